// The Heads view's case mode: a loaded case document's heads (queries labelled t1..tL, or by the
// tokens the caller gives) in place of the sentence, with its own batch element control and intro;
// and Cancel of a large case that runs in the page's Web Worker (N*H*L*S' > 50k weights or
// E > 128), back to the sentence.
import { endPageWorker } from '../common/page-worker.js';
import { el } from '../common/dom.js';
import { HeadscopeError } from '../../lib/errors.js';
import { quoteInput } from '../../lib/tensor.js';
import { parseCase } from '../../lib/case.js';
import { callDims } from '../../lib/shapes.js';
import { traceWeights } from './data.js';

/** A loaded case runs in the Web Worker above this many trace weights (N * H * L * S') or this E. */
const WORKER_WEIGHTS = 50_000;
const WORKER_EMBED_DIM = 128;

/**
 * @param {{ live: { loaded: object | null, generation: number, nextMessage: string },
 *   vs: object, controls: object, onStatus: Function, changed: (cause: string) => void,
 *   loop: object, update: () => Promise<void>, fail: (e: unknown) => void, busy: object,
 *   compute: object }} ctx  live: the view's running fields (view.js); vs: view-state.js's;
 *   controls: controls.js's elements; loop: frame-loop.js's; busy: busy.js's
 */
export function createCaseMode(ctx) {
  const { live, vs, controls, onStatus } = ctx;
  const caseOption = controls.source.querySelector('option[value="case"]');

  /**
   * Shows a case document's heads; errors go to onStatus and the view. `options.tokens`: the
   * queries' labels (a case file holds numbers only: a caller that knows the text, such as the
   * Train view's probe row, gives it); `options.about`: what the intro says of the case.
   */
  async function load(caseDocument, options = {}) {
    let parsed;
    let dims;
    let extras;
    try {
      parsed = parseCase(caseDocument);
      dims = callDims(parsed.config, parsed.query.shape, parsed.key.shape);
      extras = caseOptions(options, dims.L);
    } catch (e) {
      ctx.fail(e);
      return;
    }
    const name = parsed.name ? `case ${parsed.name}` : 'loaded case';
    live.loaded = {
      id: (live.loaded?.id ?? 0) + 1,
      parsed, dims, trace: null, name,
      big: traceWeights(dims) > WORKER_WEIGHTS || dims.E > WORKER_EMBED_DIM,
      tokens: extras.tokens,
      intro: extras.about ?? `The heads of ${name}: its own weights and inputs, run by the engine (not the ` +
        `hand-built heads of a sentence). ${extras.tokens ? 'Its queries are labelled by the tokens given with it.'
          : 'A case holds numbers, not text: its queries are labelled by position, t1, t2, ...'}`,
    };
    // N is null for a query of the wrong rank: the run fails with the engine's message.
    controls.batch.replaceChildren(...Array.from({ length: dims.N ?? 1 }, (_, n) => {
      const o = el('option', '', String(n + 1));
      o.value = String(n + 1);  // 1-based like its label
      return o;
    }));
    vs.enterCase(dims.H);
    caseOption.disabled = false;
    const what = `${live.loaded.name} (${dims.H} head${dims.H === 1 ? '' : 's'}, ${dims.L} quer${dims.L === 1 ? 'y' : 'ies'}` +
      `${dims.batched ? `, batch of ${dims.N}` : ''})`;
    controls.caseNote.textContent = `Showing ${what}. Choose other weights to go back to the sentence.`;
    onStatus(`Heads: showing ${what}.`);
    ctx.changed('case');
    ctx.loop.cancel();
    try {
      await ctx.loop.track(ctx.update());
    } catch (e) {
      ctx.fail(e);
    }
  }

  /** Cancel of a large case: its computation is dropped, the worker ended, the sentence back. */
  function cancel() {
    live.generation++;    // the running computation's result is dropped
    endPageWorker();      // and the worker computing it ended
    ctx.compute.forgetWorker();
    ctx.busy.set(false);
    vs.leaveCase();
    vs.state.ablated.clear();
    vs.state.shown = null;
    const name = live.loaded?.name ?? 'the case';
    live.nextMessage = `Cancelled: ${name} was not shown.`;
    onStatus(`Heads: cancelled ${name}.`);
    live.loaded = null;
    caseOption.disabled = true;
    ctx.loop.schedule(true);
    ctx.changed('input');
  }

  return { load, cancel };
}

const describe = (v) => (Array.isArray(v) ? `an array of ${v.length}` : v === null ? 'null' : typeof v);

// setCase's options, checked: a HeadscopeError names the bad one.
function caseOptions(options, L) {
  const where = 'setCase: options';
  const fail = (field, message) => { throw new HeadscopeError('INVALID_ARGUMENT', `${where}.${field}: ${message}`); };
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new HeadscopeError('INVALID_ARGUMENT', `${where}: expected an object with any of tokens, about, got ${describe(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (key !== 'tokens' && key !== 'about') fail(quoteInput(key), 'unknown field (expected any of tokens, about)');
  }
  const { tokens = null, about = null } = options;
  if (tokens !== null) {
    if (!Array.isArray(tokens) || tokens.length !== L) fail('tokens', `expected ${L} strings (one per query), got ${describe(tokens)}`);
    const k = tokens.findIndex((t) => typeof t !== 'string');
    if (k >= 0) fail(`tokens[${k}]`, `expected a string, got ${describe(tokens[k])}`);
  }
  if (about !== null && typeof about !== 'string') fail('about', `expected a string, got ${describe(about)}`);
  return { tokens: tokens && [...tokens], about };
}
