// The Train view's training history: one record per evaluation (its step, the training and
// held-out loss, the held-out accuracy, every head's detector scores and, while the memory cap
// allows, the probe row's hook_pattern of every layer), the step where each head first gets each
// label (the heads grid's rule, detectors.js's headLabel), and the phase change of the held-out
// loss. Pure: no DOM, no engine (tests/js/train-history.test.js).
//
// Why keep the patterns rather than replay: a record's patterns are the evaluation's own arrays
// (copied once), so scrubbing back shows exactly what the grid showed then, at once; replaying to a
// step would retrain from 0 in the Worker (seconds for a late step) and hold the queue meanwhile.
// The cost is layers x heads x T x T x 4 bytes per record (16 KiB for the induction preset), so
// the patterns have a budget: past it, every second older record loses its patterns (its scores
// stay), which keeps the kept ones spread over the whole run.
import { DETECTORS } from '../../lib/detectors.js';
import { headLabel } from './detectors.js';

/** The patterns' budget: past it, older records are thinned (their patterns dropped). */
export const PATTERN_BUDGET_BYTES = 32 * 2 ** 20;
/** At most this many records: past it, every second older record goes (its first labels stay). */
export const MAX_RECORDS = 2000;
/** The phase change rule's numbers (phaseChange below). */
export const PHASE = Object.freeze({ window: 25, skip: 50, factor: 3 });

/**
 * A history. add() a record per evaluation, in step order (a record at a step not after the last
 * one starts a new run: a reset or a loaded model clears it first, see clear()).
 * @param {{ budget?: number, maxRecords?: number }} [o]
 */
export function createHistory({ budget = PATTERN_BUDGET_BYTES, maxRecords = MAX_RECORDS } = {}) {
  let records = [];
  let bytes = 0;
  // "l.h.detector" -> { layer, head (1-based), detector, step, before (the step of the record
  // before it, null if it is the first) }: kept when records are thinned.
  let firsts = new Map();
  let pinned = null;   // a step the reader is looking at: never thinned

  const patternBytes = (p) => (p ? p.reduce((n, a) => n + a.byteLength, 0) : 0);
  // Records whose patterns (or whole selves) must stay: the first, the last, the pinned step, and
  // each first label's record and the one before it (what a reader scrubs to, to see the change).
  function keep(r, i) {
    if (i === 0 || i === records.length - 1 || r.step === pinned) return true;
    for (const f of firsts.values()) if (f.step === r.step || f.before === r.step) return true;
    return false;
  }
  // Drops the patterns of every second thinnable record until the patterns fit the budget.
  function thinPatterns() {
    while (bytes > budget) {
      const candidates = records.filter((r, i) => r.patterns && !keep(r, i));
      if (candidates.length === 0) return;
      for (let k = 0; k < candidates.length && bytes > budget; k += 2) {
        bytes -= patternBytes(candidates[k].patterns);
        candidates[k].patterns = null;
      }
    }
  }
  function thinRecords() {
    if (records.length <= maxRecords) return;
    let odd = false;
    records = records.filter((r, i) => {
      if (keep(r, i)) return true;
      odd = !odd;
      if (odd) bytes -= patternBytes(r.patterns);
      return !odd;
    });
  }

  return {
    /**
     * @param {{ step: number, trainLoss: number, heldOutLoss: number, accuracy: number,
     *   scores: object[], patterns: Float32Array[] | null }} record  scores: headScores' per layer;
     *   patterns: each layer's probe-row hook_pattern (H x T x T), copied here
     */
    add({ step, trainLoss, heldOutLoss, accuracy, scores, patterns }) {
      const last = records[records.length - 1];
      if (last && step <= last.step) this.clear();
      const before = records.length ? records[records.length - 1].step : null;
      const copy = patterns ? patterns.map((a) => a.slice()) : null;
      records.push({ step, trainLoss, heldOutLoss, accuracy, scores, patterns: copy });
      bytes += patternBytes(copy);
      scores.forEach((layer, l) => {
        const heads = layer[DETECTORS[0]]?.length ?? 0;
        for (let h = 0; h < heads; h++) {
          const label = headLabel(layer, h);
          const key = `${l}.${h + 1}.${label}`;
          if (label && !firsts.has(key)) firsts.set(key, { layer: l, head: h + 1, detector: label, step, before });
        }
      });
      thinRecords();
      thinPatterns();
    },
    clear() {
      records = [];
      bytes = 0;
      firsts = new Map();
      pinned = null;
    },
    /** Keeps the record at `step` (the one shown) from thinning; null: none. */
    pin(step) { pinned = step; },
    records: () => records,
    /** The record at `step`, or undefined. */
    at: (step) => records.find((r) => r.step === step),
    /** The bytes the kept patterns take. */
    bytes: () => bytes,
    /** Each head's first step with each label, in the order they happened. */
    firsts: () => [...firsts.values()].sort((a, b) => a.step - b.step || a.layer - b.layer || a.head - b.head),
    phaseChange: () => phaseChange(records),
  };
}

/**
 * The phase change of a run: where its held-out loss falls most steeply. The held-out loss is
 * smoothed over PHASE.window steps (each record's value: the mean over the records within half
 * the window either side, so the rule reads the same with 1-step or 25-step evaluations); the
 * slope between consecutive records is the smoothed fall per step; intervals that start before
 * step PHASE.skip are left out (every run first falls from its initial uniform guess to the
 * tokens' frequencies, which is no phase change); the steepest remaining fall counts when it is
 * at least PHASE.factor times the run's mean fall per step (first record to last). Null when no
 * interval qualifies. { from, to }: the interval's steps; lossFrom, lossTo: its smoothed losses.
 */
export function phaseChange(records, { window = PHASE.window, skip = PHASE.skip, factor = PHASE.factor } = {}) {
  const pts = records.filter((r) => Number.isFinite(r.heldOutLoss));
  if (pts.length < 3) return null;
  const half = Math.floor(window / 2);
  const smooth = new Array(pts.length);
  let lo = 0;
  let hi = 0;
  let sum = 0;
  for (let i = 0; i < pts.length; i++) {
    while (hi < pts.length && pts[hi].step <= pts[i].step + half) sum += pts[hi++].heldOutLoss;
    while (pts[lo].step < pts[i].step - half) sum -= pts[lo++].heldOutLoss;
    smooth[i] = sum / (hi - lo);
  }
  const first = 0;
  const last = pts.length - 1;
  const mean = (smooth[last] - smooth[first]) / Math.max(1, pts[last].step - pts[first].step);
  if (!(mean < 0)) return null;
  let best = null;
  for (let i = 1; i < pts.length; i++) {
    if (pts[i - 1].step < skip) continue;
    const slope = (smooth[i] - smooth[i - 1]) / (pts[i].step - pts[i - 1].step);
    if (best === null || slope < best.slope) best = { from: pts[i - 1].step, to: pts[i].step, slope, lossFrom: smooth[i - 1], lossTo: smooth[i] };
  }
  return best && best.slope < 0 && best.slope <= factor * mean ? best : null;
}
