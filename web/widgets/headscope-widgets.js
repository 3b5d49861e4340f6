// headscope's embeddable widgets for tutorial authors (package export 'headscope/widgets'). One
// module script defines both elements:
//
//   <script type="module" src="/node_modules/headscope/web/widgets/headscope-widgets.js"></script>
//   <headscope-walkthrough stages="input scores weights" compact></headscope-walkthrough>
//   <headscope-heads text="The cat sat on the mat" heads="4" show-heads="1 2"></headscope-heads>
//
// Either element also takes a case document (docs/case-format.md) as inline JSON:
//   <headscope-walkthrough><script type="application/json">{ ...case... }</script></headscope-walkthrough>
// (a JSON script is data, never executed, so this works under a strict Content-Security-Policy).
//
// Attributes configure a widget (ATTRIBUTES below, documented in docs/widgets.md, the authoring guide);
// changing one later updates it. Methods setState / setCase / setText and the property `state`
// change it from script; every change, by the reader or by script, fires a `headscope-change`
// event (bubbling, composed) whose detail is { state, cause }, so one widget can drive another.
// An unknown or invalid attribute shows a message in the widget (and the widget keeps its other
// settings); nothing is corrected silently.
//
// Each widget renders in its own shadow root with the views' stylesheet, and makes its view with
// the view's create() (headscope/views: a widget is attributes, events and promises over a
// component); all widgets of a page share one WebAssembly engine (the Train widget trains in a
// Worker of its own). No build step, no request to another site.
import { init, HeadscopeError } from '../lib/index.js';
import {
  heads, train, walkthrough, HEAD_COUNTS, HEADS_CONTROLS, HEADS_PARTS, PRESET_NAMES, TRAIN_CONTROLS, WALKTHROUGH_CONTROLS,
  WALKTHROUGH_PRESETS, WALKTHROUGH_STAGES,
} from '../views/index.js';
import { D_MODELS, MAX_WINDOW, NORMS, POSITIONS, ROPE_LAYOUTS, TASK_NAMES } from '../views/train/state.js';

const STYLESHEET = new URL('../views/headscope.css', import.meta.url).href;
let engine = null;
const getEngine = () => (engine ??= init().catch((e) => {
  engine = null;  // a later widget may try again
  throw e;
}));

// Attributes any HTML element may carry: never "unknown".
const GLOBAL_ATTRIBUTES = new Set(['id', 'class', 'style', 'title', 'lang', 'dir', 'hidden', 'tabindex', 'slot',
  'part', 'role', 'translate', 'inert', 'autofocus', 'nonce', 'is', 'exportparts', 'accesskey', 'draggable',
  'spellcheck', 'contenteditable', 'enterkeyhint', 'inputmode', 'popover']);
const isGlobal = (name) => GLOBAL_ATTRIBUTES.has(name) || name.startsWith('data-') || name.startsWith('aria-');

/** The inline case document of a widget, or null. Throws an Error naming the problem. */
function inlineCase(element) {
  const script = element.querySelector(':scope > script[type="application/json"]');
  if (script === null) return null;
  try {
    return JSON.parse(script.textContent);
  } catch (e) {
    throw new HeadscopeError('PARSE_ERROR', `the inline case document is not valid JSON (${e.message})`);
  }
}

// ---- Attribute parsers: text -> value, or a thrown message that says what was expected -------

const bad = (expected, text) => { throw new Error(`expected ${expected}, got ${JSON.stringify(text.slice(0, 60))}`); };
const words = (text) => text.split(/[\s,]+/).filter(Boolean);
function integer(min, max) {
  return (text) => {
    const v = Number(text.trim());
    return Number.isInteger(v) && v >= min && v <= max && text.trim() !== '' ? v : bad(`an integer in [${min}, ${max}]`, text);
  };
}
function oneOf(values) {
  return (text) => (values.includes(text.trim()) ? text.trim() : bad(`one of ${values.join(', ')}`, text));
}
function numberOneOf(values) {
  return (text) => {
    const v = Number(text.trim());
    return values.includes(v) ? v : bad(`one of ${values.join(', ')}`, text);
  };
}
function namesOf(values) {
  return (text) => {
    const list = words(text);
    for (const w of list) if (!values.includes(w)) bad(`names from ${values.join(', ')}`, w);
    return list;
  };
}
function numbers1(max) {  // 1-based numbers, e.g. heads "1 3"
  return (text) => words(text).map((w) => {
    const v = Number(w);
    return Number.isInteger(v) && v >= 1 && v <= max ? v : bad(`numbers in [1, ${max}] separated by spaces or commas`, w);
  });
}
const boolean = (text) => (['', 'true', 'false'].includes(text.trim()) ? text.trim() !== 'false'
  : bad('no value (present means on), "true" or "false"', text));
