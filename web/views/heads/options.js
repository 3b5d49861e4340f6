// The Heads view's options: what create() takes besides the engine, checked before anything is
// mounted (a bad option throws a HeadscopeError naming it).
import { checkNames } from '../common/options.js';
import { applyHeadsState, defaultHeadsState } from './state.js';

/** Controls a `hide` option can name, and the parts a `parts` option can show. */
export const HEADS_CONTROLS = ['text', 'weights', 'heads', 'seed', 'sharpness', 'causal', 'view', 'batch',
  'padding', 'presets', 'switches', 'export', 'explain', 'variants'];
export const HEADS_PARTS = ['grid', 'lines', 'ablation'];

/**
 * The checked options.
 * @param {{ onStatus?: (text: string) => void, state?: object, text?: string,
 *   numHeads?: 1 | 2 | 4 | 8 | 16, hide?: string[] | string, parts?: string[] | string,
 *   compact?: boolean, readonly?: boolean, onChange?: (state: object, cause: string) => void }} o
 *   state: the starting state (state.js; text and numHeads are shorthands for its text and heads);
 *   hide: controls not shown (HEADS_CONTROLS); parts: the parts shown (HEADS_PARTS, default all);
 *   compact: no intro, headings or notes; readonly: the reader explores (hover, focus, pins) but
 *   changes nothing; onChange: called after each change of the state by the reader or update()
 * @param {string} where  the call, in messages ("heads.create")
 */
export function readHeadsOptions({ onStatus = () => {}, state, text, numHeads, hide = [], parts = HEADS_PARTS,
  compact = false, readonly = false, onChange = () => {} }, where) {
  const hidden = new Set(checkNames(hide, HEADS_CONTROLS, `${where}: options.hide`));
  const shownParts = new Set(checkNames(parts, HEADS_PARTS, `${where}: options.parts`));
  let start = defaultHeadsState();
  if (numHeads !== undefined) start = applyHeadsState({ heads: numHeads }, start, `${where}: options.numHeads`);
  if (text !== undefined) start = applyHeadsState({ text }, start, `${where}: options.text`);
  if (state !== undefined) start = applyHeadsState(state, start, `${where}: options.state`);
  return { onStatus, onChange, hidden, shownParts, start, compact, readonly };
}
