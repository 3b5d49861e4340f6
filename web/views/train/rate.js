// The Train view's steps per second: the steps trained over the last second of wall-clock time,
// evaluations and drawing included, while training runs on its own (Play, a link's replay, "Train
// to step"). One chunk's own rate jumped between 17 (a single Step's round trip) and 575 (a chunk
// of 25 steps without its evaluation), which said little about how fast the run goes.

/** The window the rate is measured over. */
export const RATE_WINDOW_MS = 1000;

export function createRateMeter(windowMs = RATE_WINDOW_MS) {
  let samples = [];   // [time in ms, step], oldest first
  return {
    /** A run starts at `step` (time `now`): the rate starts again from it. */
    start(now, step) { samples = [[now, step]]; },
    stop() { samples = []; },
    /**
     * A chunk ended at `step`: the rate over the last window (the oldest sample kept is the
     * last one at or before the window's start, so the span covers the window once it can); 0
     * before a run's first chunk has ended.
     */
    add(now, step) {
      if (samples.length === 0) {
        samples = [[now, step]];
        return 0;
      }
      samples.push([now, step]);
      while (samples.length > 2 && samples[1][0] <= now - windowMs) samples.shift();
      const [t0, s0] = samples[0];
      return now > t0 ? ((step - s0) * 1000) / (now - t0) : 0;
    },
  };
}
