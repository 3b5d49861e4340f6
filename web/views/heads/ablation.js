// The Heads view's ablation part: what switching heads off changes in the output.
import { button, el, partsOf, quote, setText } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { makeScale } from '../common/scale.js';
import { renderLegend } from '../common/legend.js';
import { renderHeatmap } from '../common/heatmap.js';
import { headLabel, shownSize } from './data.js';

/** The per-dim change map is drawn up to this many output dims. */
const MAP_MAX_DIMS = 128;

/** Output change from switched-off heads: the total, per token, and per output dim. */
export function renderAblation(data, state, root, actions, layout) {
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
    : state.switches ? '. Clear a head\'s "on" box to switch it off.' : '.');
  parts.reset.disabled = off.length === 0;
  parts.reset.hidden = !state.switches;

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

  const showMap = data.E <= MAP_MAX_DIMS && off.length > 0;
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
      onLeave: () => actions.leaveCell(),
      onCell: (i, e, _byKey, anchor) => actions.explain(anchor, `Output with the heads off − output, query ${i + 1} ` +
        `${quote(data.labels.queries[i])}, dim ${e + 1} (${names[e]}): ` +
        formatNumber(difference.difference[i * data.E + e], 4)),
    });
  }
}
