// The Train view's ablation box: a switch per head (the held-out loss with the switched-off heads,
// through the forward's head gates), each head's importance |d loss / d gate| on the held-out rows
// (the gates' gradient, Michel et al. 2019), and what each head's ablation costs (the held-out
// loss with that head alone off, minus the loss with every head on).
import { button, el, setText } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';

/**
 * @param {object} t  the view's shared fields (view.js): state, model, task, held, curve, gates
 * @param {{ root: Element, serial: (job: Function) => Promise<unknown>, fail: (e: unknown) => void,
 *   redraw: () => void }} o  root: the ablation's element; serial: session.js's queue; redraw: the
 *   view's drawing of the last evaluation (the grid's "(off)" marks)
 */
export function createAblation(t, { root, serial, fail, redraw }) {
  let ablationResult = null;

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
      const costs = el('div', 'hs-train-costs');
      root.replaceChildren(switches, result, importance, eachOff, bars, costs);
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
  async function measureEachOff() {
    if (!t.model) return;
    const base = t.task.evaluate((await t.model.forward(t.held.tokens)).logits, t.held.targets).loss;
    const rows = [];
    for (let l = 0; l < t.state.layers; l++) {
      for (let h = 0; h < t.state.heads; h++) {
        const g = Array.from({ length: t.state.layers }, (_, ll) => Array.from({ length: t.state.heads }, (_, hh) => (ll === l && hh === h ? 0 : 1)));
        const loss = t.task.evaluate((await t.model.forward(t.held.tokens, { headGates: g })).logits, t.held.targets).loss;
        rows.push({ l, h, cost: loss - base });
      }
    }
    const max = Math.max(1e-12, ...rows.map((r) => Math.abs(r.cost)));
    const costs = root.querySelector('.hs-train-costs');
    costs.replaceChildren(el('p', 'hs-note', `Held-out loss with one head off, minus ${formatNumber(base, 3)} (every head on):`),
      ...rows.map(({ l, h, cost }) => {
        const row = el('div', 'hs-train-importance hs-train-cost');
        row.dataset.head = `${l}.${h + 1}`;
        row.dataset.cost = String(cost);
        const bar = el('span', 'hs-train-bar');
        bar.style.width = `${(100 * Math.abs(cost)) / max}%`;
        row.append(el('span', 'hs-train-importance-name', `L${l} H${h + 1}`), bar, el('span', '', `${cost >= 0 ? '+' : ''}${formatNumber(cost, 3)}`));
        return row;
      }));
  }

  async function measureImportance() {
    if (!t.model) return;
    const { grads } = await t.model.backward(t.held.tokens, t.held.targets, { headGateGrads: true });
    const g = grads.headGates;
    const values = g.flatMap((row, l) => row.map((v, h) => ({ l, h, v: Math.abs(v) })));
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
  }

  return { draw, measureEachOff };
}
