// One Web Worker for the whole page. The loader's long jobs and the Heads view's large cases
// share it: every worker holds its own copy of the WebAssembly module and heap, so a second one
// would double both for no gain. The loader ends it to cancel a job (a forward pass in a worker
// cannot be interrupted); whoever asks next gets a new one, and users of the old one see their
// calls rejected with DISPOSED and ask again.
import { initWorker } from '../../lib/index.js';

let current = null;  // Promise<RemoteHeadscope> | null

/** The page's worker, started on first use (a failed start is not kept). */
export function pageWorker() {
  current ??= initWorker().catch((e) => {
    current = null;
    throw e;
  });
  return current;
}

/** True while a worker is started or starting. */
export function pageWorkerStarted() {
  return current !== null;
}

/** Ends the page's worker; the next pageWorker() starts a new one. */
export function endPageWorker() {
  const w = current;
  current = null;
  w?.then((remote) => remote.terminate(), () => {});
}
