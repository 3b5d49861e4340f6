// The walkthrough view: the seed's worked example, live. Every stage of multi-head attention is a
// labelled matrix; X and every weight are editable, and each edit runs ONE trace() of the library
// (self-attention, unbatched) whose numbers fill every computed matrix. Hovering or focusing a
// computed cell writes out how it was obtained.
//
// This file makes the component (create) and applies changes of the numbers. Its parts:
// options.js (what create takes), model.js (the DOM-free state and explanations), engine.js
// (the trace), controls.js (presets, sizes), skeleton.js (the elements), sections.js (the
// matrices and their sections), build.js (the structure for the sizes), refresh.js (the numbers),
// specs.js (what each matrix shows), explain-box.js, export.js. Everything is scoped to `root`
// (no ids, no document-level queries), so the view can be mounted several times on one page and
// inside shadow roots (the <headscope-walkthrough> widget).
import { defineView, destroyedError } from '../common/component.js';
import { changeReporter } from '../common/options.js';
import { HeadscopeError } from '../../lib/errors.js';
import { checkHeads, readWalkthroughOptions } from './options.js';
import { inputMatrices, stateFromCase, traceOverflow, withCell } from './model.js';
import { applyWalkthroughState, publicWalkthroughState } from './state.js';
import { createWalkthroughEngine } from './engine.js';
import { buildControls } from './controls.js';
import { buildSkeleton } from './skeleton.js';
import { createSections } from './sections.js';
import { createBuild } from './build.js';
import { createRefresh } from './refresh.js';
import { createExplainBox } from './explain-box.js';
import { exportWalkthrough, pageMatrices } from './export.js';

/**
 * The Walkthrough (views/index.js documents create's options, options.js checks them). Its
 * extras: setCase(caseDocument) shows a case document if the walkthrough can (returns whether it
 * did), exportAs(format) the numbers as a file, showHeads(heads) which heads are shown.
 */
export const walkthrough = defineView('walkthrough', createWalkthrough);

