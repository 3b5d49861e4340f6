// The variants panel's RoPE section (positions 'rope'): two invariants of rotary embeddings, in the
// engine's numbers, per layer of the trained model. Every score and weight below comes from a
// MultiheadAttention of the engine built from the layer (layer-case.js: the trained W_Q, W_K, W_V,
// W_O and the layer's input on the probe row, with rope_dims / rope_layout / rope_base); the page
// only takes the largest differences of what the engine returned.
//
// (a) Relative positions: q_m . k_n after the turn depends on m - n only. The layer's attention
// traced on a sequence whose vectors repeat every SHIFT positions (vector i is the probe row's
// input vector i mod SHIFT) gives scores with s(m, n) = s(m + SHIFT, n + SHIFT) (to float32's
// rounding), while the same two vectors SHIFT positions further apart, s(m, n + SHIFT), score
// differently.
// (b) The layouts are one model: the other layout with each head's W_Q and W_K rows (and biases)
// permuted, interleaved 2i, 2i + 1 <-> half i, i + r/2, gives the layer's pattern; with the rows as
// they are (a checkpoint loaded with the wrong layout) it does not. Beside it, the layer case's own
// pattern against the model's hook_pattern: the head the Heads view opens is the trained head.
import { el } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { layerCase } from './layer-case.js';

/** The period of the repeated sequence of (a), in positions. */
export const SHIFT = 4;

/**
 * For each dim j of a head in layout `to`, the dim of layout `from` it reads (r rotary dims; the
 * dims from r on pass through): half pairs (i, i + r/2), interleaved (2i, 2i + 1).
 */
export function layoutSource(dh, r, from, to) {
  return Array.from({ length: dh }, (_, j) => {
    if (j >= r || from === to) return j;
    if (to === 'half') return j < r / 2 ? 2 * j : 2 * (j - r / 2) + 1;   // from interleaved
    return j % 2 === 0 ? j / 2 : (j - 1) / 2 + r / 2;                     // from half
  });
}

/** The layer case's state_dict with each head's W_Q and W_K rows (and bias entries) moved by `src`. */
function permuteQk(sd, { E, Ekv, dh, src }) {
  const rowOf = (row) => {
    if (row >= E + Ekv) return row;                       // V: as it is
    const base = row < E ? 0 : E;
    const head0 = base + Math.floor((row - base) / dh) * dh;
    return head0 + src[row - head0];
  };
  const w = sd.in_proj_weight;
  const b = sd.in_proj_bias;
  return { ...sd, in_proj_weight: w.map((_, row) => w[rowOf(row)]), in_proj_bias: b.map((_, row) => b[rowOf(row)]) };
}

