// The Walkthrough's engine call: one trace() of the library per change (self-attention,
// unbatched), on one MultiheadAttention per (E, H, bias), reused across edits.
import { maskTerms, moduleConfig, toStateDict, traceOptions } from './model.js';

/** @param {object} hs init()'s API */
export function createWalkthroughEngine(hs) {
  let mha = null;
  let mhaKey = '';
  return {
    /**
     * The trace of `state` and what its masks add to the scores (for the explanations): every
     * number the view shows. Throws the library's error for numbers it refuses.
     */
    run(state) {
      const config = moduleConfig(state);
      const key = `${config.embedDim}/${config.numHeads}/${config.bias}`;
      if (key !== mhaKey) {
        mha?.dispose();
        mha = null;
        mhaKey = '';
        mha = hs.createMultiheadAttention(config);
        mhaKey = key;
      }
      mha.loadStateDict(toStateDict(state));
      const trace = mha.trace(state.x, state.x, state.x, traceOptions(state));
      return { trace, masks: maskTerms(state) };
    },
    dispose() {
      mha?.dispose();
      mha = null;
    },
  };
}
