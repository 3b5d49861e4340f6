// The Heads view: what many heads see in a real sentence or log line.
//
// Text -> tokens -> deterministic features -> a layer whose heads were built to mean something
// (transforms.js), run by the engine: mha.trace() gives every head's weights, forward() of the same
// module with the switched-off heads' gates at 0 (options.headGates) gives the ablated output and
// PyTorch's averaged weights.
// Nothing here computes attention. The views are render(data, state, root) functions over one
// state object; user text reaches the page only through textContent.
//
// Mountable several times per page and inside a shadow root: every element is created here and
// found through `root`, never through document-level ids.
import { pageWorker } from '../common/page-worker.js';
import { parseCase } from '../../lib/case.js';
import { callDims } from '../../lib/shapes.js';
import { colorFor, formatNumber, makeScale, renderLegend } from '../common/matrix.js';
import * as T from './transforms.js';

const EMBED_DIM = 64;
const HEAD_COUNTS = [1, 2, 4, 8, 16];  // the divisors of 64 up to 16
const DEFAULT_HEADS = 4;
/** A loaded case runs in the Web Worker above this many trace weights (N * H * L * S') or this E. */
const WORKER_WEIGHTS = 50_000;
const WORKER_EMBED_DIM = 128;
/** Rows and columns a heatmap or the line view shows of a large case. */
const MAX_SHOWN = 48;
/** Lines lighter than this are not drawn. */
const LINE_MIN_WEIGHT = 0.02;
const LINE_ROW_PX = 24;
/** Upper ends of the weight bands the line view draws with one width and opacity each. */
const LINE_BANDS = [0.1, 0.25, 0.5, 0.75, Infinity];
const WEIGHT_SCALE = makeScale([], 'weights');

// ---------------------------------------------------------------------------------------------
// DOM helpers

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
function svgEl(tag, attributes = {}) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attributes)) e.setAttribute(k, String(v));
  return e;
}

function button(text, className = '') {
  const b = el('button', className, text);
  b.type = 'button';
  return b;
}

function labelled(text, control, className = '') {
  const label = el('label', className);
  label.append(el('span', 'hs-heads-label', text), control);
  return label;
}

function quote(token) {
  return `“${token}”`;
}

// The element that has focus inside `container` (a document or a shadow root), if any.
function focusedIn(container) {
  const active = container.getRootNode().activeElement;
  return active && container.contains(active) ? active : null;
}

// Rebuilding a view replaces the element that had focus: find its counterpart by its stable hooks
// (name, data-* attributes) and focus that, so keyboard users keep their place.
function preserveFocus(container, rebuild) {
  const active = focusedIn(container);
  const hooks = active ? [...active.attributes]
    .filter((a) => a.name === 'name' || a.name.startsWith('data-'))
    .map((a) => `[${a.name}="${CSS.escape(a.value)}"]`).join('') : '';
  rebuild();
  if (hooks) container.querySelector(`${active.tagName.toLowerCase()}${hooks}`)?.focus();
}

// ---------------------------------------------------------------------------------------------
// Engine: headscope objects cached per slot, reloaded only when the config or weights change.
// Works with init()'s API (synchronous methods) and initWorker()'s (promises) alike.

class Engine {
  constructor(hs) {
    this.hs = hs;
    this.slots = new Map();  // slot -> { key, mha, stateDict }
  }

  async module(slot, config, stateDict) {
    const key = JSON.stringify(config);
    let s = this.slots.get(slot);
    if (s === undefined || s.key !== key) {
      if (s) await s.mha.dispose();
      this.slots.delete(slot);
      s = { key, mha: await this.hs.createMultiheadAttention(config), stateDict: null };
      this.slots.set(slot, s);
    }
    if (s.stateDict !== stateDict) {
      s.stateDict = null;
      await s.mha.loadStateDict(stateDict);
      s.stateDict = stateDict;
    }
    return s.mha;
  }

  /**
   * trace() of the layer and forward() of the same module with `headGates` (0 for a switched-off
   * head, which is its out_proj columns zeroed; null: every head on): every head's weights and
   * statistics (trace with headStats: the entropy, distance and max weight the cards show), the
   * output both ways, PyTorch's average (gates do not change the weights, nor their statistics).
   * Through the page's worker, options go over as a structured clone and the trace's tensors,
   * headStats' included, come back transferred (web/lib/worker.js).
   */
  async run({ config, stateDict, headGates = null, query, key, value, options, trace = null }) {
    const mha = await this.module('full', config, stateDict);
    const full = trace ?? await mha.trace(query, key, value, { ...options, headStats: true });
    const averaged = await mha.forward(query, key, value,
      { ...options, headGates, needWeights: true, averageAttnWeights: true });
    return { trace: full, ablatedOutput: averaged.output, average: averaged.weights };
  }

  async dispose() {
    const slots = [...this.slots.values()];
    this.slots.clear();
    for (const s of slots) await s.mha.dispose();
  }
}

// ---------------------------------------------------------------------------------------------
// Data: from the state and the engine's results to what the views show

/** Labels of a loaded case: queries t1..tL; keys the same for self-attention, else k1..kS. */
export function caseLabels({ L, S, sourceLength, selfAttention, addBiasKV, addZeroAttn }) {
  const queries = Array.from({ length: L }, (_, i) => `t${i + 1}`);
  const keys = selfAttention ? queries.slice(0, sourceLength)
    : Array.from({ length: sourceLength }, (_, j) => `k${j + 1}`);
  if (addBiasKV) keys.push('bias_k');
  if (addZeroAttn) keys.push('zero');
  while (keys.length < S) keys.push(`k${keys.length + 1}`);
  return { queries, keys: keys.slice(0, S) };
}

/** Weights a trace of the call holds: N x H x L x S' (every head's, bias_k and the zero key included). */
const traceWeights = (dims) => dims.N * dims.H * dims.L * dims.Sp;

/**
 * What the views show for batch element n of a run: per-head weights and scores (H, L, S'), the
 * average (L, S'), outputs (L, E) and their difference, per-head statistics (the engine's headStats,
 * row n: entropy, distance, maxWeight, H values each). `dims` are the call's sizes (callDims of
 * its config and shapes), which give the layout of every tensor of the run.
 */
function viewData(run, dims, { labels, presets, n = 0, note = '' }) {
  const { batched, batchFirst, H, E, L, Sp: S } = dims;
  const per = H * L * S;
  const weights = batched ? run.trace.weights.data.subarray(n * per, (n + 1) * per) : run.trace.weights.data;
  const scores = batched ? run.trace.scores.data.subarray(n * per, (n + 1) * per) : run.trace.scores.data;
  const average = batched ? run.average.data.subarray(n * L * S, (n + 1) * L * S) : run.average.data;
  const output = T.batchRows(run.trace.output.data, run.trace.output.shape, { n, batchFirst });
  const ablatedOutput = T.batchRows(run.ablatedOutput.data, run.ablatedOutput.shape, { n, batchFirst });
  return {
    L, S, H, E, labels, presets, note,
    sourceKeys: dims.S,  // the keys with a position: S' less bias_k and the zero key
    weights, scores, average, output, ablatedOutput,
    difference: T.outputDifference(output, ablatedOutput, L, E),
    stats: T.headStatsRow(run.trace.headStats, n),
  };
}