const positive = (t) => {
  const v = Number(t.trim());
  return t.trim() !== '' && v > 0 && Number.isFinite(v) ? v : bad('a number > 0', t);
};
const number01 = (max) => (text) => {
  const v = Number(text.trim());
  return text.trim() !== '' && v >= 0 && v <= max ? v : bad(`a number in [0, ${max}]`, text);
};

// Per widget: attribute -> { parse, field: a state field's name } or { parse, option: a create
// option's name (rebuilds the view) }.
// The options every widget takes after its own attributes: hide (names of its view's controls),
// compact, and readonly where the reader can edit numbers (the walkthrough, the Heads view).
const viewOptions = (controls, { readonly }) => ({
  hide: { parse: namesOf(controls), option: 'hide' },
  compact: { parse: boolean, option: 'compact' },
  ...(readonly ? { readonly: { parse: boolean, option: 'readonly' } } : {}),
});
const HEADS_ATTRIBUTES = {
  text: { parse: (t) => t, field: 'text' },
  heads: { parse: numberOneOf(HEAD_COUNTS), field: 'heads' },
  weights: { parse: oneOf(['presets', 'random']), field: 'weights' },
  presets: { parse: namesOf(PRESET_NAMES), field: 'presets' },
  seed: { parse: integer(0, 0xffffffff), field: 'seed' },
  sharpness: { parse: number01(12), field: 'sharpness' },
  causal: { parse: boolean, field: 'causal' },
  padded: { parse: numbers1(4096), field: 'padded' },
  off: { parse: numbers1(16), field: 'off' },
  'show-heads': { parse: numbers1(16), field: 'show' },
  view: { parse: oneOf(['heads', 'average']), field: 'view' },
  // The attention variant (the view's state checks how they combine with heads).
  'kv-heads': { parse: numberOneOf(HEAD_COUNTS), field: 'kvHeads' },
  alibi: { parse: boolean, field: 'alibi' },
  window: { parse: integer(0, 4096), field: 'window' },
  'rope-dims': { parse: integer(0, 64), field: 'ropeDims' },
  'rope-layout': { parse: oneOf(ROPE_LAYOUTS), field: 'ropeLayout' },
  'rope-base': { parse: positive, field: 'ropeBase' },
  parts: { parse: namesOf(HEADS_PARTS), option: 'parts' },
  ...viewOptions(HEADS_CONTROLS, { readonly: true }),
};
const WALKTHROUGH_ATTRIBUTES = {
  preset: { parse: oneOf(WALKTHROUGH_PRESETS), field: 'preset' },
  seed: { parse: integer(0, 0xffffffff), field: 'seed' },
  tokens: { parse: integer(1, 16), field: 'L' },
  dims: { parse: integer(1, 16), field: 'E' },
  heads: { parse: integer(1, 16), field: 'H' },
  causal: { parse: boolean, field: 'causal' },
  'show-heads': { parse: numbers1(16), option: 'heads' },
  stages: { parse: namesOf(WALKTHROUGH_STAGES), option: 'stages' },
  ...viewOptions(WALKTHROUGH_CONTROLS, { readonly: true }),
};

