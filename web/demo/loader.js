// "Your weights": load a case file (the JSON case format: a PyTorch state_dict and the forward
// arguments, e.g. exported from a model) by file picker or drag and drop, check it, run it, and
// hand it to the Walkthrough and Heads views. The file is only ever parsed as JSON and shown as
// text: a weights file cannot run code or fetch anything.
import { HeadscopeError, initWorker } from '../lib/index.js';
import { parseCase } from '../lib/case.js';
import { seedWorkedExample } from '../lib/examples.js';
import { stateFromCase } from './walkthrough-model.js';

// Files above this are refused before reading (a case of E = 768 with L = 512 is ~30 MB of JSON).
export const MAX_FILE_BYTES = 64 * 1024 * 1024;
// Cases whose attention costs more than this many multiply-adds run in the Web Worker.
const WORKER_THRESHOLD = 2e6;

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** Multiply-adds of one forward pass of a parsed case: four projections plus attention. */
export function caseCost(c) {
  const e = c.config.embedDim;
  const q = c.query.shape;
  const k = c.key.shape;
  const batched = q.length === 3;
  const bf = c.config.batchFirst;
  const n = batched ? (bf ? q[0] : q[1]) : 1;
  const L = batched && bf ? q[1] : q[0];
  const S = batched && bf ? k[1] : k[0];
  return n * ((2 * L + 2 * S) * e * e + 2 * L * S * e);
}

export function mountLoader(root, { hs, onStatus = () => {}, onCase = () => {} }) {
  let worker = null;
  const intro = el('p', 'hs-intro');
  intro.append(
    'Load a case file: a JSON document with a PyTorch ',
    el('code', '', 'nn.MultiheadAttention'),
    ' config, its ',
    el('code', '', 'state_dict'),
    ' and the forward inputs (optionally the expected output, which is then checked). ',
    'It is shown in both views; nothing leaves this page.');

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

  const error = el('p', 'hs-error hs-load-error');
  error.setAttribute('role', 'alert');
  const summary = el('div', 'hs-load-summary');
  summary.setAttribute('aria-live', 'polite');
  const actions = el('div', 'hs-controls');
  const controls = el('div', 'hs-controls');
  controls.append(exampleButton, download);
  root.replaceChildren(intro, drop, controls, error, summary, actions);

  // Small cases run here; large ones in the Web Worker, so the page stays responsive.
  async function run(doc, c) {
    if (caseCost(c) < WORKER_THRESHOLD) return hs.runCase(doc);
    worker ??= await initWorker();
    return worker.runCase(doc);
  }

  async function load(text, fileName) {
    error.textContent = '';
    summary.replaceChildren();
    actions.replaceChildren();
    root.classList.add('hs-busy');
    onStatus(`Reading ${fileName}…`);
    try {
      let doc;
      try {
        doc = JSON.parse(text);
      } catch (e) {
        throw new HeadscopeError('PARSE_ERROR', `$: not valid JSON (${e.message})`);
      }
      const c = parseCase(doc);
      const started = performance.now();
      const result = await run(doc, c);
      const ms = performance.now() - started;
      const q = c.query.shape;
      const lines = [
        `${c.name ?? fileName}: embed_dim ${c.config.embedDim}, ${c.config.numHeads} heads, ` +
          `query [${q.join(', ')}], key [${c.key.shape.join(', ')}]`,
        `output [${result.output.shape.join(', ')}]` +
          (result.weights ? `, weights [${result.weights.shape.join(', ')}]` : ', no weights') +
          ` — computed in ${ms.toFixed(1)} ms`,
      ];
      if (c.expected) {
        const check = hs.checkCase(doc, result);
        lines.push(check.ok
          ? `Matches the file's expected values (max relative error ${check.maxRelativeError.toExponential(2)}).`
          : `Differs from the file's expected values: ${check.detail}`);
      }
      for (const line of lines) summary.append(el('p', '', line));
      const toHeads = el('button', 'hs-primary', 'Show in the Heads view');
      toHeads.type = 'button';
      toHeads.addEventListener('click', () => onCase(doc, { target: 'heads' }));
      actions.append(toHeads);
      // The walkthrough's own rule decides (stateFromCase), so this offer and what the
      // walkthrough accepts never disagree.
      const walkthrough = stateFromCase(doc);
      if (walkthrough.state) {
        const toWalk = el('button', '', 'Show in the Walkthrough');
        toWalk.type = 'button';
        toWalk.addEventListener('click', () => onCase(doc, { target: 'walkthrough' }));
        actions.append(toWalk);
      } else {
        actions.append(el('span', 'hs-note', walkthrough.reason));
      }
      onStatus(`Loaded ${fileName}.`);
    } catch (e) {
      const message = e instanceof HeadscopeError ? `${e.code}: ${e.message}` : String(e?.message ?? e);
      error.textContent = `Could not load ${fileName}: ${message}`;
      onStatus(`Could not load ${fileName}.`);
    } finally {
      root.classList.remove('hs-busy');
    }
  }

  async function loadFile(file) {
    if (file.size > MAX_FILE_BYTES) {
      error.textContent = `Could not load ${file.name}: ${file.size} bytes is more than the ` +
        `${MAX_FILE_BYTES / 1024 / 1024} MB this page reads`;
      return;
    }
    await load(await file.text(), file.name);
  }

  input.addEventListener('change', async () => {
    const file = input.files?.[0];
    if (!file) return;
    await loadFile(file);
    input.value = '';  // so choosing the same file again (after fixing it) loads it again
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
  exampleButton.addEventListener('click', () =>
    load(JSON.stringify(seedWorkedExample), 'seed-worked-example.json'));

  return {
    destroy() {
      URL.revokeObjectURL(download.href);
      worker?.terminate();
    },
  };
}