// ---------------------------------------------------------------------------------------------
// Views. Each is render(data, state, root, actions): it brings `root` up to date with data and
// state only, and reports user intent through `actions`. They update in place (cards, canvases and
// labels persist from one frame to the next; only what changed is touched), which keeps a 16-head,
// 32-token recompute inside one animation frame and never replaces the element that has focus.

// Persistent parts of a view, per root element: rebuilt only when `key` (the view's structure)
// changes.
const viewParts = new WeakMap();
function partsOf(root, key, build) {
  let parts = viewParts.get(root);
  if (parts === undefined || parts.key !== key) {
    parts = { key, ...build() };
    viewParts.set(root, parts);
  }
  return parts;
}

// Canvas draws wait until every DOM update of the frame is done: reading the theme's colours then
// costs one style recalculation, not one per canvas.
const drawQueue = new Set();
function queueDraw(draw) {
  drawQueue.add(draw);
  if (drawQueue.size === 1) {
    queueMicrotask(() => {
      const draws = [...drawQueue];
      drawQueue.clear();
      for (const d of draws) d();
    });
  }
}

// Colours of the current scheme (light or dark), read from the CSS variables at draw time, once
// per batch of draws and root node (the page, or a widget's shadow root).
const themeCache = new Map();
function themeColors(element) {
  const rootNode = element.getRootNode();
  const cached = themeCache.get(rootNode);
  if (cached) return cached;
  const style = getComputedStyle(element);
  const v = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
  const theme = { fg: v('--hs-fg', '#1f2328'), border: v('--hs-border', '#d1d9e0'), focus: v('--hs-focus', '#0969da') };
  themeCache.set(rootNode, theme);
  queueMicrotask(() => themeCache.delete(rootNode));
  return theme;
}

// colorFor() of the 0..1 weights scale, at 1/256 steps: a heatmap redraw fills up to 16k cells.
const WEIGHT_COLORS = Array.from({ length: 257 }, (_, k) => colorFor(k / 256, WEIGHT_SCALE));
function cellColor(value, scale) {
  if (scale.kind === 'weights' && value >= 0 && value <= 1) return WEIGHT_COLORS[Math.round(value * 256)];
  return colorFor(value, scale);
}

function setText(element, text) {
  if (element.textContent !== text) element.textContent = text;
}

// Label spans of a heatmap axis, reused and updated.
function syncLabels(container, labels) {
  while (container.children.length > labels.length) container.lastChild.remove();
  while (container.children.length < labels.length) container.append(el('span'));
  labels.forEach((label, k) => {
    const span = container.children[k];
    setText(span, label);
    if (span.title !== label) span.title = label;
  });
}

/**
 * A compact heatmap of a (rows x cols) block (row stride `stride`): cells drawn on a canvas (a
 * 16-head, 32-token grid is 16k cells: as DOM elements they take a third of a second to lay out),
 * token labels on both axes as text. The canvas is one keyboard stop: arrow keys, Home/End and
 * PageUp/PageDown move the active cell, whose description becomes the canvas's accessible name and
 * goes to `onCell` (the view's live explanation line). Hover and click work too. Also the
 * loader's attention-pattern grid of a transformer case (transformer-case.js).
 * @param {Element} root
 * @param {{ id: string, name: string, data: ArrayLike<number>, rows: number, cols: number,
 *   stride?: number, rowLabels: string[], colLabels: string[], scale?: object,
 *   masked?: (i: number, j: number) => boolean, describe: (i: number, j: number) => string,
 *   active?: [number, number] | null, onCell?: (i: number, j: number, byKeyOrClick: boolean) => void }} m
 */
export function renderHeatmap(root, m) {
  const parts = partsOf(root, 'heatmap', () => createHeatmap(root));
  parts.update(m);
}

function createHeatmap(root) {
  const box = el('div', 'hs-heatmap');
  const colLabels = el('div', 'hs-heatmap-cols');
  colLabels.setAttribute('aria-hidden', 'true');
  const rowLabels = el('div', 'hs-heatmap-rows');
  rowLabels.setAttribute('aria-hidden', 'true');
  const canvas = el('canvas', 'hs-heatmap-canvas');
  canvas.tabIndex = 0;
  canvas.setAttribute('role', 'application');
  canvas.setAttribute('aria-roledescription', 'heatmap');
  box.append(el('div', 'hs-heatmap-corner'), colLabels, rowLabels, canvas);
  root.replaceChildren(box);

  let m = null;
  let cell = 0;
  let dpr = 1;
  let active = [0, 0];
  let hover = null;
  const clampCell = ([i, j]) => [Math.max(0, Math.min(m.rows - 1, i)), Math.max(0, Math.min(m.cols - 1, j))];
  const name = () => `${m.name}. Arrow keys move between cells. Current cell: ${m.describe(active[0], active[1])}`;

  const draw = () => {
    const ctx = canvas.getContext('2d');
    if (!ctx || m === null) return;
    const { rows, cols, stride = m.cols, data, scale = WEIGHT_SCALE } = m;
    const theme = themeColors(canvas);
    const width = cols * cell;
    const height = rows * cell;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const gap = cell >= 14 ? 1 : 0.5;
    const maskedCells = new Path2D();
    let anyMasked = false;
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        if (m.masked?.(i, j)) {
          maskedCells.rect(j * cell, i * cell, cell - gap, cell - gap);
          anyMasked = true;
          continue;
        }
        ctx.fillStyle = cellColor(data[i * stride + j], scale);
        ctx.fillRect(j * cell, i * cell, cell - gap, cell - gap);
      }
    }
    if (anyMasked) {  // hatched, like .hs-masked cells in matrix.js's tables
      ctx.save();
      ctx.clip(maskedCells);
      ctx.strokeStyle = theme.border;
      ctx.lineWidth = 1;
      ctx.beginPath();
      for (let t = -height; t < width; t += 5) {
        ctx.moveTo(t, height);
        ctx.lineTo(t + height, 0);
      }
      ctx.stroke();
      ctx.restore();
    }
    if (Math.max(rows, cols) <= 10) {  // big cells: the numbers too
      ctx.fillStyle = theme.fg;
      ctx.font = '10px system-ui, sans-serif';
      ctx.textAlign = 'center';
      ctx.textBaseline = 'middle';
      for (let i = 0; i < rows; i++) {
        for (let j = 0; j < cols; j++) {
          if (!m.masked?.(i, j)) ctx.fillText(formatNumber(data[i * stride + j], 2), (j + 0.5) * cell, (i + 0.5) * cell);
        }
      }
    }
    const ring = ([i, j], color, lineWidth) => {
      ctx.strokeStyle = color;
      ctx.lineWidth = lineWidth;
      ctx.strokeRect(j * cell + lineWidth / 2, i * cell + lineWidth / 2, cell - gap - lineWidth, cell - gap - lineWidth);
    };
    if (hover) ring(hover, theme.fg, 1);
    if (focusedIn(box) === canvas) ring(active, theme.focus, 2);
  };

  const cellAt = (event) => {
    const r = canvas.getBoundingClientRect();
    const j = Math.floor(((event.clientX - r.left) / r.width) * m.cols);
    const i = Math.floor(((event.clientY - r.top) / r.height) * m.rows);
    return i >= 0 && i < m.rows && j >= 0 && j < m.cols ? [i, j] : null;
  };
  const moveTo = (next) => {
    active = clampCell(next);
    canvas.setAttribute('aria-label', name());
    m.onCell?.(active[0], active[1], true);
    draw();
  };
  canvas.addEventListener('keydown', (event) => {
    const [i, j] = active;
    const next = {
      ArrowUp: [i - 1, j], ArrowDown: [i + 1, j], ArrowLeft: [i, j - 1], ArrowRight: [i, j + 1],
      Home: [i, 0], End: [i, m.cols - 1], PageUp: [0, j], PageDown: [m.rows - 1, j],
    }[event.key];
    if (next === undefined) return;
    event.preventDefault();
    moveTo(next);
  });
  canvas.addEventListener('focus', () => moveTo(active));
  canvas.addEventListener('blur', draw);
  canvas.addEventListener('mousemove', (event) => {
    const at = cellAt(event);
    if (at === null || (hover && at[0] === hover[0] && at[1] === hover[1])) return;
    hover = at;
    m.onCell?.(at[0], at[1], false);
    draw();
  });
  canvas.addEventListener('mouseleave', () => {
    hover = null;
    draw();
  });
  canvas.addEventListener('click', (event) => {
    const at = cellAt(event);
    if (at === null) return;
    active = at;
    if (focusedIn(box) === canvas) moveTo(at);
    else canvas.focus();
  });

  function update(next) {
    m = next;
    const size = Math.max(m.rows, m.cols);
    const nextCell = size <= 10 ? 30 : size <= 20 ? 16 : 12;
    const nextDpr = Math.min(3, globalThis.devicePixelRatio || 1);
    const width = Math.max(1, Math.round(m.cols * nextCell * nextDpr));
    const height = Math.max(1, Math.round(m.rows * nextCell * nextDpr));
    if (canvas.width !== width || canvas.height !== height || nextCell !== cell) {
      cell = nextCell;
      dpr = nextDpr;
      canvas.width = width;
      canvas.height = height;
      canvas.style.width = `${m.cols * cell}px`;
      canvas.style.height = `${m.rows * cell}px`;
      box.style.setProperty('--hs-cell', `${cell}px`);
    }
    syncLabels(colLabels, m.colLabels.slice(0, m.cols));
    syncLabels(rowLabels, m.rowLabels.slice(0, m.rows));
    box.dataset.heatmap = m.id;
    canvas.dataset.heatmapCanvas = m.id;
    active = clampCell(m.active ?? active);
    if (hover && (hover[0] >= m.rows || hover[1] >= m.cols)) hover = null;
    canvas.setAttribute('aria-label', name());
    queueDraw(draw);
  }
  return { update, redraw: () => queueDraw(draw) };
}