const TRAIN_ATTRIBUTES = {
  task: { parse: oneOf(TASK_NAMES), field: 'task' },
  layers: { parse: integer(1, 4), field: 'layers' },
  heads: { parse: integer(1, 128), field: 'heads' },
  'kv-heads': { parse: integer(1, 128), field: 'kvHeads' },
  'attn-window': { parse: integer(0, MAX_WINDOW), field: 'attnWindow' },
  'attn-sinks': { parse: boolean, field: 'attnSinks' },
  dmodel: { parse: numberOneOf(D_MODELS), field: 'dModel' },
  mlp: { parse: boolean, field: 'mlp' },
  norm: { parse: oneOf(NORMS), field: 'norm' },
  positions: { parse: oneOf(POSITIONS), field: 'positions' },
  'rope-layout': { parse: oneOf(ROPE_LAYOUTS), field: 'ropeLayout' },
  'rope-base': { parse: positive, field: 'ropeBase' },
  'rope-fraction': { parse: (t) => { const v = Number(t.trim()); return t.trim() !== '' && v > 0 && v <= 1 ? v : bad('a number in (0, 1]', t); }, field: 'ropeFraction' },
  lr: { parse: (t) => { const v = Number(t.trim()); return t.trim() !== '' && v > 0 && v <= 1 ? v : bad('a number in (0, 1]', t); }, field: 'lr' },
  'weight-decay': { parse: number01(1), field: 'weightDecay' },
  batch: { parse: integer(1, 256), field: 'batch' },
  clip: { parse: number01(1e6), field: 'clip' },
  seed: { parse: integer(0, 2 ** 31 - 1), field: 'seed' },
  steps: { parse: integer(0, 100_000), field: 'steps' },
  ...viewOptions(TRAIN_CONTROLS, { readonly: false }),
};

class HeadscopeWidget extends HTMLElement {
  constructor() {
    super();
    this._view = undefined;     // undefined: not mounted; null: mounting; else the view
    this._queue = Promise.resolve();
    this._problems = new Map(); // attribute -> message
    this._ready = new Promise((resolve, reject) => {
      this._resolveReady = resolve;
      this._rejectReady = reject;
    });
    this._ready.catch(() => {});  // a failed start is shown in the widget; awaiting it rejects
  }

  /**
   * Resolves when the widget has rendered what its attributes (and inline case) ask for, so that
   * every method gives their result (or failed to start: then it rejects with a HeadscopeError).
   */
  get ready() {
    return this._ready;
  }

  /** The current state (a copy), or null before the widget is ready. */
  get state() {
    return this._view ? this._view.getState() : null;
  }

  set state(value) {
    this.setState(value).catch(() => {});
  }

  /**
   * Changes the state (the fields given; see the authoring guide, docs/widgets.md). Resolves when applied;
   * rejects with a HeadscopeError naming a bad field (nothing is applied then).
   */
  setState(patch) {
    return this._whenReady((view) => view.update(patch), 'setState');
  }

  /** Shows a case document (an object or JSON text). Resolves to whether the view could show it. */
  setCase(caseDocument) {
    return this._whenReady((view) => view.setCase(caseDocument), 'setCase');
  }

  /**
   * The widget's current view as a file: 'svg' | 'png' | 'json' | 'csv', and for the walkthrough
   * and the Train widget 'case' (the numbers, or the trained model, as a case document). Resolves
   * to a Blob of what the widget shows once its pending changes are drawn.
   */
  exportAs(format) {
    return this._whenReady((view) => view.exportAs(format), 'exportAs');
  }

  connectedCallback() {
    if (this._view !== undefined) return;
    this._view = null;
    const shadow = this.shadowRoot ?? this.attachShadow({ mode: 'open' });
    const link = document.createElement('link');
    link.rel = 'stylesheet';
    link.href = STYLESHEET;
    this._container = document.createElement('div');
    this._container.className = 'hs-widget';
    this._status = document.createElement('p');
    this._status.className = 'hs-status';
    this._status.setAttribute('role', 'status');
    this._status.textContent = 'Loading headscope…';
    this._messages = document.createElement('ul');
    this._messages.className = 'hs-widget-problems hs-error';
    this._messages.setAttribute('role', 'alert');
    this._messages.hidden = true;
    shadow.replaceChildren(link, this._status, this._messages, this._container);
    getEngine()
      .then(async (hs) => {
        if (this._view !== null || !this.isConnected) return;
        this._hs = hs;
        const first = [this._mount()];
        const doc = inlineCase(this);
        if (doc !== null) first.push(this._view.setCase(doc));
        // Ready means rendered: the attributes' state (and the inline case) computed and drawn.
        await this._settle(first);
        this._status.textContent = '';
        this.dataset.ready = 'true';
        this._resolveReady();
      })
      .catch((e) => {
        const error = asHeadscopeError(e, 'ready');
        this._status.textContent = `headscope could not start: ${error.message}`;
        this._status.classList.add('hs-error');
        this.dataset.ready = 'error';
        this._rejectReady(error);
      });
  }

  disconnectedCallback() {
    this._view?.destroy();
    this._view = undefined;
  }

