// The Train view's options: what create() takes, checked before anything is mounted (a bad
// option throws a HeadscopeError naming it).
import { initWorker } from '../../lib/index.js';
import { checkNames } from '../common/options.js';
import { applyTrainState, defaultTrainState } from './state.js';

/** Parts a `hide` option can name. */
export const TRAIN_CONTROLS = ['task', 'model', 'optimizer', 'buttons', 'history', 'variants', 'detectors', 'ablation', 'inside', 'whatif'];

// The view's own engine: a Worker of the SIMD128 build, not the relaxed one, so that a run is
// the same bits in every browser, on every CPU and in Node (the relaxed build's fused
// multiply-adds depend on the CPU), and a link to a run is that run.
const ownWorker = () => initWorker(undefined, { simd: 'simd128' });

/**
 * The checked options.
 * @param {{ engine?: object, state?: object, onStatus?: (text: string) => void,
 *   onChange?: (state: object, cause: string) => void, onOpenHead?: Function | null,
 *   hide?: string[] | string, compact?: boolean, worker?: () => Promise<object> }} o
 *   engine: initWorker()'s API to train in (it stays the caller's: the view does not end it);
 *   without one the view starts a Worker of its own (`worker` starts it: default initWorker() of
 *   the SIMD128 build) and ends it on destroy; state: the setup and the step to train to;
 *   onOpenHead(caseDocument, { layer, head, step, tokens, state }) (layer-case.js openedHead): a
 *   head's "Open in the Heads view" button (none without it); hide: parts not shown
 *   (TRAIN_CONTROLS); compact: no intro or headings
 * @param {string} where  the call, in messages ("train.create")
 */
export function readTrainOptions({ engine, state, onStatus = () => {}, onChange = () => {}, onOpenHead = null,
  hide = [], compact = false, worker = ownWorker }, where) {
  const hidden = new Set(checkNames(hide, TRAIN_CONTROLS, `${where}: options.hide`));
  const start = applyTrainState(state ?? {}, defaultTrainState(), `${where}: options.state`);
  return { hidden, start, onStatus, onChange, onOpenHead, compact,
    startWorker: engine === undefined ? worker : () => Promise.resolve(engine), ownsEngine: engine === undefined };
}
