// Data transforms of the Heads view, with no DOM: text -> tokens -> deterministic features ->
// weights whose heads mean something -> summary numbers of the attention the engine computed.
// They run unchanged in Node (tests/js/transforms.test.js) and in browsers. One module per step;
// this one gathers them (`import * as T from './transforms.js'`).
//
// Nothing here computes attention: the engine does (mha.trace / mha.forward). These functions only
// prepare its inputs (embeddings, state_dicts, masks) and summarise its outputs (output
// differences; the per-head entropy, distance and max weight are the engine's, options.headStats).
export { seededRandom, hashString } from './random.js';
export { DEFAULT_TEXT, MAX_TOKENS, tokenize, KEYWORDS, isKeyword, tokenClasses } from './tokens.js';
export { PRESET_LENGTH, CLASS_FEATURES, featureLayout, IDENTITY_SEED, embed } from './features.js';
export { positionMargin } from './channels.js';
export { PRESETS, ALL_PRESETS, PRESET_DESCRIPTIONS, defaultPresets } from './presets.js';
export { buildStateDict, randomStateDict, ablateStateDict, groupKeyValues } from './weights.js';
export { causalMask, keyPaddingMask } from './masks.js';
export { variantCall, headsBlocked, kvHeadChoices, ropeDimChoices } from './variant-state.js';
export {
  HEAD_STATS, headStatsRow, meanOverHeads, headWeights, argmaxRows, outputDifference, batchRows,
} from './summaries.js';
export { HEAD_COLORS, headColor, headDashed } from '../common/head-colors.js';
