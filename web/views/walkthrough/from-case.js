// Which case documents the walkthrough can show, and as which state (stateFromCase).
import { parseCase } from '../../lib/case.js';
import { MAX_SIZE, transpose } from './shape.js';

function nested(t) {
  const [rows, cols] = t.shape;
  return Array.from({ length: rows }, (_, i) => Array.from(t.data.subarray(i * cols, (i + 1) * cols)));
}

function sameTensor(a, b) {
  return a === b || (a.shape.length === b.shape.length && a.shape.every((d, i) => d === b.shape[i]) &&
    a.data.every((v, i) => Object.is(v, b.data[i])));
}

/**
 * Whether the walkthrough can show a case document (object or JSON text), and as which state.
 * It can when the case has a packed in_proj_weight, an unbatched query of at most 16 x 16, is
 * self-attention (key and value absent or equal to the query) and adds no extra keys
 * (add_bias_kv, add_zero_attn), no rotary embeddings (rope_dims), no attention sinks
 * (attn_sinks), no shared K/V heads and no ALiBi or window options. Biases and masks are kept,
 * so the trace equals the case's forward.
 * Malformed documents throw the library's PARSE_ERROR.
 * @returns {{ state: object } | { reason: string }}
 */
export function stateFromCase(caseDocument) {
  const c = parseCase(caseDocument);
  const { embedDim: E, numHeads: H } = c.config;
  const name = c.name ? `case "${c.name}"` : 'the loaded case';
  const heads = (why) => ({ reason: `The walkthrough shows unbatched self-attention of up to ` +
    `${MAX_SIZE} tokens x ${MAX_SIZE} dims; ${name} ${why}. A Heads view (the demo's Heads tab, or ` +
    'a <headscope-heads> widget) shows it.' });
  if (c.config.kdim !== undefined && c.config.kdim !== E) return heads('has kdim != embed_dim');
  if (c.config.vdim !== undefined && c.config.vdim !== E) return heads('has vdim != embed_dim');
  if (!c.stateDict.has('in_proj_weight')) return heads('has separate q/k/v projection weights');
  if (c.config.addBiasKV || c.config.addZeroAttn) {
    return heads('adds extra keys (add_bias_kv / add_zero_attn)');
  }
  // (The walkthrough's model has one K/V head per head and scores q . k as projected.)
  if ((c.config.ropeDims ?? 0) > 0) return heads('turns q and k by position (rope_dims)');
  if (c.config.attnSinks) return heads('has attention sinks (attn_sinks): its rows of weights sum to less than 1');
  if (c.config.numKvHeads != null && c.config.numKvHeads !== H) {
    return heads('shares K/V heads (num_kv_heads)');
  }
  // (Nor does it add a position bias or block keys outside a window: its masks are the case's.)
  if (c.options.alibi === true) return heads('adds ALiBi\'s position bias (alibi)');
  if ((c.options.window ?? 0) > 0) return heads(`attends within a window of ${c.options.window} keys (window)`);
  if (c.query.shape.length !== 2) return heads(`has a batched query [${c.query.shape.join(', ')}]`);
  const [L] = c.query.shape;
  if (L < 1 || L > MAX_SIZE || E > MAX_SIZE) return heads(`is ${L} tokens x ${E} dims`);
  if (!sameTensor(c.key, c.query) || !sameTensor(c.value, c.query)) {
    return heads('is cross-attention (its key or value differs from the query)');
  }
  const inProj = nested(c.stateDict.get('in_proj_weight'));
  const block = (b) => transpose(inProj.slice(b * E, (b + 1) * E));
  const bias = c.config.bias !== false;
  const vector = (key, from, to) => Array.from(c.stateDict.get(key).data.subarray(from, to));
  const { attnMask = null, keyPaddingMask = null, isCausal = false } = c.options;
  return {
    state: {
      L, E, H,
      x: nested(c.query),
      wq: block(0), wk: block(1), wv: block(2),
      wo: transpose(nested(c.stateDict.get('out_proj.weight'))),
      bias: bias ? {
        q: vector('in_proj_bias', 0, E), k: vector('in_proj_bias', E, 2 * E),
        v: vector('in_proj_bias', 2 * E, 3 * E), o: vector('out_proj.bias', 0, E),
      } : null,
      masks: attnMask || keyPaddingMask || isCausal ? { attnMask, keyPaddingMask, isCausal } : null,
      source: name,
    },
  };
}
