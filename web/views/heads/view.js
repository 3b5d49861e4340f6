// The Heads view: what many heads see in a real sentence or log line.
//
// Text -> tokens -> deterministic features -> a layer whose heads were built to mean something
// (transforms.js), run by the engine: mha.trace() gives every head's weights, forward() of the same
// module with the switched-off heads' gates at 0 (options.headGates) gives the ablated output and
// PyTorch's averaged weights. Nothing here computes attention.
//
// This file holds the view's state, controls and update loop. Its parts are render(data, state,
// root, actions) functions in their own files: cards.js (a card per head, the averaged card),
// lines.js (the line view), ablation.js, chips.js (key padding), over data.js (what the parts
// show) and engine.js (the engine cache). Each brings `root` up to date with data and state only,
// and reports user intent through `actions`; they update in place (cards, canvases and labels
// persist from one frame to the next), which keeps a 16-head, 32-token recompute inside one
// animation frame and never replaces the element that has focus. User text reaches the page only
// through textContent.
//
// Mountable several times per page and inside a shadow root: every element is created here and
// found through `root`, never through document-level ids.
import { endPageWorker, pageWorker } from '../common/page-worker.js';
import { parseCase } from '../../lib/case.js';
import { callDims } from '../../lib/shapes.js';
import { formatNumber } from '../common/numbers.js';
import { placeNear } from '../common/place.js';
import { renderLegend } from '../common/legend.js';
import { el, focusedIn } from '../common/dom.js';
import { WEIGHT_SCALE } from '../common/heatmap-colors.js';
import { Engine } from './engine.js';
import { caseLabels, describeCell, sameTensor, traceWeights, viewData, MAX_SHOWN } from './data.js';
import { renderAverage, renderHeadGrid } from './cards.js';
import { renderLines } from './lines.js';
import { renderAblation } from './ablation.js';
import { renderChips } from './chips.js';
import { buildControls } from './controls.js';
import * as T from './transforms.js';
import { applyHeadsState, copyHeadsState, defaultHeadsState } from './state.js';
import { HeadscopeError } from '../../lib/errors.js';
import { changeReporter, checkNames } from '../common/options.js';
import { exportBar } from '../common/export-bar.js';
import { EXPORT_FORMATS } from '../common/export-data.js';
import { checkHeadsFormat, exportHeads } from './export.js';

const EMBED_DIM = 64;
const HEAD_COUNTS = [1, 2, 4, 8, 16];  // the divisors of 64 up to 16
const DEFAULT_HEADS = 4;
/** A loaded case runs in the Web Worker above this many trace weights (N * H * L * S') or this E. */
const WORKER_WEIGHTS = 50_000;
const WORKER_EMBED_DIM = 128;
const EXPLAIN_HINT = 'Hover or focus a heatmap cell to read it.';

// ---------------------------------------------------------------------------------------------
// The view

/** Controls a `hide` option can name, and the parts a `parts` option can show. */
export const HEADS_CONTROLS = ['text', 'weights', 'heads', 'seed', 'sharpness', 'causal', 'view', 'batch',
  'padding', 'presets', 'switches', 'export', 'explain'];
export const HEADS_PARTS = ['grid', 'lines', 'ablation'];

/**
 * Mounts the Heads view into `root` (an element, also inside a shadow root). Everything it creates
 * lives under `root`; mount it as often as you like.
 * @param {Element} root
 * @param {{ hs: import('../../lib/index.js').Headscope, onStatus?: (text: string) => void,
 *   state?: object, text?: string, numHeads?: 1 | 2 | 4 | 8 | 16, hide?: string[],
 *   parts?: string[], compact?: boolean, readonly?: boolean,
 *   onChange?: (state: object, cause: string) => void }} options
 *   hs: init()'s API (small work runs on it; large loaded cases start their own Web Worker);
 *   state: the starting state (state.js; text and numHeads are shorthands for its text and heads);
 *   hide: controls not shown (HEADS_CONTROLS); parts: the parts shown (HEADS_PARTS, default all);
 *   compact: no intro, headings or notes; readonly: the reader explores (hover, focus, pins) but
 *   changes nothing; onChange: called after each change of the state by the reader or setState.
 *   A bad option throws a HeadscopeError naming it, before anything is mounted.
 * @returns {{ loadCase(caseDocument: object | string): Promise<void>, getState(): object,
 *   setState(patch: object): void, destroy(): void }} loadCase shows a case document's heads
 *   (errors go to onStatus and the view); destroy frees the engine objects and empties `root`.
 */
