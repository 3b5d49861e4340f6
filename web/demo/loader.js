// "Your weights": load a case file (the JSON case format: a PyTorch state_dict and the forward
// arguments, e.g. exported from a model) by file picker or drag and drop, check it, run it, and
// hand it to the Walkthrough and Heads views; a "kind": "transformer" case is checked and its
// attention patterns shown here (transformer-case.js). The file is only ever parsed as JSON and shown as
// text: a weights file cannot run code or fetch anything.
//
// A load is a job of stages (reading, parsing, loading the weights, computing, checking), shown
// with the elapsed time while it runs and cancellable at any stage. Only the newest job may show
// anything: a new load cancels the running one, and a cancelled job's late results are dropped.
import { HeadscopeError } from '../lib/index.js';
import { endPageWorker, pageWorker, pageWorkerStarted } from '../views/common/page-worker.js';
import {
  checkTransformerCase, compareWithExpected, parseCase, transformerCaseHooks, transformerCaseResult,
} from '../lib/case.js';
import { seedWorkedExample } from '../lib/examples.js';
import { callDims } from '../lib/shapes.js';
import { stateFromCase } from '../views/walkthrough/model.js';
import { describeTransformerConfig, patternHooks, renderTransformerCase } from './transformer-case.js';

// Files above this are refused before reading (a case of E = 768 with L = 512 is ~30 MB of JSON).
// Parsing runs on the page's thread at 20-40 ms per MB, so this also bounds that pause.
export const MAX_FILE_BYTES = 64 * 1024 * 1024;
// Cases whose attention costs more than this many multiply-adds run in the Web Worker.
const WORKER_THRESHOLD = 2e6;
// How often the elapsed time is redrawn while a job runs.
const TICK_MS = 100;

const STAGES = [
  { id: 'read', label: 'Reading the file' },
  { id: 'parse', label: 'Parsing' },
  { id: 'weights', label: 'Loading the weights' },
  { id: 'compute', label: 'Computing' },
  { id: 'check', label: 'Checking' },
];

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * Multiply-adds of one forward pass of a parsed case: the four projections (queries and output
 * E x E, keys kdim x E, values vdim x E) plus attention (scores and weights x values over the S'
 * keys, bias_k and the zero key included), per batch element. 0 for a case whose shapes fail at
 * once (a query of the wrong rank, or a key of another rank than the query).
 */
export function caseCost(c) {
  const { N, L, S, Sp, E, kdim, vdim } = callDims(c.config, c.query.shape, c.key.shape);
  if (L === null || S === null) return 0;
  return N * (2 * L * E * E + S * (kdim + vdim) * E + 2 * L * Sp * E);
}

/** "812 bytes", "1.4 MB", "64 MB": sizes the way people read them (MB = 2^20 bytes, as the limit). */
export function formatBytes(n) {
  if (n < 1024) return `${n} bytes`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  const mb = n / 1024 / 1024;
  return `${mb < 10 ? mb.toFixed(1) : Math.round(mb)} MB`;
}

function formatSeconds(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

// TextDecoder with fatal: true says only that the bytes are not UTF-8; where is what makes the
// error something to act on. The longest prefix that decodes as a stream (where a character cut at
// the end is not yet an error) ends just before the byte that cannot continue; the character it
// breaks starts at most 3 bytes earlier, where the longest prefix that decodes completely ends.
function invalidUtf8Span(bytes) {
  const decodes = (n, stream) => {
    try {
      new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, n), { stream });
      return true;
    } catch {
      return false;
    }
  };
  let ok = 0;
  let bad = bytes.length + 1;  // past the end: the file may only end inside a character
  if (!decodes(bytes.length, true)) {
    bad = bytes.length;
    while (bad - ok > 1) {
      const mid = ok + Math.floor((bad - ok) / 2);
      if (decodes(mid, true)) ok = mid;
      else bad = mid;
    }
  }
  const end = Math.min(bad, bytes.length);  // the bytes [start, end) are the broken character
  let start = bad - 1;
  while (start > 0 && !decodes(start, false)) start--;
  const hex = Array.from(bytes.subarray(start, end), (b) => b.toString(16).padStart(2, '0')).join(' ');
  return bad > bytes.length ? `it ends inside a character: bytes ${hex} at offset ${start}`
    : `bytes ${hex} at offset ${start}`;
}

