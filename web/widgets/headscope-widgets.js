// headscope's embeddable widgets for tutorial authors. One module script defines them:
//
//   <script type="module" src="https://your.site/headscope/widgets/headscope-widgets.js"></script>
//   <headscope-walkthrough></headscope-walkthrough>              the seed's worked example, live
//   <headscope-heads text="The cat sat on the mat" heads="4"></headscope-heads>
//
// Either element also takes a case document (shared/spec/case-format.md) as inline JSON:
//   <headscope-walkthrough><script type="application/json">{ ...case... }</script></headscope-walkthrough>
// (a JSON script is data, never executed, so this works under a strict Content-Security-Policy).
//
// Each widget renders in its own shadow root with the demo's stylesheet; all widgets of a page
// share one WebAssembly engine. No build step, no request to another site.
import { init } from '../lib/index.js';
import { mountWalkthrough } from '../views/walkthrough/view.js';
import { mountHeads } from '../views/heads/view.js';

const STYLESHEET = new URL('../views/headscope.css', import.meta.url).href;
let engine = null;
const getEngine = () => (engine ??= init());

/** The inline case document of a widget, or null. Throws an Error naming the problem. */
function inlineCase(element) {
  const script = element.querySelector(':scope > script[type="application/json"]');
  if (script === null) return null;
  try {
    return JSON.parse(script.textContent);
  } catch (e) {
    throw new Error(`the inline case document is not valid JSON (${e.message})`);
  }
}

class HeadscopeWidget extends HTMLElement {
  connectedCallback() {
    if (this._view !== undefined) return;
    this._view = null;
    const shadow = this.shadowRoot ?? this.attachShadow({ mode: 'open' });
    const link = document.createElement('link');
    link.rel = 'stylesheet';
    link.href = STYLESHEET;
    const container = document.createElement('div');
    container.className = 'hs-widget';
    const status = document.createElement('p');
    status.className = 'hs-status';
    status.setAttribute('role', 'status');
    status.textContent = 'Loading headscope…';
    shadow.replaceChildren(link, status, container);
    const onStatus = (text) => { status.textContent = text; };
    getEngine()
      .then((hs) => {
        if (this._view !== null || !this.isConnected) return;
        const doc = inlineCase(this);
        this._view = this.mount(container, { hs, onStatus });
        if (doc !== null) this._view.loadCase(doc);
        status.textContent = '';
        this.dataset.ready = 'true';
      })
      .catch((e) => {
        status.textContent = `headscope could not start: ${e.message}`;
        status.classList.add('hs-error');
        this.dataset.ready = 'error';
      });
  }

  disconnectedCallback() {
    this._view?.destroy();
    this._view = undefined;
  }
}

class HeadscopeWalkthrough extends HeadscopeWidget {
  mount(root, options) {
    return mountWalkthrough(root, options);
  }
}

class HeadscopeHeads extends HeadscopeWidget {
  mount(root, options) {
    const heads = this.getAttribute('heads');
    return mountHeads(root, {
      ...options,
      text: this.getAttribute('text') ?? undefined,
      numHeads: heads === null ? undefined : Number(heads),
    });
  }
}

if (!customElements.get('headscope-walkthrough')) {
  customElements.define('headscope-walkthrough', HeadscopeWalkthrough);
}
if (!customElements.get('headscope-heads')) customElements.define('headscope-heads', HeadscopeHeads);