export function mountHeads(root, { hs, onStatus = () => {}, state: initialState, text: initialText,
  numHeads: initialHeads, hide = [], parts = HEADS_PARTS, compact = false, readonly = false,
  onChange = () => {} } = {}) {
  if (!hs || typeof hs.createMultiheadAttention !== 'function') {
    throw new HeadscopeError('INVALID_ARGUMENT', 'mountHeads: options.hs must be the API of init() from headscope');
  }
  const hidden = new Set(checkNames(hide, HEADS_CONTROLS, 'mountHeads: options.hide'));
  const shownParts = new Set(checkNames(parts, HEADS_PARTS, 'mountHeads: options.parts'));
  let start = defaultHeadsState();
  if (initialHeads !== undefined) start = applyHeadsState({ heads: initialHeads }, start, 'mountHeads: options.numHeads');
  if (initialText !== undefined) start = applyHeadsState({ text: initialText }, start, 'mountHeads: options.text');
  if (initialState !== undefined) start = applyHeadsState(initialState, start, 'mountHeads: options.state');
  const state = {
    source: 'presets',      // 'presets' | 'random' | 'case'
    text: '',
    numHeads: DEFAULT_HEADS,
    presets: T.defaultPresets(DEFAULT_HEADS),
    seed: 1,
    sharpness: 6,
    causal: false,
    padded: new Set(),      // key positions masked by key_padding_mask (0-based)
    ablated: new Set(),     // heads switched off (0-based): output removed, lines faded
    shown: null,            // null, or the heads (0-based) shown in the grid and the lines
    view: 'heads',          // 'heads' | 'average'
    // What the parts offer (the hide and readonly options): per-card preset menus, on/off boxes.
    presetMenus: !readonly && !hidden.has('presets'),
    switches: !readonly && !hidden.has('switches'),
    hover: null,            // { side: 'query' | 'key', index }
    pinned: null,
    cell: null,             // { head (null: average), i, j }: the heatmap cell last explained
    batch: 0,
  };
  const local = new Engine(hs);
  let remote = null;        // Engine over the page's worker (page-worker.js), for large cases
  let loaded = null;        // { parsed, dims, big, trace, name }
  let data = null;
  let tokens = [];
  let layout = T.featureLayout(EMBED_DIM);
  let generation = 0;
  let frame = 0;
  let destroyed = false;
  const stateDicts = new Map();
  let textSource = 'presets';  // the weights of sentence mode, kept while a case is shown

  // The public state (state.js) <-> the fields above.
  function publicState() {
    const inCase = state.source === 'case';
    return copyHeadsState({
      text: state.text, heads: inCase ? textHeads : state.numHeads,
      weights: inCase ? textSource : state.source, presets: inCase ? textPresets : state.presets,
      seed: state.seed, sharpness: state.sharpness, causal: state.causal,
      padded: [...state.padded].map((j) => j + 1).sort((a, b) => a - b),
      off: [...state.ablated].map((h) => h + 1).sort((a, b) => a - b),
      show: state.shown === null ? null : [...state.shown].map((h) => h + 1).sort((a, b) => a - b),
      view: state.view,
    });
  }
  let textHeads = start.heads;
  let textPresets = start.presets;
  function assignState(s) {
    const inCase = state.source === 'case';
    textHeads = s.heads;
    textPresets = s.presets;
    textSource = s.weights;
    if (!inCase) {
      state.source = s.weights;
      state.numHeads = s.heads;
      state.presets = s.presets;
    }
    state.text = s.text;
    state.seed = s.seed;
    state.sharpness = s.sharpness;
    state.causal = s.causal;
    state.padded = new Set(s.padded.map((j) => j - 1));
    state.ablated = new Set(s.off.map((h) => h - 1));
    state.shown = s.show === null ? null : new Set(s.show.map((h) => h - 1));
    state.view = s.view;
  }
  // Reports a change of the public state (after the reader's edit or setState) to onChange.
  const reporter = changeReporter(() => publicState(), onChange);
  const changed = (cause) => reporter.changed(cause);

  assignState(start);
  reporter.settle();

  // Skeleton ----------------------------------------------------------------------------------
  const view = el('div', `hs-heads${compact ? ' hs-compact' : ''}`);
  const intro = el('p', 'hs-heads-intro hs-prose',
    'Type a sentence or a log line. It is split into tokens, given deterministic features ' +
    '(position, token identity, character class) and run through one multi-head attention layer ' +
    'whose heads were built by hand to do one job each. Set the number of heads to 1 and the five ' +
    'jobs share a single head and get in each other\'s way; at 16 heads of 4 dims the same-token ' +
    'head no longer has room to tell tokens apart.');

  const { controls, text, textLabel, tokenNote, caseNote, source, sourceLabel, heads, headsLabel, seed, seedLabel, sharpness, sharpnessValue, sharpnessLabel, causal, causalLabel, viewGroup, viewRadios, batch, batchLabel, row1, row2, chipsBox, chips } =
    buildControls({ headCounts: HEAD_COUNTS, embedDim: EMBED_DIM });

  const busy = el('p', 'hs-heads-busy');
  busy.setAttribute('role', 'status');
  const message = el('p', 'hs-heads-message');
  const legend = el('div', 'hs-heads-legend');
  renderLegend(legend, WEIGHT_SCALE);
  // The explanation of a cell opens beside it, never over it (placeNear), like the Walkthrough's.
  const explain = el('div', 'hs-explain hs-heads-explain', EXPLAIN_HINT);
  explain.setAttribute('role', 'status');
  explain.setAttribute('aria-live', 'polite');
  explain.hidden = true;
  let explainAnchor = null;
  function showExplain(line) {
    explain.textContent = line;
    if (hidden.has('explain')) return;
    explain.hidden = false;
    if (explainAnchor) placeNear(explain, explainAnchor, view);
  }

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
  const exportsBox = exportBar(EXPORT_FORMATS, (format) => exportAs(format),
    (format) => `headscope-heads.${format}`, (e) => fail(e));
  exportsBox.hidden = hidden.has('export');
  view.append(intro, controls, chipsBox, exportsBox, busy, message, gridSection, linesSection, ablationSection, explain);
  root.replaceChildren(view);

  // Actions ------------------------------------------------------------------------------------
  // A change of the public state, by the reader or setState: checked (state.js), applied, reported.
  function edit(patch, { compute = true, cause = 'input' } = {}) {
    const liveHeads = state.source === 'case' ? state.numHeads : undefined;
    assignState(applyHeadsState(patch, publicState(), 'setState: state', { liveHeads }));
    schedule(compute);
    changed(cause);
  }
  const sortedPlus = (set, h, on) => {
    const next = new Set(set);
    if (on) next.add(h);
    else next.delete(h);
    return [...next].map((k) => k + 1);
  };
  const actions = {
    setPreset(h, preset) {
      edit({ presets: state.presets.map((p, k) => (k === h ? preset : p)) });
    },
    setAblated(h, off) {
      edit({ off: sortedPlus(state.ablated, h, off) });
    },
    resetAblation() {
      edit({ off: [] });
    },
    toggleShown(h) {
      const all = new Set(Array.from({ length: state.numHeads }, (_, k) => k));
      const shown = state.shown ?? all;
      const next = sortedPlus(shown, h, !shown.has(h));
      edit({ show: next.length === state.numHeads ? null : next }, { compute: false });
      return state.shown === null || state.shown.has(h);
    },
    hoverToken(target) {
      state.hover = target;
      schedule(false);
    },
    pinToken(target) {
      const same = state.pinned && state.pinned.side === target.side && state.pinned.index === target.index;
      state.pinned = same ? null : target;
      schedule(false);
    },
    togglePadding(j) {
      edit({ padded: sortedPlus(state.padded, j, !state.padded.has(j)) });
    },
    explainCell(head, i, j, remember, anchor = null) {
      if (remember) state.cell = { head, i, j };
      if (!data) return;
      if (anchor) explainAnchor = anchor;
      const values = head === null ? data.average : T.headWeights(data.weights, { h: head, H: data.H, L: data.L, S: data.S });
      let line = describeCell(data, head, i, j, values);
      if (head !== null) {
        const score = T.headWeights(data.scores, { h: head, H: data.H, L: data.L, S: data.S })[i * data.S + j];
        line += ` (score ${score === -Infinity ? '−∞: masked' : formatNumber(score, 3)})`;
      }
      showExplain(line);
    },
    explain(anchor, line) {
      explainAnchor = anchor;
      showExplain(line);
    },
    leaveCell() {
      explain.hidden = true;
    },
  };

  text.addEventListener('input', () => {
    // New tokens: the padded positions and the pin meant other tokens.
    const before = T.tokenize(state.text).tokens.join('\u0000');
    const after = T.tokenize(text.value).tokens.join('\u0000');
    if (before !== after) state.pinned = null;
    edit(before !== after ? { text: text.value, padded: [] } : { text: text.value });
  });
  source.addEventListener('change', () => {
    if (source.value === 'case') return;
    state.pinned = null;
    if (state.source === 'case') {
      // Back to the sentence: its own head count and presets, every head on.
      state.source = source.value;
      state.numHeads = textHeads;
      state.presets = textPresets;
    }
    edit({ weights: source.value, off: [], show: null });
  });
  heads.addEventListener('change', () => {
    edit({ heads: Number(heads.value) });
  });
  seed.addEventListener('input', () => {
    const v = Number(seed.value);
    if (seed.value.trim() === '' || !Number.isInteger(v) || v < 0 || v > 0xffffffff) {
      seed.setAttribute('aria-invalid', 'true');
      return;
    }
    seed.removeAttribute('aria-invalid');
    edit({ seed: v });
  });
  sharpness.addEventListener('input', () => {
    edit({ sharpness: Number(sharpness.value) });
  });
  causal.addEventListener('change', () => {
    edit({ causal: causal.checked });
  });
  for (const r of Object.values(viewRadios)) {
    r.addEventListener('change', () => {
      // The averaged view needs PyTorch's averaged weights: a compute (see Engine.run).
      if (r.checked) edit({ view: r.value });
    });
  }
  batch.addEventListener('change', () => {
    state.batch = Number(batch.value) - 1;
    state.pinned = null;
    schedule(true);
  });

  // Update loop: at most one compute + render per animation frame -------------------------------
  let needCompute = true;
  const running = new Set();  // the computes and renders under way (settled() waits for them)
  function track(promise) {
    const done = promise.then(() => {}, () => {});
    running.add(done);
    done.then(() => running.delete(done));
    return promise;
  }
  function schedule(compute) {
    if (destroyed) return;
    needCompute ||= compute;
    if (frame) return;
    frame = requestAnimationFrame(runFrame);
  }
  function runFrame() {
    frame = 0;
    const started = performance.now();
    const recompute = needCompute;
    needCompute = false;
    track((recompute ? update() : Promise.resolve(render()))
      // After the canvas draws (queued microtasks): the frame's whole cost, for anyone measuring.
      .then(() => queueMicrotask(() => { view.dataset.updateMs = (performance.now() - started).toFixed(1); }))
      .catch(fail));
  }

  // Resolves when everything asked of the view so far is computed and drawn: a frame still waiting
  // for the browser runs now (a hidden page gets no animation frames), then the running computes
  // end (a failure is shown in the view, not thrown here).
  async function settled() {
    for (;;) {
      if (destroyed) return;
      if (frame) {
        cancelAnimationFrame(frame);
        runFrame();
      }
      if (running.size === 0) return;
      await Promise.all(running);
    }
  }

  function fail(e) {
    setBusy(false);
    message.textContent = `Heads: ${e?.message ?? e}`;
    message.classList.add('hs-error');
    onStatus(`Heads: ${e?.message ?? e}`);
  }

  // The busy line of a large case: what runs, the seconds it has taken, and Cancel (which ends
  // the page's worker: a call inside it cannot be interrupted) back to the sentence.
  let busyTimer = 0;
  let nextMessage = '';  // shown by the next update (a cancelled case's note)
  function setBusy(on, text = '', { cancel = null } = {}) {
    view.setAttribute('aria-busy', String(on));
    view.classList.toggle('hs-heads-computing', on);
    busy.classList.toggle('hs-busy', on);
    clearInterval(busyTimer);
    busyTimer = 0;
    if (!on) {
      busy.replaceChildren();
      return;
    }
    const started = performance.now();
    const label = el('span', '', text);
    const elapsed = el('span', 'hs-heads-busy-time', ' 0 s');
    busy.replaceChildren(label, elapsed);
    busyTimer = setInterval(() => {
      elapsed.textContent = ` ${Math.round((performance.now() - started) / 1000)} s`;
    }, 1000);
    if (cancel) {
      const b = el('button', 'hs-heads-cancel', 'Cancel');
      b.type = 'button';
      b.addEventListener('click', cancel);
      busy.append(' ', b);
    }
  }

  function cancelCase() {
    generation++;         // the running computation's result is dropped
    endPageWorker();      // and the worker computing it ended
    remote = null;
    setBusy(false);
    state.source = textSource;
    state.numHeads = textHeads;
    state.presets = textPresets;
    state.ablated.clear();
    state.shown = null;
    nextMessage = `Cancelled: ${loaded?.name ?? 'the case'} was not shown.`;
    onStatus(`Heads: cancelled ${loaded?.name ?? 'the case'}.`);
    loaded = null;
    source.querySelector('option[value="case"]').disabled = true;
    schedule(true);
    changed('input');
  }

  // The controls show the state (also after setState); hidden: the `hide` option, read-only mode,
  // and in case mode the sentence's controls (a case has its own tokens, heads and weights).
  function syncControls() {
    const caseMode = state.source === 'case';
    source.value = state.source;
    if (text.value !== state.text) text.value = state.text;
    heads.value = String(state.numHeads);
    if (focusedIn(view) !== seed) seed.value = String(state.seed);
      sharpnessValue.textContent = String(state.sharpness);
    causal.checked = state.causal;
    viewRadios[state.view].checked = true;
    const off = (name) => hidden.has(name) || (readonly && name !== 'view');
    textLabel.hidden = caseMode || off('text');
    tokenNote.hidden = caseMode;
    caseNote.hidden = !caseMode;
    sourceLabel.hidden = off('weights');
    headsLabel.hidden = caseMode || off('heads');
    seedLabel.hidden = caseMode || off('seed');
    sharpnessLabel.hidden = caseMode || state.source === 'random' || off('sharpness');
    causalLabel.hidden = caseMode || off('causal');
    viewGroup.hidden = off('view');
    chipsBox.hidden = caseMode || off('padding');
    batchLabel.hidden = !(caseMode && loaded?.dims.batched) || off('batch');
    const rowsShown = [row1, row2].map((r) => [...r.children].some((c) => !c.hidden));
    row1.hidden = !rowsShown[0];
    row2.hidden = !rowsShown[1];
    controls.hidden = !rowsShown[0] && !rowsShown[1];
  }

  // The weights for L tokens: the presets are written for max(32, L) positions (transforms.js).
  function stateDictFor(L) {
    const length = Math.max(T.PRESET_LENGTH, L);
    const key = JSON.stringify([state.source, state.numHeads, state.presets, state.seed, state.sharpness,
      state.source === 'random' ? 0 : length]);
    let sd = stateDicts.get(key);
    if (sd === undefined) {
      sd = state.source === 'random'
        ? T.randomStateDict({ embedDim: EMBED_DIM, numHeads: state.numHeads, seed: state.seed })
        : T.buildStateDict({ embedDim: EMBED_DIM, numHeads: state.numHeads, heads: state.presets,
          seed: state.seed, sharpness: state.sharpness, length });
      if (stateDicts.size > 16) stateDicts.clear();
      stateDicts.set(key, sd);
    }
    return { key, sd };
  }

  // One gate per head: 0 for the switched-off ones; null when every head is on.
  function headGatesFor(numHeads) {
    if (state.ablated.size === 0) return null;
    return Array.from({ length: numHeads }, (_, h) => (state.ablated.has(h) ? 0 : 1));
  }

  async function update() {
    const mine = ++generation;
    syncControls();
    message.textContent = nextMessage;
    nextMessage = '';
    message.classList.remove('hs-error');
    if (state.source === 'case' && loaded) {
      data = await computeCase(mine);
    } else {
      data = await computeText();
    }
    if (mine !== generation || destroyed) return;
    render();
    // The explanation line follows the new numbers: the remembered cell's new weight, or the hint
    // (a line about numbers that are gone would be wrong).
    const c = state.cell;
    if (data && c && c.i < Math.min(data.L, MAX_SHOWN) && c.j < Math.min(data.S, MAX_SHOWN) && (c.head === null || c.head < data.H)) {
      const wasHidden = explain.hidden;
      actions.explainCell(c.head, c.i, c.j, false);
      explain.hidden = wasHidden;
    } else {
      explain.textContent = EXPLAIN_HINT;
      explain.hidden = true;
    }
  }

  async function computeText() {
    const result = T.tokenize(state.text);
    // New tokens: the pin and the explained cell meant other tokens. (The padded positions are
    // the state's: a text edit clears them, setState sets them with the text.)
    if (result.tokens.join('\u0000') !== tokens.join('\u0000')) {
      state.pinned = null;
      state.cell = null;
    }
    tokens = result.tokens;
    tokenNote.textContent = result.total === 0 ? '' : result.truncated
      ? `${tokens.length} tokens (the first ${T.MAX_TOKENS} of ${result.total})` : `${tokens.length} tokens`;
    renderChips(tokens, state, chips, actions);
    if (tokens.length === 0) return null;
    const x = T.embed(tokens, { embedDim: EMBED_DIM });
    layout = x.layout;
    const L = tokens.length;
    const { sd } = stateDictFor(L);
    const padded = [...state.padded].filter((j) => j < L);
    const options = {
      keyPaddingMask: padded.length ? T.keyPaddingMask(L, padded) : null,
      attnMask: state.causal ? T.causalMask(L) : null,
    };
    const config = { embedDim: EMBED_DIM, numHeads: state.numHeads };
    const run = await local.run({ config, stateDict: sd, headGates: headGatesFor(state.numHeads),
      needAverage: state.view === 'average', query: x, key: x, value: x, options });
    const presets = state.source === 'random' ? Array(state.numHeads).fill('random (PyTorch init)') : state.presets;
    let note = '';
    if (padded.length === L) note = 'Every token is padded: no query has a key left, so every weight is 0.';
    return viewData(run, callDims(config, x.shape), { labels: { queries: tokens, keys: tokens }, presets, note });
  }

  async function computeCase(mine) {
    const { parsed, dims, big } = loaded;
    const ablatedKey = `${[...state.ablated].sort((a, b) => a - b).join(',')}|${state.view === 'average'}`;
    if (loaded.run && loaded.runKey === ablatedKey) return caseViewData(loaded.run);
    if (big) setBusy(true, `Large case (${traceWeights(dims)} weights): running in a Web Worker,`, { cancel: cancelCase });
    try {
      let engine = local;
      if (big) {
        try {
          // The page's one worker; if the loader ended it (a cancelled job), a new one.
          const worker = await pageWorker();
          if (remote?.hs !== worker) remote = new Engine(worker);
          engine = remote;
        } catch (e) {
          onStatus(`Heads: the Web Worker could not start (${e.message}); computing in the page.`);
        }
      }
      const sd = parsed.stateDict;
      const run = await engine.run({
        config: parsed.config, stateDict: sd,
        headGates: headGatesFor(dims.H), needAverage: state.view === 'average',
        query: parsed.query, key: parsed.key, value: parsed.value,
        options: { keyPaddingMask: parsed.options.keyPaddingMask, attnMask: parsed.options.attnMask,
          isCausal: parsed.options.isCausal ?? false },
        trace: loaded.trace,
      });
      if (mine !== generation) return data;
      loaded.trace = run.trace;
      loaded.run = run;
      loaded.runKey = ablatedKey;
      return caseViewData(run);
    } finally {
      if (mine === generation) setBusy(false);
    }
  }

  function caseViewData(run) {
    const { parsed, dims } = loaded;
    const { L, Sp: S } = dims;
    const labels = caseLabels({ L, S, sourceLength: dims.S, selfAttention: sameTensor(parsed.key, parsed.query),
      addBiasKV: parsed.config.addBiasKV, addZeroAttn: parsed.config.addZeroAttn });
    layout = null;
    const shown = L > MAX_SHOWN || S > MAX_SHOWN
      ? `Showing queries 1–${Math.min(L, MAX_SHOWN)} of ${L} and keys 1–${Math.min(S, MAX_SHOWN)} of ${S}; ` +
        'the summary numbers and the output change cover all of them.' : '';
    return viewData(run, dims, { labels, presets: Array(dims.H).fill(loaded.name), n: state.batch, note: shown });
  }

  function render() {
    syncControls();
    const empty = data === null;
    gridSection.hidden = empty || !shownParts.has('grid');
    linesSection.hidden = empty || !shownParts.has('lines');
    ablationSection.hidden = empty || !shownParts.has('ablation');
    if (empty) {
      message.textContent = 'Type something to see the heads at work.';
      return;
    }
    if (data.note) message.textContent = data.note;
    const average = state.view === 'average';
    grid.hidden = average;
    averageBox.hidden = !average;
    gridNote.textContent = average
      ? 'One heatmap: the mean of every head\'s weights, as PyTorch returns them by default. ' +
        'Its numbers are the per-head numbers averaged over the heads. Hover or focus it to read a cell.'
      : `One heatmap per head (rows: queries, columns: keys). Head dim ${data.E / data.H}. ` +
        'Entropy: 0 when a head looks at one key, ln(keys) when it looks everywhere. ' +
        'Mean distance: how far, in tokens, a head looks on average. ' +
        'Confidence: a query\'s largest weight, on average; 1 when a head looks at one key. ' +
        'The engine computes all three in the same pass as the weights. ' +
        'Hover or focus a heatmap (then the arrow keys) to read a cell.';
    if (average) {
      renderAverage(data, state, averageBox, actions);
    } else {
      renderHeadGrid(data, state, grid, actions);
    }
    // The line view and the ablation are drawn when near the screen (below a 16-head grid they
    // are thousands of pixels down); out of reach they are marked and drawn when they come near.
    renderPart('lines');
    renderPart('ablation');
  }

  const lazyParts = {
    lines: { section: linesSection, near: true, dirty: false, draw: () => renderLines(data, state, lines, actions) },
    ablation: { section: ablationSection, near: true, dirty: false, draw: () => renderAblation(data, state, ablation, actions, layout) },
  };
  function renderPart(name) {
    const part = lazyParts[name];
    if (data === null || destroyed) return;
    if (part.near) {
      part.dirty = false;
      part.draw();
    } else {
      part.dirty = true;
    }
  }
  const sectionObserver = typeof IntersectionObserver === 'function'
    ? new IntersectionObserver((entries) => {
      for (const e of entries) {
        const name = e.target === linesSection ? 'lines' : 'ablation';
        lazyParts[name].near = e.isIntersecting;
        if (e.isIntersecting && lazyParts[name].dirty) renderPart(name);
      }
    }, { rootMargin: '100% 0px' })
    : null;
  sectionObserver?.observe(linesSection);
  sectionObserver?.observe(ablationSection);

  // Canvases take their colours from the scheme: redraw when it changes.
  const scheme = globalThis.matchMedia?.('(prefers-color-scheme: dark)');
  const onScheme = () => schedule(false);
  scheme?.addEventListener?.('change', onScheme);

  schedule(true);

  /**
   * The current view as a file: 'svg' | 'png' | 'json' | 'csv' (export.js), once what was asked
   * of the view (a new text, a loaded case) is computed and drawn.
   */
  async function exportAs(format) {
    checkHeadsFormat(format);
    await settled();
    if (destroyed) throw new HeadscopeError('DISPOSED', 'exportAs: the view was destroyed');
    return exportHeads(format, { data, state, publicState: publicState(), element: view });
  }

  // API -----------------------------------------------------------------------------------------
  return {
    exportAs,
    settled,
    /**
     * Shows a case document's heads (queries labelled t1..tL). Large cases (N*H*L*S' > 50k weights
     * or E > 128) run in a Web Worker, with a busy state; smaller ones in this thread.
     */
    async loadCase(caseDocument) {
      let parsed;
      try {
        parsed = parseCase(caseDocument);
      } catch (e) {
        fail(e);
        return;
      }
      const dims = callDims(parsed.config, parsed.query.shape, parsed.key.shape);
      loaded = {
        id: (loaded?.id ?? 0) + 1,
        parsed, dims, trace: null,
        name: parsed.name ? `case ${parsed.name}` : 'loaded case',
        big: traceWeights(dims) > WORKER_WEIGHTS || dims.E > WORKER_EMBED_DIM,
      };
      // N is null for a query of the wrong rank: the run fails with the engine's message.
      batch.replaceChildren(...Array.from({ length: dims.N ?? 1 }, (_, n) => {
        const o = el('option', '', String(n + 1));
        o.value = String(n + 1);  // 1-based like its label
        return o;
      }));
      state.batch = 0;
      state.source = 'case';
      state.numHeads = dims.H;
      state.ablated.clear();
      state.shown = null;
      state.pinned = null;
      state.cell = null;
      source.querySelector('option[value="case"]').disabled = false;
      const what = `${loaded.name} (${dims.H} head${dims.H === 1 ? '' : 's'}, ${dims.L} quer${dims.L === 1 ? 'y' : 'ies'}` +
        `${dims.batched ? `, batch of ${dims.N}` : ''})`;
      caseNote.textContent = `Showing ${what}. Choose other weights to go back to the sentence.`;
      onStatus(`Heads: showing ${what}.`);
      changed('case');
      if (frame) {
        cancelAnimationFrame(frame);
        frame = 0;
      }
      needCompute = false;
      try {
        await track(update());
      } catch (e) {
        fail(e);
      }
    },
    /** The public state (state.js): a copy; changing it changes nothing. */
    getState() {
      return publicState();
    },
    /**
     * Applies the fields given (state.js); a bad field throws a HeadscopeError naming it and
     * nothing changes. Fires onChange (cause 'setState') when the state differs.
     */
    setState(patch) {
      if (destroyed) throw new HeadscopeError('DISPOSED', 'setState: the view was destroyed');
      if (patch !== null && typeof patch === 'object' && 'text' in patch) state.pinned = null;
      edit(patch, { cause: 'setState' });
    },
    destroy() {
      destroyed = true;
      clearInterval(busyTimer);
      sectionObserver?.disconnect();
      scheme?.removeEventListener?.('change', onScheme);
      generation++;
      if (frame) cancelAnimationFrame(frame);
      local.dispose().catch(() => {});
      // The page's worker is shared: free this view's objects in it, leave it running.
      remote?.dispose().catch(() => {});
      root.replaceChildren();
    },
  };
}
