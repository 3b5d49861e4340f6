// The Train view's training controls as actions: Play (chunks of t.chunk steps, each with its
// evaluation, until paused or a step is refused), Pause, Step (n steps, in chunks), Reset (a new
// model at step 0), training to a step (a link's, update()'s or "Train to step"'s, with its
// progress in the message line), and a new setup from the form or update() (a new model from step
// 0; while playing it goes on playing, and says so).
import { HeadscopeError } from '../../lib/errors.js';
import { applyTrainState, headsDivide, MAX_STEPS, sameSetup, TRAIN_KEYS } from './state.js';
import { createRateMeter } from './rate.js';

/** Steps per chunk (between two evaluations) that the speed control offers; 25 by default. */
export const CHUNKS = [1, 5, 25, 100];
export const DEFAULT_CHUNK = 25;

// The largest head count <= h that divides d (a dModel change keeps the heads when it can).
function gcdHeads(d, h) {
  for (let k = Math.min(d, h); k >= 1; k--) if (d % k === 0) return k;
  return 1;
}

/**
 * @param {object} t  the view's shared fields (view.js): state, playing, chunk, lastRate,
 *   generation, destroyed
 * @param {{ session: object, sync: () => void, fail: (e: unknown) => void,
 *   changed: (cause: string) => void, say: (text: string, o?: object) => void,
 *   viewFields: (state: object) => Promise<void> }} o  session: session.js's; sync: shows the
 *   state in the controls; say: the message line (also clears an error); viewFields: shows the
 *   state's off and log (view.js); refused(e): the form's setup was refused (e names the field);
 *   accepted(): a setup (the form's or update()'s) was accepted
 */
