// The views' one contract. Every view (walkthrough, heads, train, the what-if runner, and the demo
// page's loader) is a component made by create():
//
//   const view = walkthrough.create(root, { engine, state, ...options });
//   view.update(patch);   // a patch of the view's public state; a bad field throws, naming it
//   view.getState();      // a copy of the whole public state
//   view.destroy();       // frees the view's engine objects and empties `root`
//
// plus each view's extras (setCase, exportAs, ready, play / pause / step, ...). A view renders
// into `root` only (no ids, no document-level queries), so it can be created many times per
// page and inside shadow roots. defineView() checks what every create() takes, in one place.
import { HeadscopeError } from '../../lib/errors.js';

const ENGINE_METHOD = { attention: 'createMultiheadAttention', transformer: 'createTransformer' };

/**
 * A view's { create } from its mount function.
 * @param {string} name  the view's name in messages ("heads" -> "heads.create: options.engine: ...")
 * @param {(root: Element, options: object, where: string) => object} mount  builds the view in
 *   `root` from the checked options; `where` ("heads.create") names the call in its own messages
 * @param {{ engine?: 'attention' | 'transformer' | null, optionalEngine?: boolean }} [needs]
 *   engine: what options.engine must be (init()'s API: createMultiheadAttention; a worker's:
 *   createTransformer), null for a view that needs none; optionalEngine: the view starts its own
 *   when none is given
 */
export function defineView(name, mount, { engine = 'attention', optionalEngine = false } = {}) {
  const where = `${name}.create`;
  return {
    create(root, options = {}) {
      if (options === null || typeof options !== 'object') {
        throw new HeadscopeError('INVALID_ARGUMENT', `${where}: options: expected an object${engine && !optionalEngine ? ' with engine' : ''}`);
      }
      if (engine !== null && !(optionalEngine && options.engine === undefined) &&
          typeof options.engine?.[ENGINE_METHOD[engine]] !== 'function') {
        throw new HeadscopeError('INVALID_ARGUMENT', engine === 'attention'
          ? `${where}: options.engine: expected the API of init() from headscope`
          : `${where}: options.engine: expected the API of initWorker() from headscope`);
      }
      return mount(root, options, where);
    },
  };
}

/** The DISPOSED error of a call on a destroyed view. */
export function destroyedError(method) {
  return new HeadscopeError('DISPOSED', `${method}: the view was destroyed`);
}
