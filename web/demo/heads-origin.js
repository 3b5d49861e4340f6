// Where the Heads view's case came from, in the page's URL. A case (a head the Train view opened, a
// file loaded in Your weights) is weights, not settings: the hash cannot hold it, and the Heads
// view's own parameters describe its sentence, so `#heads?show=2` written while it showed a
// trained head reopened the hand-built heads. While a case is shown the hash is a marker instead,
//
//   #heads?from=train&layer=1&head=2&train=task%3Dinduction%26steps%3D500   (the Train view's query)
//   #heads?from=file&name=my-case
//
// which a reload turns into the hand-built heads and a message saying what the link showed and how
// to see it again (for a Train head: a link to the Train view's run, which trains to the same step,
// the same numbers, where "Open in the Heads view" opens it again).
import { failParam, formatHash, numberOf } from '../views/common/url-state.js';
import { applyTrainState, defaultTrainState } from '../views/train/state.js';
import { decodeTrainState, encodeTrainState } from '../views/train/url-state.js';

const KEYS = { train: ['from', 'layer', 'head', 'train'], file: ['from', 'name'] };

/**
 * The marker's parameters (without '#heads?') of an origin: { from: 'train', layer, head, state }
 * (state: the Train view's public state when it opened the head) or { from: 'file', name }.
 */
export function encodeHeadsOrigin(origin) {
  const params = new URLSearchParams({ from: origin.from });
  if (origin.from === 'train') {
    params.set('layer', String(origin.layer));
    params.set('head', String(origin.head));
    params.set('train', encodeTrainState(origin.state));
  } else if (origin.name) {
    params.set('name', origin.name);
  }
  return params.toString();
}

/** Whether a Heads query is a marker (has `from`). */
export const isHeadsOrigin = (query) => new URLSearchParams(query).has('from');

/** A marker's origin; a bad or unknown parameter is an error naming it. */
export function decodeHeadsOrigin(query) {
  const params = new URLSearchParams(query);
  const from = params.get('from');
  if (!Object.hasOwn(KEYS, from)) failParam('from', `expected train or file, got ${JSON.stringify(String(from).slice(0, 20))}`);
  for (const [name] of params) {
    if (!KEYS[from].includes(name)) failParam(name, `unknown (a Heads link from ${from === 'train' ? 'the Train view' : 'a file'} has ${KEYS[from].join(', ')})`);
    if (params.getAll(name).length > 1) failParam(name, 'given twice');
  }
  if (from === 'file') return { from, name: params.get('name') ?? '' };
  const index = (name, min) => {
    const v = numberOf(params.get(name) ?? '', name);
    if (!Number.isInteger(v) || v < min) failParam(name, `expected an integer >= ${min}, got ${params.get(name).slice(0, 20)}`);
    return v;
  };
  const train = params.get('train') ?? '';
  // The Train view's own checks, so that the message's link is one the Train view takes.
  const state = applyTrainState(decodeTrainState(train), defaultTrainState(), 'URL parameter train');
  return { from, layer: index('layer', 0), head: index('head', 1), state, trainHash: formatHash('train', train) };
}

/**
 * What the page says when a marker is opened: the text around a link ({ href, text }, or null),
 * as { before, link, after }.
 */
export function describeHeadsOrigin(origin) {
  const shows = 'A link cannot hold weights, so the Heads view shows its hand-built heads.';
  if (origin.from === 'file') {
    return { before: `This link showed ${origin.name ? `case ${origin.name}` : 'a case file'}, loaded in Your weights. ` +
      `${shows} Load the file again to see it.`, link: null, after: '' };
  }
  const name = `L${origin.layer} H${origin.head}`;
  return {
    before: `This link showed ${name} of a model trained in the Train view (${origin.state.task}, step ${origin.state.steps}). ` +
      `${shows} To see that head again, `,
    link: { href: origin.trainHash, text: 'open the Train view at that run' },
    after: ` (it trains to step ${origin.state.steps} again, the same numbers) and press "Open in the Heads view" on ${name}.`,
  };
}
