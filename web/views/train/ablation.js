// The Train view's ablation box: a switch per head (the held-out loss with the switched-off heads,
// through the forward's head gates), each head's importance |d loss / d gate| on the held-out rows
// (the gates' gradient, Michel et al. 2019), and what each head's ablation costs (the held-out
// loss with that head alone off, minus the loss with every head on).
import { button, el, setText } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { setupOf } from './state.js';

/**
 * @param {object} t  the view's shared fields (view.js): state, model, task, held, curve, gates
 * @param {{ root: Element, serial: (job: Function) => Promise<unknown>, fail: (e: unknown) => void,
 *   redraw: () => void }} o  root: the ablation's element; serial: session.js's queue; redraw: the
 *   view's drawing of the last evaluation (the grid's "(off)" marks)
 */
export function createAblation(t, { root, serial, fail, redraw }) {
  let ablationResult = null;
  // The last measurements, with the step and setup they were made at: each head's ablation cost
  // and the pairs' ({ step, setup, costs: [{ l, h, cost }], pairs: [{ a, b, cost }] }), and each
  // head's |d loss / d gate| ({ step, setup, values: [{ l, h, v }] }). explainDifferences reads
  // them when both are of the model as it is.
  let costs = null, importance = null;
  const setupKey = () => setupOf(t.state);

  // The switches and buttons, built again when the model's shape changes.
  function draw() {
    const { state } = t;
    if (root.childElementCount === 0 || root.dataset.shape !== `${state.layers}x${state.heads}`) {
      root.dataset.shape = `${state.layers}x${state.heads}`;
      const switches = el('div', 'hs-train-switches');
      switches.setAttribute('role', 'group');
      switches.setAttribute('aria-label', 'Heads on or off');
      for (let l = 0; l < state.layers; l++) {
        for (let h = 0; h < state.heads; h++) {
          const label = el('label', 'hs-train-switch');
          const box = el('input');
          box.type = 'checkbox';
          box.checked = true;
          box.dataset.gate = `${l}.${h + 1}`;
          box.addEventListener('change', () => {
            t.gates ??= Array.from({ length: t.state.layers }, () => new Array(t.state.heads).fill(1));
            t.gates[l][h] = box.checked ? 1 : 0;
            if (t.gates.every((row) => row.every((g) => g === 1))) t.gates = null;
            serial(measureAblation).catch(fail);
          });
          label.append(box, ` L${l} H${h + 1}`);
          switches.append(label);
        }
      }
      const result = el('p', 'hs-train-ablation-result');
      const importance = button('Head importance', 'hs-train-importance-button');
      importance.name = 'importance';
      importance.addEventListener('click', () => serial(measureImportance).catch(fail));
      const bars = el('div', 'hs-train-importance-bars');
      const eachOff = button('Each head off in turn', 'hs-train-each-off');
      eachOff.name = 'each-off';
      eachOff.addEventListener('click', () => serial(measureEachOff).catch(fail));
      const costBox = el('div', 'hs-train-costs');
      const differences = el('div', 'hs-train-differences');
      differences.setAttribute('aria-live', 'polite');
      root.replaceChildren(switches, result, importance, eachOff, bars, costBox, differences);
      ablationResult = result;
    }
  }

  async function measureAblation() {
    if (!t.model) return;
    const { logits } = await t.model.forward(t.held.tokens, t.gates ? { headGates: t.gates } : {});
    const e = t.task.evaluate(logits, t.held.targets);
    const base = t.curve[t.curve.length - 1];
    const off = t.gates ? t.gates.flatMap((row, l) => row.flatMap((g, h) => (g === 0 ? [`L${l} H${h + 1}`] : []))) : [];
    setText(ablationResult, off.length
      ? `With ${off.join(', ')} off: held-out loss ${formatNumber(e.loss, 3)} (with every head: ${formatNumber(base.heldOutLoss, 3)}), ` +
        `accuracy ${formatNumber(100 * e.accuracy, 1)}% (${formatNumber(100 * base.accuracy, 1)}%).`
      : `Every head on: held-out loss ${formatNumber(base.heldOutLoss, 3)}, accuracy ${formatNumber(100 * base.accuracy, 1)}%.`);
    ablationResult.dataset.loss = String(e.loss);
    // The grid's "(off)" marks: the same patterns and scores as the last evaluation (a gate scales
    // a head's output, not its pattern), drawn again.
    redraw();
  }

  // What each head's ablation costs: the held-out loss with that head alone switched off, minus
  // the loss with every head on.
  // The held-out loss with the heads `off` ([[l, h], ...]) switched off.
  async function lossWithout(off) {
    const g = Array.from({ length: t.state.layers }, () => new Array(t.state.heads).fill(1));
    for (const [l, h] of off) g[l][h] = 0;
    return t.task.evaluate((await t.model.forward(t.held.tokens, { headGates: g })).logits, t.held.targets).loss;
  }

  // At most this many heads get every pair switched off too (n (n - 1) / 2 forwards: 120 for 16).
  const MAX_PAIRED_HEADS = 16;

  async function measureEachOff() {
    if (!t.model) return;
    const base = t.task.evaluate((await t.model.forward(t.held.tokens)).logits, t.held.targets).loss;
    const rows = [];
    for (let l = 0; l < t.state.layers; l++) {
      for (let h = 0; h < t.state.heads; h++) rows.push({ l, h, cost: (await lossWithout([[l, h]])) - base });
    }
    // Every pair off together: redundant heads cost little alone and much together.
    const pairs = [];
    if (rows.length <= MAX_PAIRED_HEADS) {
      for (let a = 0; a < rows.length; a++) {
        for (let b = a + 1; b < rows.length; b++) {
          pairs.push({ a: rows[a], b: rows[b], cost: (await lossWithout([[rows[a].l, rows[a].h], [rows[b].l, rows[b].h]])) - base });
        }
      }
    }
    costs = { step: t.state.steps, setup: setupKey(), costs: rows, pairs };
    const max = Math.max(1e-12, ...rows.map((r) => Math.abs(r.cost)));
    const costBox = root.querySelector('.hs-train-costs');
    costBox.replaceChildren(el('p', 'hs-note', `Held-out loss with one head off, minus ${formatNumber(base, 3)} (every head on):`),
      ...rows.map(({ l, h, cost }) => {
        const row = el('div', 'hs-train-importance hs-train-cost');
        row.dataset.head = `${l}.${h + 1}`;
        row.dataset.cost = String(cost);
        const bar = el('span', 'hs-train-bar');
        bar.style.width = `${(100 * Math.abs(cost)) / max}%`;
        row.append(el('span', 'hs-train-importance-name', `L${l} H${h + 1}`), bar, el('span', '', `${cost >= 0 ? '+' : ''}${formatNumber(cost, 3)}`));
        return row;
      }));
    explainDifferences();
  }

  async function measureImportance() {
    if (!t.model) return;
    const { grads } = await t.model.backward(t.held.tokens, t.held.targets, { headGateGrads: true });
    const g = grads.headGates;
    const values = g.flatMap((row, l) => row.map((v, h) => ({ l, h, v: Math.abs(v) })));
    importance = { step: t.state.steps, setup: setupKey(), values };
    const max = Math.max(1e-12, ...values.map((x) => x.v));
    const bars = root.querySelector('.hs-train-importance-bars');
    bars.replaceChildren(el('p', 'hs-note', '|d loss / d gate| per head on the held-out rows (Michel et al. 2019): ' +
      'how much the loss would change if the head were scaled down a little.'),
    ...values.map(({ l, h, v }) => {
      const row = el('div', 'hs-train-importance');
      row.dataset.head = `${l}.${h + 1}`;
      const bar = el('span', 'hs-train-bar');
      bar.style.width = `${(100 * v) / max}%`;
      row.append(el('span', 'hs-train-importance-name', `L${l} H${h + 1}`), bar, el('span', '', formatNumber(v, 4)));
      return row;
    }));
    explainDifferences();
  }

  // Where the two measures disagree, and which heads stand in for each other, in words with the
  // numbers (headDifferences); nothing until both are of the model as it is.
  function explainDifferences() {
    const box = root.querySelector('.hs-train-differences');
    const now = (m) => m !== null && m.step === t.state.steps && m.setup === setupKey();
    if (!box || !now(costs)) return;
    const lines = headDifferences(costs, now(importance) ? importance : null);
    box.replaceChildren(...lines.map((text) => el('p', 'hs-note hs-train-difference', text)));
    box.dataset.step = String(t.state.steps);
  }

  return { draw, measureEachOff };
}