const maxDiff = (a, b, n = a.length) => {
  let worst = 0;
  for (let i = 0; i < n; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
};

/** (a) from the scores [H, T, T] of the repeated sequence. */
function shiftNumbers(s, H, T) {
  let shifted = 0;
  let apart = 0;
  let scale = 0;
  for (let h = 0; h < H; h++) {
    for (let m = 0; m < T; m++) {
      for (let n = 0; n < T; n++) {
        const at = (i, j) => (h * T + i) * T + j;
        scale = Math.max(scale, Math.abs(s[at(m, n)]));
        if (m + SHIFT >= T || n + SHIFT >= T) continue;
        shifted = Math.max(shifted, Math.abs(s[at(m, n)] - s[at(m + SHIFT, n + SHIFT)]));
        apart = Math.max(apart, Math.abs(s[at(m, n)] - s[at(m, n + SHIFT)]));
      }
    }
  }
  return { shifted, relative: scale > 0 ? shifted / scale : shifted, apart, scale };
}

/**
 * Layer l's numbers: { shifted, relative, apart, scale, caseVsHook, permuted, unpermuted }. Runs
 * on the view's engine (a Worker's: every call awaited); inside the view's queue (serial).
 */
export async function ropeNumbers(t, l) {
  const s = t.state;
  const doc = await layerCase(t, l);
  const { embed_dim: E, num_heads: H, num_kv_heads: G = H, rope_dims: r, rope_layout: layout, rope_base: base } = doc.config;
  const dh = E / H;
  const other = layout === 'half' ? 'interleaved' : 'half';
  const q = doc.inputs.query;
  const T = q.length;
  const config = (ropeLayout) => ({ embedDim: E, numHeads: H, numKvHeads: G === H ? null : G, bias: true, ropeDims: r, ropeLayout, ropeBase: base });
  const options = { attnMask: doc.inputs.attn_mask, averageAttnWeights: false };
  const mine = await t.engine.createMultiheadAttention(config(layout));
  const theirs = await t.engine.createMultiheadAttention(config(other));
  try {
    await mine.loadStateDict(doc.state_dict);
    const periodic = Array.from({ length: T }, (_, i) => q[i % SHIFT]);
    const traced = await mine.trace(periodic, periodic, periodic, { averageAttnWeights: false });
    const own = (await mine.forward(q, q, q, options)).weights.data;
    await theirs.loadStateDict(permuteQk(doc.state_dict, { E, Ekv: G * dh, dh, src: layoutSource(dh, r, layout, other) }));
    const permuted = (await theirs.forward(q, q, q, options)).weights.data;
    await theirs.loadStateDict(doc.state_dict);
    const unpermuted = (await theirs.forward(q, q, q, options)).weights.data;
    const hook = t.last.probeRun.hooks[`blocks.${l}.attn.hook_pattern`].data;
    return { ...shiftNumbers(traced.scores.data, H, T), caseVsHook: maxDiff(own, hook, H * T * T), permuted: maxDiff(permuted, own),
      unpermuted: maxDiff(unpermuted, own), layout, other, r, dh, base, fraction: s.ropeFraction };
  } finally {
    await mine.dispose();
    await theirs.dispose();
  }
}

// Small differences in exponent notation (1.9e-7), the others with 4 decimals; data-value exact.
/**
 * The section in `box`: draw() after each evaluation queues one job (at most one waiting) that
 * computes every layer's numbers for the model as it is when the job runs; the box's data-step
 * says which step its tables are of, data-ready whether they are the current setup's.
 * @param {object} t  the view's shared fields (view.js): state, engine, model, probe, last, generation
 * @param {{ box: Element, serial: Function, table: Function }} o  serial: the view's job queue
 *   (session.js); table: variants.js's (caption, column heads, rows of [text, value] cells)
 */
export function createRopeSection(t, { box, serial, table }) {
  let queued = false;
  function draw() {
    if (t.state.positions !== 'rope') {
      delete box.dataset.step;
      return box.replaceChildren();
    }
    if (queued) return;
    queued = true;
    box.dataset.ready = 'false';
    serial(async () => {
      queued = false;
      const generation = t.generation;
      const step = t.state.steps;
      if (t.state.positions !== 'rope' || !t.model || !t.last) return;
      const layers = [];
      for (let l = 0; l < t.state.layers; l++) layers.push(await ropeNumbers(t, l));
      if (generation !== t.generation || step !== t.state.steps || t.state.positions !== 'rope') return;
      box.replaceChildren(...ropeTables(layers, table));
      box.dataset.step = String(step);
      box.dataset.ready = 'true';
    }).catch((e) => { box.textContent = `RoPE: ${e?.message ?? e}`; });
  }
  return { draw };
}

const cell = (value) => [value === 0 ? '0' : Math.abs(value) < 1e-3 ? value.toExponential(1) : formatNumber(value, 4), value];

/** The section's two tables for the layers' numbers (ropeNumbers of each), with `table` of variants.js. */
export function ropeTables(layers, table) {
  const [first] = layers;
  const intro = el('p', 'hs-note', `RoPE: each head turns ${first.r} of its ${first.dh} query and key dims by position ` +
    `(${first.layout} layout, base ${first.base}, fraction ${first.fraction}); no position is added to the tokens. ` +
    'Each number below is the largest difference between outputs of the engine\'s MultiheadAttention built from the layer.');
  const shift = table(`Relative positions: the layer's scores on a sequence whose vectors repeat every ${SHIFT} positions. ` +
    `Shifting query and key together by ${SHIFT} changes no score (float32 rounding only); moving the key alone ${SHIFT} ` +
    'positions further from the same query does.',
  ['layer', `max |s(m, n) - s(m + ${SHIFT}, n + ${SHIFT})|`, 'relative to max |s|', `max |s(m, n) - s(m, n + ${SHIFT})|`],
  layers.map((x, l) => [[`layer ${l}`], cell(x.shifted), cell(x.relative), cell(x.apart)]));
  shift.classList.add('hs-train-rope-shift');
  const layouts = table(`Layouts: the layer's pattern (its layer case, which matches the model's hook_pattern) against the ` +
    `${first.other} layout with each head's W_Q and W_K rows permuted (${first.other === 'half' ? 'interleaved 2i, 2i + 1 to half i, i + r/2' : 'half i, i + r/2 to interleaved 2i, 2i + 1'}): the same ` +
    'model. With the rows as they are, the wrong layout for these weights: another model.',
  ['layer', 'layer case vs hook_pattern', `${first.other}, rows permuted: max |ΔP|`, `${first.other}, rows as they are: max |ΔP|`],
  layers.map((x, l) => [[`layer ${l}`], cell(x.caseVsHook), cell(x.permuted), cell(x.unpermuted)]));
  layouts.classList.add('hs-train-rope-layouts');
  return [intro, shift, layouts];
}
