// "Your weights": load a case file (the JSON case format: a PyTorch state_dict and the forward
// arguments, e.g. exported from a model) by file picker or drag and drop, check it, run it, and
// hand it to the Walkthrough and Heads views; a "kind": "transformer" case is checked and its
// attention patterns shown here (transformer-case.js). The file is only ever parsed as JSON and
// shown as text: a weights file cannot run code or fetch anything.
//
// A component like the views (views/common/component.js): loader.create(root, { engine, onStatus,
// onCase }) -> { update, getState, destroy, loadFile, cancel }. Its parts: loader-jobs.js (a
// load's stages, elapsed time and Cancel; only the newest job may show anything), loader-run.js
// (the engine calls, in the page or its Web Worker), loader-results.js (what a loaded case
// shows), loader-bytes.js (sizes, times, the file's bytes as text).
import { HeadscopeError } from '../lib/errors.js';
import { compareWithExpected, parseCase } from '../lib/case.js';
import { seedWorkedExample } from '../lib/examples.js';
import { defineView } from '../views/common/component.js';
import { el } from '../views/common/dom.js';
import { endPageWorker } from '../views/common/page-worker.js';
import { stateFromCase } from '../views/walkthrough/model.js';
import { decodeCaseBytes, formatBytes } from './loader-bytes.js';
import { CANCELLED, createJobs } from './loader-jobs.js';
import { runAttention, runTransformer } from './loader-run.js';
import { createResults } from './loader-results.js';

export { decodeCaseBytes, formatBytes } from './loader-bytes.js';
export { caseCost } from './loader-run.js';

// Files above this are refused before reading (a case of E = 768 with L = 512 is ~30 MB of JSON).
// Parsing runs on the page's thread at 20-40 ms per MB, so this also bounds that pause.
export const MAX_FILE_BYTES = 64 * 1024 * 1024;

const describeError = (e) => (e instanceof HeadscopeError ? `${e.code}: ${e.message}` : String(e?.message ?? e));

/**
 * The loader. Options: engine (init()'s API: small cases run on it; large ones start the page's
 * Web Worker), onStatus(text), onCase(caseDocument, { target: 'heads' | 'walkthrough' }) (a
 * "Show in" button). Its state is read-only: { loading, stage, loaded } (the file a job loads and
 * its stage, or null; the last file loaded). Extras: loadFile(file), cancel().
 */
export const loader = defineView('loader', createLoader);

function createLoader(root, { engine: hs, onStatus = () => {}, onCase = () => {} }) {
  let loaded = null;
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

  const jobs = createJobs({ onStatus, afterCancel: () => input.focus() });
  const results = createResults();
  const controls = el('div', 'hs-controls');
  controls.append(exampleButton, download);
  root.replaceChildren(intro, drop, controls, jobs.element, ...results.elements);

  // A new job: the previous one's results go.
  function start(fileName, size) {
    const current = jobs.start(fileName, size);
    results.clear();
    return current;
  }

  async function load(current, text) {
    const { fileName } = current;
    try {
      await jobs.enter(current, 'parse');
      // parseCase reads the text itself, so its rules (JSON, a byte order mark) decide.
      const c = parseCase(text);
      const transformer = c.kind === 'transformer';
      const { result, ms } = await (transformer ? runTransformer : runAttention)(hs, jobs, current, c);
      await jobs.enter(current, 'check');
      const check = (transformer ? c.expected === null : !c.expected) ? null : compareWithExpected(c, result);
      // The walkthrough's own rule decides (stateFromCase), so its offer and what the walkthrough
      // accepts never disagree. The case is parsed once: parseCase, stateFromCase and the views'
      // setCase take the parsed case as it is.
      const walkthrough = transformer ? null : stateFromCase(c);
      if (current !== jobs.current()) throw CANCELLED;
      jobs.endStage(current);
      const shown = { fileName, result, ms, check, timeLine: jobs.timeLine(current) };
      if (transformer) results.transformer(c, shown);
      else results.attention(c, { ...shown, walkthrough, onCase });
      loaded = fileName;
      onStatus(`Loaded ${fileName}.`);
    } catch (e) {
      // A cancelled job's failures (DISPOSED from the ended worker, say) are not news.
      if (e === CANCELLED || current !== jobs.current()) return;
      // INTERNAL from the worker means it died (out of memory, say): the next case gets a new one.
      if (current.usesWorker && e?.code === 'INTERNAL') endPageWorker();
      results.error(`Could not load ${fileName}: ${describeError(e)}`);
      onStatus(`Could not load ${fileName}.`);
    } finally {
      jobs.finish(current);
    }
  }

  /** Loads a File (or a Blob with a name): refused unread above MAX_FILE_BYTES. */
  async function loadFile(file) {
    if (file.size > MAX_FILE_BYTES) {
      jobs.cancel({ replaced: true });
      jobs.hide();
      results.clear(`Could not load ${file.name}: it is ${file.size} bytes, more than the ` +
        `${formatBytes(MAX_FILE_BYTES)} (${MAX_FILE_BYTES} bytes) this page reads`);
      onStatus(`Could not load ${file.name}.`);
      return;
    }
    const current = start(file.name, file.size);
    let text;
    try {
      await jobs.enter(current, 'read', ` (${formatBytes(file.size)})`);
      const bytes = new Uint8Array(await file.arrayBuffer());
      if (current !== jobs.current()) return;
      text = decodeCaseBytes(bytes);
    } catch (e) {
      if (current !== jobs.current()) return;
      results.error(`Could not load ${file.name}: ${describeError(e)}`);
      onStatus(`Could not load ${file.name}.`);
      jobs.finish(current);
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
    load(start('seed-worked-example.json'), JSON.stringify(seedWorkedExample));
  });
  // Escape anywhere in the view cancels too, the way it dismisses other pending things.
  root.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && jobs.current()) {
      e.preventDefault();
      jobs.cancel();
    }
  });

  return {
    /** The loader's state is what it was given to load: update() takes no field. */
    update(patch) {
      const field = patch === null || typeof patch !== 'object' ? null : Object.keys(patch)[0];
      if (patch === null || typeof patch !== 'object' || field !== undefined) {
        throw new HeadscopeError('INVALID_ARGUMENT', `setState: state${field ? `.${field}` : ''}: the loader's state ` +
          'is read-only (it changes by loading a file)');
      }
    },
    getState: () => ({ loading: jobs.current()?.fileName ?? null, stage: jobs.current()?.stage ?? null, loaded }),
    loadFile,
    cancel: () => jobs.cancel(),
    destroy() {
      jobs.cancel({ replaced: true });
      URL.revokeObjectURL(download.href);
      endPageWorker();
      root.replaceChildren();
    },
  };
}
