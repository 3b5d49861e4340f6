// The Train view's run, in Node: the tests that check the page's numbers against the same
// training outside the page (the view's Worker is the SIMD128 build, so a run is the same bits).
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { defaultTrainState, trainSetup } from '../../web/views/train/state.js';

/**
 * The default Train state (with `over`) trained `steps` steps as the view trains it (batches
 * task.batch(batch, k) from the run's seed): { model, task, state }. The caller disposes the model.
 */
export async function trainInNode(steps, over = {}) {
  const hs = await init({ simd: 'simd128' });
  const state = { ...defaultTrainState(), ...over };
  const task = makeTask(state.task, { seed: state.seed });
  const setup = trainSetup(state, task);
  const model = hs.createTransformer(setup.model);
  try {
    model.setOptimizer(setup.optimizer);
    for (let k = 0; k < steps; k++) {
      const { tokens, targets } = task.batch(state.batch, k);
      model.trainStep(tokens, targets);
    }
  } catch (e) {
    model.dispose();
    throw e;
  }
  return { model, task, state };
}
