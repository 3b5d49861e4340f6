// Types of 'headscope/widgets' (web/widgets/headscope-widgets.js), written by hand. Importing the
// module defines <headscope-walkthrough>, <headscope-heads> and <headscope-train> (browsers only:
// it needs customElements). Every method's promise rejects with a HeadscopeError (with a code).
import type { CaseDocument } from '../lib/index.js';
import type { ChangeCause, HeadsState, TrainState, WalkthroughPatch, WalkthroughState } from '../views/index.js';

export interface HeadscopeChangeDetail<S> {
  state: S;
  cause: ChangeCause;
}

declare class HeadscopeWidget<S, P> extends HTMLElement {
  /**
   * Resolves when the widget has rendered what its attributes (and inline case) ask for: a method
   * called then works on that (exportAs exports it); rejects with a HeadscopeError if headscope
   * could not start.
   */
  readonly ready: Promise<void>;
  /** A copy of the state, or null before `ready`; setting it is setState(value). */
  get state(): S | null;
  set state(value: P);
  /** Applies a patch when ready; rejects with a HeadscopeError naming a bad field. */
  setState(patch: P): Promise<void>;
  /**
   * Shows a case document; resolves when shown (the walkthrough: to whether it could show it).
   * The Train widget loads a "kind": "transformer" case (its 'case' export) as its model.
   */
  setCase(caseDocument: CaseDocument | string): Promise<boolean | void>;
  /**
   * The view as a file, once its pending changes are drawn: svg, png, json, csv (and for the
   * walkthrough and the Train widget, case: the numbers, or the trained model, as a case
   * document). Another format rejects with INVALID_ARGUMENT.
   */
  exportAs(format: 'svg' | 'png' | 'json' | 'csv' | 'case'): Promise<Blob>;
}

export declare class HeadscopeWalkthrough extends HeadscopeWidget<WalkthroughState, WalkthroughPatch> {}
export declare class HeadscopeHeads extends HeadscopeWidget<HeadsState, Partial<HeadsState>> {
  setText(text: string): Promise<void>;
}

/** <headscope-train>: trains in a Worker of its own; setState of a new setup starts again from step 0. */
export declare class HeadscopeTrain extends HeadscopeWidget<TrainState, Partial<TrainState>> {
  play(): Promise<void>;
  pause(): Promise<void>;
  step(n?: number): Promise<void>;
  reset(): Promise<void>;
}

declare global {
  interface HTMLElementTagNameMap {
    'headscope-walkthrough': HeadscopeWalkthrough;
    'headscope-heads': HeadscopeHeads;
    'headscope-train': HeadscopeTrain;
  }
  interface HTMLElementEventMap {
    'headscope-change': CustomEvent<HeadscopeChangeDetail<HeadsState | WalkthroughState | TrainState>>;
  }
}
