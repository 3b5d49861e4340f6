// The channels of a hand-built head: how a preset writes its scores into the head's rows of
// in_proj_weight (a position kernel, a feature of the key, token identity).
import { PRESET_LENGTH } from './features.js';

/**
 * How well m position pairs single out one offset among sequences of maxLength tokens: the gap
 * between sum_k cos(omega_k * 0) and the best sum_k cos(omega_k * d), 0 < |d| < maxLength.
 * Scaling a positional score by sharpness / gap puts the intended key exactly `sharpness` logits
 * above the best other one.
 */
export function positionMargin(frequencies, maxLength = PRESET_LENGTH) {
  let best = -Infinity;
  for (let d = 1; d < maxLength; d++) {
    let f = 0;
    for (const w of frequencies) f += Math.cos(w * d);
    best = Math.max(best, f);
  }
  return frequencies.length - best;
}

// A head's query/key rows are "channels": score(i, j) = sum_c qc(x_i) * kc(x_j) / sqrt(headDim),
// with qc(x) = qRow . x + qBias and kc(x) = kRow . x + kBias. Each preset claims channels in its own
// head's rows (in_proj_weight rows h*hd..(h+1)*hd of W_q and of W_k) and writes the sqrt(headDim)
// into the query side so that `sharpness` reads directly as logits.
export class HeadWriter {
  constructor(inProjWeight, inProjBias, E, hd, h) {
    this.w = inProjWeight;
    this.b = inProjBias;
    this.E = E;
    this.hd = hd;
    this.h = h;
    this.next = 0;
    this.scale = Math.sqrt(hd);
  }

  get free() {
    return this.hd - this.next;
  }

  /** Claims the next channel: set(qRow, qBias, kRow, kBias) writers, or null when none is left. */
  channel() {
    if (this.next >= this.hd) return null;
    const r = this.h * this.hd + this.next++;
    const { E, w, b, scale } = this;
    return {
      q: (dim, value) => { w[r * E + dim] += value * scale; },
      qBias: (value) => { b[r] += value * scale; },
      k: (dim, value) => { w[(E + r) * E + dim] += value; },
      kBias: (value) => { b[E + r] += value; },
    };
  }
}

// score += strength * sum_k cos(omega_k (i - offset - j)) / gap over the first m pairs, where m is
// what the channels left allow. cos(w(i-o-j)) = sin(w(i-o)) sin(wj) + cos(w(i-o)) cos(wj), and
// sin(w(i-o)), cos(w(i-o)) are the query's own sin/cos rotated by -w*o: a fixed 2x2 map of its
// features. Returns the number of pairs used.
export function writeOffset(head, layout, offset, strength, maxPairs = Infinity) {
  const { frequencies, start } = layout.position;
  const m = Math.min(frequencies.length, Math.floor(head.free / 2), maxPairs);
  if (m < 1) return 0;
  const used = frequencies.slice(0, m);
  const c = strength / positionMargin(used, layout.length ?? PRESET_LENGTH);
  used.forEach((w, k) => {
    const sinDim = start + 2 * k;
    const cosDim = sinDim + 1;
    const co = Math.cos(w * offset);
    const so = Math.sin(w * offset);
    const a = head.channel();  // key side: sin(w j)
    a.k(sinDim, 1);
    a.q(sinDim, c * co);
    a.q(cosDim, -c * so);
    const b = head.channel();  // key side: cos(w j)
    b.k(cosDim, 1);
    b.q(cosDim, c * co);
    b.q(sinDim, c * so);
  });
  return m;
}

// score += strength * (feature of the key): the query is a constant, so every query looks at the
// keys that have the feature, equally.
export function writeKeyFeature(head, layout, feature, strength) {
  const ch = head.channel();
  if (ch === null) return false;
  ch.qBias(strength);
  ch.k(layout.classes.dim[feature], 1);
  return true;
}

// score += strength * (1/u) sum_{b in u blocks} cos(theta_b(i) - theta_b(j)): the identity blocks
// the channels allow, starting at block `first` (heads start at different blocks). Equal tokens
// score exactly `strength`; different tokens score less, by more the more blocks the head can read.
export function writeIdentity(head, layout, strength, first, maxBlocks = Infinity) {
  const { blocks, start } = layout.identity;
  const u = Math.min(blocks, Math.floor(head.free / 2), maxBlocks);
  if (u < 1) return 0;
  const c = (strength * blocks) / u;  // each block carries 1/blocks of the unit vector's square
  for (let n = 0; n < u; n++) {
    const b = (first + n) % blocks;
    for (const dim of [start + 2 * b, start + 2 * b + 1]) {
      const ch = head.channel();
      ch.q(dim, c);
      ch.k(dim, 1);
    }
  }
  return u;
}
