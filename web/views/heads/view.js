// The Heads view: what many heads see in a real sentence or log line.
//
// Text -> tokens -> deterministic features -> a layer whose heads were built to mean something
// (transforms.js), run by the engine: mha.trace() gives every head's weights, forward() of the same
// module with the switched-off heads' gates at 0 (options.headGates) gives the ablated output and
// PyTorch's averaged weights. Nothing here computes attention.
//
// This file makes the component (create) and runs its update: at most one compute and one render
// per animation frame (common/frame-loop.js). Its parts: options.js (what create takes),
// view-state.js (the live state and the public one), skeleton.js (the elements), controls.js,
// actions.js (what the parts report), compute.js (the engine calls), render.js (the parts: cards,
// lines, ablation, each a render(data, state, root, actions) that updates in place), explain.js,
// busy.js, case-mode.js (a loaded case), export.js. User text reaches the page only through
// textContent; every element is found through `root`, never through document-level ids.
import { defineView, destroyedError } from '../common/component.js';
import { setText } from '../common/dom.js';
import { changeReporter } from '../common/options.js';
import { createFrameLoop } from '../common/frame-loop.js';
import { readHeadsOptions } from './options.js';
import { createViewState } from './view-state.js';
import { buildSkeleton, SENTENCE_INTRO } from './skeleton.js';
import { listenToControls, syncControls } from './controls.js';
import { createActions } from './actions.js';
import { createCompute, EMBED_DIM } from './compute.js';
import { createRender } from './render.js';
import { createExplain } from './explain.js';
import { createBusyLine } from './busy.js';
import { createCaseMode } from './case-mode.js';
import { renderChips } from './chips.js';
import { checkHeadsFormat, exportHeads } from './export.js';
import { MAX_TOKENS, tokenize } from './tokens.js';
import { featureLayout } from './features.js';

/**
 * The Heads view (views/index.js documents create's options, options.js checks them). Its
 * extras: setCase(caseDocument) shows a case document's heads (a Promise; errors go to onStatus
 * and the view), exportAs(format) the view as a file once drawn, settled() resolves when what was
 * asked of it is computed and drawn.
 */
export const heads = defineView('heads', createHeads);

