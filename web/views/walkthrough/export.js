// The Walkthrough's exports: the shown matrices as pictures (SVG, PNG) with their numbers, every
// matrix as JSON and CSV, and the current numbers as a case document (docs/case-format.md) whose
// expected output and per-head weights are the ones shown, so the same case runs in PyTorch, the
// CLIs and the page.
import { formatNumber } from '../common/numbers.js';
import { colorFor } from '../common/scale.js';
import { HeadscopeError } from '../../lib/errors.js';
import { exportTheme } from '../common/export.js';
import { panelsToSVG } from '../common/export-svg.js';
import { panelsToPNG } from '../common/export-png.js';
import { nested, toCSV, toJSON, MIME } from '../common/export-data.js';
import { publicWalkthroughState } from './state.js';
import { toStateDict } from './model.js';
import { matrixName, sharedScale, shownNames, specOf } from './specs.js';

/**
 * The matrices of a state and its trace, in page order, as exportWalkthrough takes them:
 * { name, title, rows, cols, rowLabels, colLabels, get(i, j), color(i, j) }.
 */
export function pageMatrices(state, trace) {
  const scale = sharedScale(state, trace);
  return shownNames(state).map((name) => {
    const spec = specOf(name, scale, state, trace);
    const get = (i, j) => spec.data[i * spec.cols + j];
    return { name, title: spec.title, rows: spec.rows, cols: spec.cols, rowLabels: spec.rowLabels,
      colLabels: spec.colLabels, get, color: (i, j) => colorFor(get(i, j), spec.scale) };
  });
}

/**
 * @param {'svg' | 'png' | 'json' | 'csv' | 'case'} format
 * @param {{ state: object, trace: object, matrices: object[], visible: (name: string) => boolean,
 *   explained: object | null, element: Element }} view matrices: { name, title, rows, cols,
 *   rowLabels, colLabels, get(i, j), color(i, j) } in page order
 * @returns {Promise<Blob>}
 */
export async function exportWalkthrough(format, { state, trace, matrices, visible, explained, element }) {
  if (format === 'svg' || format === 'png') {
    const theme = exportTheme(element);
    const panels = matrices.filter((m) => visible(m.name)).map((m) => ({
      title: `${m.name === m.title ? m.name : `${m.name}: ${m.title}`}`,
      rows: m.rows, cols: m.cols, rowLabels: m.rowLabels, colLabels: m.colLabels,
      value: m.get, color: m.color, text: (i, j) => formatNumber(m.get(i, j), 2),
      // The explained cell (hovered or focused) is outlined.
      mark: explained && matrixName(explained.stage, explained.h) === m.name ? [explained.i, explained.j] : null,
    }));
    const title = `headscope walkthrough: ${state.L} tokens × ${state.E} dims, ${state.H} head${state.H > 1 ? 's' : ''}`;
    return format === 'svg' ? new Blob([panelsToSVG(panels, theme, title)], { type: MIME.svg }) : panelsToPNG(panels, theme);
  }
  const all = (m) => Array.from({ length: m.rows }, (_, i) => Array.from({ length: m.cols }, (_, j) => m.get(i, j)));
  if (format === 'json') {
    const doc = {
      view: 'walkthrough',
      state: publicWalkthroughState(state),
      matrices: Object.fromEntries(matrices.map((m) => [m.name, all(m)])),
      explained,
    };
    return new Blob([toJSON(doc)], { type: MIME.json });
  }
  if (format === 'csv') {
    const rows = [['matrix', 'row', 'col', 'value']];
    for (const m of matrices) for (let i = 0; i < m.rows; i++) for (let j = 0; j < m.cols; j++) rows.push([m.name, i, j, m.get(i, j)]);
    return new Blob([toCSV(rows)], { type: MIME.csv });
  }
  if (format === 'case') {
    const inputs = { query: state.x, need_weights: true, average_attn_weights: false };
    if (state.masks) {
      const { attnMask, keyPaddingMask, isCausal } = state.masks;
      const asJson = (m) => nested(m, m.type === 'bool' ? (v) => v !== 0 : (v) => v);
      if (attnMask) inputs.attn_mask = asJson(attnMask);
      if (keyPaddingMask) inputs.key_padding_mask = asJson(keyPaddingMask);
      if (isCausal) {
        inputs.is_causal = true;
        // PyTorch wants the causal mask itself beside is_causal.
        inputs.attn_mask ??= Array.from({ length: state.L }, (_, i) => Array.from({ length: state.L }, (_, j) => j > i));
      }
    }
    const doc = {
      name: `walkthrough-${state.L}x${state.E}-h${state.H}`,
      config: { embed_dim: state.E, num_heads: state.H, bias: state.bias !== null },
      state_dict: toStateDict(state),
      inputs,
      // headscope's float32 results for these numbers (the format's tolerance covers float64's).
      expected: { output: nested(trace.output), weights: nested(trace.weights) },
    };
    return new Blob([toJSON(doc)], { type: MIME.case });
  }
  throw new HeadscopeError('INVALID_ARGUMENT', 'exportAs: format: expected one of svg, png, json, csv, case, ' +
    `got ${typeof format === 'string' ? JSON.stringify(format.slice(0, 60)) : String(format)}`);
}
