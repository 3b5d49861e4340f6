// The Train view's charts draw in CSS pixels: each SVG's viewBox is as wide as the SVG's content
// box on the screen, so its 12 px text is 12 px at any width (a fixed 640-unit viewBox shrunk
// into a phone's 366 px drew 11 px text at 7 px). widthOf reads the width to draw at; onWidth
// redraws when it changes.

/** The SVG's content-box width in CSS px (fractional: the scale is exactly 1), or `fallback` while it is not laid out. */
export function widthOf(svg, fallback) {
  const outer = svg.getBoundingClientRect().width;
  if (!(outer > 0)) return fallback;
  const s = getComputedStyle(svg);
  return outer - ['borderLeftWidth', 'borderRightWidth', 'paddingLeft', 'paddingRight'].reduce((a, k) => a + (parseFloat(s[k]) || 0), 0);
}

/** Calls redraw() when the SVG's width changes (a resized window, a phone turned, shown after hidden). */
export function onWidth(svg, redraw) {
  if (typeof ResizeObserver === 'undefined') return;
  let last = svg.getBoundingClientRect().width;
  new ResizeObserver(() => {
    const now = svg.getBoundingClientRect().width;
    if (now === last) return;
    last = now;
    if (now > 0) redraw();
  }).observe(svg);
}