const name = (x) => `L${x.l} H${x.h + 1}`;
const signed = (v) => `${v >= 0 ? '+' : ''}${formatNumber(v, 3)}`;

/**
 * What the ablation costs and the gradient importance say differently, in sentences:
 *   - a head whose removal costs much (at least 0.1 and a quarter of the largest cost) while its
 *     |d loss / d gate| is under a quarter of the largest: the gradient measures a small change of
 *     the gate around 1, the ablation the whole head gone, so a head the model needs at full
 *     strength can sit where the loss is flat to small changes (a saturated softmax downstream);
 *   - the reverse: a large gradient (at least half the largest) with a removal that costs little
 *     (under 0.02);
 *   - redundant pairs: both off cost at least 0.1 and more than twice the two costs alone, so
 *     either head does the job when the other is gone (what single ablations miss).
 * @param {{ costs: {l: number, h: number, cost: number}[], pairs: {a: object, b: object, cost: number}[] }} c
 * @param {{ values: {l: number, h: number, v: number}[] } | null} g
 */
export function headDifferences(c, g) {
  const lines = [];
  if (g !== null) {
    const maxCost = Math.max(0, ...c.costs.map((r) => r.cost));
    const maxGrad = Math.max(1e-12, ...g.values.map((r) => r.v));
    const gradOf = (r) => g.values.find((x) => x.l === r.l && x.h === r.h).v;
    for (const r of c.costs) {
      const v = gradOf(r);
      if (r.cost >= 0.1 && r.cost >= 0.25 * maxCost && v < 0.25 * maxGrad) {
        lines.push(`${name(r)}: switching it off costs ${signed(r.cost)}, yet its |d loss / d gate| is only ${formatNumber(v, 4)} ` +
          `(the largest: ${formatNumber(maxGrad, 4)}). The gradient measures a small change of the gate around 1; the ablation, ` +
          'the head gone. The model needs this head, but the loss barely feels a small change of it.');
      } else if (v >= 0.5 * maxGrad && Math.abs(r.cost) < 0.02) {
        lines.push(`${name(r)}: its |d loss / d gate| is ${formatNumber(v, 4)}, among the largest, yet switching it off costs only ` +
          `${signed(r.cost)}: a small change of this head moves the loss, but other heads make up for it when it is gone.`);
      }
    }
  }
  const costOf = (x) => c.costs.find((r) => r.l === x.l && r.h === x.h).cost;
  for (const p of c.pairs) {
    const a = costOf(p.a), b = costOf(p.b);
    if (p.cost >= 0.1 && p.cost > 2 * (Math.max(0, a) + Math.max(0, b))) {
      lines.push(`${name(p.a)} and ${name(p.b)} stand in for each other: off alone they cost ${signed(a)} and ${signed(b)}, ` +
        `both off ${signed(p.cost)}, more than twice the two added. Each covers for the other when it is gone, which ` +
        'switching one head off at a time does not show.');
    }
  }
  if (lines.length === 0) {
    lines.push(c.pairs.length > 0
      ? 'No two heads stand in for each other here: every pair off costs about what its two heads cost alone.'
      : 'Every head\'s cost alone is above; the pairs are measured for models of at most 16 heads.');
  }
  return lines;
}
