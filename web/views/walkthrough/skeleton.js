// The Walkthrough's elements, built once: the title and intro, the controls (controls.js), the
// export bar, the note line, the legends, the stages' box (sections.js fills it), the hint and
// the explanation box. Everything is found through the returned object, never through ids.
import { el, statusEl } from '../common/dom.js';
import { exportBar } from '../common/export-bar.js';
import { EXPORT_FORMATS } from '../common/export-data.js';

const EXPLAIN_HINT = 'Hover over or focus (Tab, then the arrow keys) any cell of Q, K, V, the ' +
  'scores, A, a head output, the concatenation or Y to see how it was computed. To change a number, ' +
  'click it, or reach it with Tab and the arrow keys and type; Enter or F2 edits it in place, ' +
  'Escape undoes the edit.';

/**
 * @param {Element} root  its content is replaced
 * @param {{ compact: boolean, readonly: boolean, hidden: Set<string>, controls: object,
 *   exportAs: (format: string) => Promise<Blob>, onExportError: (e: unknown) => void }} o
 *   controls: controls.js's presets and sizes
 */
export function buildSkeleton(root, { compact, readonly, hidden, controls, exportAs, onExportError }) {
  const view = el('div', `hs-walkthrough${compact ? ' hs-compact' : ''}`);
  const title = el('h2', 'hs-wt-title hs-prose', 'Walkthrough: multi-head attention, step by step');
  const intro = el('p', 'hs-wt-intro hs-prose', 'Y = Concat(head₁, …, head_H)·W_O, where head_h = ' +
    'softmax(Q_h K_hᵀ / √d_k)·V_h and Q_h = X·W_Q⁽ʰ⁾, K_h = X·W_K⁽ʰ⁾, V_h = X·W_V⁽ʰ⁾. Loaded with ' +
    'the seed article\'s worked example. Edit any number in X or the weights: everything below ' +
    'is recomputed at once by headscope\'s WebAssembly engine.');

  // Messages about loaded cases and errors: visible in the view, announced politely.
  const note = statusEl('p', 'hs-wt-note');
  note.hidden = true;

  const legends = el('div', 'hs-wt-legends');
  const signedLegend = el('div');
  const weightsLegend = el('div');
  legends.append(signedLegend, weightsLegend);

  const stages = el('div', 'hs-wt-stages');
  const hint = el('p', 'hs-wt-hint', EXPLAIN_HINT);
  // The explanation of a cell opens next to it (never over it) and is announced politely.
  const explain = statusEl('div', 'hs-explain hs-wt-explain');
  explain.setAttribute('aria-live', 'polite');
  explain.setAttribute('aria-label', 'How the cell was computed');
  explain.hidden = true;

  const { presets, sizes } = controls;
  presets.hidden = readonly || hidden.has('presets');
  sizes.hidden = readonly || hidden.has('sizes');
  legends.hidden = hidden.has('legend');
  hint.hidden = hidden.has('explain');
  const exportsBox = exportBar([...EXPORT_FORMATS, 'case'], exportAs,
    (format) => (format === 'case' ? 'walkthrough-case.json' : `headscope-walkthrough.${format}`), onExportError);
  exportsBox.hidden = hidden.has('export');
  view.append(title, intro, presets, sizes, exportsBox, note, legends, hint, stages, explain);
  root.replaceChildren(view);
  return { view, note, signedLegend, weightsLegend, stages, explain };
}