function headLabel(h) {
  return `Head ${h + 1}`;
}

function describeCell(data, h, i, j, values) {
  const q = data.labels.queries[i];
  const k = data.labels.keys[j];
  const who = h === null ? 'Average of the heads' : headLabel(h);
  return `${who}, query ${i + 1} ${quote(q)} → key ${j + 1} ${quote(k)}: weight ${formatNumber(values[i * data.S + j], 3)}`;
}

function shownSize(data) {
  return { rows: Math.min(data.L, MAX_SHOWN), cols: Math.min(data.S, MAX_SHOWN) };
}

// One summary number of a card: "name value", its definition as the tooltip. data-stat names the
// engine's statistic it shows (entropy, distance, maxWeight).
function statItem(stat) {
  const span = el('span', 'hs-head-stat');
  span.dataset.stat = stat;
  const name = el('span', 'hs-head-stat-name');
  const value = el('strong');
  span.append(name, value);
  return {
    element: span,
    set(label, text, detail) {
      setText(name, `${label} `);
      setText(value, text);
      span.title = detail;
    },
  };
}

// One card: header (colour, name, preset, on/off), description, summary numbers, heatmap.
function createHeadCard(h, withPresets, actions) {
  const card = el('article', 'hs-head-card');
  const header = el('header', 'hs-head-card-header');
  const title = el('h3', 'hs-head-title');
  const swatch = el('span', 'hs-head-swatch');
  swatch.setAttribute('aria-hidden', 'true');
  const titleText = el('span', '', h === null ? '' : headLabel(h));
  title.append(swatch, titleText);
  header.append(title);
  let preset = null;
  let presetName = null;
  let on = null;
  if (h !== null) {
    card.dataset.head = String(h + 1);
    card.style.setProperty('--hs-heads-color', T.headColor(h));
    if (T.headDashed(h)) swatch.classList.add('hs-head-swatch-dashed');
    if (withPresets) {
      preset = el('select', 'hs-head-preset');
      preset.dataset.headPreset = String(h + 1);
      preset.setAttribute('aria-label', `${headLabel(h)} preset`);
      for (const p of T.ALL_PRESETS) {
        const o = el('option', '', p);
        o.value = p;
        o.title = T.PRESET_DESCRIPTIONS[p];
        preset.append(o);
      }
      preset.addEventListener('change', () => actions.setPreset(h, preset.value));
      header.append(preset);
    } else {
      presetName = el('span', 'hs-head-preset-name');
      header.append(presetName);
    }
    const onLabel = el('label', 'hs-head-on');
    on = el('input');
    on.type = 'checkbox';
    on.dataset.headAblate = String(h + 1);
    on.setAttribute('aria-label', `${headLabel(h)} switched on (clear to switch it off)`);
    on.addEventListener('change', () => actions.setAblated(h, !on.checked));
    onLabel.append(on, ' on');
    header.append(onLabel);
  } else {
    card.classList.add('hs-head-average');
  }
  const description = el('p', 'hs-head-description');
  const stats = el('p', 'hs-head-stats');
  const entropy = statItem('entropy');
  const distance = statItem('distance');
  const confidence = statItem('maxWeight');
  // The averaged card's numbers are the heads' numbers averaged, not its heatmap's own.
  if (h === null) stats.append(el('span', 'hs-head-stat-name hs-head-stats-caption', 'Mean over heads:'));
  stats.append(entropy.element, distance.element, confidence.element);
  const map = el('div', 'hs-heatmap-box');
  card.append(header, description, stats, map);
  return { card, titleText, preset, presetName, on, description, entropy, distance, confidence, map };
}

/** A statistic as a card shows it: `decimals` places, '—' for NaN (a head with no query rows left). */
function formatStat(value, decimals) {
  return Number.isNaN(value) ? '—' : formatNumber(value, decimals);
}

/** Decimal places the cards show of each statistic. */
const STAT_DECIMALS = { entropy: 2, distance: 1, maxWeight: 2 };

// What each statistic is, for the tooltips: over the S' keys (bias_k and the zero key included),
// the distance over the S keys that have a position.
function statDefinitions(data) {
  const { S, sourceKeys } = data;
  const extra = S > sourceKeys
    ? `, over the ${sourceKeys} keys with a position (bias_k and the zero key add nothing)` : '';
  return {
    entropy: `Mean over queries of the row's entropy; ${formatNumber(Math.log(S), 2)} nats (ln ${S}) ` +
      'would be uniform attention',
    distance: `Average over queries of Σ_j w_ij · |i − j|${extra}`,
    maxWeight: 'Average over queries of the row\'s largest weight, max_j w_ij: 1 when each query looks at ' +
      `one key, ${formatNumber(1 / S, 2)} (1/${S}) would be uniform attention`,
  };
}

// A card's three numbers: `values` { entropy, distance, maxWeight }, `details` their tooltips.
function setStats(c, values, details) {
  c.entropy.set('entropy', `${formatStat(values.entropy, STAT_DECIMALS.entropy)} nats`, details.entropy);
  c.distance.set('mean distance', `${formatStat(values.distance, STAT_DECIMALS.distance)} tokens`, details.distance);
  c.confidence.set('confidence', formatStat(values.maxWeight, STAT_DECIMALS.maxWeight), details.maxWeight);
}

