// Writing the Walkthrough's numbers into its matrices. The matrices the browser is not rendering
// (off screen, content-visibility: auto) get their numbers in a task of their own right after the
// frame, or as soon as they are rendered again, whichever comes first: the matrices in view are
// painted without waiting for the thousands of cells out of view.
import { renderLegend } from '../common/legend.js';
import { shapeOf, sharedScale, shownNames, specOf } from './specs.js';

/**
 * @param {object} w  the view's shared fields (view.js): state, trace, destroyed
 * @param {{ view: Element, signedLegend: Element, matrix: (name: string) => object,
 *   explainer: { follow(): void } }} o
 * @returns {{ refresh(): void, shown(name: string): void }} shown: the browser renders a matrix
 *   it skipped (its onShown)
 */
export function createRefresh(w, { view, signedLegend, matrix, explainer }) {
  let legendMax = null;
  let lastScale = null;
  const pending = new Set();
  let flushing = null;
  const specNow = (name) => specOf(name, lastScale, w.state, w.trace);

  // In tasks of ~10 ms, so that a first build of many heads does not hold the page for long.
  function scheduleFlush() {
    if (flushing) return;
    flushing = new MessageChannel();
    flushing.port1.onmessage = () => {
      if (w.destroyed) return;
      const start = performance.now();
      const shown = new Set(shownNames(w.state));
      for (const name of pending) {
        pending.delete(name);
        if (shown.has(name)) matrix(name).update(specNow(name));
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
    const scale = sharedScale(w.state, w.trace);
    lastScale = scale;
    if (scale.max !== legendMax) {
      renderLegend(signedLegend, scale);
      legendMax = scale.max;
    }
    for (const name of shownNames(w.state)) {
      const m = matrix(name);
      if (m.skipped) {
        if (!pending.has(name)) m.hintShape(...shapeOf(name, w.state));
        pending.add(name);
      } else {
        pending.delete(name);
        m.update(specOf(name, scale, w.state, w.trace));
      }
    }
    if (pending.size) scheduleFlush();
    markPending();
    explainer.follow();
  }

  function shown(name) {
    if (!pending.delete(name) || !lastScale) return;
    matrix(name).update(specNow(name));
    markPending();
  }

  return { refresh, shown };
}
