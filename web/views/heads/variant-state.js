// The Heads view's attention variants: the fields of its public state that choose the variant of
// today's models the layer computes (grouped-query / multi-query K/V heads, ALiBi, a sliding
// window, RoPE), their checks, and what they become in the engine's config and forward options.
// DOM-free (state.js applies them; compute.js calls variantCall; controls and notes: variants.js).
//
//   kvHeads: a divisor of heads        K/V heads (numKvHeads; = heads: plain multi-head). A patch
//                                      changing heads alone keeps it equal to heads when it was,
//                                      and keeps it when it still divides them
//   alibi: boolean                     forward's alibi option
//   window: integer in [0, 4096]       forward's window option (0: off), causal or not (the
//                                      state's causal: the engine's isCausal, see variantCall)
//   ropeDims: even, 0..head dim        rotary dims of each head (0: no RoPE)
//   ropeLayout: 'half' | 'interleaved', ropeBase: number > 0
//                                      RoPE's layout and base: off their defaults only with
//                                      ropeDims > 0 (the engine's rule; ropeDims 0 puts them back)
//
// Every default is "no variant": the default state computes exactly what the view computed before
// these fields existed, with the same config and options, so links and tests made then keep
// their meaning.
import { MHA_SCHEMA, accepts, expectation, field } from '../../lib/config.js';

/** The view's embedding size (compute.js's EMBED_DIM; here to keep this module DOM- and engine-free). */
const EMBED = 64;
export const MAX_WINDOW = 4096;
/** The windows the control offers (any integer up to MAX_WINDOW is a valid state). */
export const WINDOW_CHOICES = [0, 1, 2, 3, 4, 8, 16, 32];
export const ROPE_LAYOUTS = field(MHA_SCHEMA, 'ropeLayout').choices;
const ROPE_KEYS = ['ropeLayout', 'ropeBase'];
const ROPE_DEFAULTS = Object.fromEntries(ROPE_KEYS.map((k) => [k, field(MHA_SCHEMA, k).default.value]));
export const VARIANT_KEYS = ['kvHeads', 'alibi', 'window', 'ropeDims', ...ROPE_KEYS];

/** The variant fields of a state of `heads` heads with no variant. */
export const defaultVariants = (heads) => ({ kvHeads: heads, alibi: false, window: 0, ropeDims: 0, ...ROPE_DEFAULTS });

export const headDim = (heads) => EMBED / heads;
/** The divisors of `heads`, from heads down: the K/V head counts it can have. */
export const kvHeadChoices = (heads) => Array.from({ length: heads }, (_, k) => heads - k).filter((g) => heads % g === 0);
/** The rotary dims the control offers for a head of d dims: 0, then powers of two up to d. */
export function ropeDimChoices(d) {
  const out = [0];
  for (let r = 2; r <= d; r *= 2) out.push(r);
  return out;
}

/**
 * Why a live state (view-state.js: numHeads and the variant's fields) cannot take `heads` heads
 * with its variant (a text for the reader), or null: the
 * heads control disables such counts with this reason rather than computing something else.
 */
export function headsBlocked(s, heads) {
  // K/V heads equal to the heads follow a new count (applyVariants): they never block one.
  if (s.kvHeads !== s.numHeads && heads % s.kvHeads !== 0) return `${s.kvHeads} K/V heads do not divide ${heads} heads`;
  if (s.ropeDims > headDim(heads)) return `RoPE turns ${s.ropeDims} dims, more than a head of ${headDim(heads)} holds`;
  return null;
}

/**
 * Checks the variant fields of `next` (a state with `p` applied; `current` the state before) and
 * applies the rules of a head count change; throws through fail(path, message), naming the field.
 */
export function applyVariants(p, current, next, where, fail) {
  // Heads changed alone: K/V heads that were the heads follow them (plain multi-head attention).
  if ('heads' in p && !('kvHeads' in p) && current.kvHeads === current.heads) next.kvHeads = next.heads;
  // No rotation: the RoPE fields the patch leaves out go back to their defaults.
  if (next.ropeDims === 0) for (const k of ROPE_KEYS) if (!(k in p)) next[k] = ROPE_DEFAULTS[k];
  const { heads } = next;
  if (!Number.isInteger(next.kvHeads) || next.kvHeads < 1 || heads % next.kvHeads !== 0) {
    fail(`${where}.kvHeads`, `expected a divisor of heads ${heads} (${kvHeadChoices(heads).join(', ')}), got ${show(next.kvHeads)}`);
  }
  if (typeof next.alibi !== 'boolean') fail(`${where}.alibi`, `expected true or false, got ${show(next.alibi)}`);
  if (!Number.isInteger(next.window) || next.window < 0 || next.window > MAX_WINDOW) {
    fail(`${where}.window`, `expected 0 (no window) or an integer in [1, ${MAX_WINDOW}], got ${show(next.window)}`);
  }
  const d = headDim(heads);
  if (!Number.isInteger(next.ropeDims) || next.ropeDims < 0 || next.ropeDims % 2 !== 0 || next.ropeDims > d) {
    fail(`${where}.ropeDims`, `expected 0 (no RoPE) or an even number of dims at most the head dim ${EMBED} / ${heads} heads = ${d}, ` +
      `got ${show(next.ropeDims)}`);
  }
  for (const k of ROPE_KEYS) {
    const f = field(MHA_SCHEMA, k);
    if (!accepts(f, next[k])) fail(`${where}.${k}`, `expected ${expectation(MHA_SCHEMA, f)}, got ${show(next[k])}`);
    if (next.ropeDims === 0 && next[k] !== ROPE_DEFAULTS[k]) {
      fail(`${where}.${k}`, `applies only with ropeDims > 0 (RoPE is off): leave it at ${show(ROPE_DEFAULTS[k])}`);
    }
  }
}

const show = (v) => (typeof v === 'string' ? JSON.stringify(v.slice(0, 40)) : Array.isArray(v) ? 'an array' : String(v));

/**
 * The engine's config fields and forward options of a state's variant (the live state of
 * view-state.js: numHeads and the fields above). With no variant both are empty: the call is the
 * plain module's. A window with causal attention uses the engine's isCausal instead of an explicit
 * causal mask (`causalMask: false`): the window's causal rule is isCausal's (the keys i - w < j <= i),
 * and a window is not meant to combine with an attention mask of the caller's.
 */
export function variantCall(s) {
  const config = {};
  if (s.kvHeads !== s.numHeads) config.numKvHeads = s.kvHeads;
  if (s.ropeDims > 0) Object.assign(config, { ropeDims: s.ropeDims, ropeLayout: s.ropeLayout, ropeBase: s.ropeBase });
  const options = {};
  if (s.alibi) options.alibi = true;
  if (s.window > 0) {
    options.window = s.window;
    if (s.causal) options.isCausal = true;
  }
  return { config, options, causalMask: s.causal && s.window === 0 };
}
