// The Train view's exports, as the other views' (common/export.js): the loss curves and every
// head's attention on the probe row as pictures (SVG, PNG), the curve, the probe row and each
// head's pattern and detector scores as JSON, and the curve as CSV (one row per evaluation).
// The trained model itself is the view's 'case' format (exportModel in view.js).
import { HeadscopeError } from '../../lib/errors.js';
import { DETECTORS } from '../../lib/detectors.js';
import { cellColor, WEIGHT_SCALE } from '../common/heatmap-colors.js';
import { formatNumber } from '../common/numbers.js';
import { exportTheme } from '../common/export.js';
import { panelsToSVG } from '../common/export-svg.js';
import { panelsToPNG } from '../common/export-png.js';
import { nested, toCSV, toJSON, MIME } from '../common/export-data.js';

/** The formats of the Train view's exportAs ('case': the trained model, view.js). */
export const TRAIN_EXPORT_FORMATS = ['svg', 'png', 'json', 'csv', 'case'];

/** Head heatmaps in a picture at most (the first ones, layer by layer); JSON holds them all. */
const PICTURE_HEADS = 64;

/** Throws the HeadscopeError of a format the Train view does not export. */
export function checkTrainFormat(format) {
  if (!TRAIN_EXPORT_FORMATS.includes(format)) {
    throw new HeadscopeError('INVALID_ARGUMENT', `exportAs: format: expected one of ${TRAIN_EXPORT_FORMATS.join(', ')}, ` +
      `got ${typeof format === 'string' ? JSON.stringify(format.slice(0, 60)) : String(format)}`);
  }
}

/**
 * @param {'svg' | 'png' | 'json' | 'csv'} format
 * @param {{ state: object, task: object, probe: object, curve: object[], last: { probeRun: object,
 *   scores: object[] }, gates: number[][] | null, log: boolean, element: Element }} view the view's
 *   state, task, probe row, curve points, last evaluation, head gates, whether the loss axis is
 *   logarithmic and an element to read the theme from
 * @returns {Promise<Blob>}
 */
export async function exportTrain(format, { state, task, probe, curve, last, gates, log, element }) {
  checkTrainFormat(format);
  const T = task.seqLen;
  const labels = Array.from(probe.tokens.data, (id) => task.vocab[id]);
  const heads = [];
  for (let l = 0; l < state.layers; l++) {
    const pattern = last.probeRun.hooks[`blocks.${l}.attn.hook_pattern`];
    for (let h = 0; h < state.heads; h++) {
      heads.push({ l, h, off: gates?.[l][h] === 0, data: pattern.data.subarray(h * T * T, (h + 1) * T * T) });
    }
  }
  const name = (l, h) => `L${l} H${h + 1}`;
  const steps = `${state.task}, step ${state.steps}`;
  if (format === 'svg' || format === 'png') {
    const theme = exportTheme(element);
    const losses = curve.flatMap((p) => [p.trainLoss, p.heldOutLoss]).filter((v) => Number.isFinite(v) && (!log || v > 0));
    let lo = losses.length ? Math.min(...losses) : 0.01;
    let hi = losses.length ? Math.max(...losses) : 1;
    if (log) {
      lo = Math.max(1e-4, lo * 0.9);
      hi = Math.max(hi * 1.1, lo * 10);
    } else {
      lo = 0;
      hi = Math.max(hi * 1.05, 1e-3);
    }
    const series = (key) => curve.map((p) => [p.step, p[key]]);
    const chart = {
      kind: 'chart', title: `Loss and accuracy (${steps})`, width: 560, height: 200,
      x: { min: 0, max: Math.max(100, state.steps), label: 'steps' },
      left: { min: lo, max: hi, log }, right: { min: 0, max: 1 },
      series: [
        { label: 'training loss', color: theme.heads[0], axis: 'left', points: series('trainLoss') },
        { label: 'held-out loss', color: theme.heads[1], axis: 'left', points: series('heldOutLoss') },
        { label: 'held-out accuracy (right axis)', color: theme.heads[2], axis: 'right', dash: true, points: series('accuracy') },
      ],
    };
    const pictured = heads.slice(0, PICTURE_HEADS).map(({ l, h, off, data }) => ({
      title: `${name(l, h)}${off ? ' (off)' : ''}`, rows: T, cols: T, rowLabels: labels, colLabels: labels,
      value: (i, j) => data[i * T + j],
      color: (i, j) => (j > i ? theme.border : cellColor(data[i * T + j], WEIGHT_SCALE)),
      text: T <= 10 ? (i, j) => (j > i ? '' : formatNumber(data[i * T + j], 2)) : null,
    }));
    const more = heads.length > PICTURE_HEADS ? ` (the first ${PICTURE_HEADS} of ${heads.length} heads)` : '';
    const title = `headscope train: ${steps}; every head on the probe row${more}`;
    const panels = [chart, ...pictured];
    return format === 'svg' ? new Blob([panelsToSVG(panels, theme, title)], { type: MIME.svg }) : panelsToPNG(panels, theme);
  }
  // A training loss exists only after training: the first evaluation has none (null, an empty cell).
  const points = curve.map((p) => ({ step: p.step, trainLoss: Number.isFinite(p.trainLoss) ? p.trainLoss : null,
    heldOutLoss: p.heldOutLoss, accuracy: p.accuracy }));
  if (format === 'json') {
    const doc = {
      view: 'train',
      state,
      curve: points,
      probe: { tokens: labels, ids: Array.from(probe.tokens.data), text: task.describe(probe.tokens) },
      heads: heads.map(({ l, h, off, data }) => ({
        layer: l, head: h + 1, on: !off,
        detectors: Object.fromEntries(DETECTORS.map((d) => [d, last.scores[l][d]?.[h] ?? null])),
        pattern: nested({ data, shape: [T, T] }),
      })),
    };
    return new Blob([toJSON(doc)], { type: MIME.json });
  }
  const rows = [['step', 'train_loss', 'held_out_loss', 'held_out_accuracy'],
    ...points.map((p) => [p.step, p.trainLoss ?? '', p.heldOutLoss, p.accuracy])];
  return new Blob([toCSV(rows)], { type: MIME.csv });
}
