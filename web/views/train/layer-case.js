// A trained layer's attention as a case document, for the Heads view and the Walkthrough.
import { nested } from '../common/export-data.js';
import { ropeDims } from './state.js';

/**
 * Layer l's attention on the probe row as a case document of nn.MultiheadAttention (the
 * Heads view's and the Walkthrough's kind): the trained in_proj and out_proj weights (num_kv_heads
 * with grouped-query attention), and the layer's input as the engine computed it
 * (blocks.l.ln1.hook_normalized for a pre-LayerNorm model, blocks.l.hook_resid_pre otherwise).
 * The position rules are the attention mask: causal, and the sliding window's band, as booleans;
 * with ALiBi a float mask per head (num_heads, T, T) adding -slope |i - j| (the engine's slopes,
 * engine.alibiSlopes) and -Infinity where the rules hide a key, which is the bias the layer adds.
 * With rotary positions the case carries the turn: rope_dims (the Transformer's RopeDims rule,
 * state.js ropeDims), rope_layout and rope_base; query i and key i are at position i, as in the
 * layer. (The Walkthrough cannot show such a case and says so: walkthrough/from-case.js.) With
 * attention sinks the case carries attn_sinks and the layer's trained sinks, so the Heads view's
 * rows sum to less than 1 as the layer's do (the Walkthrough cannot show that either).
 */
export async function layerCase({ model, probe, state, engine }, l) {
  const hook = state.norm === 'pre' ? `blocks.${l}.ln1.hook_normalized` : `blocks.${l}.hook_resid_pre`;
  const { hooks } = await model.forward(probe.tokens, { hooks: [hook] });
  const sd = await model.stateDict();
  const x = hooks[hook];
  const [, T, D] = x.shape;
  const query = Array.from({ length: T }, (_, i) => Array.from(x.data.subarray(i * D, (i + 1) * D)));
  const key = (name) => nested(sd[`blocks.${l}.attn.${name}`]);
  const w = state.attnWindow;
  const hidden = (i, j) => j > i || (w > 0 && j <= i - w);
  const rows = (cell) => Array.from({ length: T }, (_, i) => Array.from({ length: T }, (_, j) => cell(i, j)));
  let mask = rows(hidden);
  if (state.positions === 'alibi') {
    const slopes = await engine.alibiSlopes(state.heads);
    mask = Array.from(slopes, (m) => rows((i, j) => (hidden(i, j) ? -Infinity : -Math.fround(m * Math.abs(i - j)))));
  }
  const r = ropeDims(state);
  return {
    name: `${state.task} layer ${l} at step ${state.steps}`,
    config: { embed_dim: D, num_heads: state.heads, ...(state.kvHeads !== state.heads ? { num_kv_heads: state.kvHeads } : {}), bias: true,
      ...(r > 0 ? { rope_dims: r, rope_layout: state.ropeLayout, rope_base: state.ropeBase } : {}),
      ...(state.attnSinks ? { attn_sinks: true } : {}) },
    state_dict: { in_proj_weight: key('in_proj_weight'), in_proj_bias: key('in_proj_bias'),
      ...(state.attnSinks ? { sinks: key('sinks') } : {}), 'out_proj.weight': key('out_proj.weight'), 'out_proj.bias': key('out_proj.bias') },
    inputs: { query, attn_mask: mask, need_weights: true, average_attn_weights: false },
  };
}

/**
 * What the Heads view needs besides head h's layer case to say what it shows (onOpenHead's second
 * argument): the layer, the 1-based head, the model's step, the probe row's tokens as the task
 * writes them (the case's query labels: a case holds numbers only) and the Train view's public
 * state then (a link to the run: the Heads view's URL cannot carry the trained weights).
 */
export function openedHead({ state, task, probe }, l, h) {
  return { layer: l, head: h, step: state.steps, tokens: Array.from(probe.tokens.data, (id) => task.vocab[id]), state: { ...state } };
}
