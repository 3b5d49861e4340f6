// The heads' colours (--hs-head-1..16 in headscope.css), shared by every view that colours heads.

/** Heads with a colour of their own (--hs-head-1..16 in headscope.css); more heads cycle them. */
export const HEAD_COLORS = 16;

/** CSS colour of head h (0-based): --hs-head-1..16 from headscope.css, cycled past 16 heads. */
export function headColor(h) {
  return `var(--hs-head-${(h % HEAD_COLORS) + 1})`;
}

/** True for heads that reuse a colour (h >= 16): the views draw them dashed to tell them apart. */
export function headDashed(h) {
  return h >= HEAD_COLORS;
}
