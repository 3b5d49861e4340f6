// The Heads view's token chips (key padding).
import { tokenClasses } from './tokens.js';
import { button, quote, setText } from '../common/dom.js';

/** Token chips: click (or Enter) a token to pad it (key_padding_mask): no query may look at it. */
export function renderChips(tokens, state, root, actions) {
  while (root.children.length > tokens.length) root.lastChild.remove();
  while (root.children.length < tokens.length) {
    const j = root.children.length;
    const b = button('', 'hs-token-chip');
    b.dataset.padToken = String(j);
    b.title = 'Pad this key (key_padding_mask)';
    b.addEventListener('click', () => actions.togglePadding(j));
    root.append(b);
  }
  tokens.forEach((t, j) => {
    const b = root.children[j];
    setText(b, t);
    const classes = tokenClasses(t);
    for (const k of ['number', 'keyword', 'punct']) b.classList.toggle(`hs-token-${k}`, classes[k]);
    b.setAttribute('aria-pressed', String(state.padded.has(j)));
    b.setAttribute('aria-label', `Pad token ${j + 1} ${quote(t)}`);
  });
}
