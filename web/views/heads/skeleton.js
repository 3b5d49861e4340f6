// The Heads view's elements, built once: the intro, the controls (controls.js), the export bar,
// the busy and message lines, the three parts' sections (grid, lines, ablation) and the
// explanation box. Everything is created here and found through the returned object, never
// through document-level ids, so the view mounts many times per page and in shadow roots.
import { el, statusEl } from '../common/dom.js';
import { renderLegend } from '../common/legend.js';
import { WEIGHT_SCALE } from '../common/heatmap-colors.js';
import { exportBar } from '../common/export-bar.js';
import { EXPORT_FORMATS } from '../common/export-data.js';
import { buildControls } from './controls.js';
import { HEAD_COUNTS } from './state.js';
import { EMBED_DIM } from './compute.js';

export const EXPLAIN_HINT = 'Hover or focus a heatmap cell to read it.';
/** The intro of the sentence's hand-built heads (a loaded case has its own: case-mode.js). */
export const SENTENCE_INTRO = 'Type a sentence or a log line. It is split into tokens, given deterministic features ' +
  '(position, token identity, character class) and run through one multi-head attention layer ' +
  'whose heads were built by hand to do one job each. Set the number of heads to 1 and the five ' +
  'jobs share a single head and get in each other\'s way; at 16 heads of 4 dims the same-token ' +
  'head no longer has room to tell tokens apart.';

/**
 * @param {Element} root  its content is replaced
 * @param {{ compact: boolean, hidden: Set<string>, shownParts: Set<string>,
 *   exportAs: (format: string) => Promise<Blob>, onExportError: (e: unknown) => void }} o
 * @returns the elements, by name (and `controls`: buildControls's)
 */
export function buildSkeleton(root, { compact, hidden, shownParts, exportAs, onExportError }) {
  const view = el('div', `hs-heads${compact ? ' hs-compact' : ''}`);
  const intro = el('p', 'hs-heads-intro hs-prose', SENTENCE_INTRO);
  const controls = buildControls({ headCounts: HEAD_COUNTS, embedDim: EMBED_DIM });

  const busy = statusEl('p', 'hs-heads-busy');
  const message = el('p', 'hs-heads-message');
  const legend = el('div', 'hs-heads-legend');
  renderLegend(legend, WEIGHT_SCALE);
  // The explanation of a cell opens beside it, never over it (placeNear), like the Walkthrough's.
  const explain = statusEl('div', 'hs-explain hs-heads-explain', EXPLAIN_HINT);
  explain.setAttribute('aria-live', 'polite');
  explain.hidden = true;

  const gridSection = el('section', 'hs-heads-section');
  const gridTitle = el('h2', 'hs-heads-h2', 'What each head looks at');
  const gridNote = el('p', 'hs-note hs-heads-grid-note hs-prose');
  const grid = el('div', 'hs-head-grid');
  const averageBox = el('div', 'hs-heads-average');
  gridSection.append(gridTitle, gridNote, legend, grid, averageBox);

  const linesSection = el('section', 'hs-heads-section');
  const lines = el('div', 'hs-lines');
  linesSection.append(el('h2', 'hs-heads-h2', 'Lines: who looks at whom'), lines);

  const ablationSection = el('section', 'hs-heads-section');
  const ablation = el('div', 'hs-ablation');
  ablationSection.append(el('h2', 'hs-heads-h2', 'Switch heads off'),
    el('p', 'hs-note hs-prose', 'A switched-off head keeps attending (its weights above do not change), but its ' +
      'columns of out_proj.weight are set to 0, which is exactly the same as zeroing its output before ' +
      'W_O. The engine runs the layer again; the difference is what that head contributed.'),
    ablation);

  for (const h2 of [gridTitle, linesSection.firstChild, ablationSection.firstChild]) h2.classList.add('hs-prose');
  gridSection.hidden = !shownParts.has('grid');
  linesSection.hidden = !shownParts.has('lines');
  ablationSection.hidden = !shownParts.has('ablation');
  const exportsBox = exportBar(EXPORT_FORMATS, exportAs, (format) => `headscope-heads.${format}`, onExportError);
  exportsBox.hidden = hidden.has('export');
  view.append(intro, controls.controls, controls.chipsBox, exportsBox, busy, message, gridSection, linesSection,
    ablationSection, explain);
  root.replaceChildren(view);
  return { view, intro, controls, busy, message, explain, gridSection, gridNote, grid, averageBox, linesSection, lines,
    ablationSection, ablation };
}
