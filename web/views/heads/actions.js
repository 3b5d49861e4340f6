// What the Heads view's parts report (cards.js, lines.js, ablation.js, chips.js call these): each
// is a patch of the public state (through `edit`, which checks, applies, recomputes and reports
// the change), or a change of what is hovered, pinned or explained (a redraw only).

/**
 * @param {{ state: object, edit: (patch: object, o?: { compute?: boolean }) => void,
 *   schedule: (compute: boolean) => void, explain: ReturnType<import('./explain.js').createExplain>,
 *   data: () => object | null }} o  state: the live state (view-state.js); data: the numbers shown
 */
export function createActions({ state, edit, schedule, explain, data }) {
  // 1-based heads or tokens of `set` (0-based) with `h` added (on) or removed.
  const sortedPlus = (set, h, on) => {
    const next = new Set(set);
    if (on) next.add(h);
    else next.delete(h);
    return [...next].map((k) => k + 1);
  };
  return {
    setPreset(h, preset) {
      edit({ presets: state.presets.map((p, k) => (k === h ? preset : p)) });
    },
    setAblated(h, off) {
      edit({ off: sortedPlus(state.ablated, h, off) });
    },
    resetAblation() {
      edit({ off: [] });
    },
    /** Shows or hides head h's card and lines; returns whether it is shown now. */
    toggleShown(h) {
      const all = new Set(Array.from({ length: state.numHeads }, (_, k) => k));
      const shown = state.shown ?? all;
      const next = sortedPlus(shown, h, !shown.has(h));
      edit({ show: next.length === state.numHeads ? null : next }, { compute: false });
      return state.shown === null || state.shown.has(h);
    },
    hoverToken(target) {
      state.hover = target;
      schedule(false);
    },
    pinToken(target) {
      const same = state.pinned && state.pinned.side === target.side && state.pinned.index === target.index;
      state.pinned = same ? null : target;
      schedule(false);
    },
    togglePadding(j) {
      edit({ padded: sortedPlus(state.padded, j, !state.padded.has(j)) });
    },
    explainCell(head, i, j, remember, anchor = null) {
      explain.cell(data(), head, i, j, remember, anchor);
    },
    explain(anchor, line) {
      explain.show(line, anchor);
    },
    leaveCell() {
      explain.hide();
    },
  };
}
