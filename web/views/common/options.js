// Checks of the views' list options (hide, parts, stages): an unknown name is an error that names
// the option and lists what it accepts, never ignored.
import { HeadscopeError } from '../../lib/errors.js';

/**
 * `value` (an array of names, or a string of names separated by spaces or commas) as an array of
 * names from `allowed`; a HeadscopeError naming `where` otherwise.
 */
export function checkNames(value, allowed, where) {
  let names = value;
  if (typeof value === 'string') names = value.split(/[\s,]+/).filter(Boolean);
  if (!Array.isArray(names)) {
    throw new HeadscopeError('INVALID_ARGUMENT', `${where}: expected an array of names (any of ${allowed.join(', ')}), ` +
      `got ${value === null ? 'null' : typeof value}`);
  }
  const out = [];
  for (const [k, name] of names.entries()) {
    if (typeof name !== 'string' || !allowed.includes(name)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `${where}: unknown name ${JSON.stringify(String(name)).slice(0, 60)}` +
        `${typeof value === 'string' ? '' : ` at [${k}]`} (expected any of ${allowed.join(', ')})`);
    }
    out.push(name);
  }
  return out;
}

/**
 * A view's onChange reporter: changed(cause) calls onChange(state, cause) when getState()'s
 * state differs from the one last reported (or marked with settle(), while mounting), as `key`
 * tells them apart (default: the state's JSON; a view may count what its state leaves out). A
 * listener's exception must not break the view: it is rethrown in a microtask, where the page's
 * author sees it.
 */
export function changeReporter(getState, onChange, { key: keyOf = (s) => JSON.stringify(s) } = {}) {
  let reported = null;
  return {
    settle() {
      reported = keyOf(getState());
    },
    changed(cause) {
      if (reported === null) return;
      const s = getState();
      const key = keyOf(s);
      if (key === reported) return;
      reported = key;
      try {
        onChange(s, cause);
      } catch (e) {
        queueMicrotask(() => { throw e; });
      }
    },
  };
}
