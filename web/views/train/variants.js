// The Train view's variants panel: what the setup's attention variant does, each number the
// engine's. The KV cache's bytes for MHA, the setup's GQA and MQA at the current size
// (engine.kvCacheBytes of each config); with a sliding window, its visible band on the probe row
// (the engine's hook_pattern: every weight outside the band, as it is); with ALiBi, each head's
// bias matrix (the engine's slopes, engine.alibiSlopes: -slope |i - j|, the float the layers add)
// beside the head's mean attention distance on the probe row per layer (sum_j P_ij |i - j| over
// the engine's pattern, averaged over the rows: the definition of the engine's headStats.distance).
//
// Attention sinks (attnSinks): each head's learned sink logit (the model's stateDict()) and its
// mean sink mass on the held-out rows (1 - the row sum of the engine's hook_pattern), measured in
// each evaluation (session.js, variants-sinks.js).
//
// RoPE (positions 'rope'): its invariants in a section of their own (variants-rope.js), drawn only
// for rope: the relative-position property (q_m . k_n depends on m - n only) and the two layouts
// equal after the matching permutation of W_Q / W_K rows (and different without it), both from
// MultiheadAttention calls of the engine on each trained layer, queued after the evaluation.
import { columnHeads, el, setText } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { renderHeatmap } from '../common/heatmap.js';
import { trainSetup } from './state.js';
import { createRopeSection } from './variants-rope.js';
import { sinksTable } from './variants-sinks.js';

const fmtBytes = (b) => `${b.toLocaleString('en-US')} bytes`;

function table(caption, heads, rows) {
  const t = el('table', 'hs-train-variants-table');
  const thead = el('thead');
  thead.append(columnHeads(heads));
  const tbody = el('tbody');
  for (const cells of rows) {
    const tr = el('tr');
    cells.forEach(([text, value], k) => {
      const cell = el(k === 0 ? 'th' : 'td', '', text);
      if (k === 0) cell.scope = 'row';
      if (value !== undefined) cell.dataset.value = String(value);
      tr.append(cell);
    });
    tbody.append(tr);
  }
  t.append(el('caption', 'hs-note', caption), thead, tbody);
  return t;
}

/** Mean over the rows of sum_j P[i][j] |i - j|, skipping rows whose weights are all 0. */
function meanDistance(P, T) {
  let sum = 0;
  let rows = 0;
  for (let i = 0; i < T; i++) {
    let d = 0;
    let any = false;
    for (let j = 0; j < T; j++) {
      const p = P[i * T + j];
      if (p !== 0) any = true;
      d += p * Math.abs(i - j);
    }
    if (any) { sum += d; rows++; }
  }
  return rows ? sum / rows : NaN;
}

/**
 * @param {object} t  the view's shared fields (view.js): state, engine, model, task, probe, last, generation
 * @param {{ root: Element, serial: Function }} o  root: the panel's box (skeleton.js); serial: the
 *   view's job queue (session.js), which RoPE's engine calls join
 */
