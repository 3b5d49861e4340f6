// The Heads view's engine calls: the sentence (its features and hand-built or random weights, one
// run of the layer) and a loaded case (in the page's Web Worker when it is large), each turned into
// what the parts show (data.js's viewData). Every number comes from the engine (engine.js: one
// trace with headStats, and a forward with head gates for the switched-off heads).
import { pageWorker } from '../common/page-worker.js';
import { callDims } from '../../lib/shapes.js';
import { Engine } from './engine.js';
import { caseLabels, sameTensor, traceWeights, viewData, MAX_SHOWN } from './data.js';
import { embed, PRESET_LENGTH } from './features.js';
import { buildStateDict, groupKeyValues, randomStateDict } from './weights.js';
import { causalMask, keyPaddingMask } from './masks.js';
import { variantCall } from './variant-state.js';

/** The sentence's layer: embedding size (the head counts are its divisors up to 16). */
export const EMBED_DIM = 64;

/**
 * @param {object} hs  init()'s API (small work runs on it; large cases on the page's worker)
 * @param {{ onStatus: (text: string) => void }} o
 */
export function createCompute(hs, { onStatus }) {
  const local = new Engine(hs);
  let remote = null;        // Engine over the page's worker (page-worker.js), for large cases
  const stateDicts = new Map();

  // The weights for L tokens: the presets are written for max(32, L) positions (features.js).
  // Grouped-query K/V heads: the random layer is initialised in its own shape; the presets' K and
  // V are pooled per group (groupKeyValues), as a multi-head checkpoint is converted.
  function stateDictFor(state, L) {
    const length = Math.max(PRESET_LENGTH, L);
    const key = JSON.stringify([state.source, state.numHeads, state.kvHeads, state.presets, state.seed, state.sharpness,
      state.source === 'random' ? 0 : length]);
    let sd = stateDicts.get(key);
    if (sd === undefined) {
      const dims = { embedDim: EMBED_DIM, numHeads: state.numHeads, numKvHeads: state.kvHeads };
      sd = state.source === 'random'
        ? randomStateDict({ ...dims, seed: state.seed })
        : groupKeyValues(buildStateDict({ embedDim: EMBED_DIM, numHeads: state.numHeads, heads: state.presets,
          seed: state.seed, sharpness: state.sharpness, length }), dims);
      if (stateDicts.size > 16) stateDicts.clear();
      stateDicts.set(key, sd);
    }
    return sd;
  }

  // One gate per head: 0 for the switched-off ones; null when every head is on.
  function headGatesFor(state, numHeads) {
    if (state.ablated.size === 0) return null;
    return Array.from({ length: numHeads }, (_, h) => (state.ablated.has(h) ? 0 : 1));
  }

  /** The sentence's run for `tokens` (at least one): { data, layout } (layout: featureLayout's). */
  async function sentence(state, tokens) {
    const x = embed(tokens, { embedDim: EMBED_DIM });
    const L = tokens.length;
    const padded = [...state.padded].filter((j) => j < L);
    // The attention variant's config fields and options (none by default: the plain module's call).
    const variant = variantCall(state);
    const options = {
      keyPaddingMask: padded.length ? keyPaddingMask(L, padded) : null,
      attnMask: variant.causalMask ? causalMask(L) : null,
      ...variant.options,
    };
    const config = { embedDim: EMBED_DIM, numHeads: state.numHeads, ...variant.config };
    const run = await local.run({ config, stateDict: stateDictFor(state, L), headGates: headGatesFor(state, state.numHeads),
      needAverage: state.view === 'average', query: x, key: x, value: x, options });
    const presets = state.source === 'random' ? Array(state.numHeads).fill('random (PyTorch init)') : state.presets;
    let note = '';
    if (padded.length === L) note = 'Every token is padded: no query has a key left, so every weight is 0.';
    const data = viewData(run, callDims(config, x.shape), { labels: { queries: tokens, keys: tokens }, presets, note });
    // ALiBi's slopes as the engine's kernel uses them, for the variant's note.
    data.alibiSlopes = state.alibi ? await local.hs.alibiSlopes(state.numHeads) : null;
    return { data, layout: x.layout };
  }

  /**
   * A loaded case's run (`loaded`: case-mode.js's), reused while the switched-off heads and the
   * view mode stay. `isCurrent()` false: a newer update took over, and `stale` is returned.
   * `busy(on, text, cancel)` shows the busy line of a large case.
   */
  async function loadedCase(loaded, state, { isCurrent, stale, busy }) {
    const { parsed, dims, big } = loaded;
    const ablatedKey = `${[...state.ablated].sort((a, b) => a - b).join(',')}|${state.view === 'average'}`;
    if (loaded.run && loaded.runKey === ablatedKey) return caseData(loaded, loaded.run, state);
    if (big) busy(true, `Large case (${traceWeights(dims)} weights): running in a Web Worker,`);
    try {
      let engine = local;
      if (big) {
        try {
          // The page's one worker; if the loader ended it (a cancelled job), a new one.
          const worker = await pageWorker();
          if (remote?.hs !== worker) remote = new Engine(worker);
          engine = remote;
        } catch (e) {
          onStatus(`Heads: the Web Worker could not start (${e.message}); computing in the page.`);
        }
      }
      const run = await engine.run({
        config: parsed.config, stateDict: parsed.stateDict,
        headGates: headGatesFor(state, dims.H), needAverage: state.view === 'average',
        query: parsed.query, key: parsed.key, value: parsed.value,
        // The case's own options, headscope's alibi and window included (without them a case
        // made with a window would show full attention).
        options: { keyPaddingMask: parsed.options.keyPaddingMask, attnMask: parsed.options.attnMask,
          isCausal: parsed.options.isCausal ?? false, alibi: parsed.options.alibi ?? false, window: parsed.options.window ?? 0 },
        trace: loaded.trace,
      });
      if (!isCurrent()) return stale();
      loaded.trace = run.trace;
      loaded.run = run;
      loaded.runKey = ablatedKey;
      return caseData(loaded, run, state);
    } finally {
      if (isCurrent()) busy(false);
    }
  }

  function caseData(loaded, run, state) {
    const { parsed, dims } = loaded;
    const { L, Sp: S } = dims;
    const labels = caseLabels({ L, S, sourceLength: dims.S, selfAttention: sameTensor(parsed.key, parsed.query),
      addBiasKV: parsed.config.addBiasKV, addZeroAttn: parsed.config.addZeroAttn, tokens: loaded.tokens });
    const shown = L > MAX_SHOWN || S > MAX_SHOWN
      ? `Showing queries 1–${Math.min(L, MAX_SHOWN)} of ${L} and keys 1–${Math.min(S, MAX_SHOWN)} of ${S}; ` +
        'the summary numbers and the output change cover all of them.' : '';
    return viewData(run, dims, { labels, presets: Array(dims.H).fill(loaded.name), n: state.batch, note: shown });
  }

  return {
    sentence,
    loadedCase,
    /** The page's worker was ended (a cancelled case): the next large case asks for a new one. */
    forgetWorker() { remote = null; },
    /** Frees this view's engine objects (the page's worker is shared: it keeps running). */
    dispose() {
      local.dispose().catch(() => {});
      remote?.dispose().catch(() => {});
    },
  };
}
