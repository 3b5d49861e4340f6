// What the loader shows of a loaded case: the error line, a summary (shapes, the time it took,
// the check against the file's expected values), and what to do next: an attention case offers
// the Heads view and, when it can show it, the Walkthrough; a transformer case is checked and its
// attention patterns shown here (transformer-case.js).
import { el } from '../views/common/dom.js';
import { formatSeconds } from './loader-bytes.js';
import { describeTransformerConfig, renderTransformerCase } from './transformer-case.js';

const took = (ms) => `computed in ${ms < 1000 ? `${ms.toFixed(1)} ms` : formatSeconds(ms)}`;

/** The results' elements (in page order: `elements`), and what fills them. */
export function createResults() {
  const error = el('p', 'hs-error hs-load-error');
  error.setAttribute('role', 'alert');
  const summary = el('div', 'hs-load-summary');
  summary.setAttribute('aria-live', 'polite');
  const actions = el('div', 'hs-controls');
  // A transformer case's check and pattern grid (transformer-case.js).
  const transformerView = el('div', 'hs-tcase');
  const say = (lines) => { for (const line of lines) summary.append(el('p', '', line)); };

  return {
    elements: [error, summary, actions, transformerView],
    /** Empties the results; with `errorText`, shows it as the error. */
    clear(errorText = '') {
      error.textContent = errorText;
      summary.replaceChildren();
      actions.replaceChildren();
      transformerView.replaceChildren();
    },
    error(text) {
      error.textContent = text;
    },

    /**
     * An attention case's summary lines (its shapes, the output's, the check: compareWithExpected's
     * or null) and its actions; `walkthrough` is stateFromCase's answer (the Walkthrough's own
     * rule), `timeLine` the job's.
     */
    attention(c, { fileName, result, ms, check, walkthrough, timeLine, onCase }) {
      const q = c.query.shape;
      const lines = [
        `${c.name ?? fileName}: embed_dim ${c.config.embedDim}, ${c.config.numHeads} heads, ` +
          `query [${q.join(', ')}], key [${c.key.shape.join(', ')}]`,
        `output [${result.output.shape.join(', ')}]` +
          (result.weights ? `, weights [${result.weights.shape.join(', ')}]` : ', no weights') + ` — ${took(ms)}`,
      ];
      if (check !== null) {
        lines.push(check.ok
          ? `Matches the file's expected values (max relative error ${check.maxRelativeError.toExponential(2)}).`
          : `Differs from the file's expected values: ${check.detail}`);
      }
      lines.push(timeLine);
      say(lines);
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
    },

    /** A transformer case's summary, check and patterns; `check` compareWithExpected's or null. */
    transformer(c, { fileName, result, ms, check, timeLine }) {
      const t = c.tokens.shape;
      const lines = [
        `${c.name ?? fileName}: a transformer case, ${describeTransformerConfig(c.config)}`,
        `tokens [${t.join(', ')}]${c.targets ? ', with targets' : ''}${c.headGates ? ', with head gates' : ''}; ` +
          `logits [${result.logits.shape.join(', ')}]${result.loss === undefined ? '' : `, loss ${result.loss}`} — ` +
          took(ms),
        timeLine,
      ];
      if (check === null) lines.splice(2, 0, 'The file has no expected values to check.');
      say(lines);
      renderTransformerCase(transformerView, { c, result, check });
      actions.append(el('span', 'hs-note', 'The Walkthrough and Heads views take attention cases; this ' +
        'transformer case is shown here.'));
    },
  };
}
