// The Train view's "Inside the model" section: the engine's causal experiments on the task's probe
// row (src/headscope/experiments.h, Transformer.activationPatching, logitLens, attentionRollout,
// scoreContributions), run on demand at the current step:
//   - activation patching: the probe row (clean) against a corrupted copy; each head's output, and
//     each residual position entering each block, patched from the clean run into the corrupted
//     one, and how much of the correct tokens' logit that restores;
//   - the logit lens: the top token at every position, read off the stream before and after each
//     block;
//   - attention rollout through every layer;
//   - why one weight is high: its score split into the head's per-dimension terms.
// Every number shown is the engine's; the cells carry them in data attributes for the tests.
import { button, el, labelled, setOptions, setText } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { setupOf } from './state.js';
import { renderHeatmap } from '../common/heatmap.js';

/** The corruptions the section offers: which probe positions get another token. */
// (The first token stays: a task's row may start with a marker, <bos>, that every row shares.)
export const CORRUPTIONS = Object.freeze({
  'first-half': { text: 'the first half of the row replaced', pick: (i, T) => i > 0 && i < Math.floor(T / 2) },
  'every-third': { text: 'every third token replaced', pick: (i) => i > 0 && i % 3 === 0 },
});

/**
 * The probe's tokens (1, T) with the picked positions replaced: token (t + 1 + i mod (V - 1)) mod
 * V, which always differs from t (for V > 1) and is a function of the row only.
 */
export function corrupt(tokens, mode, vocabSize) {
  const T = tokens.shape[1];
  const { pick } = CORRUPTIONS[mode];
  const data = Int32Array.from(tokens.data, (t, i) => (pick(i % T, T) ? (t + 1 + (i % Math.max(1, vocabSize - 1))) % vocabSize : t));
  return { data, shape: [...tokens.shape] };
}

/** The share of the clean-vs-corrupted gap a patched run restores: (patched - bad) / (clean - bad). */
export function restored(patched, clean, bad) {
  const gap = clean - bad;
  return Math.abs(gap) < 1e-6 ? NaN : (patched - bad) / gap;
}

// A cell shaded by |value| in [0, 1] (beyond: full), its number as a percentage.
function shadedCell(value, text) {
  const td = el('td', 'hs-inside-cell', text);
  const a = Number.isFinite(value) ? Math.min(1, Math.abs(value)) : 0;
  td.style.setProperty('--hs-inside-shade', String(a));
  if (value < 0) td.classList.add('hs-inside-negative');
  return td;
}

// A table under its caption (a paragraph: a <caption> would wrap at a narrow table's width),
// scrolling sideways when wider than the view.
function captioned(text, table) {
  const box = el('div', 'hs-inside-figure');
  table.setAttribute('aria-label', text);
  const scroll = el('div', 'hs-inside-scroll');
  scroll.append(table);
  box.append(el('p', 'hs-inside-caption', text), scroll);
  return box;
}

const pct = (v) => (Number.isFinite(v) ? `${formatNumber(100 * v, 0)}%` : '-');

/**
 * @param {object} t  the view's shared fields (view.js): state, model, task, probe, last
 * @param {{ root: Element, serial: (job: Function) => Promise<unknown>, fail: (e: unknown) => void }} o
 */
