// The walkthrough's state in PyTorch's terms: the state_dict and config of the module it runs,
// trace()'s options, what the masks add to the scores, and whether a trace overflowed float32.
import { transpose } from './shape.js';

/**
 * PyTorch's state_dict for the state: in_proj_weight (3E, E) = [W_Q^T; W_K^T; W_V^T] (a torch
 * projection computes x W^T), out_proj.weight = W_O^T, and the biases when the state has them.
 */
export function toStateDict(state) {
  const sd = {
    in_proj_weight: [...transpose(state.wq), ...transpose(state.wk), ...transpose(state.wv)],
    'out_proj.weight': transpose(state.wo),
  };
  if (state.bias) {
    sd.in_proj_bias = [...state.bias.q, ...state.bias.k, ...state.bias.v];
    sd['out_proj.bias'] = state.bias.o.slice();
  }
  return sd;
}

/** createMultiheadAttention's config for the state. */
export const moduleConfig = (state) => ({ embedDim: state.E, numHeads: state.H, bias: state.bias !== null });

/** trace()'s options: the loaded case's masks, if any. */
export function traceOptions(state) {
  if (!state.masks) return {};
  const { attnMask, keyPaddingMask, isCausal } = state.masks;
  return { attnMask, keyPaddingMask, isCausal };
}

/** In words, what the state's masks do (empty without masks). */
export function describeMasks(state) {
  if (!state.masks) return '';
  const { attnMask, keyPaddingMask, isCausal } = state.masks;
  const parts = [];
  const kind = (m) => (m.type === 'bool' ? 'boolean' : 'additive');
  if (attnMask) parts.push(`a ${kind(attnMask)} attn_mask [${attnMask.shape.join(', ')}]`);
  else if (isCausal) parts.push('a causal mask (is_causal)');
  if (keyPaddingMask) parts.push(`a ${kind(keyPaddingMask)} key_padding_mask [${keyPaddingMask.shape.join(', ')}]`);
  return parts.length ? `Masks from the case: ${parts.join(' and ')} are added to the scores ` +
    '(−∞ where a key is blocked).' : '';
}

/**
 * What the masks add to each score, (H, L, L) row-major, as PyTorch applies them: a boolean mask
 * blocks (−∞) where true, a float mask is added, attn_mask (L, L) or per head (H, L, L), plus
 * key_padding_mask (L) on every row; is_causal without attn_mask blocks the keys after the query.
 * null without masks.
 */
export function maskTerms(state) {
  if (!state.masks) return null;
  const { L, H } = state;
  const { attnMask, keyPaddingMask, isCausal } = state.masks;
  const add = new Float64Array(H * L * L);
  const term = (m, k) => (m.type === 'bool' ? (m.data[k] ? -Infinity : 0) : m.data[k]);
  for (let h = 0; h < H; h++) {
    for (let i = 0; i < L; i++) {
      for (let j = 0; j < L; j++) {
        let t = 0;
        if (attnMask) t += term(attnMask, attnMask.shape.length === 3 ? (h * L + i) * L + j : i * L + j);
        else if (isCausal && j > i) t = -Infinity;
        if (keyPaddingMask) t += term(keyPaddingMask, j);
        add[(h * L + i) * L + j] = t;
      }
    }
  }
  return add;
}

/**
 * Whether a trace overflowed float32 somewhere (a ±∞ or NaN that no mask put there), and where,
 * in words ("the scores"); null when every number is finite. A masked score is −∞ by design and a
 * fully masked row's weights are 0, so neither counts.
 */
export function traceOverflow(trace, masks = null) {
  const bad = (t) => { for (let n = 0; n < t.data.length; n++) if (!Number.isFinite(t.data[n])) return true; return false; };
  if (bad(trace.q) || bad(trace.k) || bad(trace.v)) return 'the queries, keys or values';
  const s = trace.scores.data;
  for (let n = 0; n < s.length; n++) {
    if (Number.isNaN(s[n]) || s[n] === Infinity || (s[n] === -Infinity && !(masks && masks[n] === -Infinity))) {
      return 'the scores';
    }
  }
  if (bad(trace.weights)) return 'the attention weights';
  if (bad(trace.headOutputs)) return 'the head outputs';
  if (bad(trace.concat) || bad(trace.output)) return 'the outputs';
  return null;
}