  static get observedAttributes() {
    return Object.keys(this.ATTRIBUTES);
  }

  attributeChangedCallback(name, _old, value) {
    if (!this._view) return;  // read when mounting
    const spec = this.constructor.ATTRIBUTES[name];
    // An option, or a field of a group the view refused at mount (which applied none of the
    // group's fields): every attribute is read again, so the fixed group applies as a whole.
    if (spec.option || [...this._problems.keys()].some((k) => k.includes(' ') && k.split(' ').includes(name))) {
      this._remount();
      return;
    }
    const parsed = this._parse(name, value);
    this._showProblems();
    if (parsed === undefined) return;
    const refused = (e) => {
      this._problems.set(name, `${name}="${(value ?? '').slice(0, 60)}": ${e.message}`);
      this._showProblems();
    };
    try {
      // The Train view's update is asynchronous: its refusal arrives as a rejection.
      this._view.update({ [spec.field]: parsed.value })?.catch?.(refused);
      this._problems.delete(name);
    } catch (e) {
      refused(e);
    }
    this._showProblems();
  }

  // { value } of one attribute, { value: undefined }-less undefined when absent or invalid (its
  // problem is recorded).
  _parse(name, text) {
    this._problems.delete(name);
    if (text === null) return undefined;
    try {
      return { value: this.constructor.ATTRIBUTES[name].parse(text) };
    } catch (e) {
      this._problems.set(name, `${name}="${text.slice(0, 60)}": ${e.message}`);
      return undefined;
    }
  }

  // Waits for `pending` (the promises of a mount: refused patches are shown, not thrown) and then
  // for what the view still computes or draws (its `ready`, which rejects when it cannot start,
  // and `settled`).
  async _settle(pending) {
    await Promise.allSettled(pending);
    const view = this._view;
    if (!view) return;
    await view.ready;
    await view.settled?.();
  }

  // Reads every attribute, mounts the view with the valid ones, and lists the problems. Returns a
  // promise of the patches applied (each settles; a refused one is listed with the problems).
  _mount() {
    const specs = this.constructor.ATTRIBUTES;
    this._problems.clear();
    for (const attr of this.getAttributeNames()) {
      if (!(attr in specs) && !isGlobal(attr)) {
        this._problems.set(attr, `unknown attribute "${attr}" (this widget takes ${Object.keys(specs).join(', ')})`);
      }
    }
    const options = {};
    const fields = {};
    for (const [name, spec] of Object.entries(specs)) {
      const parsed = this._parse(name, this.getAttribute(name));
      if (parsed === undefined) continue;
      if (spec.option) options[spec.option] = parsed.value;
      else fields[spec.field] = parsed.value;
    }
    const onChange = (state, cause) => {
      this.dispatchEvent(new CustomEvent('headscope-change', { detail: { state, cause }, bubbles: true, composed: true }));
    };
    const onStatus = (text) => { this._status.textContent = text; };
    const previous = this._view?.getState?.();
    this._view?.destroy();
    // Every view through its create(); the Train view trains in a Worker of its own.
    const engine = this.constructor.SHARED_ENGINE ? { engine: this._hs } : {};
    this._view = this.constructor.VIEW.create(this._container, { ...engine, onStatus, onChange, ...options });
    // The fields one at a time, so one bad field (say presets of the wrong length) costs only itself.
    const state = previous ? { ...previous } : null;
    const pending = [];
    if (state) {
      delete state.source;
      delete state.masked;
      // The Train view's setState is asynchronous: a refusal there is not an error either.
      try { pending.push(this._view.update(state)?.catch?.(() => {})); } catch { /* sizes changed */ }
    }
    for (const group of this.constructor.FIELD_GROUPS) {
      const patch = Object.fromEntries(group.filter((f) => f in fields).map((f) => [f, fields[f]]));
      if (Object.keys(patch).length === 0) continue;
      const problem = (e) => {
        const attrs = Object.keys(specs).filter((a) => specs[a].field in patch);
        const shown = attrs.map((a) => `${a}="${this.getAttribute(a).slice(0, 60)}"`).join(' ');
        for (const a of attrs) this._problems.delete(a);
        // Keyed by the group's attributes: a later change of any of them reads the group again.
        this._problems.set(attrs.join(' '), `${shown}: ${e.message}`);
        this._showProblems();
      };
      try {
        // The Train view's setState is asynchronous (a new setup trains from step 0).
        pending.push(this._view.update(patch)?.catch?.(problem));
      } catch (e) {
        problem(e);
      }
    }
    this._showProblems();
    return Promise.all(pending);
  }