export function createInside(t, { root, serial, fail }) {
  const intro = el('p', 'hs-note', 'Four ways to look inside the trained model, each computed by the engine on the ' +
    'probe row at the current step. Press the button after training to see what the heads have learned to do.');
  const corruption = el('select');
  corruption.name = 'inside-corruption';
  setOptions(corruption, Object.keys(CORRUPTIONS), (k) => CORRUPTIONS[k].text);
  const run = button('Look inside at this step', 'hs-inside-run');
  run.name = 'inside-run';
  const status = el('p', 'hs-note hs-inside-status');
  status.setAttribute('aria-live', 'polite');
  const patching = el('div', 'hs-inside-patching');
  const lens = el('div', 'hs-inside-lens');
  const rollout = el('div', 'hs-inside-rollout');
  const why = el('div', 'hs-inside-why');
  const whyLayer = el('select');
  whyLayer.name = 'why-layer';
  const whyHead = el('select');
  whyHead.name = 'why-head';
  const whyQuery = el('select');
  whyQuery.name = 'why-query';
  const whyControls = el('div', 'hs-inside-why-controls');
  whyControls.append(labelled('Layer', whyLayer), labelled('Head', whyHead), labelled('Query position', whyQuery));
  const whyOut = el('div', 'hs-inside-why-out');
  why.append(whyControls, whyOut);
  const section = (title, source, body) => {
    const box = el('section', 'hs-inside-part');
    box.append(el('h3', 'hs-prose hs-train-h3', title), el('p', 'hs-note', source), body);
    return box;
  };
  root.replaceChildren(intro, labelled('Corrupted prompt:', corruption), run, status,
    section('Activation patching: which heads carry the answer', 'The probe row (clean) and a corrupted copy run through ' +
      'the model; then, one at a time, a head\'s output (or the residual stream at one position, entering a block) is ' +
      'copied from the clean run into the corrupted one. Each cell: the share of the correct tokens\' logit that the ' +
      'copy restores, (patched - corrupted) / (clean - corrupted) (Meng et al. 2022, causal tracing; Wang et al. 2022).', patching),
    section('The logit lens: what the stream predicts after each block', 'The residual stream before the first block ' +
      'and after each block, read through the final LayerNorm and the unembedding as the model reads its last ' +
      '(nostalgebraist 2020): the top token at each position and its probability; marked where it is the target.', lens),
    section('Attention rollout: where each position\'s information comes from', 'Each layer\'s heads averaged, with ' +
      'the residual connection as half the weight (0.5 A + 0.5 I), rows renormalised, and multiplied through the layers ' +
      '(Abnar and Zuidema 2020). Row i: how much each input position reaches position i after the last block.', rollout),
    section('Why is this weight high?', 'A head\'s score for a query and a key is q . k / sqrt(d), the sum of d terms ' +
      'q_d k_d / sqrt(d), one per dimension of the head (plus ALiBi\'s bias where the model has it). The bars: the terms ' +
      'for the key the query attends to most.', why));

  let result = null;  // the last measurement: { step, setup, ... }
  let builtFor = '';   // the task and shape the selects were built for

  // Results of another setup (state.js setupOf) are stale.
  const setupKey = () => setupOf(t.state);
  const range = (n) => Array.from({ length: n }, (_, i) => i);

  /** After each evaluation: the choices fit the model; earlier results are marked as another step's. */
  function draw() {
    const { state, task, probe } = t;
    if (!task || !probe) return;
    const T = task.seqLen;
    const shape = `${state.task}/${state.seed}/${state.layers}x${state.heads}`;
    if (builtFor !== shape) {
      builtFor = shape;
      setOptions(whyLayer, range(state.layers), (v) => `L${v}`);
      whyLayer.value = String(state.layers - 1);
      setOptions(whyHead, range(state.heads), (v) => `H${v + 1}`);
      whyHead.value = '0';
      setOptions(whyQuery, range(T), (v) => `${v}: ${task.vocab[probe.tokens.data[v]]}`);
      whyQuery.value = String(T - 1);
    }
    const stale = result !== null && (result.step !== state.steps || result.setup !== setupKey());
    root.dataset.stale = String(stale);
    setText(status, result === null ? 'Not measured yet.'
      : stale ? `Measured at step ${result.step}; the model is now at step ${state.steps}: press the button to measure again.`
        : `Measured at step ${result.step}.`);
  }

  async function measure() {
    if (!t.model || !t.probe) return;
    const { model, task, probe, state } = t;
    const T = task.seqLen;
    const clean = probe.tokens;
    const bad = corrupt(clean, corruption.value, task.vocabSize);
    const heads = await model.activationPatching(clean, bad, probe.targets, { site: 'heads' });
    const positions = await model.activationPatching(clean, bad, probe.targets, { site: 'positions' });
    const lensRun = await model.logitLens(clean);
    const roll = await model.attentionRollout(clean);
    result = { step: state.steps, setup: setupKey(), T, heads, positions, lens: lensRun.logits, rollout: roll.rollout,
      clean: clean.data, bad: bad.data, targets: probe.targets.data };
    drawPatching();
    drawLens();
    drawRollout();
    await explain();
    root.dataset.step = String(result.step);
    root.dataset.ready = 'true';
    draw();
  }

  function drawPatching() {
    const { heads, positions, T, clean, bad } = result;
    const { task } = t;
    const L = heads.loss.shape[0], H = heads.loss.shape[1];
    const gap = heads.clean.logit - heads.corrupted.logit;
    const summary = el('p', 'hs-note', `Correct tokens' mean logit: ${formatNumber(heads.clean.logit, 3)} on the clean row, ` +
      `${formatNumber(heads.corrupted.logit, 3)} on the corrupted one (loss ${formatNumber(heads.clean.loss, 3)} vs ` +
      `${formatNumber(heads.corrupted.loss, 3)}).` +
      (Math.abs(gap) < 1e-6 ? ' The corruption does not change it: nothing to restore; try the other corruption.' : ''));
    const headTable = el('table', 'hs-inside-grid hs-inside-heads');
    const hr = el('tr');
    hr.append(el('th', '', 'layer'), ...Array.from({ length: H }, (_, h) => el('th', '', `H${h + 1}`)));
    headTable.append(hr);
    for (let l = 0; l < L; l++) {
      const tr = el('tr');
      tr.append(el('th', '', `L${l}`));
      for (let h = 0; h < H; h++) {
        const logit = heads.logit.data[l * H + h];
        const r = restored(logit, heads.clean.logit, heads.corrupted.logit);
        const td = shadedCell(r, pct(r));
        td.dataset.cell = `${l}.${h}`;
        td.dataset.logit = String(logit);
        td.dataset.loss = String(heads.loss.data[l * H + h]);
        td.title = `L${l} H${h + 1} patched: logit ${formatNumber(logit, 3)}, loss ${formatNumber(heads.loss.data[l * H + h], 3)}`;
        tr.append(td);
      }
      headTable.append(tr);
    }
    const posTable = el('table', 'hs-inside-grid hs-inside-positions');
    const pr = el('tr');
    pr.append(el('th', '', 'block'), ...Array.from({ length: T }, (_, i) => {
      const th = el('th', clean[i] !== bad[i] ? 'hs-inside-changed' : '', task.vocab[clean[i]]);
      th.title = clean[i] !== bad[i] ? `position ${i}: ${task.vocab[clean[i]]} (corrupted: ${task.vocab[bad[i]]})` : `position ${i}`;
      return th;
    }));
    posTable.append(pr);
    for (let l = 0; l < L; l++) {
      const tr = el('tr');
      tr.append(el('th', '', `L${l}`));
      for (let i = 0; i < T; i++) {
        const logit = positions.logit.data[l * T + i];
        const r = restored(logit, positions.clean.logit, positions.corrupted.logit);
        const td = shadedCell(r, Number.isFinite(r) ? formatNumber(100 * r, 0) : '-');
        td.dataset.cell = `${l}.${i}`;
        td.dataset.logit = String(logit);
        tr.append(td);
      }
      posTable.append(tr);
    }
    patching.replaceChildren(summary, captioned('Patching one head\'s output (attn.hook_z, every position)', headTable),
      captioned('Patching the residual stream entering each block, one position at a time (underlined: the corrupted ' +
        'positions)', posTable), el('p', 'hs-note hs-inside-finding', explainPatching(heads, L, H)));
  }

  // The heads that restore most, in words.
  function explainPatching(heads, L, H) {
    const cells = [];
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < H; h++) cells.push({ l, h, r: restored(heads.logit.data[l * H + h], heads.clean.logit, heads.corrupted.logit) });
    }
    const ranked = cells.filter((c) => Number.isFinite(c.r)).sort((a, b) => b.r - a.r);
    if (ranked.length === 0) return '';
    const top = ranked[0];
    const strong = ranked.filter((c) => c.r >= 0.5);
    return strong.length > 1
      ? `${strong.map((c) => `L${c.l} H${c.h + 1} (${pct(c.r)})`).join(', ')} each restore half or more on their own: ` +
        'the answer runs through each of them, so switching one off may cost little while the others carry it.'
      : `L${top.l} H${top.h + 1} restores the most (${pct(top.r)}): the clean answer flows through that head.`;
  }

  function drawLens() {
    const { lens: logits, T, targets } = result;
    const { task } = t;
    const S = logits.shape[0], V = logits.shape[logits.shape.length - 1];
    const table = el('table', 'hs-inside-grid hs-inside-lens-table');
    const head = el('tr');
    head.append(el('th', '', 'stream'), ...Array.from({ length: T }, (_, i) => el('th', '', task.vocab[result.clean[i]])));
    table.append(head);
    for (let s = 0; s < S; s++) {
      const tr = el('tr');
      tr.append(el('th', '', s === 0 ? 'embeddings' : `after L${s - 1}`));
      for (let i = 0; i < T; i++) {
        const row = logits.data.subarray((s * T + i) * V, (s * T + i + 1) * V);
        let best = 0;
        for (let v = 1; v < V; v++) if (row[v] > row[best]) best = v;
        let z = 0;
        for (let v = 0; v < V; v++) z += Math.exp(row[v] - row[best]);
        const p = 1 / z;
        const td = el('td', 'hs-inside-cell', task.vocab[best]);
        td.style.setProperty('--hs-inside-shade', String(p));
        td.dataset.cell = `${s}.${i}`;
        td.dataset.token = String(best);
        td.title = `${s === 0 ? 'embeddings' : `after L${s - 1}`}, position ${i}: ${task.vocab[best]} (${formatNumber(100 * p, 1)}%)`;
        if (targets[i] !== -100 && targets[i] === best) td.classList.add('hs-inside-hit');
        tr.append(td);
      }
      table.append(tr);
    }
    lens.replaceChildren(captioned('Top token at each position (shade: its probability; outlined: the target)', table));
  }

  function drawRollout() {
    const { rollout: r, T, clean } = result;
    const L = r.shape[0];
    const labels = Array.from(clean, (id) => t.task.vocab[id]);
    const data = r.data.subarray((L - 1) * T * T, L * T * T);
    const box = el('div', 'hs-heatmap-box');
    rollout.replaceChildren(box);
    renderHeatmap(box, {
      id: 'rollout', name: `Attention rollout through ${L} layers on the probe row, ${T} by ${T}`,
      data, rows: T, cols: T, rowLabels: labels, colLabels: labels,
      describe: (i, j) => `${labels[i]} (${i}) from ${labels[j]} (${j}): ${formatNumber(data[i * T + j], 3)}`,
    });
  }

  async function explain() {
    if (!result || !t.model) return;
    const layer = Number(whyLayer.value), head = Number(whyHead.value), query = Number(whyQuery.value);
    const T = result.T;
    const pattern = t.last.probeRun.hooks[`blocks.${layer}.attn.hook_pattern`];
    const w = pattern.data.subarray((head * T + query) * T, (head * T + query + 1) * T);
    let key = 0;
    for (let j = 1; j < T; j++) if (w[j] > w[key]) key = j;
    const s = await t.model.scoreContributions(t.probe.tokens, { layer, head, position: query });
    const d = s.terms.shape[1];
    const terms = Array.from(s.terms.data.subarray(key * d, (key + 1) * d));
    const max = Math.max(1e-12, ...terms.map(Math.abs));
    const vocab = t.task.vocab, tokens = result.clean;
    const ranked = Array.from({ length: T }, (_, j) => j).filter((j) => Number.isFinite(s.score.data[j]))
      .sort((a, b) => s.score.data[b] - s.score.data[a]).slice(0, 3);
    const bars = el('div', 'hs-inside-terms');
    bars.setAttribute('role', 'list');
    terms.forEach((v, k) => {
      const row = el('div', 'hs-train-importance hs-inside-term');
      row.setAttribute('role', 'listitem');
      row.dataset.term = String(v);
      const bar = el('span', `hs-train-bar${v < 0 ? ' hs-inside-negative' : ''}`);
      bar.style.width = `${(100 * Math.abs(v)) / max}%`;
      row.append(el('span', 'hs-train-importance-name', `dim ${k}`), bar, el('span', '', `${v >= 0 ? '+' : ''}${formatNumber(v, 3)}`));
      bars.append(row);
    });
    const bias = s.bias.data[key];
    whyOut.dataset.key = String(key);
    whyOut.dataset.score = String(s.score.data[key]);
    whyOut.replaceChildren(
      el('p', 'hs-note', `L${layer} H${head + 1}, query ${query} (${vocab[tokens[query]]}) attends most to key ${key} ` +
        `(${vocab[tokens[key]]}), weight ${formatNumber(w[key], 3)}. Its score ${formatNumber(s.score.data[key], 3)} = ` +
        `the sum of the ${d} terms below (${formatNumber(s.dot.data[key], 3)})` +
        (bias !== 0 ? ` + ALiBi's bias ${formatNumber(bias, 3)}.` : '.') +
        ` The highest scores of this row: ${ranked.map((j) => `key ${j} (${vocab[tokens[j]]}) ${formatNumber(s.score.data[j], 3)}`).join(', ')}.`),
      bars);
  }

  run.addEventListener('click', () => {
    run.disabled = true;
    serial(measure).catch(fail).finally(() => { run.disabled = false; });
  });
  for (const select of [whyLayer, whyHead, whyQuery]) {
    select.addEventListener('change', () => { if (result) serial(explain).catch(fail); });
  }
  corruption.addEventListener('change', () => { if (result) serial(measure).catch(fail); });

  return { draw, measure: () => serial(measure) };
}
