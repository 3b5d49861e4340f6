// DOM helpers shared by the views: elements made here (user text only through textContent), focus
// kept across rebuilds, and per-root persistent parts, so views update in place.

export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** An element whose changes are announced politely to screen readers (role="status"). */
export function statusEl(tag, className, text) {
  const e = el(tag, className, text);
  e.setAttribute('role', 'status');
  return e;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
export function svgEl(tag, attributes = {}) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attributes)) e.setAttribute(k, String(v));
  return e;
}

export function button(text, className = '') {
  const b = el('button', className, text);
  b.type = 'button';
  return b;
}

export function labelled(text, control, className = '') {
  const label = el('label', className);
  label.append(el('span', 'hs-heads-label', text), control);
  return label;
}

/**
 * A select's options: `values`, each shown as text(v) with the value String(v); rebuilt only when
 * they change (a rebuild would lose the reader's place in an open list).
 */
export function setOptions(select, values, text = String) {
  const key = values.map((v) => `${v}:${text(v)}`).join(',');
  if (select.dataset.options === key) return;
  select.dataset.options = key;
  select.replaceChildren(...values.map((v) => {
    const o = el('option', '', text(v));
    o.value = String(v);
    return o;
  }));
}

/** A named checkbox inside its label (the text after the box): { input, label }. */
export function checkbox(name, text) {
  const input = el('input');
  input.type = 'checkbox';
  input.name = name;
  const label = el('label');
  label.append(input, text);
  return { input, label };
}

/** A table's header row: one <th scope="col"> per text. */
export function columnHeads(texts) {
  const tr = el('tr');
  for (const text of texts) {
    const th = el('th', '', text);
    th.scope = 'col';
    tr.append(th);
  }
  return tr;
}

export function quote(token) {
  return `“${token}”`;
}

// The element that has focus inside `container` (a document or a shadow root), if any.
export function focusedIn(container) {
  const active = container.getRootNode().activeElement;
  return active && container.contains(active) ? active : null;
}

// Rebuilding a view replaces the element that had focus: find its counterpart by its stable hooks
// (name, data-* attributes) and focus that, so keyboard users keep their place.
export function preserveFocus(container, rebuild) {
  const active = focusedIn(container);
  const hooks = active ? [...active.attributes]
    .filter((a) => a.name === 'name' || a.name.startsWith('data-'))
    .map((a) => `[${a.name}="${CSS.escape(a.value)}"]`).join('') : '';
  rebuild();
  if (hooks) container.querySelector(`${active.tagName.toLowerCase()}${hooks}`)?.focus();
}

export function setText(element, text) {
  if (element.textContent !== text) element.textContent = text;
}

// Label spans of a heatmap axis, reused and updated.
export function syncLabels(container, labels) {
  while (container.children.length > labels.length) container.lastChild.remove();
  while (container.children.length < labels.length) container.append(el('span'));
  labels.forEach((label, k) => {
    const span = container.children[k];
    setText(span, label);
    if (span.title !== label) span.title = label;
  });
}


// Persistent parts of a view, per root element: rebuilt only when `key` (the view's structure)
// changes.
const viewParts = new WeakMap();
export function partsOf(root, key, build) {
  let parts = viewParts.get(root);
  if (parts === undefined || parts.key !== key) {
    parts = { key, ...build() };
    viewParts.set(root, parts);
  }
  return parts;
}
