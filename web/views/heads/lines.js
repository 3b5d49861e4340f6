// The Heads view's line view (after BertViz's head view).
import { headColor, headDashed } from '../common/head-colors.js';
import { headWeights } from './summaries.js';
import { button, el, partsOf, preserveFocus, quote, setText, svgEl } from '../common/dom.js';
import { headLabel, shownSize } from './data.js';

/** Lines lighter than this are not drawn. */
const LINE_MIN_WEIGHT = 0.02;
const LINE_ROW_PX = 24;
/** Upper ends of the weight bands the line view draws with one width and opacity each. */
const LINE_BANDS = [0.1, 0.25, 0.5, 0.75, Infinity];

/**
 * The line view, after BertViz: queries on the left, keys on the right, lines weighted by
 * attention, a colour per head (heads 9-16 reuse the colours, dashed). Hover or focus a token to
 * see only its lines; click (or Enter) pins it. A head's button shows or hides its lines (state.shown);
 * hiding only hides: a switched-off head (its card's "on" box, state.ablated) is drawn faded.
 */
export function renderLines(data, state, root, actions) {
  const { rows, cols } = shownSize(data);
  const average = state.view === 'average';
  const parts = partsOf(root, `${data.H}|${average}`, () => buildLines(data.H, root, actions, average));
  const sideLabels = (side, labels, count) => {
    const column = side === 'query' ? parts.queries : parts.keys;
    while (column.children.length > count) column.lastChild.remove();
    while (column.children.length < count) column.append(lineToken(side, column.children.length, actions));
    for (let i = 0; i < count; i++) {
      const b = column.children[i];
      setText(b, labels[i]);
      b.title = labels[i];
      b.setAttribute('aria-label', `${side} ${i + 1} ${quote(labels[i])}`);
    }
  };
  sideLabels('query', data.labels.queries, rows);
  sideLabels('key', data.labels.keys, cols);
  const height = Math.max(rows, cols) * LINE_ROW_PX;
  parts.svg.setAttribute('viewBox', `0 0 100 ${height}`);
  parts.svg.style.height = `${height}px`;

  const focus = state.pinned ?? state.hover;
  for (const b of parts.toggles.querySelectorAll('[data-head-toggle]')) {
    const h = Number(b.dataset.headToggle) - 1;
    b.setAttribute('aria-pressed', String(state.shown === null || state.shown.has(h)));
    b.classList.toggle('hs-head-toggle-off', state.ablated.has(h));
  }
  for (const column of [parts.queries, parts.keys]) {
    for (const b of column.children) {
      const [side, index] = b.dataset.lineToken.split(':');
      const at = (t) => t !== null && t.side === side && t.index === Number(index);
      b.classList.toggle('hs-lines-focus', at(focus));
      b.setAttribute('aria-pressed', String(at(state.pinned)));
    }
  }
  // One <path> per head and weight band (a few dozen elements, not one per line): width and
  // opacity follow the band's weight. The paths persist (parts.paths, by head and band): a frame
  // only rewrites the `d` of those whose lines changed.
  const n = Math.max(rows, cols);
  if (parts.ends?.length !== n) {
    parts.ends = Array.from({ length: n }, (_, k) => (k + 0.5) * LINE_ROW_PX);
    parts.from = parts.ends.map((y) => `M0 ${y}`);
    parts.to = parts.ends.map((y) => `L100 ${y}`);
  }
  const { from, to } = parts;
  const sets = average ? [{ h: null, w: data.average }]
    : Array.from({ length: data.H }, (_, h) => h).filter((h) => state.shown === null || state.shown.has(h))
      .map((h) => ({ h, w: headWeights(data.weights, { h, H: data.H, L: data.L, S: data.S }) }));
  const bandOf = (weight) => {
    for (let b = 0; b < LINE_BANDS.length; b++) if (weight < LINE_BANDS[b]) return b;
    return LINE_BANDS.length - 1;
  };
  parts.paths ??= new Map();
  const wanted = [];
  for (const { h, w } of sets) {
    const bands = LINE_BANDS.map(() => []);
    const S = data.S;
    for (let i = 0; i < rows; i++) {
      if (focus?.side === 'query' && focus.index !== i) continue;
      const row = i * S;
      for (let j = 0; j < cols; j++) {
        if (focus?.side === 'key' && focus.index !== j) continue;
        const weight = w[row + j];
        if (!(weight >= LINE_MIN_WEIGHT)) continue;
        bands[bandOf(weight)].push(from[i] + to[j]);
      }
    }
    bands.forEach((segments, b) => {
      if (segments.length === 0) return;
      const key = `${h}:${b}`;
      let path = parts.paths.get(key);
      if (path === undefined) {
        const mid = b === 0 ? (LINE_MIN_WEIGHT + LINE_BANDS[0]) / 2 : (LINE_BANDS[b - 1] + Math.min(1, LINE_BANDS[b])) / 2;
        path = svgEl('path', {
          fill: 'none', 'stroke-width': (1 + 3 * mid).toFixed(2), 'vector-effect': 'non-scaling-stroke',
        });
        path.mid = mid;
        if (h !== null) path.dataset.lineHead = String(h + 1);
        path.style.stroke = h === null ? 'var(--hs-fg)' : headColor(h);
        if (h !== null && headDashed(h)) path.setAttribute('stroke-dasharray', '6 3');
        parts.paths.set(key, path);
      }
      const d = segments.join('');
      if (path.getAttribute('d') !== d) path.setAttribute('d', d);
      // A switched-off head still attends; its lines are faded, since its output is removed.
      const opacity = ((h !== null && state.ablated.has(h) ? 0.3 : 1) * Math.min(1, 0.15 + 0.85 * path.mid)).toFixed(3);
      if (path.getAttribute('stroke-opacity') !== opacity) path.setAttribute('stroke-opacity', opacity);
      wanted.push(path);
    });
  }
  // The SVG's children made exactly `wanted`, in order, touching only what changed.
  const keep = new Set(wanted);
  for (const child of [...parts.svg.children]) if (!keep.has(child)) child.remove();
  wanted.forEach((path, k) => {
    if (parts.svg.children[k] !== path) parts.svg.insertBefore(path, parts.svg.children[k] ?? null);
  });
  if (state.pinned !== null) {
    const labels = state.pinned.side === 'query' ? data.labels.queries : data.labels.keys;
    setText(parts.hint, `Pinned: ${state.pinned.side} ${state.pinned.index + 1} ` +
      `${quote(labels[state.pinned.index] ?? '')}. Click it again (or press Enter) to unpin.`);
  } else {
    setText(parts.hint, 'Hover or focus a token to see only its lines; click it (or press Enter) to pin ' +
      'the selection. Line width and opacity follow the weight; weights under 0.02 are not drawn. ' +
      'Press a head above to hide or show its lines; a head switched off (its card\'s "on" box) is drawn faded.');
  }
}

