// The Train view's grid: every head's attention on the task's probe row, one heatmap per layer
// and head (layers as rows, heads as columns), each captioned with the detector it scores highest
// on (above 0.4) and marked when it is switched off.
import { button, el, setText } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { renderHeatmap } from '../common/heatmap.js';
import { DETECTOR_LABELS, headLabel } from './detectors.js';

/**
 * @param {Element} grid
 * @param {{ state: object, task: object, probe: object, probeRun: object, scores: object[],
 *   gates: number[][] | null, onOpen: ((l: number, h: number) => void) | null }} o  probeRun: the
 *   probe's forward with every hook_pattern; scores: the detectors' per layer; onOpen: a card's
 *   "Open in the Heads view" (layer, 1-based head), none when null
 */
export function drawHeadGrid(grid, { state, task, probe, probeRun, scores, gates, onOpen }) {
  const T = task.seqLen;
  const labels = Array.from(probe.tokens.data, (id) => task.vocab[id]);
  const cells = [];
  for (let l = 0; l < state.layers; l++) {
    const pattern = probeRun.hooks[`blocks.${l}.attn.hook_pattern`];
    for (let h = 0; h < state.heads; h++) cells.push({ l, h, data: pattern.data.subarray(h * T * T, (h + 1) * T * T) });
  }
  while (grid.children.length > cells.length) grid.lastChild.remove();
  while (grid.children.length < cells.length) {
    const card = el('figure', 'hs-train-head');
    const caption = el('figcaption');
    caption.append(el('span', 'hs-train-head-name'));
    if (onOpen) {
      const open = button('Open in the Heads view', 'hs-train-open');
      open.addEventListener('click', () => onOpen(Number(card.dataset.layer), Number(card.dataset.head)));
      caption.append(' ', open);
    }
    card.append(caption, el('div', 'hs-heatmap-box'));
    grid.append(card);
  }
  grid.style.setProperty('--hs-train-heads', String(Math.min(state.heads, 8)));
  cells.forEach(({ l, h, data }, k) => {
    const card = grid.children[k];
    card.dataset.layer = String(l);
    card.dataset.head = String(h + 1);
    const label = headLabel(scores[l], h);
    const off = gates?.[l][h] === 0;
    setText(card.firstChild.firstChild, `L${l} H${h + 1}${off ? ' (off)' : ''}${label ? `: ${DETECTOR_LABELS[label]}` : ''}`);
    card.dataset.label = label ?? '';
    card.classList.toggle('hs-head-off', off);
    renderHeatmap(card.lastChild, {
      id: `${l}.${h + 1}`, name: `Layer ${l} head ${h + 1} attention on the probe row, ${T} by ${T}`,
      data, rows: T, cols: T, rowLabels: labels, colLabels: labels,
      // Hatched: the keys the position rules hide (causal, and outside a sliding window's band).
      masked: (i, j) => j > i || (state.attnWindow > 0 && j <= i - state.attnWindow),
      describe: (i, j) => `layer ${l} head ${h + 1}: ${labels[i]} (${i}) → ${labels[j]} (${j}): ${formatNumber(data[i * T + j], 3)}`,
    });
  });
}