function createHeads(root, options, where) {
  const hs = options.engine;
  const { onStatus, onChange, hidden, shownParts, start, compact, readonly } = readHeadsOptions(options, where);
  const vs = createViewState(start, { presetMenus: !readonly && !hidden.has('presets'),
    switches: !readonly && !hidden.has('switches') });
  const { state } = vs;
  // What the parts share while the view runs: the loaded case, the numbers shown, the sentence's
  // tokens and feature layout, the newest update's number, and the next update's message.
  const live = { loaded: null, data: null, tokens: [], layout: featureLayout(EMBED_DIM), generation: 0,
    destroyed: false, nextMessage: '' };
  const showsCase = () => state.source === 'case' && live.loaded !== null;
  // Reports a change of the public state (after the reader's edit or update()) to onChange; showing
  // a case or going back to the sentence is one too, though the public state describes the
  // sentence throughout (the page's URL then changes: a case is not in it).
  const reporter = changeReporter(() => vs.publicState(), onChange,
    { key: (s) => JSON.stringify([s, showsCase() ? live.loaded.id : null]) });
  const changed = (cause) => reporter.changed(cause);
  reporter.settle();
  const dom = buildSkeleton(root, { compact, hidden, shownParts, exportAs: (format) => exportAs(format),
    onExportError: (e) => fail(e) });
  const c = dom.controls;
  const compute = createCompute(hs, { onStatus });
  const busy = createBusyLine(dom.view, dom.busy);
  const explain = createExplain(dom, { hidden, state });
  const loop = createFrameLoop({ compute: update, render: draw, fail,
    done: (ms) => { dom.view.dataset.updateMs = ms.toFixed(1); } });

  // A change of the public state, by the reader or update(): checked (state.js), applied, reported.
  function edit(patch, { compute: recompute = true, cause = 'input' } = {}) {
    vs.apply(patch);
    loop.schedule(recompute);
    changed(cause);
  }
  const actions = createActions({ state, edit, schedule: loop.schedule, explain, data: () => live.data });
  listenToControls(c, { vs, edit, schedule: loop.schedule });
  const painter = createRender(dom, { shownParts, state, actions, current: () => live });
  const caseMode = createCaseMode({ live, vs, controls: c, onStatus, changed, loop, update, fail, busy, compute });

  // The controls show the state; the variant's note quotes the shown run's ALiBi slopes; the intro
  // is the sentence's or the shown case's.
  const sync = () => {
    syncControls(c, state, { hidden, readonly, batched: live.loaded?.dims.batched, view: dom.view,
      slopes: live.data?.alibiSlopes?.length === state.numHeads ? live.data.alibiSlopes : null });
    setText(dom.intro, showsCase() ? live.loaded.intro : SENTENCE_INTRO);
  };

  function draw() {
    sync();
    painter.render();
  }

  function fail(e) {
    busy.set(false);
    dom.message.textContent = `Heads: ${e?.message ?? e}`;
    dom.message.classList.add('hs-error');
    onStatus(`Heads: ${e?.message ?? e}`);
  }

  async function update() {
    const mine = ++live.generation;
    sync();
    dom.message.textContent = live.nextMessage;
    live.nextMessage = '';
    dom.message.classList.remove('hs-error');
    if (state.source === 'case' && live.loaded) {
      live.data = await compute.loadedCase(live.loaded, state, {
        isCurrent: () => mine === live.generation, stale: () => live.data,
        busy: (on, text) => busy.set(on, text, { cancel: caseMode.cancel }),
      });
      if (mine === live.generation) live.layout = null;
    } else {
      live.data = await sentence();
    }
    if (mine !== live.generation || live.destroyed) return;
    draw();
    explain.follow(live.data);
  }

  // The sentence: its tokens (shown as the token note and the padding chips), then its run.
  async function sentence() {
    const result = tokenize(state.text);
    // New tokens: the pin and the explained cell meant other tokens. (The padded positions are
    // the state's: a text edit clears them, update() sets them with the text.)
    if (result.tokens.join('\u0000') !== live.tokens.join('\u0000')) {
      state.pinned = null;
      state.cell = null;
    }
    live.tokens = result.tokens;
    const n = live.tokens.length;
    c.tokenNote.textContent = result.total === 0 ? '' : result.truncated
      ? `${n} tokens (the first ${MAX_TOKENS} of ${result.total})` : `${n} tokens`;
    renderChips(live.tokens, state, c.chips, actions);
    if (n === 0) return null;
    const { data, layout } = await compute.sentence(state, live.tokens);
    live.layout = layout;
    return data;
  }

  // Canvases take their colours from the scheme: redraw when it changes.
  const scheme = globalThis.matchMedia?.('(prefers-color-scheme: dark)');
  const onScheme = () => loop.schedule(false);
  scheme?.addEventListener?.('change', onScheme);

  loop.schedule(true);

  /**
   * The current view as a file: 'svg' | 'png' | 'json' | 'csv' (export.js), once what was asked
   * of the view (a new text, a loaded case) is computed and drawn.
   */
  async function exportAs(format) {
    checkHeadsFormat(format);
    await loop.settled();
    if (live.destroyed) throw destroyedError('exportAs');
    return exportHeads(format, { data: live.data, state, publicState: vs.publicState(), element: dom.view });
  }

  return {
    /**
     * Applies the fields given (state.js); a bad field throws a HeadscopeError naming it and
     * nothing changes. Fires onChange (cause 'setState') when the state differs.
     */
    update(patch) {
      if (live.destroyed) throw destroyedError('setState');
      if (patch !== null && typeof patch === 'object' && 'text' in patch) state.pinned = null;
      edit(patch, { cause: 'setState' });
    },
    /** The public state (state.js): a copy; changing it changes nothing. */
    getState: () => vs.publicState(),
    /**
     * Shows a case document's heads (queries labelled t1..tL, or options.tokens; the intro says
     * what the case is, or options.about). Large cases run in a Web Worker, with a busy state and
     * Cancel; smaller ones in this thread.
     */
    setCase: (caseDocument, caseOptions) => caseMode.load(caseDocument, caseOptions),
    /** Whether the view shows a case (setCase) rather than the sentence: its state does not hold it. */
    showsCase,
    exportAs,
    settled: loop.settled,
    /** Frees the engine objects and empties `root`. */
    destroy() {
      live.destroyed = true;
      busy.stop();
      painter.disconnect();
      scheme?.removeEventListener?.('change', onScheme);
      live.generation++;
      loop.stop();
      compute.dispose();
      root.replaceChildren();
    },
  };
}
