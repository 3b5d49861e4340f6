// The Walkthrough's structure: the sections on the page for the current sizes (presets, resizing,
// loaded cases), built once per size and kept, and which of them the stages and heads options show.
import { renderLegend } from '../common/legend.js';
import { makeScale } from '../common/scale.js';
import { describeMasks, headDim } from './model.js';
import { stageOf } from './state.js';
import { shownNames } from './specs.js';

const WEIGHTS_SCALE = makeScale([], 'weights');

// Children of `parent` made exactly `wanted`, in order, moving as little as possible.
function syncChildren(parent, wanted) {
  const keep = new Set(wanted);
  for (const child of [...parent.children]) if (!keep.has(child)) child.remove();
  wanted.forEach((node, k) => {
    if (parent.children[k] !== node) parent.insertBefore(node, parent.children[k] ?? null);
  });
}

/**
 * A guess, without layout, of whether head h's section lies within a viewport's height of the
 * viewport: from the stages' position and each section's size in rows of cells (~26 px each)
 * and matrices per line (~66 px per column).
 */
function nearViewport(state, { stages, view }) {
  const { L, E } = state;
  const hd = headDim(state);
  const top = stages.getBoundingClientRect().top;
  const screen = window.innerHeight || 800;
  const width = Math.max(200, stages.clientWidth || view.clientWidth || 800);
  const rowPx = 26;
  const block = (rows, cols, count) => {
    const perLine = Math.max(1, Math.floor((width + 20) / (60 + cols * 66)));
    return Math.ceil(count / perLine) * (56 + rows * rowPx);
  };
  const headHeight = 40 + block(E, hd, 3) + (state.bias ? block(1, hd, 3) : 0) + block(L, hd, 3) + block(L, L, 3);
  const first = top + 40 + block(L, E, 1);
  return (h) => {
    const y = first + h * headHeight;
    return y < 2 * screen && y + headHeight > -screen;
  };
}

/**
 * @param {object} w  the view's shared fields (view.js): state, shownStages, shownHeads
 * @param {{ dom: object, sections: object, controls: object, refresh: () => void,
 *   explainer: { hide(): void } }} o  dom: skeleton.js's; sections: sections.js's; controls:
 *   controls.js's
 * @returns {{ build(): void, applyVisibility(): void }}
 */
export function createBuild(w, { dom, sections, controls, refresh, explainer }) {
  const { matrix, inputSection, inputRow, maskNote, outputSection, outRow, headSection, sectionNames } = sections;

  /** Brings the page's structure to the current sizes (presets, resizing, loaded cases). */
  function build() {
    const { state } = w;
    // Read before anything is written, while the layout is clean (reading it later would force
    // a layout of the whole page).
    const near = nearViewport(state, dom);
    explainer.hide();
    const { L, E, H } = state;
    const hd = headDim(state);
    controls.showSizes(state);
    renderLegend(dom.weightsLegend, WEIGHTS_SCALE);

    inputSection.firstChild.textContent = `Input: ${L} token${L > 1 ? 's' : ''}, ${E} dim${E > 1 ? 's' : ''} each`;
    if (inputRow.firstChild !== matrix('X').element) inputRow.append(matrix('X').element);
    maskNote.textContent = describeMasks(state);
    maskNote.hidden = !maskNote.textContent;

    // Matrices attached by this build: until the browser has rendered them once, whether it
    // skips them is estimated from where they will land (a 16-token head is ~1,200 px tall), so
    // that the heads far below the viewport get their cells after the frame.
    const shown = [inputSection];
    for (let h = 0; h < H; h++) {
      const parts = headSection(h);
      const isNear = near(h);
      if (!parts.section.isConnected) {
        for (const n of sectionNames(h)) if (!matrix(n).element.isConnected) matrix(n).assumeSkipped(!isNear);
      }
      parts.headNote.textContent =
        ` columns ${h * hd}${hd > 1 ? `–${h * hd + hd - 1}` : ''} of the packed projections, d_k = ${hd}`;
      syncChildren(parts.section, [parts.section.firstChild, parts.weights,
        ...(state.bias ? [parts.biases] : []), parts.qkv, parts.attn]);
      shown.push(parts.section);
    }
    syncChildren(outRow, ['CONCAT', 'WO', ...(state.bias ? ['BO'] : []), 'Y'].map((n) => matrix(n).element));
    shown.push(outputSection);
    // The numbers first, then the new sections onto the page: cells created off the page are
    // cheaper than cells created in it.
    refresh();
    syncChildren(dom.stages, shown);
    applyVisibility();
  }

  // The stages and heads options: matrices of other stages, sections of other heads, and rows or
  // sections left empty are hidden (they are still computed: one trace gives everything).
  function applyVisibility() {
    for (const name of shownNames(w.state)) matrix(name).element.hidden = !w.shownStages.has(stageOf(name));
    for (const section of dom.stages.children) {
      const rows = [...section.querySelectorAll('.hs-stage-row')];
      for (const r of rows) r.hidden = [...r.children].every((c) => c.hidden);
      const h = sections.headSections.findIndex((p) => p?.section === section);
      section.hidden = (h >= 0 && w.shownHeads !== null && !w.shownHeads.includes(h + 1)) || rows.every((r) => r.hidden);
    }
  }

  return { build, applyVisibility };
}
