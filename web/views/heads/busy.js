// The Heads view's busy line for a large case: what runs, the seconds it has taken, and Cancel
// (which ends the page's worker: a call inside it cannot be interrupted) back to the sentence.
import { el } from '../common/dom.js';

/** @param {Element} view the view's box (aria-busy) @param {Element} line the busy line */
export function createBusyLine(view, line) {
  let timer = 0;
  function set(on, text = '', { cancel = null } = {}) {
    view.setAttribute('aria-busy', String(on));
    view.classList.toggle('hs-heads-computing', on);
    line.classList.toggle('hs-busy', on);
    clearInterval(timer);
    timer = 0;
    if (!on) {
      line.replaceChildren();
      return;
    }
    const started = performance.now();
    const label = el('span', '', text);
    const elapsed = el('span', 'hs-heads-busy-time', ' 0 s');
    line.replaceChildren(label, elapsed);
    timer = setInterval(() => {
      elapsed.textContent = ` ${Math.round((performance.now() - started) / 1000)} s`;
    }, 1000);
    if (cancel) {
      const b = el('button', 'hs-heads-cancel', 'Cancel');
      b.type = 'button';
      b.addEventListener('click', cancel);
      line.append(' ', b);
    }
  }
  return { set, stop: () => clearInterval(timer) };
}
