// The walkthrough view: the seed's worked example, live. Every stage of multi-head attention is a
// labelled matrix; X and every weight are editable, and each edit runs ONE trace() of the library
// (self-attention, unbatched) whose numbers fill every computed matrix. Hovering or focusing a
// computed cell writes out how it was obtained.
//
// Everything is scoped to `root` (no ids, no document-level queries), so the view can be mounted
// several times on one page and inside shadow roots (the <headscope-walkthrough> widget).
import { renderMatrix, renderLegend, makeScale, colorFor, formatNumber } from '../common/matrix.js';
import {
  MAX_SIZE, divisors, nearestDivisor, seedState, learnedLookingState, randomState, identityState,
  resizeState, headDim, inputMatrices, inputData, withCell, toStateDict, moduleConfig, traceOptions,
  describeMasks, maskTerms, stateFromCase, explainCell,
} from './model.js';
import {
  WALKTHROUGH_CONTROLS, WALKTHROUGH_STAGES, applyWalkthroughState, publicWalkthroughState, stageOf,
} from './state.js';
import { checkNames } from '../common/options.js';
import { exportBar, EXPORT_FORMATS } from '../common/export.js';
import { exportWalkthrough } from './export.js';
import { HeadscopeError } from '../../lib/errors.js';

const EXPLAIN_HINT = 'Hover over or focus (Tab, then the arrow keys) any cell of Q, K, V, the ' +
  'scores, A, a head output, the concatenation or Y to see how it was computed.';

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
  // Per data-matrix name: { table, cells: [{ td, i, j, value (span or input), color, text }] }
  let tables = new Map();
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
  const explain = el('div', 'hs-explain', EXPLAIN_HINT);
  explain.setAttribute('role', 'status');
  explain.setAttribute('aria-live', 'polite');
  explain.setAttribute('aria-label', 'How the cell was computed');

  presets.hidden = readonly || hidden.has('presets');
  sizes.hidden = readonly || hidden.has('sizes');
  legends.hidden = hidden.has('legend');
  explain.hidden = hidden.has('explain');
  const exportsBox = exportBar([...EXPORT_FORMATS, 'case'], (format) => exportAs(format),
    (format) => (format === 'case' ? 'walkthrough-case.json' : `headscope-walkthrough.${format}`),
    (e) => showNote(`Export failed: ${e.message}`, { error: true }));
  exportsBox.hidden = hidden.has('export');
  view.append(title, intro, presets, sizes, exportsBox, note, legends, stages, explain);
  root.replaceChildren(view);

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

  function sharedScale() {
    const values = [];
    for (const m of inputMatrices(state)) for (let i = 0; i < m.rows; i++) for (let j = 0; j < m.cols; j++) values.push(m.get(i, j));
    for (const k of ['q', 'k', 'v', 'scores', 'headOutputs', 'concat', 'output']) values.push(...trace[k].data);
    return makeScale(values, 'signed');
  }

  const WEIGHTS_SCALE = makeScale([], 'weights');

  // The computed matrices, in the order they appear; `data()` reads the current trace.
  function computedMatrices() {
    const { L, E, H } = state;
    const hd = headDim(state);
    const tokens = Array.from({ length: L }, (_, i) => `x${i}`);
    const out = [];
    for (let h = 0; h < H; h++) {
      const n = h + 1;
      const dims = Array.from({ length: hd }, (_, c) => `${c}`);
      for (const [stage, key, title] of [['Q', 'q', 'Q = X·W_Q'], ['K', 'k', 'K = X·W_K'], ['V', 'v', 'V = X·W_V']]) {
        out.push({ name: `${stage}${n}`, stage, h, rows: L, cols: hd, title, rowLabels: tokens, colLabels: dims,
          data: () => headSlice(trace[key], h), subtitle: `${L}×${hd}`, group: 'qkv' });
      }
      const keys = Array.from({ length: L }, (_, j) => `k${j}`);
      const queries = Array.from({ length: L }, (_, i) => `q${i}`);
      out.push({ name: `S${n}`, stage: 'S', h, rows: L, cols: L, title: 'scores = Q·Kᵀ / √d_k',
        subtitle: `d_k = ${hd}`, rowLabels: queries, colLabels: keys, data: () => headSlice(trace.scores, h), group: 'attn' });
      out.push({ name: `A${n}`, stage: 'A', h, rows: L, cols: L, title: 'A = softmax(scores)',
        subtitle: 'rows sum to 1', rowLabels: queries, colLabels: keys, data: () => headSlice(trace.weights, h),
        weights: true, group: 'attn' });
      out.push({ name: `H${n}`, stage: 'H', h, rows: L, cols: hd, title: `head${subscript(n)} = A·V`,
        subtitle: `${L}×${hd}`, rowLabels: tokens, colLabels: dims, data: () => headSlice(trace.headOutputs, h), group: 'attn' });
    }
    const all = Array.from({ length: E }, (_, c) => `${c}`);
    out.push({ name: 'CONCAT', stage: 'CONCAT', h: 0, rows: L, cols: E, title: 'Concat(heads)',
      subtitle: `${L}×${E}`, rowLabels: tokens, colLabels: all, data: () => trace.concat.data, group: 'out' });
    out.push({ name: 'Y', stage: 'Y', h: 0, rows: L, cols: E, title: `Y = Concat·W_O${state.bias ? ' + b_O' : ''}`,
      subtitle: `${L}×${E}`, rowLabels: tokens, colLabels: all, data: () => trace.output.data, group: 'out' });
    return out;
  }

  function inputTitle(name) {
    const m = /^([WB])([QKVO])(\d*)$/.exec(name);
    if (name === 'X') return ['X', 'tokens × dims'];
    if (!m) return [name, ''];
    return [`${m[1] === 'W' ? 'W' : 'b'}_${m[2]}`, m[3] ? `head ${m[3]}` : ''];
  }

  function addMatrix(container, spec) {
    const box = el('div', 'hs-wt-matrix');
    container.append(box);
    const table = renderMatrix(box, spec);
    // The cells in row-major order with what they show, so that refresh() touches only what changed.
    const cells = [...table.querySelectorAll('td.hs-cell')].map((td) => ({
      td,
      i: Number(td.dataset.row),
      j: Number(td.dataset.col),
      value: td.querySelector('.hs-cell-value, .hs-cell-input'),
      color: td.style.backgroundColor,
      text: null,
    }));
    for (const c of cells) c.text = spec.editable ? c.value.value : c.value.textContent;
    tables.set(spec.name, { table, cells });
    if (!spec.editable) setUpRovingFocus(table);
    return table;
  }

  /** Rebuilds every matrix for the current sizes (presets, resizing, loaded cases). */
  function build() {
    tables = new Map();
    highlighted = [];
    explained = null;
    const { L, E, H } = state;
    const hd = headDim(state);
    tokensSelect.value = String(L);
    embedSelect.value = String(E);
    headsSelect.replaceChildren(...divisors(E).map((d) => option(d, String(d), d === H)));
    headDimText.textContent = `d_k = E / H = ${hd}`;

    const scale = sharedScale();
    renderLegend(signedLegend, scale);
    renderLegend(weightsLegend, WEIGHTS_SCALE);
    const inputs = new Map(inputMatrices(state).map((m) => [m.name, m]));
    const inputSpec = (name) => {
      const m = inputs.get(name);
      const [title, subtitle] = inputTitle(name);
      const isBias = name.startsWith('B');
      return {
        name, title, subtitle: `${subtitle ? `${subtitle}, ` : ''}${m.rows}×${m.cols}`,
        data: inputData(state, name), rows: m.rows, cols: m.cols, scale, editable: !readonly,
        rowLabels: isBias ? [''] : name === 'X' ? Array.from({ length: L }, (_, i) => `x${i}`)
          : Array.from({ length: E }, (_, i) => `${i}`),
        colLabels: Array.from({ length: m.cols }, (_, j) => `${j}`),
        onEdit: (i, j, v) => edit(name, i, j, v),
      };
    };
    const computed = new Map(computedMatrices().map((m) => [m.name, m]));
    const computedSpec = (name) => {
      const m = computed.get(name);
      return {
        name, title: m.title, subtitle: m.subtitle, data: m.data(), rows: m.rows, cols: m.cols,
        rowLabels: m.rowLabels, colLabels: m.colLabels, scale: m.weights ? WEIGHTS_SCALE : scale,
        explain: (i, j) => explainAt(m.stage, m.h, i, j),
        onExplain: showExplanation,
      };
    };
    const section = (heading, className) => {
      const s = el('section', `hs-wt-stage ${className ?? ''}`.trim());
      const h3 = el('h3', '', heading);
      s.append(h3);
      stages.append(s);
      return s;
    };
    const row = (parent, label) => {
      const r = el('div', 'hs-stage-row');
      if (label) r.setAttribute('aria-label', label);
      r.setAttribute('role', 'group');
      parent.append(r);
      return r;
    };

    stages.replaceChildren();
    const input = section(`Input: ${L} token${L > 1 ? 's' : ''}, ${E} dim${E > 1 ? 's' : ''} each`);
    addMatrix(row(input), inputSpec('X'));
    const maskText = describeMasks(state);
    if (maskText) input.append(el('p', 'hs-wt-mask-note', maskText));

    for (let h = 0; h < H; h++) {
      const n = h + 1;
      const s = section(`Head ${n}`, 'hs-wt-head');
      s.style.setProperty('--hs-wt-head-color', `var(--hs-head-${(h % 16) + 1})`);
      s.querySelector('h3').append(el('span', 'hs-wt-head-note',
        ` columns ${h * hd}${hd > 1 ? `–${h * hd + hd - 1}` : ''} of the packed projections, d_k = ${hd}`));
      const weights = row(s, `Head ${n} projections`);
      for (const letter of ['Q', 'K', 'V']) addMatrix(weights, inputSpec(`W${letter}${n}`));
      if (state.bias) {
        const biases = row(s, `Head ${n} biases`);
        for (const letter of ['Q', 'K', 'V']) addMatrix(biases, inputSpec(`B${letter}${n}`));
      }
      const qkv = row(s, `Head ${n} queries, keys and values`);
      for (const letter of ['Q', 'K', 'V']) addMatrix(qkv, computedSpec(`${letter}${n}`));
      const attn = row(s, `Head ${n} attention`);
      for (const letter of ['S', 'A', 'H']) addMatrix(attn, computedSpec(`${letter}${n}`));
    }

    const output = section('Output: concatenate the heads, then mix them with W_O');
    const outRow = row(output);
    addMatrix(outRow, computedSpec('CONCAT'));
    addMatrix(outRow, inputSpec('WO'));
    if (state.bias) addMatrix(outRow, inputSpec('BO'));
    addMatrix(outRow, computedSpec('Y'));
    explain.textContent = EXPLAIN_HINT;
    applyVisibility();
  }

  // The stages and heads options: matrices of other stages, sections of other heads, and rows or
  // sections left empty are hidden (they are still computed: one trace gives everything).
  function applyVisibility() {
    for (const [name, { table }] of tables) {
      table.closest('.hs-wt-matrix').hidden = !shownStages.has(stageOf(name));
    }
    [...stages.querySelectorAll('.hs-wt-head')].forEach((s, h) => {
      s.dataset.head = String(h + 1);
    });
    for (const r of stages.querySelectorAll('.hs-stage-row')) r.hidden = [...r.children].every((c) => c.hidden);
    for (const s of stages.children) {
      const head = s.dataset.head === undefined ? null : Number(s.dataset.head);
      s.hidden = (head !== null && shownHeads !== null && !shownHeads.includes(head))
        || [...s.querySelectorAll('.hs-stage-row')].every((r) => r.hidden);
    }
  }

  /** Writes new numbers into the existing tables (same sizes): no DOM is created. */
  function refresh(skipInput) {
    const scale = sharedScale();
    renderLegend(signedLegend, scale);
    const paint = (cell, v, s) => {
      const color = colorFor(v, s);
      // Compared with what was written last: the browser would normalise the colour it reports.
      if (color !== cell.color) {
        cell.td.style.backgroundColor = color;
        cell.color = color;
      }
    };
    for (const m of inputMatrices(state)) {
      const entry = tables.get(m.name);
      if (!entry) continue;
      for (const cell of entry.cells) {
        const v = m.get(cell.i, cell.j);
        paint(cell, v, scale);
        const text = formatNumber(v, 3);
        if (cell.value !== skipInput && (text !== cell.text || cell.value.value !== text)) {
          cell.value.value = text;
          cell.value.removeAttribute('aria-invalid');
        }
        cell.text = text;
      }
    }
    for (const m of computedMatrices()) {
      const entry = tables.get(m.name);
      if (!entry) continue;
      const data = m.data();
      const s = m.weights ? WEIGHTS_SCALE : scale;
      for (const cell of entry.cells) {
        const v = data[cell.i * m.cols + cell.j];
        paint(cell, v, s);
        const text = formatNumber(v, 3);
        if (text !== cell.text) {
          cell.td.classList.toggle('hs-masked', v === -Infinity);
          cell.value.textContent = text;
          cell.value.setAttribute('aria-label', `${m.name} row ${cell.i + 1} column ${cell.j + 1}: ${text}`);
          cell.text = text;
        }
      }
    }
    if (explained) {
      const { stage, h, i, j } = explained;
      showExplanation(explainAt(stage, h, i, j));
    }
  }

  // ---- Explanations ------------------------------------------------------------------------

  function explainAt(stage, h, i, j) {
    if (!trace) return null;
    explained = { stage, h, i, j };
    const { text, sources } = explainCell(stage, { state, trace, masks }, h, i, j);
    highlight(stage === 'CONCAT' || stage === 'Y' ? stage : `${stage}${h + 1}`, i, j, sources);
    return text;
  }

  function showExplanation(text) {
    if (text) explain.textContent = text;
  }

  function highlight(target, i, j, sources) {
    for (const td of highlighted) td.classList.remove('hs-wt-source', 'hs-wt-target');
    highlighted = [];
    const mark = (name, row, col, className) => {
      for (const cell of tables.get(name)?.cells ?? []) {
        if ((row === undefined || cell.i === row) && (col === undefined || cell.j === col)) {
          cell.td.classList.add(className);
          highlighted.push(cell.td);
        }
      }
    };
    for (const s of sources) mark(s.matrix, s.row, s.col, 'hs-wt-source');
    mark(target, i, j, 'hs-wt-target');
  }

  // One tab stop per computed matrix; the arrow keys, Home and End move between its cells.
  function setUpRovingFocus(table) {
    const spans = [...table.querySelectorAll('.hs-cell-value[tabindex]')];
    if (spans.length === 0) return;
    spans.forEach((s, k) => { s.tabIndex = k === 0 ? 0 : -1; });
    table.addEventListener('focusin', (e) => {
      if (!e.target.classList?.contains('hs-cell-value')) return;
      for (const s of spans) s.tabIndex = s === e.target ? 0 : -1;
    });
    table.addEventListener('keydown', (e) => {
      const span = e.target;
      if (!span.classList?.contains('hs-cell-value')) return;
      const td = span.parentElement;
      const rows = table.tBodies[0].rows.length;
      const cols = spans.length / rows;
      let i = Number(td.dataset.row);
      let j = Number(td.dataset.col);
      switch (e.key) {
        case 'ArrowUp': i = Math.max(0, i - 1); break;
        case 'ArrowDown': i = Math.min(rows - 1, i + 1); break;
        case 'ArrowLeft': j = Math.max(0, j - 1); break;
        case 'ArrowRight': j = Math.min(cols - 1, j + 1); break;
        case 'Home': j = 0; break;
        case 'End': j = cols - 1; break;
        default: return;
      }
      e.preventDefault();
      spans[i * cols + j].focus();
    });
  }

  // ---- State changes -----------------------------------------------------------------------

  function showNote(text, { error = false } = {}) {
    note.textContent = text;
    note.hidden = !text;
    note.classList.toggle('hs-error', error);
  }

  function setState(next, { structural = false, skipInput = null, cause = 'input' } = {}) {
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
      refresh(skipInput);
    }
    changed(cause);
    return true;
  }

  function edit(name, i, j, value, inputEl = null) {
    if (destroyed) return;
    const current = inputMatrices(state).find((m) => m.name === name);
    if (!current || current.get(i, j) === value) return;
    setState(withCell(state, name, i, j, value), { skipInput: inputEl });
  }

  // Recompute while typing, not only on change (Enter / leaving the cell): the 'input' event
  // carries every keystroke; an incomplete number ("-", "1e") waits for more.
  function onInput(e) {
    const inputEl = e.target;
    if (!inputEl.classList?.contains('hs-cell-input')) return;
    const text = inputEl.value.trim();
    const value = Number(text);
    if (text === '' || !Number.isFinite(value)) return;
    inputEl.removeAttribute('aria-invalid');
    const td = inputEl.closest('td');
    const name = inputEl.closest('table').dataset.matrix;
    edit(name, Number(td.dataset.row), Number(td.dataset.col), value, inputEl);
  }
  stages.addEventListener('input', onInput);

  // ---- Public API --------------------------------------------------------------------------

  /**
   * Shows a case document if the walkthrough can (packed in_proj_weight, unbatched
   * self-attention, at most 16 x 16); otherwise keeps the current content and says in the view
   * that the case is in the Heads view. Returns whether the case is shown.
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
  let reported = null;
  function changed(cause) {
    if (reported === null) return;
    const s = publicWalkthroughState(state);
    const key = JSON.stringify(s);
    if (key === reported) return;
    reported = key;
    try {
      onChange(s, cause);
    } catch (e) {
      queueMicrotask(() => { throw e; });  // a listener's bug must not break the view
    }
  }

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
    const tokens = Array.from({ length: state.L }, (_, i) => `x${i}`);
    const index = (n) => Array.from({ length: n }, (_, k) => `${k}`);
    const inputs = inputMatrices(state).map((m) => ({
      name: m.name, title: inputTitle(m.name).filter(Boolean).join(', '), rows: m.rows, cols: m.cols,
      rowLabels: m.name === 'X' ? tokens : m.name.startsWith('B') ? [''] : index(state.E), colLabels: index(m.cols),
      get: m.get, color: (i, j) => colorFor(m.get(i, j), scale),
    }));
    const computed = computedMatrices().map((m) => {
      const data = m.data();
      const get = (i, j) => data[i * m.cols + j];
      return { name: m.name, title: m.title, rows: m.rows, cols: m.cols, rowLabels: m.rowLabels, colLabels: m.colLabels,
        get, color: (i, j) => colorFor(get(i, j), m.weights ? WEIGHTS_SCALE : scale) };
    });
    const order = new Map([...tables.keys()].map((name, k) => [name, k]));
    const matrices = [...inputs, ...computed].sort((a, b) => (order.get(a.name) ?? 1e9) - (order.get(b.name) ?? 1e9));
    const visible = (name) => {
      const box = tables.get(name)?.table.closest('.hs-wt-matrix');
      return box !== undefined && box !== null && !box.hidden && !box.closest('section')?.hidden;
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
    stages.removeEventListener('input', onInput);
    mha?.dispose();
    mha = null;
    trace = null;
    root.replaceChildren();
  }

  setState(state, { structural: true });
  if (initialCase !== undefined && initialCase !== null) loadCase(initialCase);
  reported = JSON.stringify(publicWalkthroughState(state));
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
