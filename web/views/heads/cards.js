// The Heads view's cards: one per head (colour, preset, on/off, statistics, heatmap) and the
// averaged card (PyTorch's default output).
import { el, partsOf, setText } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { renderHeatmap } from '../common/heatmap.js';
import { heatmapCellSize } from '../common/heatmap-draw.js';
import { stretchedScale, WEIGHT_SCALE } from '../common/heatmap-colors.js';
import { headColor, headDashed } from '../common/head-colors.js';
import { describeCell, headLabel, shownSize } from './data.js';
import { ALL_PRESETS, PRESET_DESCRIPTIONS } from './presets.js';
import { headWeights, meanOverHeads } from './summaries.js';
import { setStats, statDefinitions, statItem } from './stats.js';

// One card: header (colour, name, preset, on/off), description, summary numbers, heatmap.
function createHeadCard(h, withPresets, withSwitch, actions) {
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
    card.style.setProperty('--hs-heads-color', headColor(h));
    if (headDashed(h)) swatch.classList.add('hs-head-swatch-dashed');
    if (withPresets) {
      preset = el('select', 'hs-head-preset');
      preset.dataset.headPreset = String(h + 1);
      preset.setAttribute('aria-label', `${headLabel(h)} preset`);
      for (const p of ALL_PRESETS) {
        const o = el('option', '', p);
        o.value = p;
        o.title = PRESET_DESCRIPTIONS[p];
        preset.append(o);
      }
      preset.addEventListener('change', () => actions.setPreset(h, preset.value));
      header.append(preset);
    } else {
      presetName = el('span', 'hs-head-preset-name');
      header.append(presetName);
    }
    const onLabel = el('label', 'hs-head-on');
    onLabel.hidden = !withSwitch;
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

/** The grid of per-head heatmaps, each with its summary numbers, preset and on/off switch. */
export function renderHeadGrid(data, state, root, actions) {
  const { rows, cols } = shownSize(data);
  const { H, L, S } = data;
  const withPresets = state.source === 'presets' && state.presetMenus;
  const parts = partsOf(root, `${H}|${withPresets}|${state.switches}`, () => {
    const cards = Array.from({ length: H }, (_, h) => createHeadCard(h, withPresets, state.switches, actions));
    root.replaceChildren(...cards.map((c) => c.card));
    return { cards };
  });
  // Cards as wide as their heatmap (row labels, cells, padding), as many per row as fit.
  const cellPx = heatmapCellSize(Math.max(rows, cols));
  root.style.setProperty('--hs-head-card-min', `${Math.max(300, 130 + cols * cellPx)}px`);
  const definitions = statDefinitions(data);
  parts.cards.forEach((c, h) => {
    c.card.classList.toggle('hs-head-off', state.ablated.has(h));
    c.card.hidden = state.shown !== null && !state.shown.has(h);
    if (c.preset && c.preset.value !== data.presets[h]) c.preset.value = data.presets[h];
    if (c.presetName) setText(c.presetName, data.presets[h]);
    c.on.checked = !state.ablated.has(h);
    const weights = headWeights(data.weights, { h, H, L, S });
    const scores = headWeights(data.scores, { h, H, L, S });
    // PyTorch's initialisation: small scores, every weight near 1/S, a blank heatmap on the 0..1
    // scale. Stretch the colours to this head's range and say so.
    const scale = state.source === 'random' ? stretchedScale(weights) : WEIGHT_SCALE;
    const description = scale.stretch
      ? `Untrained (PyTorch's initial weights): scores are small, so attention is nearly uniform; ` +
        `every weight is between ${formatNumber(scale.min, 3)} and ${formatNumber(scale.max, 3)} ` +
        `(uniform: 1/${S} = ${formatNumber(1 / S, 3)}). Colours are stretched to that range.`
      : PRESET_DESCRIPTIONS[data.presets[h]] ?? '';
    setText(c.description, description);
    c.description.hidden = !description;
    setStats(c, { entropy: data.stats.entropy[h], distance: data.stats.distance[h],
      maxWeight: data.stats.maxWeight[h] }, definitions);
    renderHeatmap(c.map, {
      scale,
      id: String(h + 1),
      name: `${headLabel(h)} attention weights, ${L} queries by ${S} keys`,
      data: weights, stride: S, rows, cols,
      rowLabels: data.labels.queries, colLabels: data.labels.keys,
      masked: (i, j) => scores[i * S + j] === -Infinity,
      describe: (i, j) => describeCell(data, h, i, j, weights),
      active: state.cell?.head === h ? [state.cell.i, state.cell.j] : null,
      onCell: (i, j, remember, anchor) => actions.explainCell(h, i, j, remember, anchor),
      onLeave: () => actions.leaveCell(),
    });
  });
}

/** PyTorch's default output (average_attn_weights=True): one heatmap, the mean of the heads. */
export function renderAverage(data, state, root, actions) {
  const { rows, cols } = shownSize(data);
  const { H, L, S } = data;
  const c = partsOf(root, 'average', () => {
    const card = createHeadCard(null, false, false, actions);
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
    entropy: meanOverHeads(data.stats.entropy),
    distance: meanOverHeads(data.stats.distance),
    maxWeight: meanOverHeads(data.stats.maxWeight),
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
    onCell: (i, j, remember, anchor) => actions.explainCell(null, i, j, remember, anchor),
    onLeave: () => actions.leaveCell(),
  });
}