function createWalkthrough(root, options, where) {
  const o = readWalkthroughOptions(options, where);
  // What the parts share: the numbers (a model.js state), their trace and mask terms, the cell
  // explained, the matrices by name, and what the stages and heads options show.
  const w = { state: o.start, trace: null, masks: null, explained: null, destroyed: false, tables: new Map(),
    shownStages: o.shownStages, shownHeads: o.shownHeads };
  const engine = createWalkthroughEngine(options.engine);
  const controls = buildControls({ state: () => w.state, apply: (next) => show(next, { structural: true }),
    onStatus: o.onStatus });
  const dom = buildSkeleton(root, { compact: o.compact, readonly: o.readonly, hidden: o.hidden, controls,
    exportAs: (format) => exportAs(format), onExportError: (e) => showNote(`Export failed: ${e.message}`, { error: true }) });
  const explainer = createExplainBox(w, { view: dom.view, explain: dom.explain, hidden: o.hidden });
  const sections = createSections(w, { readonly: o.readonly, edit, explainer, onShown: (name) => numbers.shown(name) });
  const numbers = createRefresh(w, { view: dom.view, signedLegend: dom.signedLegend, matrix: sections.matrix, explainer });
  const structure = createBuild(w, { dom, sections, controls, refresh: numbers.refresh, explainer });
  // Reports a change of the numbers or sizes to onChange (not while mounting).
  const reporter = changeReporter(() => publicWalkthroughState(w.state), o.onChange);

  // Runs the engine on `state`: its trace and mask terms become the view's (a refusal throws).
  function compute(state) {
    ({ trace: w.trace, masks: w.masks } = engine.run(state));
  }

  function showNote(text, { error = false } = {}) {
    dom.note.textContent = text;
    dom.note.hidden = !text;
    dom.note.classList.toggle('hs-error', error);
  }

  // Shows a new state (its trace first: a refusal keeps the last good numbers); whether it could.
  function show(next, { structural = false, cause = 'input' } = {}) {
    try {
      compute(next);
    } catch (e) {
      // The library refused the numbers: keep showing the last good ones.
      showNote(`headscope could not compute this: ${e.message}`, { error: true });
      return false;
    }
    w.state = next;
    if (structural) {
      showNote('');
      structure.build();
    } else {
      numbers.refresh();
    }
    reporter.changed(cause);
    return true;
  }

  /**
   * One typed number (the matrix component parsed it). Returns why it was refused, or null:
   * a number whose computation overflows float32 is not used (it would turn every result into
   * NaN or ±∞).
   */
  function edit(name, i, j, value) {
    if (w.destroyed) return null;
    const current = inputMatrices(w.state).find((m) => m.name === name);
    if (!current || current.get(i, j) === value) return null;
    const previous = w.state;
    const next = withCell(previous, name, i, j, value);
    try {
      compute(next);
    } catch (e) {
      compute(previous);
      return `headscope could not compute this (${e.message})`;
    }
    const overflow = traceOverflow(w.trace, w.masks);
    if (overflow) {
      compute(previous);
      return `with ${value}, ${overflow} overflow float32 (beyond ±3.4e38), so it is not used`;
    }
    w.state = next;
    numbers.refresh();
    // A typed number is a change of the public state like any control's: onChange (the page's
    // URL) hears of it.
    reporter.changed('input');
    return null;
  }

  /**
   * Shows a case document if the walkthrough can (packed in_proj_weight, unbatched
   * self-attention, at most 16 x 16); otherwise keeps the current content and says in the view
   * why, and that a Heads view shows it (the same words in the page and in a widget). Returns
   * whether the case is shown.
   */
  function setCase(caseDocument) {
    if (w.destroyed) return false;
    let result;
    try {
      result = stateFromCase(caseDocument);
    } catch (e) {
      showNote(`This case could not be read: ${e.message}`, { error: true });
      return false;
    }
    if (result.reason) {
      showNote(result.reason);
      return false;
    }
    if (!show(result.state, { structural: true, cause: 'case' })) return false;
    const { state } = w;
    const extras = [state.bias ? 'its biases are shown under each head and next to W_O' : '',
      state.masks ? 'its masks are applied to the scores' : ''].filter(Boolean);
    showNote(`Showing ${state.source}${extras.length ? `: ${extras.join('; ')}` : ''}.`);
    o.onStatus(`Walkthrough: showing ${state.source}.`);
    return true;
  }

  /**
   * Applies a patch (state.js): a bad field throws a HeadscopeError naming it and nothing changes;
   * an H that does not divide E, or heads beyond H in the heads option, likewise.
   */
  function update(patch) {
    if (w.destroyed) throw destroyedError('setState');
    const { state } = w;
    const next = applyWalkthroughState(patch, state);
    const structural = next.L !== state.L || next.E !== state.E || next.H !== state.H
      || (next.bias === null) !== (state.bias === null) || next.masks !== state.masks || 'preset' in patch;
    if (!show(next, { structural, cause: 'setState' })) {
      throw new HeadscopeError('INVALID_ARGUMENT', `setState: ${dom.note.textContent}`);
    }
  }

  /**
   * The current numbers as a file: 'svg' | 'png' (the shown matrices), 'json' | 'csv' (every
   * matrix), 'case' (a case document with the expected output and weights). A Promise of a Blob.
   */
  function exportAs(format) {
    const visible = (name) => {
      const element = w.tables.get(name)?.element;
      return element !== undefined && !element.hidden && element.isConnected && !element.closest('section')?.hidden;
    };
    return exportWalkthrough(format, { state: w.state, trace: w.trace, matrices: pageMatrices(w.state, w.trace),
      visible, explained: w.explained, element: dom.view });
  }

  show(w.state, { structural: true });
  if (o.initialCase !== undefined && o.initialCase !== null) setCase(o.initialCase);
  reporter.settle();
  return {
    update,
    /** The public state (state.js): a copy. */
    getState: () => publicWalkthroughState(w.state),
    setCase,
    exportAs,
    /** Which heads the view shows (1-based; null: all). */
    showHeads(heads) {
      w.shownHeads = checkHeads(heads, 'showHeads: heads');
      structure.applyVisibility();
    },
    destroy() {
      if (w.destroyed) return;
      w.destroyed = true;
      explainer.destroy();
      engine.dispose();
      w.trace = null;
      root.replaceChildren();
    },
  };
}