/** The grid of per-head heatmaps, each with its summary numbers, preset and on/off switch. */
function renderHeadGrid(data, state, root, actions) {
  const { rows, cols } = shownSize(data);
  const { H, L, S } = data;
  const withPresets = state.source === 'presets';
  const parts = partsOf(root, `${H}|${withPresets}`, () => {
    const cards = Array.from({ length: H }, (_, h) => createHeadCard(h, withPresets, actions));
    root.replaceChildren(...cards.map((c) => c.card));
    return { cards };
  });
  // Cards as wide as their heatmap (row labels, cells, padding), as many per row as fit.
  const cellPx = Math.max(rows, cols) <= 10 ? 30 : Math.max(rows, cols) <= 20 ? 16 : 12;
  root.style.setProperty('--hs-head-card-min', `${Math.max(300, 130 + cols * cellPx)}px`);
  const definitions = statDefinitions(data);
  parts.cards.forEach((c, h) => {
    c.card.classList.toggle('hs-head-off', state.ablated.has(h));
    if (c.preset && c.preset.value !== data.presets[h]) c.preset.value = data.presets[h];
    if (c.presetName) setText(c.presetName, data.presets[h]);
    c.on.checked = !state.ablated.has(h);
    setText(c.description, T.PRESET_DESCRIPTIONS[data.presets[h]] ?? '');
    c.description.hidden = !T.PRESET_DESCRIPTIONS[data.presets[h]];
    setStats(c, { entropy: data.stats.entropy[h], distance: data.stats.distance[h],
      maxWeight: data.stats.maxWeight[h] }, definitions);
    const weights = T.headWeights(data.weights, { h, H, L, S });
    const scores = T.headWeights(data.scores, { h, H, L, S });
    renderHeatmap(c.map, {
      id: String(h + 1),
      name: `${headLabel(h)} attention weights, ${L} queries by ${S} keys`,
      data: weights, stride: S, rows, cols,
      rowLabels: data.labels.queries, colLabels: data.labels.keys,
      masked: (i, j) => scores[i * S + j] === -Infinity,
      describe: (i, j) => describeCell(data, h, i, j, weights),
      active: state.cell?.head === h ? [state.cell.i, state.cell.j] : null,
      onCell: (i, j, remember) => actions.explainCell(h, i, j, remember),
    });
  });
}

/** PyTorch's default output (average_attn_weights=True): one heatmap, the mean of the heads. */
function renderAverage(data, state, root, actions) {
  const { rows, cols } = shownSize(data);
  const { H, L, S } = data;
  const c = partsOf(root, 'average', () => {
    const card = createHeadCard(null, false, actions);
    root.replaceChildren(card.card);
    return card;
  });
  setText(c.titleText, `Average of the ${H} head${H === 1 ? '' : 's'}`);
  setText(c.description, 'What nn.MultiheadAttention returns by default (need_weights=True, ' +
    'average_attn_weights=True): the heads\' different patterns blurred into one.');
  // The mean over heads of the engine's per-head numbers (the per-head cards'), not statistics of
  // this heatmap computed here: the engine computes no statistics of the averaged weights.
  const heads = `Mean over the ${H} head${H === 1 ? '' : 's'} of each head's`;
  const own = 'Not this heatmap\'s own: averaging blurs the heads\' patterns, so its rows have';
  setStats(c, {
    entropy: T.meanOverHeads(data.stats.entropy),
    distance: T.meanOverHeads(data.stats.distance),
    maxWeight: T.meanOverHeads(data.stats.maxWeight),
  }, {
    entropy: `${heads} entropy (the per-head cards' numbers). ${own} a higher entropy`,
    distance: `${heads} mean distance, Σ_j w_ij · |i − j| averaged over queries (the per-head cards' numbers)`,
    maxWeight: `${heads} confidence, its largest weight per query on average (the per-head cards' numbers). ` +
      `${own} lower largest weights`,
  });
  renderHeatmap(c.map, {
    id: 'average',
    name: `Attention weights averaged over ${H} heads, ${L} queries by ${S} keys`,
    data: data.average, stride: S, rows, cols,
    rowLabels: data.labels.queries, colLabels: data.labels.keys,
    masked: (i, j) => {
      for (let h = 0; h < H; h++) if (data.scores[(h * L + i) * S + j] !== -Infinity) return false;
      return true;
    },
    describe: (i, j) => describeCell(data, null, i, j, data.average),
    active: state.cell?.head === null ? [state.cell.i, state.cell.j] : null,
    onCell: (i, j, remember) => actions.explainCell(null, i, j, remember),
  });
}

/**
 * The line view, after BertViz: queries on the left, keys on the right, lines weighted by
 * attention, a colour per head (heads 9-16 reuse the colours, dashed). Hover or focus a token to
 * see only its lines; click (or Enter) pins it. A head's button shows or hides it: a hidden head is
 * switched off altogether (its lines go, and its output is removed: the ablation below).
 */
function renderLines(data, state, root, actions) {
  const { rows, cols } = shownSize(data);
  const average = state.view === 'average';
  const parts = partsOf(root, `${data.H}|${average}`, () => buildLines(data.H, root, actions, average));
  const sideLabels = (side, labels, count) => {
    const column = side === 'query' ? parts.queries : parts.keys;
    while (column.children.length > count) column.lastChild.remove();
    while (column.children.length < count) column.append(lineToken(side, column.children.length, actions));
    for (let i = 0; i < count; i++) {
      const b = column.children[i];
      setText(b, labels[i]);
      b.title = labels[i];
      b.setAttribute('aria-label', `${side} ${i + 1} ${quote(labels[i])}`);
    }
  };
  sideLabels('query', data.labels.queries, rows);
  sideLabels('key', data.labels.keys, cols);
  const height = Math.max(rows, cols) * LINE_ROW_PX;
  parts.svg.setAttribute('viewBox', `0 0 100 ${height}`);
  parts.svg.style.height = `${height}px`;

  const focus = state.pinned ?? state.hover;
  for (const b of parts.toggles.querySelectorAll('[data-head-toggle]')) {
    b.setAttribute('aria-pressed', String(!state.ablated.has(Number(b.dataset.headToggle) - 1)));
  }
  for (const column of [parts.queries, parts.keys]) {
    for (const b of column.children) {
      const [side, index] = b.dataset.lineToken.split(':');
      const at = (t) => t !== null && t.side === side && t.index === Number(index);
      b.classList.toggle('hs-lines-focus', at(focus));
      b.setAttribute('aria-pressed', String(at(state.pinned)));
    }
  }
  // One <path> per head and weight band (a few dozen elements, not one per line): width and
  // opacity follow the band's weight.
  const paths = [];
  const ys = Array.from({ length: Math.max(rows, cols) }, (_, k) => (k + 0.5) * LINE_ROW_PX);
  const sets = average ? [{ h: null, w: data.average }]
    : Array.from({ length: data.H }, (_, h) => h).filter((h) => !state.ablated.has(h))
      .map((h) => ({ h, w: T.headWeights(data.weights, { h, H: data.H, L: data.L, S: data.S }) }));
  for (const { h, w } of sets) {
    const bands = LINE_BANDS.map(() => []);
    for (let i = 0; i < rows; i++) {
      if (focus?.side === 'query' && focus.index !== i) continue;
      for (let j = 0; j < cols; j++) {
        if (focus?.side === 'key' && focus.index !== j) continue;
        const weight = w[i * data.S + j];
        if (!(weight >= LINE_MIN_WEIGHT)) continue;
        bands[LINE_BANDS.findIndex((upper) => weight < upper)].push(`M0 ${ys[i]}L100 ${ys[j]}`);
      }
    }
    bands.forEach((segments, b) => {
      if (segments.length === 0) return;
      const mid = b === 0 ? (LINE_MIN_WEIGHT + LINE_BANDS[0]) / 2 : (LINE_BANDS[b - 1] + Math.min(1, LINE_BANDS[b])) / 2;
      const path = svgEl('path', {
        d: segments.join(''),
        fill: 'none',
        'stroke-opacity': Math.min(1, 0.15 + 0.85 * mid).toFixed(3),
        'stroke-width': (1 + 3 * mid).toFixed(2),
        'vector-effect': 'non-scaling-stroke',
      });
      if (h !== null) path.dataset.lineHead = String(h + 1);
      path.style.stroke = h === null ? 'var(--hs-fg)' : T.headColor(h);
      if (h !== null && T.headDashed(h)) path.setAttribute('stroke-dasharray', '6 3');
      paths.push(path);
    });
  }
  parts.svg.replaceChildren(...paths);
  if (state.pinned !== null) {
    const labels = state.pinned.side === 'query' ? data.labels.queries : data.labels.keys;
    setText(parts.hint, `Pinned: ${state.pinned.side} ${state.pinned.index + 1} ` +
      `${quote(labels[state.pinned.index] ?? '')}. Click it again (or press Enter) to unpin.`);
  } else {
    setText(parts.hint, 'Hover or focus a token to see only its lines; click it (or press Enter) to pin ' +
      'the selection. Line width and opacity follow the weight; weights under 0.02 are not drawn. ' +
      'Press a head above to hide it: that also switches it off (see "Switch heads off").');
  }
}

