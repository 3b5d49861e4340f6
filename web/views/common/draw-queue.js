// When canvases draw: after every DOM update of the frame (queueDraw), and for a canvas far from
// the viewport only once it comes near (lazyDraw), with its latest data.

// Canvas draws wait until every DOM update of the frame is done: reading the theme's colours then
// costs one style recalculation, not one per canvas.
const drawQueue = new Set();
export function queueDraw(draw) {
  drawQueue.add(draw);
  if (drawQueue.size === 1) {
    queueMicrotask(() => {
      const draws = [...drawQueue];
      drawQueue.clear();
      for (const d of draws) d();
    });
  }
}

// Heatmaps far from the viewport are not drawn: a 16-head, 128-token grid is 8 rows of cards, of
// which two or three are on screen. Each canvas is observed; a draw of one that is more than a
// viewport away waits until it comes near (then it draws once, with its latest data).
const nearScreen = new WeakMap();   // canvas -> { near, pending: draw | null }
const observer = typeof IntersectionObserver === 'function'
  ? new IntersectionObserver((entries) => {
    for (const e of entries) {
      const s = nearScreen.get(e.target);
      if (!s) continue;
      s.near = e.isIntersecting;
      if (s.near && s.pending) {
        const draw = s.pending;
        s.pending = null;
        queueDraw(draw);
      }
    }
  }, { rootMargin: '100% 0px' })
  : null;

/** Observes `canvas`; returns draw() that runs now (queued) when the canvas is near, later otherwise. */
export function lazyDraw(canvas, draw) {
  if (observer === null) return () => queueDraw(draw);
  // Unknown until the first observation: draw (the first frame must not stay blank).
  const s = { near: true, pending: null };
  nearScreen.set(canvas, s);
  observer.observe(canvas);
  return () => {
    if (s.near) queueDraw(draw);
    else s.pending = draw;
  };
}
