// A typed use of headscope/views and headscope/widgets, checked by tsc (tests/js/types.test.js)
// against web/views/index.d.ts and web/widgets/headscope-widgets.d.ts through the package's exports.
import { init } from 'headscope';
import {
  heads, train as trainView, walkthrough, whatIf, STYLESHEET_URL, type HeadsState, type TrainState, type WalkthroughState,
} from 'headscope/views';
import type { HeadscopeHeads, HeadscopeTrain } from 'headscope/widgets';
import { runExperiment, formatTable, EXPERIMENTS } from 'headscope/experiments';
import { trainBpe, charTokenizer, tokenizerFromJSON, type Tokenizer } from 'headscope/tokenizers';

export async function demo(root: Element, other: Element): Promise<void> {
  const engine = await init();
  const view = heads.create(root, { engine, state: { text: 'a b c', heads: 2 }, hide: ['seed'], compact: true,
    onChange: (state: HeadsState, cause) => { if (cause === 'input') console.log(state.text); } });
  view.update({ off: [2], show: null });
  const s: HeadsState = view.getState();
  const n: number = s.heads;
  const w = walkthrough.create(other, { engine, stages: ['input', 'weights'], heads: [1] });
  w.update({ preset: 'random', seed: 3, L: 4 });
  const ws: WalkthroughState = w.getState();
  const rows: number = ws.x.length + n;
  console.log(rows, STYLESHEET_URL);
  const el = document.querySelector('headscope-heads') as HeadscopeHeads;
  await el.ready;
  await el.setState({ view: 'average' });
  await el.setText('new text');
  const blob: Blob = await el.exportAs('svg');
  console.log(blob.size, await w.exportAs('case'));
  el.addEventListener('headscope-change', (e) => console.log(e.detail.cause));
  const train = document.querySelector('headscope-train') as HeadscopeTrain;
  await train.setState({ task: 'copy', heads: 4 });
  await train.step(10);
  const steps: number = train.state?.steps ?? 0;
  const curve: Blob = await train.exportAs('csv');
  await train.setCase(JSON.parse(await (await train.exportAs('case')).text()));
  console.log(curve.type);
  const result = await runExperiment(engine, { ...EXPERIMENTS.induction, heads: [1, 4], steps: 10 });
  console.log(steps, formatTable(result), result.rows[0].accuracy.mean);
  await view.settled();
  w.showHeads([1]);
  const t = trainView.create(other, { state: { task: 'copy', steps: 10 }, hide: ['whatif'],
    onChange: (ts: TrainState) => console.log(ts.steps),
    onOpenHead: (doc, { layer, head, step, tokens, state }) => view.setCase(doc, {
      tokens, about: `L${layer} H${head} of a ${state.task} model at step ${step}` }).then(() => console.log(view.showsCase())) });
  await t.ready;
  await t.update({ heads: 4 });
  const trained: TrainState = t.getState();
  const curves: Blob = await t.exportAs('csv');
  await t.setCase(await t.exportModel());
  await t.whatIf.update({ experiment: 'induction' });
  const runner = whatIf.create(other, { workers: 1 });
  await runner.run('log-line', { heads: [1, 2], steps: 20 });
  console.log(trained.steps, curves.size, t.whatIf.getState().experiment, runner.result()?.rows.length);
  runner.destroy();
  t.destroy();
  view.destroy();
  w.destroy();
}

// headscope/tokenizers: a BPE trained on a reader's text, its ids, and the same from JSON.
export function tokens(text: string): number {
  const bpe = trainBpe(text, { vocabSize: 300, special: ['<bos>'], onProgress: (m: number, total: number) => console.log(m, total) });
  const ids: Int32Array = bpe.encode(text);
  const back: string = bpe.decode(ids);
  const again: Tokenizer = tokenizerFromJSON(bpe.toJSON());
  const chars = charTokenizer(text, { unknown: '?' });
  return ids.length + back.length + again.vocabSize + bpe.merges + chars.special['?'];
}
