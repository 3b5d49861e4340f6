// A stand-in for a browser module worker's global scope, in a node:worker_threads Worker: worker.js
// served through `self.postMessage` / `self.onmessage`. Every reply is checked on its way out: a
// successful one whose typed arrays (at any depth: a result's tensors, headStats, hooks, a
// stateDict) are not all in its transfer list becomes an error NOT_TRANSFERRED the test sees.
import { Worker } from 'node:worker_threads';

const WORKER_URL = new URL('../../web/lib/worker.js', import.meta.url);

/** A Worker running worker.js through a browser-style `self`, checking transfers. */
export function transferCheckingWorker() {
  return new Worker(`
    const { parentPort, workerData } = require('node:worker_threads');
    const views = (v, out = []) => {
      if (ArrayBuffer.isView(v)) out.push(v);
      else if (v !== null && typeof v === 'object') for (const x of Object.values(v)) views(x, out);
      return out;
    };
    globalThis.self = {
      postMessage: (m, t) => {
        const missing = m && m.ok ? views(m.result).filter((x) => !t.includes(x.buffer)).length : 0;
        parentPort.postMessage(missing === 0 ? m
          : { id: m.id, ok: false, error: { code: 'NOT_TRANSFERRED', message: missing + ' not transferred' } }, t);
      },
      onmessage: null,
    };
    const queue = [];
    parentPort.on('message', (data) => (self.onmessage ? self.onmessage({ data }) : queue.push(data)));
    import(workerData).then(() => { for (const data of queue) self.onmessage({ data }); });`,
  { eval: true, workerData: WORKER_URL.href });
}