export function createVariants(t, { root, serial }) {
  const kv = el('div', 'hs-train-variants-kv');
  const band = el('div', 'hs-train-variants-window');
  const alibi = el('div', 'hs-train-variants-alibi');
  const sinks = el('div', 'hs-train-variants-sinks');
  const rope = el('div', 'hs-train-variants-rope');
  root.replaceChildren(kv, band, alibi, sinks, rope);
  const ropeSection = createRopeSection(t, { box: rope, serial, table });
  let key = null;
  let info = null;   // { kv: [[label, G, bytes]], slopes: Float32Array | null } of the setup `key`
  let pending = Promise.resolve();

  // The engine's numbers that depend on the setup only, fetched once per setup.
  async function fetchInfo(s) {
    const config = trainSetup(s, t.task).model;
    // MHA, the setup's K/V heads, a grouped example (the largest divisor between 1 and heads) and MQA.
    const between = Array.from({ length: s.heads - 2 }, (_, k) => s.heads - 1 - k).find((g) => s.heads % g === 0);
    const Gs = [...new Set([s.heads, s.kvHeads, ...(between ? [between] : []), 1])].sort((a, b) => b - a);
    const label = (G) => (G === s.heads ? 'MHA' : G === 1 ? 'MQA' : 'GQA');
    const kvRows = [];
    for (const G of Gs) kvRows.push([label(G), G, await t.engine.kvCacheBytes({ ...config, nKvHeads: G }, { batch: 1, positions: t.task.seqLen })]);
    return { kv: kvRows, slopes: s.positions === 'alibi' ? await t.engine.alibiSlopes(s.heads) : null };
  }

  function drawKv(s) {
    if (!info) return setText(kv, 'KV cache: asking the engine...');
    const T = t.task.seqLen;
    const mha = info.kv[0][2];
    kv.replaceChildren(table(`The KV cache of one sequence of ${T} positions when this model generates (engine.kvCacheBytes): ` +
      `${s.layers} layers x keys and values x ${T} positions x K/V heads x head dim ${s.dModel / s.heads} floats.`,
    ['attention', 'K/V heads', 'KV cache', 'vs MHA'],
    info.kv.map(([name, G, bytes]) => [[`${name}${G === s.kvHeads ? ' (this model)' : ''}`], [String(G), G], [fmtBytes(bytes), bytes],
      [mha ? `${formatNumber(bytes / mha, 3)}x` : '-']])));
  }

  function drawBand(s, T) {
    if (s.attnWindow === 0) return band.replaceChildren();
    const w = s.attnWindow;
    const rows = [];
    for (let l = 0; l < s.layers; l++) {
      const P = t.last.probeRun.hooks[`blocks.${l}.attn.hook_pattern`].data;
      let outside = 0;
      let largest = 0;
      let inside = Infinity;
      for (let h = 0; h < s.heads; h++) {
        for (let i = 0; i < T; i++) {
          let mass = 0;
          for (let j = 0; j < T; j++) {
            const p = P[(h * T + i) * T + j];
            if (j > i || j <= i - w) { outside++; largest = Math.max(largest, Math.abs(p)); } else mass += p;
          }
          inside = Math.min(inside, mass);
        }
      }
      rows.push([[`layer ${l}`], [String(outside), outside], [formatNumber(largest, 6), largest], [formatNumber(inside, 6), inside]]);
    }
    band.replaceChildren(table(`The sliding window on the probe row (the engine's hook_pattern): token i sees tokens i - ${w - 1} ` +
      `to i; every weight outside that band, in every head, is 0, and each row's band holds all of its attention.`,
    ['layer', 'cells outside the band', 'largest weight there', 'smallest row sum in the band'], rows));
  }

  function drawAlibi(s, T) {
    if (s.positions !== 'alibi') return alibi.replaceChildren();
    if (!info?.slopes) return setText(alibi, 'ALiBi: asking the engine...');
    const labels = Array.from({ length: T }, (_, i) => String(i));
    const cards = el('div', 'hs-train-grid');
    cards.style.setProperty('--hs-train-heads', String(Math.min(s.heads, 8)));
    const rows = [];
    for (let h = 0; h < s.heads; h++) {
      const m = info.slopes[h];
      const bias = new Float32Array(T * T);
      for (let i = 0; i < T; i++) for (let j = 0; j <= i; j++) bias[i * T + j] = -Math.fround(m * (i - j));
      const distances = Array.from({ length: s.layers }, (_, l) =>
        meanDistance(t.last.probeRun.hooks[`blocks.${l}.attn.hook_pattern`].data.subarray(h * T * T, (h + 1) * T * T), T));
      rows.push([[`H${h + 1}`], [String(m), m], [formatNumber(bias[T], 4), bias[T]], [formatNumber(bias[(T - 1) * T], 4), bias[(T - 1) * T]],
        ...distances.map((d) => [formatNumber(d, 2), d])]);
      const card = el('figure', 'hs-train-head hs-train-alibi-head');
      card.append(el('figcaption', '', `H${h + 1}: slope ${formatNumber(m, 4)}`), el('div', 'hs-heatmap-box'));
      cards.append(card);
      renderHeatmap(card.lastChild, {
        id: `alibi.${h + 1}`, name: `ALiBi bias of head ${h + 1}, ${T} by ${T}`, data: bias, rows: T, cols: T,
        rowLabels: labels, colLabels: labels, masked: (i, j) => j > i,
        describe: (i, j) => `head ${h + 1}: query ${i}, key ${j}: bias ${formatNumber(bias[i * T + j], 4)}`,
      });
    }
    alibi.replaceChildren(table('ALiBi: each head adds -slope |i - j| to its scores (slopes from the engine, the floats every layer ' +
      'adds); a steeper slope keeps a head\'s attention nearer. Its mean attention distance on the probe row, per layer, beside it.',
    ['head', 'slope', 'bias at distance 1', `bias at distance ${T - 1}`, ...Array.from({ length: s.layers }, (_, l) => `mean distance, layer ${l}`)],
    rows), cards);
  }

  function render() {
    if (!t.task || !t.last) return;
    const s = t.state;
    drawKv(s);
    drawBand(s, t.task.seqLen);
    drawAlibi(s, t.task.seqLen);
    sinks.replaceChildren(...sinksTable(t.last.sinks, table));
  }

  /** After an evaluation: the panel for the view's setup (the engine's sizes fetched once per setup). */
  function draw() {
    const s = t.state;
    // The state this panel was drawn for (a test waits for the current one: a new setup's state is
    // the view's before its model's first evaluation is drawn).
    root.dataset.drawn = JSON.stringify(s);
    const k = JSON.stringify([s.task, s.layers, s.heads, s.kvHeads, s.dModel, s.positions, t.task?.seqLen]);
    if (k !== key) {
      key = k;
      info = null;
      root.dataset.ready = 'false';
      pending = fetchInfo(s).then((got) => {
        if (key !== k) return;
        info = got;
        render();
        root.dataset.ready = 'true';
      }).catch((e) => { if (key === k) setText(kv, `KV cache: ${e.message}`); });
    }
    render();
    ropeSection.draw();
  }

  return { draw, settled: () => pending };
}