/**
 * The file's bytes as text, exactly: invalid UTF-8 is an error instead of U+FFFD replacement
 * characters, and a leading byte order mark is kept for parseCase to rule on.
 */
export function decodeCaseBytes(bytes) {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new HeadscopeError('PARSE_ERROR', `$: the file is not valid UTF-8 text (${invalidUtf8Span(bytes)}); ` +
      'case files are JSON, which is UTF-8');
  }
}

// Thrown inside a job that was cancelled or replaced; never shown.
const CANCELLED = Symbol('cancelled');

// Lets the browser paint (the new stage, the elapsed time) before the next synchronous step.
// requestAnimationFrame does not fire in a hidden tab, so a timeout stands in for it there.
function nextPaint() {
  return new Promise((resolve) => {
    requestAnimationFrame(() => setTimeout(resolve, 0));
    setTimeout(resolve, 100);
  });
}

export function mountLoader(root, { hs, onStatus = () => {}, onCase = () => {} }) {
  // The Web Worker for large cases, started on first use. A cancelled job terminates it (the only
  // way to stop a forward pass in progress); the next large case starts a fresh one.
  let job = null;  // the running job, or null
  let ticker = 0;

  const intro = el('p', 'hs-intro');
  intro.append(
    'Load a case file: a JSON document with a PyTorch ',
    el('code', '', 'nn.MultiheadAttention'),
    ' config, its ',
    el('code', '', 'state_dict'),
    ' and the forward inputs (optionally the expected output, which is then checked). ',
    'It is shown in both views. A ',
    el('code', '', '"kind": "transformer"'),
    ' case (a small transformer, its tokens and expected logits, loss and hooks) is checked and its ',
    'attention patterns shown here. Nothing leaves this page. ' +
    `Files up to ${formatBytes(MAX_FILE_BYTES)}.`);

  const drop = el('label', 'hs-drop');
  const input = el('input');
  input.type = 'file';
  input.accept = '.json,application/json';
  input.name = 'case-file';
  drop.append(el('span', 'hs-drop-text', 'Choose a case file, or drop it here'), input);

  const exampleButton = el('button', '', 'Use the seed example');
  exampleButton.type = 'button';
  const download = el('a', '', 'Download the seed example as a case file');
  download.download = 'seed-worked-example.json';
  download.href = URL.createObjectURL(new Blob([JSON.stringify(seedWorkedExample, null, 1)],
    { type: 'application/json' }));

  // The job's progress: its stages, the one running, the elapsed time and Cancel. Nothing here is
  // a live region: the page's status line (onStatus) announces each stage once, and the elapsed
  // time, redrawn ten times a second, would drown everything else out.
  const progress = el('section', 'hs-job');
  progress.setAttribute('aria-label', 'Loading progress');
  progress.hidden = true;
  const jobTitle = el('p', 'hs-job-title');
  const stageList = el('ol', 'hs-job-stages');
  const stageItems = new Map(STAGES.map((s) => {
    const li = el('li', 'hs-job-stage', s.label);
    li.dataset.stage = s.id;
    stageList.append(li);
    return [s.id, li];
  }));
  const jobLine = el('p', 'hs-job-line');
  const jobState = el('span', 'hs-job-state');
  const elapsed = el('span', 'hs-job-elapsed');
  jobLine.append(jobState, ' ', elapsed);
  const cancelButton = el('button', 'hs-job-cancel', 'Cancel');
  cancelButton.type = 'button';
  cancelButton.setAttribute('aria-label', 'Cancel loading the case file');
  const jobBar = el('div', 'hs-job-bar');
  jobBar.append(jobLine, cancelButton);
  progress.append(jobTitle, stageList, jobBar);

  const error = el('p', 'hs-error hs-load-error');
  error.setAttribute('role', 'alert');
  const summary = el('div', 'hs-load-summary');
  summary.setAttribute('aria-live', 'polite');
  const actions = el('div', 'hs-controls');
  // A transformer case's check and pattern grid (transformer-case.js).
  const transformerView = el('div', 'hs-tcase');
  const controls = el('div', 'hs-controls');
  controls.append(exampleButton, download);
  root.replaceChildren(intro, drop, controls, progress, error, summary, actions, transformerView);

  function showElapsed() {
    if (job) elapsed.textContent = formatSeconds(performance.now() - job.started);
  }

  // Enters a stage of the running job: shows it, lets the browser paint it (the step after it may
  // hold the thread), then starts the stage's clock. Throws CANCELLED if the job is no longer current.
  async function enter(current, id, detail = '') {
    if (current !== job) throw CANCELLED;
    const fresh = current.stage !== id;  // or the same stage with news (the worker started)
    if (fresh) endStage(current);
    current.stage = id;
    const index = STAGES.findIndex((s) => s.id === id);
    STAGES.forEach((s, i) => {
      const li = stageItems.get(s.id);
      li.classList.toggle('hs-job-done', i < index);
      li.classList.toggle('hs-job-current', i === index);
      if (i === index) li.setAttribute('aria-current', 'step');
      else li.removeAttribute('aria-current');
    });
    const text = `${STAGES[index].label}${detail}… (step ${index + 1} of ${STAGES.length})`;
    jobState.textContent = text;
    onStatus(`${current.fileName}: ${text}`);
    showElapsed();
    await nextPaint();
    if (current !== job) throw CANCELLED;
    if (fresh) current.stageStarted = performance.now();
  }

  function endStage(current) {
    if (current.stage) current.times.push([current.stage, performance.now() - current.stageStarted]);
  }

  // Starts a job, cancelling the running one: two loads never race to show their results.
  function startJob(fileName, size) {
    if (job) cancel({ replaced: true });
    job = { fileName, started: performance.now(), stage: null, stageStarted: 0, times: [], usesWorker: false };
    error.textContent = '';
    summary.replaceChildren();
    actions.replaceChildren();
    transformerView.replaceChildren();
    jobTitle.textContent = `Loading ${fileName}${size === undefined ? '' : ` (${formatBytes(size)})`}`;
    progress.classList.remove('hs-job-cancelled');
    cancelButton.hidden = false;
    progress.hidden = false;
    clearInterval(ticker);
    ticker = setInterval(showElapsed, TICK_MS);
    return job;
  }

  function finishJob(current) {
    if (current !== job) return;
    job = null;
    clearInterval(ticker);
    progress.hidden = true;
  }

  /** Stops the running job at once; its results, if they still arrive, are never shown. */
  function cancel({ replaced = false } = {}) {
    const current = job;
    if (!current) return;
    job = null;
    clearInterval(ticker);
    // A forward pass in the worker cannot be interrupted, only ended with its worker.
    if (current.usesWorker) endPageWorker();
    if (replaced) return;
    const after = formatSeconds(performance.now() - current.started);
    const stage = STAGES.find((s) => s.id === current.stage)?.label.toLowerCase() ?? 'starting';
    const hadFocus = progress.contains(document.activeElement);
    progress.classList.add('hs-job-cancelled');
    cancelButton.hidden = true;
    jobState.textContent = `Cancelled after ${after}, while ${stage}.`;
    elapsed.textContent = '';
    onStatus(`Loading ${current.fileName} cancelled.`);
    // The Cancel button just disappeared: give the focus to where the next load starts.
    if (hadFocus) input.focus();
  }

  // Runs the parsed case in stages. Small cases run here (they take microseconds, less than a
  // worker round trip); large ones in the Web Worker, so the page stays responsive and Cancel works.
  async function run(current, c) {
    const onMain = caseCost(c) < WORKER_THRESHOLD;
    let engine = hs;
    if (!onMain) {
      current.usesWorker = true;
      if (!pageWorkerStarted()) await enter(current, 'weights', ' (starting the worker)');
      engine = await pageWorker();
    }
    await enter(current, 'weights');
    const mha = await engine.createMultiheadAttention(c.config);
    try {
      await mha.loadStateDict(c.stateDict);
      await enter(current, 'compute');
      const started = performance.now();
      const result = await mha.forward(c.query, c.key, c.value, c.options);
      return { result, ms: performance.now() - started };
    } finally {
      // After a cancel the worker, and this object with it, is gone already.
      if (!current.usesWorker || current === job) await mha.dispose();
    }
  }

  // A transformer case: runCase's steps in stages, asking for every layer's pattern besides the
  // hooks the case expects. The model starts without weights (the case's replace them all), its
  // keys, shapes and cost are checked before any weight is copied (checkTransformerCase), and a
  // case above the worker threshold runs in the Web Worker, where Cancel ends it.
  async function runTransformer(current, c) {
    // Checked here first, on a model without weights (nothing allocated for them): a case the
    // engine would refuse never starts a worker.
    const empty = hs.createTransformer({ ...c.config, seed: null });
    let hooks;
    let cost;
    try {
      hooks = transformerCaseHooks(c, empty.hookNames(), patternHooks(c.config.nLayers));
      cost = checkTransformerCase(c, empty.parameterShapes(), hooks);
    } finally {
      empty.dispose();
    }
    const onMain = cost.multiplyAdds < WORKER_THRESHOLD;
    let engine = hs;
    if (!onMain) {
      current.usesWorker = true;
      if (!pageWorkerStarted()) await enter(current, 'weights', ' (starting the worker)');
      engine = await pageWorker();
    }
    await enter(current, 'weights');
    const model = await engine.createTransformer({ ...c.config, seed: null });
    try {
      await model.loadStateDict(Object.fromEntries(c.stateDict));
      await enter(current, 'compute');
      const started = performance.now();
      const out = await model.forward(c.tokens, { hooks, headGates: c.headGates });
      return { result: transformerCaseResult(c, out), ms: performance.now() - started };
    } finally {
      // After a cancel the worker, and this object with it, is gone already.
      if (!current.usesWorker || current === job) await model.dispose();
    }
  }

  async function showTransformer(current, c) {
    const { result, ms } = await runTransformer(current, c);
    await enter(current, 'check');
    const check = c.expected === null ? null : compareWithExpected(c, result);
    if (current !== job) throw CANCELLED;
    endStage(current);
    const t = c.tokens.shape;
    const lines = [
      `${c.name ?? current.fileName}: a transformer case, ${describeTransformerConfig(c.config)}`,
      `tokens [${t.join(', ')}]${c.targets ? ', with targets' : ''}${c.headGates ? ', with head gates' : ''}; ` +
        `logits [${result.logits.shape.join(', ')}]${result.loss === undefined ? '' : `, loss ${result.loss}`} — ` +
        `computed in ${ms < 1000 ? `${ms.toFixed(1)} ms` : formatSeconds(ms)}`,
      timeLine(current),
    ];
    if (check === null) lines.splice(2, 0, 'The file has no expected values to check.');
    for (const line of lines) summary.append(el('p', '', line));
    renderTransformerCase(transformerView, { c, result, check });
    actions.append(el('span', 'hs-note', 'The Walkthrough and Heads views take attention cases; this ' +
      'transformer case is shown here.'));
  }

  function timeLine(current) {
    return `Time: ${current.times.map(([id, t]) => `${STAGES.find((s) => s.id === id).label.toLowerCase()} ` +
      formatSeconds(t)).join(', ')}; ${formatSeconds(performance.now() - current.started)} in all.`;
  }

  async function load(current, text) {
    const { fileName } = current;
    try {
      await enter(current, 'parse');
      // parseCase reads the text itself, so its rules (JSON, a byte order mark) decide.
      const c = parseCase(text);
      if (c.kind === 'transformer') {
        await showTransformer(current, c);
        onStatus(`Loaded ${fileName}.`);
        return;
      }
      const { result, ms } = await run(current, c);
      await enter(current, 'check');
      const q = c.query.shape;
      const lines = [
        `${c.name ?? fileName}: embed_dim ${c.config.embedDim}, ${c.config.numHeads} heads, ` +
          `query [${q.join(', ')}], key [${c.key.shape.join(', ')}]`,
        `output [${result.output.shape.join(', ')}]` +
          (result.weights ? `, weights [${result.weights.shape.join(', ')}]` : ', no weights') +
          ` — computed in ${ms < 1000 ? `${ms.toFixed(1)} ms` : formatSeconds(ms)}`,
      ];
      if (c.expected) {
        const check = compareWithExpected(c, result);
        lines.push(check.ok
          ? `Matches the file's expected values (max relative error ${check.maxRelativeError.toExponential(2)}).`
          : `Differs from the file's expected values: ${check.detail}`);
      }
      // The walkthrough's own rule decides (stateFromCase), so this offer and what the
      // walkthrough accepts never disagree. The case is parsed once: parseCase, stateFromCase and
      // the views' loadCase take the parsed case as it is.
      const walkthrough = stateFromCase(c);
      if (current !== job) throw CANCELLED;
      endStage(current);
      lines.push(timeLine(current));

      for (const line of lines) summary.append(el('p', '', line));
      const toHeads = el('button', 'hs-primary', 'Show in the Heads view');
      toHeads.type = 'button';
      toHeads.addEventListener('click', () => onCase(c, { target: 'heads' }));
      actions.append(toHeads);
      if (walkthrough.state) {
        const toWalk = el('button', '', 'Show in the Walkthrough');
        toWalk.type = 'button';
        toWalk.addEventListener('click', () => onCase(c, { target: 'walkthrough' }));
        actions.append(toWalk);
      } else {
        actions.append(el('span', 'hs-note', walkthrough.reason));
      }
      onStatus(`Loaded ${fileName}.`);
    } catch (e) {
      // A cancelled job's failures (DISPOSED from the ended worker, say) are not news.
      if (e === CANCELLED || current !== job) return;
      // INTERNAL from the worker means it died (out of memory, say): the next case gets a new one.
      if (current.usesWorker && e?.code === 'INTERNAL') endPageWorker();
      const message = e instanceof HeadscopeError ? `${e.code}: ${e.message}` : String(e?.message ?? e);
      error.textContent = `Could not load ${fileName}: ${message}`;
      onStatus(`Could not load ${fileName}.`);
    } finally {
      finishJob(current);
    }
  }

  async function loadFile(file) {
    if (file.size > MAX_FILE_BYTES) {
      if (job) cancel({ replaced: true });
      progress.hidden = true;
      summary.replaceChildren();
      actions.replaceChildren();
      transformerView.replaceChildren();
      error.textContent = `Could not load ${file.name}: it is ${file.size} bytes, more than the ` +
        `${formatBytes(MAX_FILE_BYTES)} (${MAX_FILE_BYTES} bytes) this page reads`;
      onStatus(`Could not load ${file.name}.`);
      return;
    }
    const current = startJob(file.name, file.size);
    let text;
    try {
      await enter(current, 'read', ` (${formatBytes(file.size)})`);
      const bytes = new Uint8Array(await file.arrayBuffer());
      if (current !== job) return;
      text = decodeCaseBytes(bytes);
    } catch (e) {
      if (current !== job) return;
      const message = e instanceof HeadscopeError ? `${e.code}: ${e.message}` : String(e?.message ?? e);
      error.textContent = `Could not load ${file.name}: ${message}`;
      onStatus(`Could not load ${file.name}.`);
      finishJob(current);
      return;
    }
    await load(current, text);
  }

  input.addEventListener('change', () => {
    const file = input.files?.[0];
    if (!file) return;
    input.value = '';  // so choosing the same file again (after fixing it) loads it again
    loadFile(file);
  });
  drop.addEventListener('dragover', (e) => {
    e.preventDefault();
    drop.classList.add('hs-drop-active');
  });
  drop.addEventListener('dragleave', () => drop.classList.remove('hs-drop-active'));
  drop.addEventListener('drop', (e) => {
    e.preventDefault();
    drop.classList.remove('hs-drop-active');
    const file = e.dataTransfer?.files?.[0];
    if (file) loadFile(file);
  });
  exampleButton.addEventListener('click', () => {
    const current = startJob('seed-worked-example.json');
    load(current, JSON.stringify(seedWorkedExample));
  });
  cancelButton.addEventListener('click', () => cancel());
  // Escape anywhere in the view cancels too, the way it dismisses other pending things.
  root.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && job) {
      e.preventDefault();
      cancel();
    }
  });

  return {
    destroy() {
      if (job) cancel({ replaced: true });
      URL.revokeObjectURL(download.href);
      endPageWorker();
    },
  };
}
