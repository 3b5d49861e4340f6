// The Heads view's drawing: its parts are render(data, state, root, actions) functions (cards.js:
// the grid and the averaged card; lines.js; ablation.js), which bring `root` up to date in place.
// The line view and the ablation are drawn only near the screen (below a 16-head grid they are
// thousands of pixels down): out of reach they are marked, and drawn when they come near.
import { renderAverage, renderHeadGrid } from './cards.js';
import { renderLines } from './lines.js';
import { renderAblation } from './ablation.js';

const GRID_NOTE = (data) => `One heatmap per head (rows: queries, columns: keys). Head dim ${data.E / data.H}. ` +
  'Entropy: 0 when a head looks at one key, ln(keys) when it looks everywhere. ' +
  'Mean distance: how far, in tokens, a head looks on average. ' +
  'Confidence: a query\'s largest weight, on average; 1 when a head looks at one key. ' +
  'The engine computes all three in the same pass as the weights. ' +
  'Hover or focus a heatmap (then the arrow keys) to read a cell.';
const AVERAGE_NOTE = 'One heatmap: the mean of every head\'s weights, as PyTorch returns them by default. ' +
  'Its numbers are the per-head numbers averaged over the heads. Hover or focus it to read a cell.';

/**
 * @param {object} dom  skeleton.js's elements
 * @param {{ shownParts: Set<string>, state: object, actions: object,
 *   current: () => { data: object | null, layout: object | null, destroyed: boolean } }} o
 * @returns {{ render(): void, disconnect(): void }} render draws current()'s data
 */
export function createRender(dom, { shownParts, state, actions, current }) {
  const lazyParts = {
    lines: { section: dom.linesSection, near: true, dirty: false,
      draw: () => renderLines(current().data, state, dom.lines, actions) },
    ablation: { section: dom.ablationSection, near: true, dirty: false,
      draw: () => renderAblation(current().data, state, dom.ablation, actions, current().layout) },
  };
  function renderPart(name) {
    const part = lazyParts[name];
    const { data, destroyed } = current();
    if (data === null || destroyed) return;
    if (part.near) {
      part.dirty = false;
      part.draw();
    } else {
      part.dirty = true;
    }
  }
  const sectionObserver = typeof IntersectionObserver === 'function'
    ? new IntersectionObserver((entries) => {
      for (const e of entries) {
        const name = e.target === dom.linesSection ? 'lines' : 'ablation';
        lazyParts[name].near = e.isIntersecting;
        if (e.isIntersecting && lazyParts[name].dirty) renderPart(name);
      }
    }, { rootMargin: '100% 0px' })
    : null;
  sectionObserver?.observe(dom.linesSection);
  sectionObserver?.observe(dom.ablationSection);

  function render() {
    const { data } = current();
    const empty = data === null;
    dom.gridSection.hidden = empty || !shownParts.has('grid');
    dom.linesSection.hidden = empty || !shownParts.has('lines');
    dom.ablationSection.hidden = empty || !shownParts.has('ablation');
    if (empty) {
      dom.message.textContent = 'Type something to see the heads at work.';
      return;
    }
    if (data.note) dom.message.textContent = data.note;
    const average = state.view === 'average';
    dom.grid.hidden = average;
    dom.averageBox.hidden = !average;
    dom.gridNote.textContent = average ? AVERAGE_NOTE : GRID_NOTE(data);
    if (average) {
      renderAverage(data, state, dom.averageBox, actions);
    } else {
      renderHeadGrid(data, state, dom.grid, actions);
    }
    renderPart('lines');
    renderPart('ablation');
  }

  return { render, disconnect: () => sectionObserver?.disconnect() };
}
