// The walkthrough view: the seed's worked example, live. Every stage of multi-head attention is a
// labelled matrix; X and every weight are editable, and each edit runs ONE trace() of the library
// (self-attention, unbatched) whose numbers fill every computed matrix. Hovering or focusing a
// computed cell writes out how it was obtained.
//
// Everything is scoped to `root` (no ids, no document-level queries), so the view can be mounted
// several times on one page and inside shadow roots (the <headscope-walkthrough> widget).
import { createMatrix } from '../common/matrix.js';
import { renderLegend } from '../common/legend.js';
import { makeScale, colorFor } from '../common/scale.js';
import { placeNear } from '../common/place.js';
import {
  MAX_SIZE, divisors, nearestDivisor, seedState, learnedLookingState, randomState, identityState,
  resizeState, headDim, inputMatrices, inputData, withCell, toStateDict, moduleConfig, traceOptions,
  describeMasks, maskTerms, stateFromCase, explainCell, traceOverflow,
} from './model.js';
import {
  WALKTHROUGH_CONTROLS, WALKTHROUGH_STAGES, applyWalkthroughState, publicWalkthroughState, stageOf,
} from './state.js';
import { changeReporter, checkNames } from '../common/options.js';
import { exportBar } from '../common/export-bar.js';
import { EXPORT_FORMATS } from '../common/export-data.js';
import { exportWalkthrough } from './export.js';
import { HeadscopeError } from '../../lib/errors.js';

const EXPLAIN_HINT = 'Hover over or focus (Tab, then the arrow keys) any cell of Q, K, V, the ' +
  'scores, A, a head output, the concatenation or Y to see how it was computed. To change a number, ' +
  'click it, or reach it with Tab and the arrow keys and type; Enter or F2 edits it in place, ' +
  'Escape undoes the edit.';

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function option(value, text, selected) {
  const o = el('option', '', text);
  o.value = String(value);
  o.selected = selected;
  return o;
}

function labelled(text, control) {
  const label = el('label', '', text);
  label.append(control);
  return label;
}

/** Row-major data of a trace tensor for head h ((H, rows, cols) -> (rows, cols)). */
function headSlice(t, h) {
  const size = t.shape[1] * t.shape[2];
  return t.data.subarray(h * size, (h + 1) * size);
}

/**
 * Mounts the walkthrough into `root`.
 * @param {HTMLElement} root  the panel (or a widget's shadow-root container); its content is replaced
 * @param {{ hs: import('../../lib/index.js').Headscope, onStatus?: (text: string) => void,
 *   initialCase?: object | string, state?: object, stages?: string[], heads?: number[] | null,
 *   hide?: string[], compact?: boolean, readonly?: boolean,
 *   onChange?: (state: object, cause: string) => void }} options
 *   state: the starting numbers (state.js); stages: the stages shown (WALKTHROUGH_STAGES, default
 *   all); heads: the heads shown (1-based; null: all; the others still compute); hide: controls
 *   not shown (WALKTHROUGH_CONTROLS); compact: no title or intro; readonly: nothing editable;
 *   onChange: after each change of the numbers or sizes. A bad option throws a HeadscopeError
 *   naming it, before anything is mounted.
 * @returns {{ loadCase(caseDocument: object | string): boolean, getState(): object,
 *   setState(patch: object): void, destroy(): void }}
 */
