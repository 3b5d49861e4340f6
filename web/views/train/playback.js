// The Train view's training controls as actions: Play (chunks of CHUNK_STEPS until paused or a
// step is refused), Pause, Step, Reset (a new model at step 0), training to a step (a link's, or
// update()'s), and a new setup from the form or update() (a new model from step 0).
import { HeadscopeError } from '../../lib/errors.js';
import { applyTrainState, headsDivide, sameSetup } from './state.js';

/** Steps per chunk between two evaluations while playing. */
const CHUNK_STEPS = 25;

// The largest head count <= h that divides d (a dModel change keeps the heads when it can).
function gcdHeads(d, h) {
  for (let k = Math.min(d, h); k >= 1; k--) if (d % k === 0) return k;
  return 1;
}

/**
 * @param {object} t  the view's shared fields (view.js): state, playing, lastRate, generation,
 *   destroyed
 * @param {{ session: object, sync: () => void, fail: (e: unknown) => void,
 *   changed: (cause: string) => void, say: (text: string) => void }} o  session: session.js's;
 *   sync: shows the state in the controls; say: the message line (also clears an error)
 */
export function createPlayback(t, { session, sync, fail, changed, say }) {
  const { serial } = session;

  async function loop() {
    while (t.playing && !t.destroyed) {
      const ok = await serial(() => session.trainSteps(CHUNK_STEPS));
      if (!ok) t.playing = false;
    }
    sync();
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
    t.lastRate = 0;
    return serial(async () => {
      await session.newModel();
      changed('reset');
    }).catch((e) => {
      fail(e);
      throw e;
    });
  }

  // Trains up to step `to` in chunks, each with its evaluation (the curve gets its points), as
  // playing would; a refused step or a reset stops it.
  async function trainTo(to) {
    const mine = t.generation;
    while (t.state.steps < to && mine === t.generation && !t.destroyed) {
      const ok = await serial(() => session.trainSteps(Math.min(CHUNK_STEPS, to - t.state.steps)));
      if (!ok) break;
    }
  }

  function step(n = 1) {
    if (!Number.isInteger(n) || n < 1 || n > 100_000) {
      return Promise.reject(new HeadscopeError('INVALID_ARGUMENT', `step: n: expected an integer in [1, 100000], got ${String(n)}`));
    }
    return serial(() => session.trainSteps(n)).catch((e) => {
      fail(e);
      throw e;
    });
  }

  /** update(): a new setup resets to step 0; `steps` beyond the current step trains up to it. */
  async function update(patch) {
    const next = applyTrainState(patch, t.state);
    if (!sameSetup(next, t.state) || next.steps < t.state.steps) {
      const to = next.steps;
      t.state = { ...next, steps: 0 };
      await reset();
      if (to > 0) await trainTo(to);
    } else if (next.steps > t.state.steps) {
      await trainTo(next.steps);
    }
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
      say(e.message, { keepError: true });
      return;
    }
    say('', { keepError: true });
    if (sameSetup(next, t.state)) return;
    t.state = { ...next, steps: 0 };
    reset().catch(() => {});
  }

  return { play, pause, reset, trainTo, step, update, setup };
}
