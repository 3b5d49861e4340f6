// "Your weights" for a "kind": "transformer" case: what the loader shows once the case has run.
// The check against the file's expected values (pass or fail, the max relative error of every
// tensor, the loss) and a layers x heads grid of the attention patterns of batch item 0 (hook
// blocks.{l}.attn.hook_pattern), each a compact heatmap whose rows (queries) and columns (keys)
// are labelled by token id. Every number is the engine's (runCase's result, compareWithExpected's
// check); user-controlled text reaches the page only through textContent.
import { columnHeads, el } from '../views/common/dom.js';
import { formatNumber } from '../views/common/numbers.js';
import { renderHeatmap } from '../views/common/heatmap.js';

/** The longest sequence a pattern heatmap shows (the first tokens of a longer one). */
export const MAX_PATTERN_TOKENS = 48;

/** The hook names of the attention patterns of every layer, in layer order. */
export function patternHooks(nLayers) {
  return Array.from({ length: nLayers }, (_, l) => `blocks.${l}.attn.hook_pattern`);
}

const exp = (x) => (Number.isFinite(x) ? x.toExponential(2) : String(x));

// Ids for aria-labelledby, unique in the page (views may be mounted more than once).
let nextId = 0;
const uniqueId = (prefix) => `${prefix}-${++nextId}`;

/** One line of the config: "vocab 7, max_len 8, d_model 4, 1 layer x 1 head, ...". */
export function describeTransformerConfig(config) {
  const { vocabSize, maxLen, dModel, nLayers, nHeads, dMlp } = config;
  return `vocab ${vocabSize}, max_len ${maxLen}, d_model ${dModel}, ${nLayers} layer${nLayers === 1 ? '' : 's'} x ` +
    `${nHeads} head${nHeads === 1 ? '' : 's'}, ${dMlp === 0 ? 'attention only' : `MLP ${dMlp} (${config.act})`}, ` +
    `norm ${config.norm}, positions ${config.positions}, ${config.causal ? 'causal' : 'not causal'}` +
    `${config.bias ? '' : ', no bias'}${config.tieEmbeddings ? ', tied embeddings' : ''}`;
}

/** The pass/fail sentence of a check (compareWithExpected's result for a transformer case). */
export function checkSentence(check) {
  const loss = check.loss === null ? '' : `; loss ${check.loss.got} vs ${check.loss.expected}, error ${exp(check.loss.error)}`;
  return check.ok
    ? `Matches the file's expected values (max relative error ${exp(check.maxRelativeError)} over ` +
      `${check.tensors.length} tensors${loss}).`
    : `Differs from the file's expected values: ${check.detail}`;
}

function checkSection(check, tolerance) {
  const section = el('section', 'hs-tcase-check');
  const heading = el('h3', '', 'Check against the expected values');
  heading.id = uniqueId('hs-tcase-check');
  section.setAttribute('aria-labelledby', heading.id);
  const line = el('p', `hs-tcase-verdict ${check.ok ? 'hs-pass' : 'hs-fail'}`);
  line.append(el('strong', '', check.ok ? 'Pass. ' : 'Fail. '), checkSentence(check));
  const details = el('details', 'hs-tcase-tensors');
  if (!check.ok) details.open = true;
  const failed = check.tensors.filter((t) => !t.ok).length + (check.loss && !check.loss.ok ? 1 : 0);
  details.append(el('summary', '', `Per tensor: ${check.tensors.length} tensors${check.loss ? ' and the loss' : ''}` +
    `, ${failed === 0 ? 'all within' : `${failed} outside`} the tolerance ${tolerance}`));
  const table = el('table', 'hs-tcase-table');
  table.append(el('caption', '', 'Max relative error of each tensor: max |got − expected| / max |expected|'));
  const thead = el('thead');
  thead.append(columnHeads(['Tensor', 'Max relative error', 'Result']));
  const body = el('tbody');
  const row = (name, value, ok, title) => {
    const tr = el('tr', ok ? 'hs-pass' : 'hs-fail');
    const th = el('th', '', name);
    th.scope = 'row';
    const cell = el('td', '', value);
    if (title) cell.title = title;
    tr.append(th, cell, el('td', '', ok ? 'pass' : 'fail'));
    body.append(tr);
  };
  for (const t of check.tensors) row(t.name, t.detail && !t.ok ? t.detail : exp(t.maxRelativeError), t.ok);
  if (check.loss) {
    row('loss', `${exp(check.loss.error)} (got ${check.loss.got}, expected ${check.loss.expected})`, check.loss.ok,
      'Loss error: |got − expected| / max(1, |expected|)');
  }
  table.append(thead, body);
  details.append(table);
  section.append(heading, line, details);
  return section;
}