function lineToken(side, index, actions) {
  const b = button('', 'hs-lines-token');
  b.dataset.lineToken = `${side}:${index}`;
  const target = { side, index };
  b.addEventListener('mouseenter', () => actions.hoverToken(target));
  b.addEventListener('focus', () => actions.hoverToken(target));
  b.addEventListener('mouseleave', () => actions.hoverToken(null));
  b.addEventListener('blur', () => actions.hoverToken(null));
  b.addEventListener('click', () => actions.pinToken(target));
  return b;
}

function buildLines(H, root, actions, average) {
  const toggles = el('div', 'hs-head-toggles');
  toggles.setAttribute('role', 'group');
  toggles.setAttribute('aria-label', 'Heads: press to switch a head off or on');
  if (!average) {
    for (let h = 0; h < H; h++) {
      const b = button('', 'hs-head-toggle');
      b.dataset.headToggle = String(h + 1);
      b.title = `Show or hide ${headLabel(h)}: a hidden head is switched off (its output is removed too)`;
      b.style.setProperty('--hs-heads-color', T.headColor(h));
      const swatch = el('span', `hs-head-swatch${T.headDashed(h) ? ' hs-head-swatch-dashed' : ''}`);
      swatch.setAttribute('aria-hidden', 'true');
      b.append(swatch, headLabel(h));
      // The pressed state answers at once; the recomputed views follow in the next frame.
      b.addEventListener('click', () => b.setAttribute('aria-pressed', String(actions.toggleHead(h))));
      toggles.append(b);
    }
  } else {
    toggles.append(el('span', 'hs-note', 'Averaged weights: one set of lines for all heads.'));
  }
  const body = el('div', 'hs-lines-body');
  const queries = el('div', 'hs-lines-tokens hs-lines-query');
  queries.setAttribute('role', 'group');
  queries.setAttribute('aria-label', 'Queries (the tokens that attend)');
  const keys = el('div', 'hs-lines-tokens hs-lines-key');
  keys.setAttribute('role', 'group');
  keys.setAttribute('aria-label', 'Keys (the tokens attended to)');
  const svg = svgEl('svg', { class: 'hs-lines-svg', preserveAspectRatio: 'none', 'aria-hidden': 'true', focusable: 'false' });
  body.append(queries, svg, keys);
  const hint = el('p', 'hs-note hs-lines-hint');
  preserveFocus(root, () => root.replaceChildren(toggles, body, hint));
  return { toggles, queries, keys, svg, hint };
}

/** Output change from switched-off heads: the total, per token, and per output dim. */
function renderAblation(data, state, root, actions, layout) {
  const { difference } = data;
  const parts = partsOf(root, 'ablation', () => {
    const summary = el('p', 'hs-ablation-summary');
    const value = el('strong', 'hs-ablation-diff');
    const relative = el('span');
    const which = el('span');
    const reset = button('Switch every head on');
    reset.name = 'all-heads-on';
    reset.addEventListener('click', () => actions.resetAblation());
    summary.append('Output change ‖Δ‖ = ', value, relative, which, ' ', reset);
    const bars = el('table', 'hs-ablation-bars');
    bars.append(el('caption', '', 'Per token: ‖output − output with the heads off‖'));
    const tbody = el('tbody');
    bars.append(tbody);
    const mapTitle = el('p', 'hs-matrix-title');
    const legend = el('div');
    const map = el('div', 'hs-heatmap-box hs-ablation-map');
    root.replaceChildren(summary, bars, mapTitle, legend, map);
    return { value, relative, which, reset, tbody, mapTitle, legend, map };
  });
  const off = [...state.ablated].sort((a, b) => a - b);
  setText(parts.value, formatNumber(difference.total, 3));
  parts.value.dataset.value = String(difference.total);
  setText(parts.relative, ` (${formatNumber(100 * difference.relative, 1)}% of ‖output‖)`);
  setText(parts.which, off.length ? ` with ${off.map((h) => headLabel(h)).join(', ')} switched off.`
    : '. Clear a head\'s "on" box to switch it off.');
  parts.reset.disabled = off.length === 0;

  const { rows } = shownSize(data);
  const max = Math.max(1e-12, ...difference.perToken);
  while (parts.tbody.rows.length > rows) parts.tbody.lastChild.remove();
  while (parts.tbody.rows.length < rows) {
    const tr = el('tr');
    const th = el('th', 'hs-ablation-token');
    th.scope = 'row';
    const barCell = el('td', 'hs-ablation-bar-cell');
    barCell.append(el('span', 'hs-ablation-bar'));
    tr.append(th, barCell, el('td', 'hs-ablation-value'));
    parts.tbody.append(tr);
  }
  for (let i = 0; i < rows; i++) {
    const [th, barCell, valueCell] = parts.tbody.rows[i].cells;
    setText(th, data.labels.queries[i]);
    th.title = data.labels.queries[i];
    barCell.firstChild.style.width = `${(100 * difference.perToken[i]) / max}%`;
    setText(valueCell, formatNumber(difference.perToken[i], 3));
  }

  const showMap = data.E <= WORKER_EMBED_DIM && off.length > 0;
  parts.mapTitle.hidden = !showMap;
  parts.legend.hidden = !showMap;
  parts.map.hidden = !showMap;
  if (showMap) {
    const scale = makeScale(difference.difference, 'signed');
    const names = layout?.names ?? Array.from({ length: data.E }, (_, e) => `dim ${e + 1}`);
    setText(parts.mapTitle, layout
      ? 'Change per output dim (the presets write back into the features: position, identity, classes)'
      : 'Change per output dim');
    renderLegend(parts.legend, scale);
    renderHeatmap(parts.map, {
      id: 'difference',
      name: `Output change per token and output dim, ${data.L} by ${data.E}`,
      data: difference.difference, stride: data.E, rows, cols: data.E,
      rowLabels: data.labels.queries, colLabels: names, scale,
      describe: (i, e) => `Output change, query ${i + 1} ${quote(data.labels.queries[i])}, dim ${e + 1} ` +
        `(${names[e]}): ${formatNumber(difference.difference[i * data.E + e], 3)}`,
      onCell: (i, e) => actions.explain(`Output with the heads off − output, query ${i + 1} ` +
        `${quote(data.labels.queries[i])}, dim ${e + 1} (${names[e]}): ` +
        formatNumber(difference.difference[i * data.E + e], 4)),
    });
  }
}

