// headscope's views as components (package export 'headscope/views'), for pages that build
// their own layout instead of using the widgets (headscope/widgets makes these same components):
//
//   import { init } from 'headscope';
//   import { heads, walkthrough, train, whatIf, STYLESHEET_URL } from 'headscope/views';
//   const engine = await init();
//   const view = heads.create(document.querySelector('#here'), { engine, state: { text: 'a b c', heads: 2 } });
//   view.update({ off: [2] });        // a patch of the state (each view's state.js)
//   view.getState();                  // a copy of the whole state
//   view.destroy();
//
// Every view is create(root, { engine, state, ...options }) -> { update, getState, destroy } plus
// its extras (common/component.js); the Train view and the what-if runner start Workers of their
// own unless given an engine (initWorker()'s). A view renders into `root` (also inside a shadow
// root) with the classes of headscope.css: link STYLESHEET_URL in the document or shadow root it
// lives in. Its parts are exported too: the canvas heatmap, the matrix table and the colour scales.
import { walkthrough } from './walkthrough/view.js';
import { heads } from './heads/view.js';
import { train } from './train/view.js';
import { whatIf } from './train/whatif.js';

export { renderHeatmap } from './common/heatmap.js';
export { renderMatrix } from './common/matrix.js';
export { renderLegend } from './common/legend.js';
export { makeScale, colorFor } from './common/scale.js';
export { formatNumber } from './common/numbers.js';
export { applyHeadsState, defaultHeadsState, HEAD_COUNTS, PRESET_NAMES } from './heads/state.js';
export {
  applyWalkthroughState, publicWalkthroughState, WALKTHROUGH_CONTROLS, WALKTHROUGH_PRESETS, WALKTHROUGH_STAGES,
} from './walkthrough/state.js';
export { HEADS_CONTROLS, HEADS_PARTS } from './heads/options.js';
export { TRAIN_CONTROLS } from './train/options.js';
export { heads, walkthrough, train, whatIf };

/** The views' stylesheet. */
export const STYLESHEET_URL = new URL('./headscope.css', import.meta.url).href;

// The mount functions of earlier versions, kept for pages that call them: thin wrappers over
// create() (`hs` is create's `engine`) whose view also answers to the old names setState
// (update) and loadCase (setCase).
const withOldNames = (view) => ({ ...view, setState: view.update, loadCase: view.setCase });

/** Deprecated: heads.create(root, { engine: hs, ...options }), also as setState / loadCase. */
export function mountHeads(root, { hs, ...options } = {}) {
  return withOldNames(heads.create(root, { engine: hs, ...options }));
}

/** Deprecated: walkthrough.create(root, { engine: hs, ...options }), also as setState / loadCase. */
export function mountWalkthrough(root, { hs, ...options } = {}) {
  return withOldNames(walkthrough.create(root, { engine: hs, ...options }));
}