function patternGrid(c, result, onCell) {
  const section = el('section', 'hs-tcase-patterns');
  const heading = el('h3', '', 'Attention patterns');
  heading.id = uniqueId('hs-tcase-patterns');
  section.setAttribute('aria-labelledby', heading.id);
  const { nLayers, nHeads, causal } = c.config;
  const tokens = Array.from(c.tokens.data.subarray(0, c.tokens.shape[c.tokens.shape.length - 1]));
  const T = tokens.length;
  const shown = Math.min(T, MAX_PATTERN_TOKENS);
  const labels = tokens.slice(0, shown).map(String);
  const note = el('p', 'hs-note', `${c.tokens.shape.length === 2 ? 'Batch item 0' : 'The sequence'}: ` +
    `${T} token${T === 1 ? '' : 's'}${shown < T ? `, the first ${shown} shown` : ''}. Each heatmap is one ` +
    `head's softmax weights (hook blocks.{l}.attn.hook_pattern): rows are queries, columns keys, both ` +
    `labelled by token id${causal ? '; hatched cells are causally masked' : ''}. Focus a heatmap and use ` +
    'the arrow keys to read its cells.');
  const readout = el('p', 'hs-tcase-readout');
  readout.setAttribute('aria-live', 'polite');
  section.append(heading, note);
  const grid = el('div', 'hs-tcase-grid');
  for (let l = 0; l < nLayers; l++) {
    const pattern = result.hooks?.[`blocks.${l}.attn.hook_pattern`];
    if (pattern === undefined) continue;
    const layer = el('section', 'hs-tcase-layer');
    const layerHeading = el('h4', '', `Layer ${l}`);
    layer.append(layerHeading);
    const heads = el('div', 'hs-tcase-heads');
    for (let h = 0; h < nHeads; h++) {
      const figure = el('figure', 'hs-tcase-head');
      figure.dataset.layer = String(l);
      figure.dataset.head = String(h);
      const caption = el('figcaption', '', `Head ${h}`);
      const box = el('div', 'hs-heatmap-box');
      // Batch item 0's (T x T) block of head h, in [B, H, T, T] or [H, T, T] alike.
      const data = pattern.data.subarray(h * T * T, (h + 1) * T * T);
      const describe = (i, j) => `layer ${l}, head ${h}: query ${i} (token ${tokens[i]}) → key ${j} ` +
        `(token ${tokens[j]}): weight ${causal && j > i ? '0 (masked)' : formatNumber(data[i * T + j], 3)}`;
      renderHeatmap(box, {
        id: `l${l}h${h}`,
        name: `Attention pattern of layer ${l}, head ${h}, ${shown} x ${shown} tokens`,
        data, rows: shown, cols: shown, stride: T, rowLabels: labels, colLabels: labels,
        masked: causal ? (i, j) => j > i : undefined,
        describe,
        onCell: (i, j) => onCell(readout, describe(i, j)),
      });
      figure.append(caption, box);
      heads.append(figure);
    }
    layer.append(heads);
    grid.append(layer);
  }
  section.append(grid, readout);
  return section;
}

/**
 * Renders a run transformer case into `root` (replacing its content): the check (when the case
 * has expected values) and the pattern grid. `result` is runCase's { logits, hooks, loss? } with
 * at least the patternHooks(nLayers) among its hooks; `check` compareWithExpected's, or null.
 */
export function renderTransformerCase(root, { c, result, check, tolerance = 1e-4 }) {
  const parts = [];
  if (check !== null) parts.push(checkSection(check, tolerance));
  parts.push(patternGrid(c, result, (readout, text) => { readout.textContent = text; }));
  root.replaceChildren(...parts);
}
