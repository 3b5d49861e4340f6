// The Walkthrough's options: what create() takes besides the engine, checked before anything is
// mounted (a bad option throws a HeadscopeError naming it).
import { HeadscopeError } from '../../lib/errors.js';
import { checkNames } from '../common/options.js';
import { WALKTHROUGH_CONTROLS, WALKTHROUGH_STAGES, applyWalkthroughState } from './state.js';
import { seedState } from './model.js';

/**
 * The checked options.
 * @param {{ onStatus?: (text: string) => void, initialCase?: object | string, state?: object,
 *   stages?: string[] | string, heads?: number[] | string | null, hide?: string[] | string,
 *   compact?: boolean, readonly?: boolean, onChange?: (state: object, cause: string) => void }} o
 *   state: the starting numbers (state.js); stages: the stages shown (WALKTHROUGH_STAGES, default
 *   all); heads: the heads shown (1-based; null: all; the others still compute); hide: controls
 *   not shown (WALKTHROUGH_CONTROLS); compact: no title or intro; readonly: nothing editable;
 *   onChange: after each change of the numbers or sizes
 * @param {string} where  the call, in messages ("walkthrough.create")
 */
export function readWalkthroughOptions({ onStatus = () => {}, initialCase, state, stages = WALKTHROUGH_STAGES,
  heads = null, hide = [], compact = false, readonly = false, onChange = () => {} }, where) {
  const shownStages = new Set(checkNames(stages, WALKTHROUGH_STAGES, `${where}: options.stages`));
  const hidden = new Set(checkNames(hide, WALKTHROUGH_CONTROLS, `${where}: options.hide`));
  const shownHeads = checkHeads(heads, `${where}: options.heads`);
  let start = seedState();
  if (state !== undefined) start = applyWalkthroughState(state, start, `${where}: options.state`);
  return { onStatus, onChange, initialCase, start, shownStages, shownHeads, hidden, compact, readonly };
}

/** The heads option: null (all) or 1-based head numbers (heads beyond H show nothing). */
export function checkHeads(value, where) {
  if (value === null || value === undefined) return null;
  const list = typeof value === 'string' ? value.split(/[\s,]+/).filter(Boolean).map(Number) : value;
  if (!Array.isArray(list) || list.some((h) => !Number.isInteger(h) || h < 1 || h > 16)) {
    throw new HeadscopeError('INVALID_ARGUMENT', `${where}: expected null or head numbers in [1, 16] (1-based), ` +
      `got ${Array.isArray(value) ? JSON.stringify(value).slice(0, 60) : JSON.stringify(String(value)).slice(0, 60)}`);
  }
  return [...new Set(list)].sort((a, b) => a - b);
}
