// The loader's jobs: a load is a job of stages (reading, parsing, loading the weights, computing,
// checking), shown with the elapsed time while it runs and cancellable at any stage. Only the
// newest job may show anything: a new load cancels the running one, and a cancelled job's late
// results are dropped (its steps throw CANCELLED).
import { el } from '../views/common/dom.js';
import { endPageWorker } from '../views/common/page-worker.js';
import { formatBytes, formatSeconds } from './loader-bytes.js';

// How often the elapsed time is redrawn while a job runs.
const TICK_MS = 100;

export const STAGES = [
  { id: 'read', label: 'Reading the file' },
  { id: 'parse', label: 'Parsing' },
  { id: 'weights', label: 'Loading the weights' },
  { id: 'compute', label: 'Computing' },
  { id: 'check', label: 'Checking' },
];

/** Thrown inside a job that was cancelled or replaced; never shown. */
export const CANCELLED = Symbol('cancelled');

// Lets the browser paint (the new stage, the elapsed time) before the next synchronous step.
// requestAnimationFrame does not fire in a hidden tab, so a timeout stands in for it there.
function nextPaint() {
  return new Promise((resolve) => {
    requestAnimationFrame(() => setTimeout(resolve, 0));
    setTimeout(resolve, 100);
  });
}

/**
 * @param {{ onStatus: (text: string) => void, afterCancel: () => void }} o  afterCancel: Cancel
 *   had the focus and is gone (the focus goes where the next load starts)
 */
export function createJobs({ onStatus, afterCancel }) {
  let job = null;  // the running job, or null
  let ticker = 0;

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
  function start(fileName, size) {
    if (job) cancel({ replaced: true });
    job = { fileName, started: performance.now(), stage: null, stageStarted: 0, times: [], usesWorker: false };
    jobTitle.textContent = `Loading ${fileName}${size === undefined ? '' : ` (${formatBytes(size)})`}`;
    progress.classList.remove('hs-job-cancelled');
    cancelButton.hidden = false;
    progress.hidden = false;
    clearInterval(ticker);
    ticker = setInterval(showElapsed, TICK_MS);
    return job;
  }

  function finish(current) {
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
    if (hadFocus) afterCancel();
  }

  /** The stages' times of a finished job, in words. */
  function timeLine(current) {
    return `Time: ${current.times.map(([id, t]) => `${STAGES.find((s) => s.id === id).label.toLowerCase()} ` +
      formatSeconds(t)).join(', ')}; ${formatSeconds(performance.now() - current.started)} in all.`;
  }

  cancelButton.addEventListener('click', () => cancel());
  return { element: progress, start, enter, endStage, finish, cancel, timeLine, hide: () => { progress.hidden = true; },
    current: () => job };
}