  _remount() {
    if (!this._view) return;
    this._mount();
  }

  _showProblems() {
    const list = [...this._problems.values()];
    this._messages.replaceChildren(...list.map((m) => {
      const li = document.createElement('li');
      li.textContent = m;
      return li;
    }));
    this._messages.hidden = list.length === 0;
    if (list.length) this.dataset.problems = String(list.length);
    else delete this.dataset.problems;
  }

  // Runs `action` on the mounted view (waiting for it); its result, or its error, settles the
  // promise. Every rejection is a HeadscopeError (an unexpected error becomes an INTERNAL one
  // naming `method`).
  _whenReady(action, method) {
    const run = this._queue.then(() => this._ready).then(() => {
      if (!this._view) throw new HeadscopeError('DISPOSED', `${method}: the widget is not connected to the document`);
      return action(this._view);
    }).catch((e) => {
      throw asHeadscopeError(e, method);
    });
    this._queue = run.catch(() => {});
    return run;
  }
}

// `e` if headscope made it, else an INTERNAL HeadscopeError that names the method and keeps `e`
// as its cause (the widgets' promises reject with HeadscopeErrors only).
function asHeadscopeError(e, method) {
  if (HeadscopeError.is(e)) return e;
  return new HeadscopeError('INTERNAL', `${method}: ${e?.message ?? String(e)}`, { cause: e });
}

class HeadscopeWalkthrough extends HeadscopeWidget {
  static ATTRIBUTES = WALKTHROUGH_ATTRIBUTES;
  // Applied in this order, each group as one patch: a preset brings its own sizes, and the sizes
  // are checked together (heads must divide dims).
  static FIELD_GROUPS = [['preset', 'seed'], ['L', 'E', 'H'], ['causal']];

  static VIEW = walkthrough;
  static SHARED_ENGINE = true;
}

class HeadscopeHeads extends HeadscopeWidget {
  static ATTRIBUTES = HEADS_ATTRIBUTES;
  // The head count before what is per head; with it what must fit it (K/V heads divide it, the
  // rotary dims fit its head dim), so the three are checked together.
  static FIELD_GROUPS = [['text', 'padded'], ['heads', 'kvHeads', 'ropeDims', 'ropeLayout', 'ropeBase'],
    ['weights', 'seed', 'sharpness', 'causal', 'view', 'alibi', 'window'],
    ['presets'], ['off'], ['show']];

  static VIEW = heads;
  static SHARED_ENGINE = true;

  /** Sets the sentence (a shorthand for setState({ text })). */
  setText(text) {
    return this._whenReady((view) => view.update({ text }), 'setText');
  }
}

class HeadscopeTrain extends HeadscopeWidget {
  static ATTRIBUTES = TRAIN_ATTRIBUTES;
  // One patch: a setup (and the step to train to) at once, so the model is made once.
  static FIELD_GROUPS = [['task', 'layers', 'heads', 'kvHeads', 'dModel', 'mlp', 'norm', 'positions', 'ropeLayout', 'ropeBase',
    'ropeFraction', 'attnWindow', 'attnSinks', 'lr', 'weightDecay', 'batch', 'clip', 'seed', 'steps']];

  static VIEW = train;
  static SHARED_ENGINE = false;  // the Train view trains in a Worker of its own

  play() { return this._whenReady((view) => view.play(), 'play'); }
  pause() { return this._whenReady((view) => view.pause(), 'pause'); }
  step(n = 1) { return this._whenReady((view) => view.step(n), 'step'); }
  reset() { return this._whenReady((view) => view.reset(), 'reset'); }
  // setCase (the base class's) is the Train view's: it loads a "kind": "transformer" case (what
  // its Export model button writes) as the widget's model, and training goes on from it.
}

if (!customElements.get('headscope-train')) customElements.define('headscope-train', HeadscopeTrain);
if (!customElements.get('headscope-walkthrough')) {
  customElements.define('headscope-walkthrough', HeadscopeWalkthrough);
}
if (!customElements.get('headscope-heads')) customElements.define('headscope-heads', HeadscopeHeads);

export { HeadscopeWalkthrough, HeadscopeHeads, HeadscopeTrain };
