// The Heads view's exports: the shown heads' weights (or the average, in the averaged view) as
// pictures (SVG, PNG), and every number of the current run as JSON and CSV, with the state, the
// pinned token and the explained cell.
import { headWeights } from './summaries.js';
import { cellColor, WEIGHT_SCALE } from '../common/heatmap-colors.js';
import { formatNumber } from '../common/numbers.js';
import { exportTheme } from '../common/export.js';
import { panelsToSVG } from '../common/export-svg.js';
import { panelsToPNG } from '../common/export-png.js';
import { nested, toCSV, toJSON, EXPORT_FORMATS, MIME } from '../common/export-data.js';
import { HeadscopeError } from '../../lib/errors.js';
import { headLabel } from './data.js';

/** Heatmaps larger than this on a side are cut to their first rows and columns in pictures. */
const PICTURE_MAX = 128;

/**
 * @param {'svg' | 'png' | 'json' | 'csv'} format
 * @param {{ data: object, state: object, publicState: object, element: Element }} view the view's
 *   data (data.js viewData), its internal and public state, and an element to read the theme from
 * @returns {Promise<Blob>}
 */
export async function exportHeads(format, { data, state, publicState, element }) {
  checkHeadsFormat(format);
  if (data === null) {
    throw new HeadscopeError('INVALID_ARGUMENT', 'exportAs: nothing to export: the text has no tokens ' +
      '(type a sentence, or set one with the text attribute, setText or setState)');
  }
  const { H, L, S, E, labels } = data;
  const shown = Array.from({ length: H }, (_, h) => h).filter((h) => state.shown === null || state.shown.has(h));
  const weightsOf = (h) => headWeights(data.weights, { h, H, L, S });
  const scoresOf = (h) => headWeights(data.scores, { h, H, L, S });
  if (format === 'svg' || format === 'png') {
    const theme = exportTheme(element);
    const rows = Math.min(L, PICTURE_MAX);
    const cols = Math.min(S, PICTURE_MAX);
    // The explained cell (state.cell: the one last hovered, focused or clicked) is outlined.
    const panel = (title, w, masked, h) => ({
      title, rows, cols, rowLabels: labels.queries, colLabels: labels.keys,
      mark: state.cell && state.cell.head === h ? [state.cell.i, state.cell.j] : null,
      value: (i, j) => w[i * S + j],
      color: (i, j) => (masked(i, j) ? theme.border : cellColor(w[i * S + j], WEIGHT_SCALE)),
      text: rows <= 10 && cols <= 10 ? (i, j) => (masked(i, j) ? '' : formatNumber(w[i * S + j], 2)) : null,
    });
    const panels = state.view === 'average'
      ? [panel(`Average of the ${H} heads`, data.average, () => false, null)]
      : shown.map((h) => {
        const scores = scoresOf(h);
        const off = state.ablated.has(h) ? ' (switched off)' : '';
        return panel(`${headLabel(h)}: ${data.presets[h]}${off}`, weightsOf(h), (i, j) => scores[i * S + j] === -Infinity, h);
      });
    const pinned = state.pinned ? `; pinned: ${state.pinned.side} ${state.pinned.index + 1}` : '';
    const title = `headscope: attention weights, ${L} queries × ${S} keys${pinned}`;
    return format === 'svg' ? new Blob([panelsToSVG(panels, theme, title)], { type: MIME.svg }) : panelsToPNG(panels, theme);
  }
  if (format === 'json') {
    const matrix = (w) => nested({ data: w, shape: [L, S] });
    const doc = {
      view: 'heads',
      state: publicState,
      tokens: { queries: labels.queries, keys: labels.keys },
      heads: shown.map((h) => ({
        head: h + 1, preset: data.presets[h], on: !state.ablated.has(h),
        stats: { entropy: data.stats.entropy[h], distance: data.stats.distance[h], maxWeight: data.stats.maxWeight[h] },
        weights: matrix(weightsOf(h)), scores: matrix(scoresOf(h)),
      })),
      // PyTorch's averaged weights: computed by the engine when the averaged view is shown.
      ...(data.average ? { average: matrix(data.average) } : {}),
      output: nested({ data: data.output, shape: [L, E] }),
      outputWithHeadsOff: nested({ data: data.ablatedOutput, shape: [L, E] }),
      pinned: state.pinned && { side: state.pinned.side, index: state.pinned.index + 1 },
      explained: state.cell && { head: state.cell.head === null ? 'average' : state.cell.head + 1, query: state.cell.i + 1, key: state.cell.j + 1 },
    };
    return new Blob([toJSON(doc)], { type: MIME.json });
  }
  if (format === 'csv') {
    const rows = [['head', 'query', 'query_token', 'key', 'key_token', 'weight', 'score']];
    const sets = state.view === 'average' ? [null] : shown;
    for (const h of sets) {
      const w = h === null ? data.average : weightsOf(h);
      const s = h === null ? null : scoresOf(h);
      for (let i = 0; i < L; i++) {
        for (let j = 0; j < S; j++) {
          rows.push([h === null ? 'average' : h + 1, i + 1, labels.queries[i], j + 1, labels.keys[j], w[i * S + j], s ? s[i * S + j] : '']);
        }
      }
    }
    return new Blob([toCSV(rows)], { type: MIME.csv });
  }
  return checkHeadsFormat(format);
}

/** Throws the HeadscopeError of a format the Heads view does not export. */
export function checkHeadsFormat(format) {
  if (!EXPORT_FORMATS.includes(format)) {
    throw new HeadscopeError('INVALID_ARGUMENT', `exportAs: format: expected one of ${EXPORT_FORMATS.join(', ')}, ` +
      `got ${typeof format === 'string' ? JSON.stringify(format.slice(0, 60)) : String(format)}`);
  }
}