function lineToken(side, index, actions) {
  const b = button('', 'hs-lines-token');
  b.dataset.lineToken = `${side}:${index}`;
  const target = { side, index };
  b.addEventListener('mouseenter', () => actions.hoverToken(target));
  b.addEventListener('focus', () => actions.hoverToken(target));
  b.addEventListener('mouseleave', () => actions.hoverToken(null));
  b.addEventListener('blur', () => actions.hoverToken(null));
  b.addEventListener('click', () => actions.pinToken(target));
  return b;
}

function buildLines(H, root, actions, average) {
  const toggles = el('div', 'hs-head-toggles');
  toggles.setAttribute('role', 'group');
  toggles.setAttribute('aria-label', 'Heads: press to show or hide a head\'s lines');
  if (!average) {
    for (let h = 0; h < H; h++) {
      const b = button('', 'hs-head-toggle');
      b.dataset.headToggle = String(h + 1);
      b.title = `Show or hide ${headLabel(h)}'s lines (hiding does not switch it off)`;
      b.style.setProperty('--hs-heads-color', headColor(h));
      const swatch = el('span', `hs-head-swatch${headDashed(h) ? ' hs-head-swatch-dashed' : ''}`);
      swatch.setAttribute('aria-hidden', 'true');
      b.append(swatch, headLabel(h));
      // The pressed state answers at once; the recomputed views follow in the next frame.
      b.addEventListener('click', () => b.setAttribute('aria-pressed', String(actions.toggleShown(h))));
      toggles.append(b);
    }
  } else {
    toggles.append(el('span', 'hs-note', 'Averaged weights: one set of lines for all heads.'));
  }
  const body = el('div', 'hs-lines-body');
  const queries = el('div', 'hs-lines-tokens hs-lines-query');
  queries.setAttribute('role', 'group');
  queries.setAttribute('aria-label', 'Queries (the tokens that attend)');
  const keys = el('div', 'hs-lines-tokens hs-lines-key');
  keys.setAttribute('role', 'group');
  keys.setAttribute('aria-label', 'Keys (the tokens attended to)');
  const svg = svgEl('svg', { class: 'hs-lines-svg', preserveAspectRatio: 'none', 'aria-hidden': 'true', focusable: 'false' });
  body.append(queries, svg, keys);
  const hint = el('p', 'hs-note hs-lines-hint');
  preserveFocus(root, () => root.replaceChildren(toggles, body, hint));
  return { toggles, queries, keys, svg, hint };
}
