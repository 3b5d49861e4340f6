// A view's update loop: at most one compute and one render per animation frame. schedule(true)
// asks for a compute (which renders after), schedule(false) for a render only; settled() resolves
// once everything asked so far is computed and drawn.

/**
 * @param {{ compute: () => Promise<void>, render: () => void, done?: (ms: number) => void,
 *   fail: (e: unknown) => void }} o  compute: recomputes and renders; render: draws the current
 *   data; done: the frame's whole cost, once the canvas draws it queued are done; fail: a
 *   compute's or render's error (shown in the view, never thrown from here)
 */
export function createFrameLoop({ compute, render, done = () => {}, fail }) {
  let frame = 0;
  let needCompute = true;
  let stopped = false;
  const running = new Set();  // the computes and renders under way (settled() waits for them)

  /** Resolves with `promise`'s value, and counts it as running until it settles. */
  function track(promise) {
    const finished = promise.then(() => {}, () => {});
    running.add(finished);
    finished.then(() => running.delete(finished));
    return promise;
  }

  function schedule(recompute) {
    if (stopped) return;
    needCompute ||= recompute;
    if (frame) return;
    frame = requestAnimationFrame(runFrame);
  }

  function runFrame() {
    frame = 0;
    const started = performance.now();
    const recompute = needCompute;
    needCompute = false;
    track((recompute ? compute() : Promise.resolve(render()))
      // After the canvas draws (queued microtasks): the frame's whole cost, for anyone measuring.
      .then(() => queueMicrotask(() => done(performance.now() - started)))
      .catch(fail));
  }

  /** Drops the frame asked for (a caller computes at once instead). */
  function cancel() {
    if (frame) {
      cancelAnimationFrame(frame);
      frame = 0;
    }
    needCompute = false;
  }

  // Resolves when everything asked of the view so far is computed and drawn: a frame still waiting
  // for the browser runs now (a hidden page gets no animation frames), then the running computes
  // end (a failure is shown in the view, not thrown here).
  async function settled() {
    for (;;) {
      if (stopped) return;
      if (frame) {
        cancelAnimationFrame(frame);
        runFrame();
      }
      if (running.size === 0) return;
      await Promise.all(running);
    }
  }

  function stop() {
    stopped = true;
    if (frame) cancelAnimationFrame(frame);
  }

  return { schedule, track, cancel, settled, stop };
}
