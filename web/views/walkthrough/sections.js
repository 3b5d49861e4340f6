// The Walkthrough's matrices and the sections that hold them: the input (X and the masks' note),
// one section per head (its projections, biases, Q/K/V, scores, weights and output) and the
// output. Each matrix (common/matrix.js) and each head's section is made on first use and kept:
// a change of sizes reshapes them in place, and heads beyond the current count are detached and
// kept for later.
import { el } from '../common/dom.js';
import { createMatrix } from '../common/matrix.js';
import { isInput, stageOfName } from './specs.js';

const section = (heading, className) => {
  const s = el('section', `hs-wt-stage ${className ?? ''}`.trim());
  const h3 = el('h3', '', heading);
  s.append(h3);
  return s;
};
const row = (label) => {
  const r = el('div', 'hs-stage-row');
  if (label) r.setAttribute('aria-label', label);
  r.setAttribute('role', 'group');
  return r;
};

/**
 * @param {object} w  the view's shared fields (view.js): tables (data-matrix name -> matrix)
 * @param {{ readonly: boolean, edit: (name, i, j, value) => string | null,
 *   explainer: { show: Function, end: Function, hide: Function }, onShown: (name: string) => void }} o
 *   edit: a typed number (a reason to refuse it, or null); explainer: explain-box.js's; onShown:
 *   the browser renders a matrix it skipped (refresh.js writes its numbers)
 */
export function createSections(w, { readonly, edit, explainer, onShown }) {
  /** The matrix component of a name, created on first use and kept. */
  function matrix(name) {
    let m = w.tables.get(name);
    if (m) return m;
    const { stage, h } = stageOfName(name);
    m = createMatrix({
      name,
      editable: !readonly && isInput(name),
      onEdit: (i, j, v) => edit(name, i, j, v),
      onExplain: (i, j, cell) => explainer.show(stage, h, i, j, cell),
      onExplainEnd: (how) => (how?.dismiss ? explainer.hide() : explainer.end()),
      onShown: () => onShown(name),
    });
    m.element.classList.add('hs-wt-matrix');
    w.tables.set(name, m);
    return m;
  }

  // The fixed parts: the input section (X and the masks' note) and the output section.
  const inputSection = section('');
  const inputRow = row();
  const maskNote = el('p', 'hs-wt-mask-note');
  inputSection.append(inputRow, maskNote);
  const outputSection = section('Output: concatenate the heads, then mix them with W_O');
  const outRow = row();
  outputSection.append(outRow);
  const headSections = [];   // per head index, created on first use and kept

  function headSection(h) {
    if (headSections[h]) return headSections[h];
    const n = h + 1;
    const s = section(`Head ${n}`, 'hs-wt-head');
    s.style.setProperty('--hs-wt-head-color', `var(--hs-head-${(h % 16) + 1})`);
    const headNote = el('span', 'hs-wt-head-note');
    s.querySelector('h3').append(headNote);
    const parts = {
      section: s, headNote,
      weights: row(`Head ${n} projections`), biases: row(`Head ${n} biases`),
      qkv: row(`Head ${n} queries, keys and values`), attn: row(`Head ${n} attention`),
    };
    parts.weights.append(...['Q', 'K', 'V'].map((l) => matrix(`W${l}${n}`).element));
    parts.biases.append(...['Q', 'K', 'V'].map((l) => matrix(`B${l}${n}`).element));
    parts.qkv.append(...['Q', 'K', 'V'].map((l) => matrix(`${l}${n}`).element));
    parts.attn.append(...['S', 'A', 'H'].map((l) => matrix(`${l}${n}`).element));
    headSections[h] = parts;
    return parts;
  }

  /** The matrices of head h's section, by name. */
  const sectionNames = (h) => {
    const n = h + 1;
    return ['WQ', 'WK', 'WV', 'BQ', 'BK', 'BV', 'Q', 'K', 'V', 'S', 'A', 'H'].map((l) => `${l}${n}`);
  };

  return { matrix, inputSection, inputRow, maskNote, outputSection, outRow, headSections, headSection, sectionNames };
}
