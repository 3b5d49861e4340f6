// The variants panel's attention-sinks section (attnSinks: gpt-oss's sinks): each head's learned
// sink logit s_h, as the model holds it (stateDict()'s blocks.{l}.attn.sinks), and its mean sink
// mass on the evaluation's held-out rows: 1 - the row's sum of the engine's hook_pattern (the
// weight the sink took from the keys), averaged over every row of the held-out batch. session.js
// measures them in each evaluation (the same model and step as the other numbers); this file draws.
import { formatNumber } from '../common/numbers.js';

/**
 * Per layer, each head's sink logit and mean sink mass: [{ logits: number[H], mass: number[H] }].
 * @param {object} model  the view's model (stateDict() of the engine, a Promise in a Worker)
 * @param {{ hooks: Record<string, { data: Float32Array, shape: number[] }> }} heldRun  forward's
 *   result on the held-out rows with every layer's hook_pattern ([B, H, T, T])
 * @param {number} layers
 */
export async function sinkNumbers(model, heldRun, layers) {
  const sd = await model.stateDict();
  return Array.from({ length: layers }, (_, l) => {
    const { data, shape: [B, H, T] } = heldRun.hooks[`blocks.${l}.attn.hook_pattern`];
    const mass = new Array(H).fill(0);
    for (let b = 0; b < B; b++) {
      for (let h = 0; h < H; h++) {
        for (let i = 0; i < T; i++) {
          const row = ((b * H + h) * T + i) * T;
          let sum = 0;
          for (let j = 0; j < T; j++) sum += data[row + j];
          mass[h] += 1 - sum;
        }
      }
    }
    return { logits: Array.from(sd[`blocks.${l}.attn.sinks`].data), mass: mass.map((m) => m / (B * T)) };
  });
}

/**
 * The section for an evaluation of a model with sinks (none without): a row per head, its sink
 * logit and mean sink mass per layer. `sinks`: the evaluation's sinkNumbers (null without sinks),
 * so the table is always that model's; `table` is variants.js's.
 */
export function sinksTable(sinks, table) {
  if (!sinks) return [];
  const rows = Array.from({ length: sinks[0].logits.length }, (_, h) => [[`H${h + 1}`],
    ...sinks.flatMap(({ logits, mass }) => [[formatNumber(logits[h], 4), logits[h]], [formatNumber(mass[h], 4), mass[h]]])]);
  return [table('Attention sinks (gpt-oss): each head has a learned sink logit in every softmax row, so rows of the pattern ' +
    'may sum to less than 1: the head can attend to nothing. Each head\'s logit (the model\'s weights, 0 at step 0) and its mean ' +
    'sink mass, 1 - the row\'s sum of the engine\'s pattern, over the rows of the held-out batch, per layer.',
  ['head', ...sinks.flatMap((_, l) => [`sink logit, layer ${l}`, `mean sink mass, layer ${l}`])], rows)];
}