/** Token chips: click (or Enter) a token to pad it (key_padding_mask): no query may look at it. */
function renderChips(tokens, state, root, actions) {
  while (root.children.length > tokens.length) root.lastChild.remove();
  while (root.children.length < tokens.length) {
    const j = root.children.length;
    const b = button('', 'hs-token-chip');
    b.dataset.padToken = String(j);
    b.title = 'Pad this key (key_padding_mask)';
    b.addEventListener('click', () => actions.togglePadding(j));
    root.append(b);
  }
  tokens.forEach((t, j) => {
    const b = root.children[j];
    setText(b, t);
    const classes = T.tokenClasses(t);
    for (const k of ['number', 'keyword', 'punct']) b.classList.toggle(`hs-token-${k}`, classes[k]);
    b.setAttribute('aria-pressed', String(state.padded.has(j)));
    b.setAttribute('aria-label', `Pad token ${j + 1} ${quote(t)}`);
  });
}

// ---------------------------------------------------------------------------------------------
// The view

/**
 * Mounts the Heads view into `root` (an element, also inside a shadow root). Everything it creates
 * lives under `root`; mount it as often as you like.
 * @param {Element} root
 * @param {{ hs: import('../../lib/index.js').Headscope, onStatus?: (text: string) => void,
 *   text?: string, numHeads?: 1 | 2 | 4 | 8 | 16 }} options hs: init()'s API (small work runs on
 *   it; large loaded cases start their own Web Worker); text and numHeads: the starting sentence
 *   (default: the seed's log line) and head count (default 4).
 * @returns {{ loadCase(caseDocument: object | string): Promise<void>, destroy(): void }} loadCase
 *   shows a case document's heads (errors go to onStatus and the view); destroy frees the engine
 *   objects, ends the worker and empties `root`.
 */
