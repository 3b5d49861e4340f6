// The Train view's elements, built once: the intro, the controls (controls.js), the message line,
// the curves (curves.js), the history (history-chart.js), the probe row's grid of heads with the
// line that says when it shows a recorded step, the variants panel's box (variants.js), the
// detectors and ablation sections, the causal experiments' section (inside.js), and the box the
// what-if runner (whatif.js) renders into.
import { button, el, statusEl } from '../common/dom.js';
import { createCurves } from './curves.js';

let views = 0;

/**
 * @param {Element} root  its content is replaced
 * @param {{ compact: boolean, hidden: Set<string>, controls: object, history: object }} o  controls:
 *   controls.js's; history: history-chart.js's
 */
export function buildSkeleton(root, { compact, hidden, controls, history }) {
  const view = el('div', `hs-train${compact ? ' hs-compact' : ''}`);
  const intro = el('p', 'hs-prose hs-train-intro', 'Train a small transformer on a task, in this page. ' +
    'Watch the loss fall, every head\'s attention on one example, and the detectors that say what ' +
    'each head has learned to do (an induction head forms as the loss drops). Then switch heads off ' +
    'and see what each one was worth.');
  const message = statusEl('p', 'hs-train-message');
  message.id = `hs-train-message-${++views}`;   // a refused field's aria-describedby
  const curves = createCurves();
  const probeText = el('p', 'hs-note hs-train-probe');
  const gridTitle = el('h2', 'hs-prose hs-train-h2', 'Every head on the probe row');
  const grid = el('div', 'hs-train-grid');
  // Above the grid, so a reader looking at the patterns sees they are not the model's now.
  const shownLine = statusEl('p', 'hs-train-shown');
  const shownText = el('span');
  const backToNow = button('Back to now', 'hs-train-now');
  backToNow.name = 'back-to-now';
  shownLine.append(shownText, ' ', backToNow);
  shownLine.hidden = true;
  history.element.hidden = hidden.has('history');
  const detectorsTitle = el('h2', 'hs-prose hs-train-h2', 'What each head does (head detectors, on the held-out rows)');
  const detectors = el('table', 'hs-train-detectors');
  // Wider than a phone: the table scrolls in its own box, its head names held at the left edge
  // (sticky), so each row's name stays beside its scores. Focusable, so a keyboard scrolls it too.
  const detectorsScroll = el('div', 'hs-train-detectors-scroll');
  detectorsScroll.tabIndex = 0;
  detectorsScroll.setAttribute('role', 'region');
  detectorsScroll.setAttribute('aria-label', 'Head detectors table');
  detectorsScroll.append(detectors);
  const ablationTitle = el('h2', 'hs-prose hs-train-h2', 'Switch heads off: the held-out loss, and each head\'s importance');
  const ablation = el('div', 'hs-train-ablation');
  const detectorsBox = el('section');
  const detectorInputs = el('div', 'hs-train-detector-inputs');
  detectorsBox.append(detectorsTitle, detectorInputs, detectorsScroll);
  detectorsBox.hidden = hidden.has('detectors');
  const ablationBox = el('section');
  ablationBox.append(ablationTitle, ablation);
  ablationBox.hidden = hidden.has('ablation');
  const variantsBox = el('section', 'hs-train-variants-box');
  const variants = el('div', 'hs-train-variants');
  variantsBox.append(el('h2', 'hs-prose hs-train-h2', 'The attention variant, in the engine\'s numbers'), variants);
  variantsBox.hidden = hidden.has('variants');
  const insideBox = el('section', 'hs-train-inside-box');
  const inside = el('div', 'hs-train-inside');
  insideBox.append(el('h2', 'hs-prose hs-train-h2', 'Inside the model: patching, the logit lens, rollout, and why a weight is high'), inside);
  insideBox.hidden = hidden.has('inside');
  const whatIf = el('div', 'hs-train-whatif-box');
  whatIf.hidden = hidden.has('whatif');
  view.append(intro, controls.form, controls.buttons, message, curves.element, history.element, gridTitle, shownLine, probeText, grid,
    variantsBox, detectorsBox, ablationBox, insideBox, whatIf);
  root.replaceChildren(view);
  return { view, message, curves, probeText, grid, shownLine, shownText, backToNow, variants, detectors, detectorInputs, ablation, ablationBox, inside, whatIf };
}
