// Where an explanation box opens: next to the cell it explains, never over it.

/**
 * Places `box` (absolutely positioned inside `container`) next to `anchor` without covering it:
 * under the anchor when it fits in the viewport there (or there is more room below), otherwise
 * above; left-aligned with the anchor, kept inside the container's width.
 */
export function placeNear(box, anchor, container, { gap = 6 } = {}) {
  const c = container.getBoundingClientRect();
  const a = anchor.getBoundingClientRect();
  const height = box.offsetHeight;
  const width = box.offsetWidth;
  const viewport = window.innerHeight || document.documentElement.clientHeight;
  const below = viewport - a.bottom;
  const above = a.top;
  const under = height + gap <= below || below >= above;
  const top = under ? a.bottom - c.top + gap : a.top - c.top - height - gap;
  const left = Math.max(0, Math.min(a.left - c.left, c.width - width));
  box.style.top = `${Math.round(top)}px`;
  box.style.left = `${Math.round(left)}px`;
  box.dataset.side = under ? 'below' : 'above';
}