export function mountHeads(root, { hs, onStatus = () => {}, text: initialText = T.DEFAULT_TEXT,
  numHeads: initialHeads = DEFAULT_HEADS } = {}) {
  if (!hs || typeof hs.createMultiheadAttention !== 'function') {
    throw new TypeError('mountHeads: options.hs must be the API of init() from headscope');
  }
  let startHeads = initialHeads;
  if (!HEAD_COUNTS.includes(startHeads)) {
    onStatus(`Heads: ${startHeads} heads is not one of ${HEAD_COUNTS.join(', ')}; showing ${DEFAULT_HEADS}.`);
    startHeads = DEFAULT_HEADS;
  }
  const state = {
    source: 'presets',      // 'presets' | 'random' | 'case'
    text: String(initialText),
    numHeads: startHeads,
    presets: T.defaultPresets(startHeads),
    seed: 1,
    sharpness: 6,
    causal: false,
    padded: new Set(),      // key positions masked by key_padding_mask
    ablated: new Set(),     // heads switched off (0-based): output removed, lines not drawn
    view: 'heads',          // 'heads' | 'average'
    hover: null,            // { side: 'query' | 'key', index }
    pinned: null,
    cell: null,             // { head (null: average), i, j }: the heatmap cell last explained
    batch: 0,
  };
  const local = new Engine(hs);
  let remote = null;        // Engine over the page's worker (page-worker.js), for large cases
  let loaded = null;        // { parsed, dims, big, trace, name }
  let data = null;
  let tokens = [];
  let layout = T.featureLayout(EMBED_DIM);
  let generation = 0;
  let frame = 0;
  let destroyed = false;
  const stateDicts = new Map();

  // Skeleton ----------------------------------------------------------------------------------
  const view = el('div', 'hs-heads');
  const intro = el('p', 'hs-heads-intro',
    'Type a sentence or a log line. It is split into tokens, given deterministic features ' +
    '(position, token identity, character class) and run through one multi-head attention layer ' +
    'whose heads were built by hand to do one job each. Set the number of heads to 1 and the five ' +
    'jobs share a single head and get in each other\'s way; at 16 heads of 4 dims the same-token ' +
    'head no longer has room to tell tokens apart.');

  const controls = el('form', 'hs-controls hs-heads-controls');
  controls.addEventListener('submit', (e) => e.preventDefault());
  const text = el('input', 'hs-heads-text');
  text.type = 'text';
  text.name = 'text';
  text.value = state.text;
  text.spellcheck = false;
  text.autocomplete = 'off';
  const textLabel = labelled('Sentence or log line', text, 'hs-heads-text-label');
  const tokenNote = el('span', 'hs-note hs-heads-token-note');
  tokenNote.setAttribute('aria-live', 'polite');

  const source = el('select');
  source.name = 'weights';
  for (const [value, label] of [['presets', 'Presets (built by hand)'], ['random', 'Seeded random (PyTorch init)'],
    ['case', 'Loaded case']]) {
    const o = el('option', '', label);
    o.value = value;
    source.append(o);
  }
  source.querySelector('option[value="case"]').disabled = true;

  const heads = el('select');
  heads.name = 'heads';
  for (const n of HEAD_COUNTS) {
    const o = el('option', '', `${n} (head dim ${EMBED_DIM / n})`);
    o.value = String(n);
    o.selected = n === state.numHeads;
    heads.append(o);
  }
  const seed = el('input', 'hs-heads-seed');
  seed.type = 'number';
  seed.name = 'seed';
  seed.min = '0';
  seed.step = '1';
  seed.value = String(state.seed);
  const sharpness = el('input');
  sharpness.type = 'range';
  sharpness.name = 'sharpness';
  sharpness.min = '0';
  sharpness.max = '12';
  sharpness.step = '0.5';
  sharpness.value = String(state.sharpness);
  const sharpnessValue = el('output', 'hs-heads-sharpness-value', String(state.sharpness));
  const sharpnessLabel = labelled('Sharpness', sharpness);
  sharpnessLabel.append(sharpnessValue);
  const causal = el('input');
  causal.type = 'checkbox';
  causal.name = 'causal';
  const causalLabel = el('label');
  causalLabel.append(causal, 'Causal mask');

  const viewGroup = el('fieldset', 'hs-heads-viewmode');
  viewGroup.append(el('legend', '', 'Weights shown'));
  const viewRadios = {};
  for (const [value, label] of [['heads', 'per head'], ['average', 'averaged (PyTorch default)']]) {
    const r = el('input');
    r.type = 'radio';
    r.name = 'view';
    r.value = value;
    r.checked = state.view === value;
    viewRadios[value] = r;
    const l = el('label');
    l.append(r, label);
    viewGroup.append(l);
  }
  const batch = el('select');
  batch.name = 'batch';
  const batchLabel = labelled('Batch element', batch);
  batchLabel.hidden = true;

  const row1 = el('div', 'hs-heads-row');
  row1.append(textLabel, tokenNote);
  const row2 = el('div', 'hs-heads-row');
  row2.append(labelled('Weights', source), labelled('Heads', heads), labelled('Seed', seed), sharpnessLabel,
    causalLabel, viewGroup, batchLabel);
  controls.append(row1, row2);

  const chipsBox = el('div', 'hs-heads-chips-box');
  const chipsTitle = el('p', 'hs-note', 'Key padding: click a token to mask it as a key (key_padding_mask); ' +
    'no query may attend to it.');
  const chips = el('div', 'hs-heads-chips');
  chips.setAttribute('role', 'group');
  chips.setAttribute('aria-label', 'Tokens: press to pad (mask as a key)');
  chipsBox.append(chipsTitle, chips);

  const busy = el('p', 'hs-heads-busy');
  busy.setAttribute('role', 'status');
  const message = el('p', 'hs-heads-message');
  const legend = el('div', 'hs-heads-legend');
  renderLegend(legend, WEIGHT_SCALE);
  const explain = el('div', 'hs-explain hs-heads-explain', 'Hover or focus a heatmap cell to read it.');
  explain.setAttribute('aria-live', 'polite');

  const gridSection = el('section', 'hs-heads-section');
  const gridTitle = el('h2', 'hs-heads-h2', 'What each head looks at');
  const gridNote = el('p', 'hs-note hs-heads-grid-note');
  const grid = el('div', 'hs-head-grid');
  const averageBox = el('div', 'hs-heads-average');
  gridSection.append(gridTitle, gridNote, legend, grid, averageBox);

  const linesSection = el('section', 'hs-heads-section');
  const lines = el('div', 'hs-lines');
  linesSection.append(el('h2', 'hs-heads-h2', 'Lines: who looks at whom'), lines);

  const ablationSection = el('section', 'hs-heads-section');
  const ablation = el('div', 'hs-ablation');
  ablationSection.append(el('h2', 'hs-heads-h2', 'Switch heads off'),
    el('p', 'hs-note', 'A switched-off head keeps attending (its weights above do not change), but its ' +
      'columns of out_proj.weight are set to 0, which is exactly the same as zeroing its output before ' +
      'W_O. The engine runs the layer again; the difference is what that head contributed.'),
    ablation);

  view.append(intro, controls, chipsBox, busy, message, gridSection, linesSection, ablationSection, explain);
  root.replaceChildren(view);

  // Actions ------------------------------------------------------------------------------------
  const actions = {
    setPreset(h, preset) {
      state.presets = state.presets.map((p, k) => (k === h ? preset : p));
      schedule(true);
    },
    setAblated(h, off) {
      if (off) state.ablated.add(h);
      else state.ablated.delete(h);
      schedule(true);
    },
    resetAblation() {
      state.ablated.clear();
      schedule(true);
    },
    toggleHead(h) {
      actions.setAblated(h, !state.ablated.has(h));
      return !state.ablated.has(h);
    },
    hoverToken(target) {
      state.hover = target;
      schedule(false);
    },
    pinToken(target) {
      const same = state.pinned && state.pinned.side === target.side && state.pinned.index === target.index;
      state.pinned = same ? null : target;
      schedule(false);
    },
    togglePadding(j) {
      if (state.padded.has(j)) state.padded.delete(j);
      else state.padded.add(j);
      schedule(true);
    },
    explainCell(head, i, j, remember) {
      if (remember) state.cell = { head, i, j };
      if (!data) return;
      const values = head === null ? data.average : T.headWeights(data.weights, { h: head, H: data.H, L: data.L, S: data.S });
      let line = describeCell(data, head, i, j, values);
      if (head !== null) {
        const score = T.headWeights(data.scores, { h: head, H: data.H, L: data.L, S: data.S })[i * data.S + j];
        line += ` (score ${score === -Infinity ? '−∞: masked' : formatNumber(score, 3)})`;
      }
      explain.textContent = line;
    },
    explain(line) {
      explain.textContent = line;
    },
  };

  text.addEventListener('input', () => {
    state.text = text.value;
    schedule(true);
  });
  source.addEventListener('change', () => {
    state.source = source.value;
    state.ablated.clear();
    state.pinned = null;
    schedule(true);
  });
  heads.addEventListener('change', () => {
    state.numHeads = Number(heads.value);
    state.presets = T.defaultPresets(state.numHeads);
    state.ablated.clear();
    schedule(true);
  });
  seed.addEventListener('input', () => {
    const v = Number(seed.value);
    if (seed.value.trim() === '' || !Number.isInteger(v) || v < 0) {
      seed.setAttribute('aria-invalid', 'true');
      return;
    }
    seed.removeAttribute('aria-invalid');
    state.seed = v;
    schedule(true);
  });
  sharpness.addEventListener('input', () => {
    state.sharpness = Number(sharpness.value);
    sharpnessValue.textContent = sharpness.value;
    schedule(true);
  });
  causal.addEventListener('change', () => {
    state.causal = causal.checked;
    schedule(true);
  });
  for (const r of Object.values(viewRadios)) {
    r.addEventListener('change', () => {
      if (r.checked) state.view = r.value;
      schedule(false);
    });
  }
  batch.addEventListener('change', () => {
    state.batch = Number(batch.value) - 1;
    state.pinned = null;
    schedule(true);
  });

  // Update loop: at most one compute + render per animation frame -------------------------------
  let needCompute = true;
  function schedule(compute) {
    if (destroyed) return;
    needCompute ||= compute;
    if (frame) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      const started = performance.now();
      const recompute = needCompute;
      needCompute = false;
      (recompute ? update() : Promise.resolve(render()))
        // After the canvas draws (queued microtasks): the frame's whole cost, for anyone measuring.
        .then(() => queueMicrotask(() => { view.dataset.updateMs = (performance.now() - started).toFixed(1); }))
        .catch(fail);
    });
  }

  function fail(e) {
    setBusy(false);
    message.textContent = `Heads: ${e?.message ?? e}`;
    message.classList.add('hs-error');
    onStatus(`Heads: ${e?.message ?? e}`);
  }

  function setBusy(on, text = '') {
    view.setAttribute('aria-busy', String(on));
    view.classList.toggle('hs-heads-computing', on);
    busy.classList.toggle('hs-busy', on);
    busy.textContent = on ? text : '';
  }

  function syncControls() {
    const caseMode = state.source === 'case';
    source.value = state.source;
    for (const c of [text, heads, causal]) c.disabled = caseMode;
    seed.disabled = caseMode;
    sharpness.disabled = caseMode || state.source === 'random';
    chipsBox.hidden = caseMode;
    heads.value = String(state.numHeads);
    batchLabel.hidden = !(caseMode && loaded?.dims.batched);
  }

  function stateDictFor() {
    const key = JSON.stringify([state.source, state.numHeads, state.presets, state.seed, state.sharpness]);
    let sd = stateDicts.get(key);
    if (sd === undefined) {
      sd = state.source === 'random'
        ? T.randomStateDict({ embedDim: EMBED_DIM, numHeads: state.numHeads, seed: state.seed })
        : T.buildStateDict({ embedDim: EMBED_DIM, numHeads: state.numHeads, heads: state.presets,
          seed: state.seed, sharpness: state.sharpness });
      if (stateDicts.size > 16) stateDicts.clear();
      stateDicts.set(key, sd);
    }
    return { key, sd };
  }

  // One gate per head: 0 for the switched-off ones; null when every head is on.
  function headGatesFor(numHeads) {
    if (state.ablated.size === 0) return null;
    return Array.from({ length: numHeads }, (_, h) => (state.ablated.has(h) ? 0 : 1));
  }

  async function update() {
    const mine = ++generation;
    syncControls();
    message.textContent = '';
    message.classList.remove('hs-error');
    if (state.source === 'case' && loaded) {
      data = await computeCase(mine);
    } else {
      data = await computeText();
    }
    if (mine !== generation || destroyed) return;
    render();
  }

  async function computeText() {
    const result = T.tokenize(state.text);
    if (result.tokens.join('\u0000') !== tokens.join('\u0000')) {
      state.padded.clear();
      state.pinned = null;
      state.cell = null;
    }
    tokens = result.tokens;
    tokenNote.textContent = result.total === 0 ? '' : result.truncated
      ? `${tokens.length} tokens (the first ${T.MAX_TOKENS} of ${result.total})` : `${tokens.length} tokens`;
    renderChips(tokens, state, chips, actions);
    if (tokens.length === 0) return null;
    const x = T.embed(tokens, { embedDim: EMBED_DIM });
    layout = x.layout;
    const L = tokens.length;
    const { sd } = stateDictFor();
    const options = {
      keyPaddingMask: state.padded.size ? T.keyPaddingMask(L, state.padded) : null,
      attnMask: state.causal ? T.causalMask(L) : null,
    };
    const config = { embedDim: EMBED_DIM, numHeads: state.numHeads };
    const run = await local.run({ config, stateDict: sd, headGates: headGatesFor(state.numHeads),
      query: x, key: x, value: x, options });
    const presets = state.source === 'random' ? Array(state.numHeads).fill('random (PyTorch init)') : state.presets;
    let note = '';
    if (state.padded.size === L) note = 'Every token is padded: no query has a key left, so every weight is 0.';
    return viewData(run, callDims(config, x.shape), { labels: { queries: tokens, keys: tokens }, presets, note });
  }

  async function computeCase(mine) {
    const { parsed, dims, big } = loaded;
    const ablatedKey = [...state.ablated].sort((a, b) => a - b).join(',');
    if (loaded.run && loaded.runKey === ablatedKey) return caseViewData(loaded.run);
    if (big) setBusy(true, `Large case (${traceWeights(dims)} weights): running in a Web Worker,`);
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
      const sd = parsed.stateDict;
      const run = await engine.run({
        config: parsed.config, stateDict: sd,
        headGates: headGatesFor(dims.H),
        query: parsed.query, key: parsed.key, value: parsed.value,
        options: { keyPaddingMask: parsed.options.keyPaddingMask, attnMask: parsed.options.attnMask,
          isCausal: parsed.options.isCausal ?? false },
        trace: loaded.trace,
      });
      if (mine !== generation) return data;
      loaded.trace = run.trace;
      loaded.run = run;
      loaded.runKey = ablatedKey;
      return caseViewData(run);
    } finally {
      if (mine === generation) setBusy(false);
    }
  }

  function caseViewData(run) {
    const { parsed, dims } = loaded;
    const { L, Sp: S } = dims;
    const labels = caseLabels({ L, S, sourceLength: dims.S, selfAttention: parsed.key === parsed.query,
      addBiasKV: parsed.config.addBiasKV, addZeroAttn: parsed.config.addZeroAttn });
    layout = null;
    const shown = L > MAX_SHOWN || S > MAX_SHOWN
      ? `Showing queries 1–${Math.min(L, MAX_SHOWN)} of ${L} and keys 1–${Math.min(S, MAX_SHOWN)} of ${S}; ` +
        'the summary numbers and the output change cover all of them.' : '';
    return viewData(run, dims, { labels, presets: Array(dims.H).fill(loaded.name), n: state.batch, note: shown });
  }

  function render() {
    syncControls();
    const empty = data === null;
    gridSection.hidden = empty;
    linesSection.hidden = empty;
    ablationSection.hidden = empty;
    if (empty) {
      message.textContent = 'Type something to see the heads at work.';
      return;
    }
    if (data.note) message.textContent = data.note;
    const average = state.view === 'average';
    grid.hidden = average;
    averageBox.hidden = !average;
    gridNote.textContent = average
      ? 'One heatmap: the mean of every head\'s weights, as PyTorch returns them by default. ' +
        'Its numbers are the per-head numbers averaged over the heads.'
      : `One heatmap per head (rows: queries, columns: keys). Head dim ${data.E / data.H}. ` +
        'Entropy: 0 when a head looks at one key, ln(keys) when it looks everywhere. ' +
        'Mean distance: how far, in tokens, a head looks on average. ' +
        'Confidence: a query\'s largest weight, on average; 1 when a head looks at one key. ' +
        'The engine computes all three in the same pass as the weights.';
    if (average) {
      renderAverage(data, state, averageBox, actions);
    } else {
      renderHeadGrid(data, state, grid, actions);
    }
    renderLines(data, state, lines, actions);
    renderAblation(data, state, ablation, actions, layout);
  }

  // Canvases take their colours from the scheme: redraw when it changes.
  const scheme = globalThis.matchMedia?.('(prefers-color-scheme: dark)');
  const onScheme = () => schedule(false);
  scheme?.addEventListener?.('change', onScheme);

  schedule(true);

  // API -----------------------------------------------------------------------------------------
  return {
    /**
     * Shows a case document's heads (queries labelled t1..tL). Large cases (N*H*L*S' > 50k weights
     * or E > 128) run in a Web Worker, with a busy state; smaller ones in this thread.
     */
    async loadCase(caseDocument) {
      let parsed;
      try {
        parsed = parseCase(caseDocument);
      } catch (e) {
        fail(e);
        return;
      }
      const dims = callDims(parsed.config, parsed.query.shape, parsed.key.shape);
      loaded = {
        id: (loaded?.id ?? 0) + 1,
        parsed, dims, trace: null,
        name: parsed.name ? `case ${parsed.name}` : 'loaded case',
        big: traceWeights(dims) > WORKER_WEIGHTS || dims.E > WORKER_EMBED_DIM,
      };
      // N is null for a query of the wrong rank: the run fails with the engine's message.
      batch.replaceChildren(...Array.from({ length: dims.N ?? 1 }, (_, n) => {
        const o = el('option', '', String(n + 1));
        o.value = String(n + 1);  // 1-based like its label
        return o;
      }));
      state.batch = 0;
      state.source = 'case';
      state.ablated.clear();
        state.pinned = null;
      state.cell = null;
      source.querySelector('option[value="case"]').disabled = false;
      onStatus(`Heads: showing ${loaded.name} (${dims.H} heads, ${dims.L} queries${dims.batched ? `, batch of ${dims.N}` : ''}).`);
      if (frame) {
        cancelAnimationFrame(frame);
        frame = 0;
      }
      needCompute = false;
      try {
        await update();
      } catch (e) {
        fail(e);
      }
    },
    destroy() {
      destroyed = true;
      scheme?.removeEventListener?.('change', onScheme);
      generation++;
      if (frame) cancelAnimationFrame(frame);
      local.dispose().catch(() => {});
      // The page's worker is shared: free this view's objects in it, leave it running.
      remote?.dispose().catch(() => {});
      root.replaceChildren();
    },
  };
}