export function createPlayback(t, { session, sync, fail, changed, say, viewFields, refused, accepted }) {
  const { serial } = session;
  const meter = createRateMeter();
  let running = 0;   // loops training on their own (Play, trainTo): the rate shows while any runs

  // One chunk (at most `n` steps), its evaluation, and the rate while a run goes on.
  async function chunk(n) {
    const ok = await serial(() => session.trainSteps(Math.min(t.chunk, n)));
    t.lastRate = running ? meter.add(performance.now(), t.state.steps) : 0;
    sync();
    return ok;
  }
  function begin() {
    if (running++ === 0) meter.start(performance.now(), t.state.steps);
  }
  function end() {
    if (--running === 0) {
      meter.stop();
      t.lastRate = 0;
      sync();
    }
  }

  async function loop() {
    const mine = t.generation;
    begin();
    try {
      while (t.playing && !t.destroyed && mine === t.generation) {
        if (t.state.steps >= MAX_STEPS || !(await chunk(MAX_STEPS - t.state.steps))) t.playing = false;
      }
    } finally {
      end();
    }
  }

  function play() {
    if (t.playing || t.destroyed) return;
    t.playing = true;
    say('');
    sync();
    loop().catch(fail);
  }

  function pause() {
    t.playing = false;
    sync();
  }

  function reset() {
    t.playing = false;
    t.generation++;
    return serial(async () => {
      await session.newModel();
      changed('reset');
    }).catch((e) => {
      fail(e);
      throw e;
    });
  }

  /**
   * Trains up to step `to` in chunks, each with its evaluation (the curve and the history get
   * their points), as playing would; a refused step or a reset stops it. `verb` ('Replaying',
   * 'Training'): the message line shows the progress ("Replaying to step 2000: 40%") and the time
   * it took; none: quiet (Step).
   */
  async function trainTo(to, verb = null) {
    const mine = t.generation;
    const from = t.state.steps;
    const started = performance.now();
    const progress = () => say(`${verb} to step ${to}: ${Math.floor((100 * (t.state.steps - from)) / Math.max(1, to - from))}%`);
    if (verb && to > from) progress();
    if (verb) begin();
    try {
      while (t.state.steps < to && mine === t.generation && !t.destroyed) {
        if (!(await chunk(to - t.state.steps))) return;
        if (verb && t.state.steps < to && mine === t.generation) progress();
      }
    } finally {
      if (verb) end();
    }
    if (verb && to > from && t.state.steps === to && mine === t.generation) {
      say(`${verb === 'Replaying' ? 'Replayed' : 'Trained'} to step ${to} in ${((performance.now() - started) / 1000).toFixed(1)} s.`);
    }
  }

  /** n more steps, in chunks of the speed control's size (each with its evaluation). */
  function step(n = 1) {
    if (!Number.isInteger(n) || n < 1 || n > 100_000) {
      return Promise.reject(new HeadscopeError('INVALID_ARGUMENT', `step: n: expected an integer in [1, 100000], got ${String(n)}`));
    }
    if (t.state.steps + n > MAX_STEPS) {
      const e = new HeadscopeError('INVALID_ARGUMENT', `step: n: the model is at step ${t.state.steps}; the Train view trains to step ${MAX_STEPS} at most`);
      fail(e);
      return Promise.reject(e);
    }
    return trainTo(t.state.steps + n).catch((e) => {
      fail(e);
      throw e;
    });
  }

  /**
   * "Train to step N": a checked number (the field's text, from the page); past the model's step
   * it trains there with its progress; otherwise it says why not. Resolves when done: false when
   * refused.
   */
  function trainToStep(text) {
    const n = Number(text);
    if (String(text).trim() === '' || !Number.isInteger(n) || n < 1 || n > MAX_STEPS) {
      say(`Train to step: expected an integer in [1, ${MAX_STEPS}], got ${JSON.stringify(String(text).slice(0, 20))}`, { keepError: true, error: true });
      return Promise.resolve(false);
    }
    if (n <= t.state.steps) {
      say(`Train to step: the model is already at step ${t.state.steps}; give a later step (or Reset, or look back with the history's scrubber)`,
        { keepError: true, error: true });
      return Promise.resolve(false);
    }
    return trainTo(n, 'Training').then(() => changed('input')).catch(fail).then(() => true);
  }

  /** update(): a new setup resets to step 0; `steps` beyond the current step trains up to it. */
  async function update(patch) {
    const next = applyTrainState(patch, t.state);
    accepted();
    if (!sameSetup(next, t.state) || next.steps < t.state.steps) {
      const to = next.steps;
      t.state = { ...next, steps: 0, off: [] };
      await reset();
      if (to > 0) await trainTo(to, 'Replaying');
    } else if (next.steps > t.state.steps) {
      await trainTo(next.steps, 'Replaying');
    }
    await viewFields(next);
    changed('setState');
  }

  /** The form's setup (controls.js's readSetup): a change is a new model from step 0. */
  function setup(patch) {
    if (!headsDivide(patch)) patch.heads = Math.min(patch.dModel, t.state.heads) > 0 ? gcdHeads(patch.dModel, patch.heads) : 1;
    // New heads: K/V heads that were the heads follow them, and so do K/V heads that no longer divide.
    if (patch.heads !== t.state.heads && (t.state.kvHeads === t.state.heads || patch.heads % patch.kvHeads !== 0)) patch.kvHeads = patch.heads;
    let next;
    try {
      next = applyTrainState(patch, t.state, 'Train');
    } catch (e) {
      refused(e);
      return;
    }
    accepted();
    say('');
    if (sameSetup(next, t.state)) {
      sync();   // the fields as the state (a refused field, corrected back to the value in use)
      return;
    }
    // A new setup is a new model from step 0, which the reader should hear about: the trained
    // steps are gone, and a run that was playing goes on playing from 0.
    const what = TRAIN_KEYS.filter((k) => !['steps', 'off', 'log'].includes(k) && next[k] !== t.state[k]).join(', ');
    const was = t.state.steps;
    const playing = t.playing;
    t.state = { ...next, steps: 0 };
    reset().then(() => {
      if (playing) play();
      if (was > 0 || playing) {
        say(`The setup changed (${what}): a new model from step 0; the run to step ${was} is gone${playing ? '. Playing on from step 0' : ''}.`);
      }
    }, () => {});
  }

  return { play, pause, reset, trainTo, trainToStep, step, update, setup };
}