export function mountWalkthrough(root, { hs, onStatus = () => {}, initialCase, state: initialState,
  stages: stageOption = WALKTHROUGH_STAGES, heads: headsOption = null, hide = [], compact = false,
  readonly = false, onChange = () => {} } = {}) {
  if (!hs || typeof hs.createMultiheadAttention !== 'function') {
    throw new HeadscopeError('INVALID_ARGUMENT', 'mountWalkthrough: options.hs must be the API of init() from headscope');
  }
  const shownStages = new Set(checkNames(stageOption, WALKTHROUGH_STAGES, 'mountWalkthrough: options.stages'));
  const hidden = new Set(checkNames(hide, WALKTHROUGH_CONTROLS, 'mountWalkthrough: options.hide'));
  let shownHeads = checkHeads(headsOption, 'mountWalkthrough: options.heads');
  let state = seedState();
  if (initialState !== undefined) state = applyWalkthroughState(initialState, state, 'mountWalkthrough: options.state');
  let randomSeed = 1;
  let mha = null;          // one MultiheadAttention per (E, H, bias), reused across edits
  let mhaKey = '';
  let trace = null;
  let masks = null;        // maskTerms(state), for the explanations
  let explained = null;    // { stage, h, i, j } of the cell whose explanation is shown
  let destroyed = false;
  // Per data-matrix name: its matrix component (common/matrix.js createMatrix), kept across builds
  const tables = new Map();
  let highlighted = [];    // cells marked as the explained one and its sources

  const view = el('div', `hs-walkthrough${compact ? ' hs-compact' : ''}`);
  const title = el('h2', 'hs-wt-title hs-prose', 'Walkthrough: multi-head attention, step by step');
  const intro = el('p', 'hs-wt-intro hs-prose', 'Y = Concat(head₁, …, head_H)·W_O, where head_h = ' +
    'softmax(Q_h K_hᵀ / √d_k)·V_h and Q_h = X·W_Q⁽ʰ⁾, K_h = X·W_K⁽ʰ⁾, V_h = X·W_V⁽ʰ⁾. Loaded with ' +
    'the seed article\'s worked example. Edit any number in X or the weights: everything below ' +
    'is recomputed at once by headscope\'s WebAssembly engine.');

  // Presets and sizes.
  const presets = el('div', 'hs-controls hs-wt-presets');
  presets.setAttribute('role', 'group');
  presets.setAttribute('aria-label', 'Presets');
  const presetLabel = el('span', 'hs-wt-control-label', 'Numbers:');
  const presetButtons = [
    ['Seed example', 'The seed article\'s 3 x 4 example: heads pick dims 0-1 and 2-3', () => seedState()],
    ['Learned-looking W_Q', 'The seed\'s example with its learned-looking W_Q for head 1',
      () => learnedLookingState()],
    ['Seeded random', 'Random numbers from the seed below, at the current sizes',
      () => randomState(state, randomSeed, { withBias: state.bias !== null })],
    ['Identity', 'Every projection the identity, at the current sizes; X kept', () => identityState(state)],
  ].map(([text, description, make]) => {
    const b = el('button', '', text);
    b.type = 'button';
    b.title = description;
    b.addEventListener('click', () => {
      setState(make(), { structural: true });
      onStatus(`Walkthrough: ${state.source}.`);
    });
    return b;
  });
  const seedInput = el('input', 'hs-wt-seed');
  seedInput.type = 'number';
  seedInput.min = '0';
  seedInput.step = '1';
  seedInput.value = String(randomSeed);
  seedInput.addEventListener('change', () => {
    const v = Number(seedInput.value);
    if (Number.isInteger(v) && v >= 0) {
      randomSeed = v;
      seedInput.removeAttribute('aria-invalid');
    } else {
      seedInput.setAttribute('aria-invalid', 'true');
    }
  });
  presets.append(presetLabel, ...presetButtons, labelled('Random seed', seedInput));

  const sizes = el('div', 'hs-controls hs-wt-sizes');
  sizes.setAttribute('role', 'group');
  sizes.setAttribute('aria-label', 'Sizes');
  const tokensSelect = el('select');
  const embedSelect = el('select');
  const headsSelect = el('select');
  for (let n = 1; n <= MAX_SIZE; n++) {
    tokensSelect.append(option(n, String(n), false));
    embedSelect.append(option(n, String(n), false));
  }
  const headDimText = el('span', 'hs-wt-headdim');
  sizes.append(labelled('Tokens L', tokensSelect), labelled('Embedding size E', embedSelect),
    labelled('Heads H', headsSelect), headDimText);
  const resize = (change) => {
    const { state: next, droppedMasks } = resizeState(state, change, randomSeed);
    setState(next, { structural: true });
    onStatus(`Walkthrough: ${state.L} tokens x ${state.E} dims, ${state.H} head${state.H > 1 ? 's' : ''}` +
      `${droppedMasks ? '; the case\'s masks no longer fit and were dropped' : ''}.`);
  };
  tokensSelect.addEventListener('change', () => resize({ L: Number(tokensSelect.value) }));
  embedSelect.addEventListener('change', () => {
    const E = Number(embedSelect.value);
    resize({ E, H: nearestDivisor(E, state.H) });
  });
  headsSelect.addEventListener('change', () => resize({ H: Number(headsSelect.value) }));

  // Messages about loaded cases and errors: visible in the view, announced politely.
  const note = el('p', 'hs-wt-note');
  note.setAttribute('role', 'status');
  note.hidden = true;

  const legends = el('div', 'hs-wt-legends');
  const signedLegend = el('div');
  const weightsLegend = el('div');
  legends.append(signedLegend, weightsLegend);

  const stages = el('div', 'hs-wt-stages');
  const hint = el('p', 'hs-wt-hint', EXPLAIN_HINT);
  // The explanation of a cell opens next to it (never over it) and is announced politely.
  const explain = el('div', 'hs-explain hs-wt-explain');
  explain.setAttribute('role', 'status');
  explain.setAttribute('aria-live', 'polite');
  explain.setAttribute('aria-label', 'How the cell was computed');
  explain.hidden = true;

  presets.hidden = readonly || hidden.has('presets');
  sizes.hidden = readonly || hidden.has('sizes');
  legends.hidden = hidden.has('legend');
  hint.hidden = hidden.has('explain');
  const exportsBox = exportBar([...EXPORT_FORMATS, 'case'], (format) => exportAs(format),
    (format) => (format === 'case' ? 'walkthrough-case.json' : `headscope-walkthrough.${format}`),
    (e) => showNote(`Export failed: ${e.message}`, { error: true }));
  exportsBox.hidden = hidden.has('export');
  view.append(title, intro, presets, sizes, exportsBox, note, legends, hint, stages, explain);
  root.replaceChildren(view);
  // Scrolling (the page or a matrix) moves the explained cell: the explanation follows it to the
  // side of the cell that is on screen.
  const onScroll = () => { if (!explain.hidden) schedulePlacement(); };
  window.addEventListener('scroll', onScroll, { passive: true, capture: true });

  // ---- Engine ------------------------------------------------------------------------------

  function compute() {
    const config = moduleConfig(state);
    const key = `${config.embedDim}/${config.numHeads}/${config.bias}`;
    if (key !== mhaKey) {
      mha?.dispose();
      mha = null;
      mhaKey = '';
      mha = hs.createMultiheadAttention(config);
      mhaKey = key;
    }
    mha.loadStateDict(toStateDict(state));
    trace = mha.trace(state.x, state.x, state.x, traceOptions(state));
    masks = maskTerms(state);
  }

  // ---- Rendering ---------------------------------------------------------------------------
  //
  // The DOM is built once per matrix and kept: a change of sizes reshapes the matrices in place
  // (a head's S and A keep their cells when only the head count changes), heads beyond the
  // current count are detached and kept for later, and every other change only writes the
  // numbers and colours that changed.

  /** The signed scale shared by every matrix except A: the largest magnitude shown. */
  function sharedScale() {
    let max = 0;
    const see = (v) => { if (Number.isFinite(v) && Math.abs(v) > max) max = Math.abs(v); };
    for (const row of state.x) row.forEach(see);
    for (const w of [state.wq, state.wk, state.wv, state.wo]) for (const row of w) row.forEach(see);
    if (state.bias) for (const k of ['q', 'k', 'v', 'o']) state.bias[k].forEach(see);
    for (const k of ['q', 'k', 'v', 'scores', 'headOutputs', 'concat', 'output']) {
      const d = trace[k].data;
      for (let n = 0; n < d.length; n++) see(d[n]);
    }
    return { kind: 'signed', min: -(max || 1), max: max || 1 };
  }

  const WEIGHTS_SCALE = makeScale([], 'weights');

  const labelCache = new Map();
  const labels = (prefix, n) => {
    const key = `${prefix}/${n}`;
    if (!labelCache.has(key)) labelCache.set(key, Array.from({ length: n }, (_, i) => `${prefix}${i}`));
    return labelCache.get(key);
  };

  /** What each matrix shows for the current state: shape, labels, numbers, scale. */
  function specOf(name, scale) {
    const { L, E } = state;
    const hd = headDim(state);
    const input = /^(X|WO|BO|[WB][QKV]\d+)$/.test(name);
    if (input) {
      const [t, sub] = inputTitle(name);
      const isBias = name.startsWith('B');
      const rows = isBias ? 1 : name === 'X' ? L : E;
      const cols = name === 'X' || name === 'WO' || name === 'BO' ? E : hd;
      return {
        title: t, subtitle: `${sub ? `${sub}, ` : ''}${rows}×${cols}`, rows, cols,
        rowLabels: isBias ? ['b'] : name === 'X' ? labels('x', L) : labels('', E),
        colLabels: labels('', cols), data: inputData(state, name), scale,
      };
    }
    if (name === 'CONCAT' || name === 'Y') {
      return {
        title: name === 'Y' ? `Y = Concat·W_O${state.bias ? ' + b_O' : ''}` : 'Concat(heads)',
        subtitle: `${L}×${E}`, rows: L, cols: E, rowLabels: labels('x', L), colLabels: labels('', E),
        data: name === 'Y' ? trace.output.data : trace.concat.data, scale,
      };
    }
    const stage = name[0];
    const n = Number(name.slice(1));
    const h = n - 1;
    switch (stage) {
      case 'Q': case 'K': case 'V':
        return {
          title: `${stage} = X·W_${stage}`, subtitle: `${L}×${hd}`, rows: L, cols: hd, rowLabels: labels('x', L),
          colLabels: labels('', hd), data: headSlice(trace[stage.toLowerCase()], h), scale,
        };
      case 'S':
        return {
          title: 'scores = Q·Kᵀ / √d_k', subtitle: `d_k = ${hd}`, rows: L, cols: L, rowLabels: labels('q', L),
          colLabels: labels('k', L), data: headSlice(trace.scores, h), scale,
        };
      case 'A':
        return {
          title: 'A = softmax(scores)', subtitle: 'rows sum to 1', rows: L, cols: L, rowLabels: labels('q', L),
          colLabels: labels('k', L), data: headSlice(trace.weights, h), scale: WEIGHTS_SCALE,
        };
      case 'H':
        return {
          title: `head${subscript(n)} = A·V`, subtitle: `${L}×${hd}`, rows: L, cols: hd, rowLabels: labels('x', L),
          colLabels: labels('', hd), data: headSlice(trace.headOutputs, h), scale,
        };
      default:
        throw new RangeError(`no matrix named ${name}`);
    }
  }

  function inputTitle(name) {
    const m = /^([WB])([QKVO])(\d*)$/.exec(name);
    if (name === 'X') return ['X', 'tokens × dims'];
    if (!m) return [name, ''];
    return [`${m[1] === 'W' ? 'W' : 'b'}_${m[2]}`, m[3] ? `head ${m[3]}` : ''];
  }

  /** The matrix component of a name, created on first use and kept. */
  function matrix(name) {
    let m = tables.get(name);
    if (m) return m;
    const editable = !readonly && /^(X|WO|BO|[WB][QKV]\d+)$/.test(name);
    const stage = name === 'CONCAT' || name === 'Y' ? name : name[0];
    const h = stage === name ? 0 : Number(name.slice(1)) - 1;
    m = createMatrix({
      name,
      editable,
      onEdit: (i, j, v) => edit(name, i, j, v),
      onExplain: (i, j, cell) => showExplanation(stage, h, i, j, cell),
      onExplainEnd: (how) => (how?.dismiss ? hideExplanation() : endExplanation()),
      onShown: () => {
        if (!pending.delete(name) || !lastScale) return;
        m.update(specOf(name, lastScale));
        markPending();
      },
    });
    m.element.classList.add('hs-wt-matrix');
    tables.set(name, m);
    return m;
  }

  // Children of `parent` made exactly `wanted`, in order, moving as little as possible.
  function syncChildren(parent, wanted) {
    const keep = new Set(wanted);
    for (const child of [...parent.children]) if (!keep.has(child)) child.remove();
    wanted.forEach((node, k) => {
      if (parent.children[k] !== node) parent.insertBefore(node, parent.children[k] ?? null);
    });
  }

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

  const sectionNames = (h) => {
    const n = h + 1;
    return ['WQ', 'WK', 'WV', 'BQ', 'BK', 'BV', 'Q', 'K', 'V', 'S', 'A', 'H'].map((l) => `${l}${n}`);
  };

  /** rows x cols of a matrix, by name, for the current sizes. */
  function shapeOf(name) {
    const { L, E } = state;
    const hd = headDim(state);
    if (name === 'X' || name === 'CONCAT' || name === 'Y') return [L, E];
    if (name === 'WO') return [E, E];
    if (name === 'BO') return [1, E];
    if (name[0] === 'W') return [E, hd];
    if (name[0] === 'B') return [1, hd];
    if (name[0] === 'S' || name[0] === 'A') return [L, L];
    return [L, hd];
  }

  /**
   * A guess, without layout, of whether head h's section lies within a viewport's height of the
   * viewport: from the stages' position and each section's size in rows of cells (~26 px each)
   * and matrices per line (~66 px per column).
   */
  function nearViewport() {
    const { L, E } = state;
    const hd = headDim(state);
    const top = stages.getBoundingClientRect().top;
    const screen = window.innerHeight || 800;
    const width = Math.max(200, stages.clientWidth || view.clientWidth || 800);
    const rowPx = 26;
    const block = (rows, cols, count) => {
      const perLine = Math.max(1, Math.floor((width + 20) / (60 + cols * 66)));
      return Math.ceil(count / perLine) * (56 + rows * rowPx);
    };
    const headHeight = 40 + block(E, hd, 3) + (state.bias ? block(1, hd, 3) : 0) + block(L, hd, 3) + block(L, L, 3);
    const first = top + 40 + block(L, E, 1);
    return (h) => {
      const y = first + h * headHeight;
      return y < 2 * screen && y + headHeight > -screen;
    };
  }

  /** The matrices now on the page, by name, in page order. */
  function shownNames() {
    const names = ['X'];
    for (let n = 1; n <= state.H; n++) {
      names.push(`WQ${n}`, `WK${n}`, `WV${n}`);
      if (state.bias) names.push(`BQ${n}`, `BK${n}`, `BV${n}`);
      names.push(`Q${n}`, `K${n}`, `V${n}`, `S${n}`, `A${n}`, `H${n}`);
    }
    names.push('CONCAT', 'WO');
    if (state.bias) names.push('BO');
    names.push('Y');
    return names;
  }

  /** Brings the page's structure to the current sizes (presets, resizing, loaded cases). */
  function build() {
    // Read before anything is written, while the layout is clean (reading it later would force
    // a layout of the whole page).
    const near = nearViewport();
    hideExplanation();
    const { L, E, H } = state;
    const hd = headDim(state);
    tokensSelect.value = String(L);
    embedSelect.value = String(E);
    const options = divisors(E);
    if (headsSelect.options.length !== options.length ||
        [...headsSelect.options].some((o, k) => Number(o.value) !== options[k])) {
      headsSelect.replaceChildren(...options.map((d) => option(d, String(d), d === H)));
    }
    headsSelect.value = String(H);
    headDimText.textContent = `d_k = E / H = ${hd}`;
    renderLegend(weightsLegend, WEIGHTS_SCALE);

    inputSection.firstChild.textContent = `Input: ${L} token${L > 1 ? 's' : ''}, ${E} dim${E > 1 ? 's' : ''} each`;
    if (inputRow.firstChild !== matrix('X').element) inputRow.append(matrix('X').element);
    maskNote.textContent = describeMasks(state);
    maskNote.hidden = !maskNote.textContent;

    // Matrices attached by this build: until the browser has rendered them once, whether it
    // skips them is estimated from where they will land (a 16-token head is ~1,200 px tall), so
    // that the heads far below the viewport get their cells after the frame.
    const sections = [inputSection];
    for (let h = 0; h < H; h++) {
      const parts = headSection(h);
      const isNear = near(h);
      if (!parts.section.isConnected) {
        for (const n of sectionNames(h)) if (!matrix(n).element.isConnected) matrix(n).assumeSkipped(!isNear);
      }
      parts.headNote.textContent =
        ` columns ${h * hd}${hd > 1 ? `–${h * hd + hd - 1}` : ''} of the packed projections, d_k = ${hd}`;
      syncChildren(parts.section, [parts.section.firstChild, parts.weights,
        ...(state.bias ? [parts.biases] : []), parts.qkv, parts.attn]);
      sections.push(parts.section);
    }
    syncChildren(outRow, ['CONCAT', 'WO', ...(state.bias ? ['BO'] : []), 'Y'].map((n) => matrix(n).element));
    sections.push(outputSection);
    // The numbers first, then the new sections onto the page: cells created off the page are
    // cheaper than cells created in it.
    refresh();
    syncChildren(stages, sections);
    applyVisibility();
  }

  // The stages and heads options: matrices of other stages, sections of other heads, and rows or
  // sections left empty are hidden (they are still computed: one trace gives everything).
  function applyVisibility() {
    for (const name of shownNames()) matrix(name).element.hidden = !shownStages.has(stageOf(name));
    for (const section of stages.children) {
      const rows = [...section.querySelectorAll('.hs-stage-row')];
      for (const r of rows) r.hidden = [...r.children].every((c) => c.hidden);
      const h = headSections.findIndex((p) => p?.section === section);
      section.hidden = (h >= 0 && shownHeads !== null && !shownHeads.includes(h + 1)) || rows.every((r) => r.hidden);
    }
  }

  let legendMax = null;
  let lastScale = null;
  // Matrices the browser is not rendering (off screen) get their numbers in a task of their own
  // right after the frame, or as soon as they are rendered again, whichever comes first: the
  // matrices in view are painted without waiting for the thousands of cells out of view.
  const pending = new Set();
  let flushing = null;
  // In tasks of ~10 ms, so that a first build of many heads does not hold the page for long.
  function scheduleFlush() {
    if (flushing) return;
    flushing = new MessageChannel();
    flushing.port1.onmessage = () => {
      if (destroyed) return;
      const start = performance.now();
      const shown = new Set(shownNames());
      for (const name of pending) {
        pending.delete(name);
        if (shown.has(name)) matrix(name).update(specOf(name, lastScale));
        if (performance.now() - start > 10) break;
      }
      if (pending.size) {
        flushing.port2.postMessage(0);
      } else {
        flushing = null;
        markPending();
      }
    };
    requestAnimationFrame(() => flushing?.port2.postMessage(0));
  }
  // data-pending on the view while matrices wait for their numbers (tests and tools wait for it).
  const markPending = () => view.toggleAttribute('data-pending', pending.size > 0);

  /** Writes the current numbers into the matrices on the page. */
  function refresh() {
    const scale = sharedScale();
    lastScale = scale;
    if (scale.max !== legendMax) {
      renderLegend(signedLegend, scale);
      legendMax = scale.max;
    }
    for (const name of shownNames()) {
      const m = matrix(name);
      if (m.skipped) {
        if (!pending.has(name)) m.hintShape(...shapeOf(name));
        pending.add(name);
      } else {
        pending.delete(name);
        m.update(specOf(name, scale));
      }
    }
    if (pending.size) scheduleFlush();
    markPending();
    if (explained) {
      const { stage, h, i, j } = explained;
      const cell = explainedCell();
      if (cell) {
        explain.textContent = explainAt(stage, h, i, j);
        schedulePlacement();
      } else {
        hideExplanation();
      }
    }
  }

  // ---- Explanations ------------------------------------------------------------------------

  const matrixName = (stage, h) => (stage === 'CONCAT' || stage === 'Y' ? stage : `${stage}${h + 1}`);

  function explainAt(stage, h, i, j) {
    if (!trace) return null;
    explained = { stage, h, i, j };
    const { text, sources } = explainCell(stage, { state, trace, masks }, h, i, j);
    highlight(matrixName(stage, h), i, j, sources);
    return text;
  }

  function explainedCell() {
    if (!explained) return null;
    const { stage, h, i, j } = explained;
    return tables.get(matrixName(stage, h))?.cell(i, j)?.td ?? null;
  }

  let placement = 0;
  function schedulePlacement() {
    if (placement) return;
    placement = requestAnimationFrame(() => {
      placement = 0;
      const cell = explainedCell();
      if (cell && !explain.hidden && cell.isConnected) placeNear(explain, cell, view);
    });
  }

  function showExplanation(stage, h, i, j, cellContent) {
    if (hidden.has('explain')) return;  // the hide option: no explanations
    const text = explainAt(stage, h, i, j);
    if (!text) return;
    explain.textContent = text;
    explain.hidden = false;
    placeNear(explain, cellContent.closest('td') ?? cellContent, view);
  }

  // The pointer left a matrix, or the focus left its cells: the explanation closes unless a
  // computed cell still has the focus (then it explains that one).
  function endExplanation() {
    queueMicrotask(() => {
      const focused = view.getRootNode().activeElement;
      if (focused?.classList?.contains('hs-cell-value') && view.contains(focused)) {
        const table = focused.closest('table');
        const td = focused.closest('td');
        const name = table.dataset.matrix;
        const stage = name === 'CONCAT' || name === 'Y' ? name : name[0];
        const h = stage === name ? 0 : Number(name.slice(1)) - 1;
        showExplanation(stage, h, Number(td.dataset.row), Number(td.dataset.col), focused);
        return;
      }
      hideExplanation();
    });
  }

  function hideExplanation() {
    explained = null;
    explain.hidden = true;
    highlight(null, 0, 0, []);
  }

  function highlight(target, i, j, sources) {
    for (const td of highlighted) td.classList.remove('hs-wt-source', 'hs-wt-target');
    highlighted = [];
    const mark = (name, r, c, className) => {
      for (const cell of tables.get(name)?.cellsIn(r, c) ?? []) {
        cell.td.classList.add(className);
        highlighted.push(cell.td);
      }
    };
    for (const s of sources) mark(s.matrix, s.row, s.col, 'hs-wt-source');
    if (target) mark(target, i, j, 'hs-wt-target');
  }

  // ---- State changes -----------------------------------------------------------------------

  function showNote(text, { error = false } = {}) {
    note.textContent = text;
    note.hidden = !text;
    note.classList.toggle('hs-error', error);
  }

  function setState(next, { structural = false, cause = 'input' } = {}) {
    const previous = state;
    state = next;
    try {
      compute();
    } catch (e) {
      // The library refused the numbers: keep showing the last good ones.
      state = previous;
      showNote(`headscope could not compute this: ${e.message}`, { error: true });
      return false;
    }
    if (structural) {
      showNote('');
      build();
    } else {
      refresh();
    }
    changed(cause);
    return true;
  }

  /**
   * One typed number (the matrix component parsed it). Returns why it was refused, or null:
   * a number whose computation overflows float32 is not used (it would turn every result into
   * NaN or ±∞).
   */
  function edit(name, i, j, value) {
    if (destroyed) return null;
    const current = inputMatrices(state).find((m) => m.name === name);
    if (!current || current.get(i, j) === value) return null;
    const previous = state;
    state = withCell(state, name, i, j, value);
    try {
      compute();
    } catch (e) {
      state = previous;
      compute();
      return `headscope could not compute this (${e.message})`;
    }
    const overflow = traceOverflow(trace, masks);
    if (overflow) {
      state = previous;
      compute();
      return `with ${value}, ${overflow} overflow float32 (beyond ±3.4e38), so it is not used`;
    }
    refresh();
    return null;
  }

  // ---- Public API --------------------------------------------------------------------------

  /**
   * Shows a case document if the walkthrough can (packed in_proj_weight, unbatched
   * self-attention, at most 16 x 16); otherwise keeps the current content and says in the view
   * why, and that a Heads view shows it (the same words in the page and in a widget). Returns
   * whether the case is shown.
   */
  function loadCase(caseDocument) {
    if (destroyed) return false;
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
    if (!setState(result.state, { structural: true, cause: 'case' })) return false;
    const extras = [state.bias ? 'its biases are shown under each head and next to W_O' : '',
      state.masks ? 'its masks are applied to the scores' : ''].filter(Boolean);
    showNote(`Showing ${state.source}${extras.length ? `: ${extras.join('; ')}` : ''}.`);
    onStatus(`Walkthrough: showing ${state.source}.`);
    return true;
  }

  // Reports a change of the numbers or sizes to onChange (not while mounting).
  const reporter = changeReporter(() => publicWalkthroughState(state), onChange);
  const changed = (cause) => reporter.changed(cause);

  /** The public state (state.js): a copy. */
  function getState() {
    return publicWalkthroughState(state);
  }

  /**
   * Applies a patch (state.js): a bad field throws a HeadscopeError naming it and nothing changes;
   * an H that does not divide E, or heads beyond H in the heads option, likewise.
   */
  function setPublicState(patch) {
    if (destroyed) throw new HeadscopeError('DISPOSED', 'setState: the view was destroyed');
    const next = applyWalkthroughState(patch, state);
    const structural = next.L !== state.L || next.E !== state.E || next.H !== state.H
      || (next.bias === null) !== (state.bias === null) || next.masks !== state.masks || 'preset' in patch;
    if (!setState(next, { structural, cause: 'setState' })) {
      throw new HeadscopeError('INVALID_ARGUMENT', `setState: ${note.textContent}`);
    }
  }

  /**
   * The current numbers as a file: 'svg' | 'png' (the shown matrices), 'json' | 'csv' (every
   * matrix), 'case' (a case document with the expected output and weights). A Promise of a Blob.
   */
  function exportAs(format) {
    const scale = sharedScale();
    const matrices = shownNames().map((name) => {
      const spec = specOf(name, scale);
      const get = (i, j) => spec.data[i * spec.cols + j];
      return { name, title: spec.title, rows: spec.rows, cols: spec.cols, rowLabels: spec.rowLabels,
        colLabels: spec.colLabels, get, color: (i, j) => colorFor(get(i, j), spec.scale) };
    });
    const visible = (name) => {
      const element = tables.get(name)?.element;
      return element !== undefined && !element.hidden && element.isConnected && !element.closest('section')?.hidden;
    };
    return exportWalkthrough(format, { state, trace, matrices, visible, explained, element: view });
  }

  /** Which heads the view shows (1-based; null: all). */
  function showHeads(heads) {
    shownHeads = checkHeads(heads, 'showHeads: heads');
    applyVisibility();
  }

  function destroy() {
    if (destroyed) return;
    destroyed = true;
    if (placement) cancelAnimationFrame(placement);
    window.removeEventListener('scroll', onScroll, { capture: true });
    mha?.dispose();
    mha = null;
    trace = null;
    root.replaceChildren();
  }

  setState(state, { structural: true });
  if (initialCase !== undefined && initialCase !== null) loadCase(initialCase);
  reporter.settle();
  return { loadCase, getState, setState: setPublicState, showHeads, exportAs, destroy };
}

/** The heads option: null (all) or 1-based head numbers (heads beyond H show nothing). */
function checkHeads(value, where) {
  if (value === null || value === undefined) return null;
  const list = typeof value === 'string' ? value.split(/[\s,]+/).filter(Boolean).map(Number) : value;
  if (!Array.isArray(list) || list.some((h) => !Number.isInteger(h) || h < 1 || h > 16)) {
    throw new HeadscopeError('INVALID_ARGUMENT', `${where}: expected null or head numbers in [1, 16] (1-based), ` +
      `got ${Array.isArray(value) ? JSON.stringify(value).slice(0, 60) : JSON.stringify(String(value)).slice(0, 60)}`);
  }
  return [...new Set(list)].sort((a, b) => a - b);
}

function subscript(n) {
  return String(n).replace(/\d/g, (d) => '₀₁₂₃₄₅₆₇₈₉'[Number(d)]);
}
