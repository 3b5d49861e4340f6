// The demo page: the views over one headscope engine, each a component made by its create()
// (views/index.js; the loader, which is the page's own, by loader.js's) in its panel, owning its
// state. This file loads the engine, switches tabs, routes a loaded case file to both views, and
// keeps the URL hash in step with the shown view's state (`#heads?text=...&heads=2`,
// `#walkthrough?L=...`; each view's url-state.js), so a link opens exactly that setting, and
// editing the hash (or going back) switches views. A case shown in the Heads view is not a setting:
// the hash then says where it came from instead (heads-origin.js).
import { init } from '../lib/index.js';
import { heads, train, walkthrough } from '../views/index.js';
import { formatHash, parseHash } from '../views/common/url-state.js';
import { decodeHeadsState, encodeHeadsState } from '../views/heads/url-state.js';
import { decodeWalkthroughState, encodeWalkthroughState } from '../views/walkthrough/url-state.js';
import { applyHeadsState, defaultHeadsState } from '../views/heads/state.js';
import { applyTrainState, defaultTrainState } from '../views/train/state.js';
import { decodeTrainState, encodeTrainState } from '../views/train/url-state.js';
import { loader } from './loader.js';
import { decodeHeadsOrigin, describeHeadsOrigin, encodeHeadsOrigin, isHeadsOrigin } from './heads-origin.js';

const status = document.querySelector('.hs-status');
// linkError: the status line shows why a link could not be applied (or what a Heads link showed
// that it cannot hold); the next link that applies cleanly clears it (it would otherwise describe a
// link no longer shown). `text`: a string, or strings and elements.
let linkError = false;
const setStatus = (text, { isLinkError = false } = {}) => {
  status.replaceChildren(...[text].flat());
  linkError = isLinkError;
};
const linkFailed = (e) => setStatus(`This link's settings could not be applied: ${e.message}`, { isLinkError: true });
const linkApplied = () => { if (linkError) setStatus(''); };
const VIEWS = ['walkthrough', 'heads', 'train', 'load'];

function setupTabs(onSelect) {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  const select = (tab) => {
    for (const t of tabs) {
      const selected = t === tab;
      t.setAttribute('aria-selected', String(selected));
      t.tabIndex = selected ? 0 : -1;
      document.getElementById(t.getAttribute('aria-controls')).hidden = !selected;
    }
    onSelect(tab.id.replace('tab-', ''));
  };
  tabs.forEach((tab, i) => {
    tab.addEventListener('click', () => select(tab));
    tab.addEventListener('keydown', (e) => {
      const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
      if (next === undefined) return;
      e.preventDefault();
      const target = tabs[(next + tabs.length) % tabs.length];
      select(target);
      target.focus();
    });
  });
  return (view) => select(document.getElementById(`tab-${view}`));
}

async function main() {
  let views = null;     // { walkthrough, heads } once mounted
  let current = 'walkthrough';
  // Where the Heads view's case came from (heads-origin.js), while it shows one.
  let headsOrigin = null;
  const headsQuery = () => (headsOrigin && views.heads.showsCase() ? encodeHeadsOrigin(headsOrigin)
    : encodeHeadsState(views.heads.getState()));
  // The hash of the shown view's state; written with replaceState (no history entry per edit).
  const hashOf = (view) => {
    if (view === 'load') return formatHash(view, '');
    if (view === 'train') return formatHash(view, views.train ? encodeTrainState(views.train.getState()) : '');
    return formatHash(view, view === 'heads' ? headsQuery() : encodeWalkthroughState(views.walkthrough.getState()));
  };
  const writeHash = () => {
    if (!views) return;  // before the views exist, the hash is still the link's: keep it
    const hash = hashOf(current);
    if (location.hash !== hash) history.replaceState(null, '', hash);
  };
  // The Train view starts its Worker and first model when it is first shown.
  const trainView = () => {
    views.train ??= train.create(document.getElementById('panel-train'), {
      onStatus: setStatus, onChange: () => { if (current === 'train') writeHash(); },
      // A head of the trained model, in the Heads view (its layer, that head shown, its tokens the
      // probe row's, the intro saying which model and step) and the Walkthrough (which shows
      // layers of at most 16 dims, and says so otherwise).
      onOpenHead: async (doc, { layer, head, step, tokens, state }) => {
        views.walkthrough.setCase(doc);
        const about = `L${layer} H${head} of the model the Train view trained (${state.task}) at step ${step}: ` +
          `layer ${layer}'s trained attention weights, run by the engine on the probe row as it enters the layer, so ` +
          'the pattern is the Train view\'s; the tokens are the task\'s. The layer\'s other heads are hidden, not off ' +
          '(the line view\'s head buttons show them). Training on in the Train view does not change what is shown ' +
          'here, and a link cannot hold these weights: this view\'s link names the Train view\'s run instead.';
        headsOrigin = { from: 'train', layer, head, state };
        await views.heads.setCase(doc, { tokens, about });
        views.heads.update({ show: [head] });
        selectTab('heads');
      },
    });
    return views.train;
  };
  const selectTab = setupTabs((view) => {
    current = view;
    if (view === 'train' && views) trainView();
    writeHash();
  });
  // Applies a hash: its view is shown, its parameters set that view's state.
  const applyHash = () => {
    const { view, query } = parseHash(location.hash);
    if (!VIEWS.includes(view)) return;
    current = view;
    if (views && (query || view === 'heads' || view === 'walkthrough')) {
      try {
        // A link is a whole setting: the fields it leaves out are the defaults (which is what
        // encodeHeadsState leaves out), not whatever the view showed before.
        if (view === 'heads' && isHeadsOrigin(query)) {
          // A case's marker: the hand-built heads, and what the link showed and how to see it again.
          const { before, link, after } = describeHeadsOrigin(decodeHeadsOrigin(query));
          views.heads.update(defaultHeadsState());
          const a = link && Object.assign(document.createElement('a'), { href: link.href, textContent: link.text });
          setStatus([before, ...(a ? [a, after] : [])], { isLinkError: true });
        } else if (view === 'heads') {
          views.heads.update(applyHeadsState(decodeHeadsState(query), defaultHeadsState(), 'URL'));
        }
        if (view === 'walkthrough') views.walkthrough.update(decodeWalkthroughState(query));
        if (view === 'train') {
          const wanted = applyTrainState(decodeTrainState(query), defaultTrainState(), 'URL');
          trainView().update(wanted).then(linkApplied, linkFailed);
        } else if (!(view === 'heads' && isHeadsOrigin(query))) {
          linkApplied();
        }
      } catch (e) {
        linkFailed(e);
      }
    }
    selectTab(view);
  };
  applyHash();
  setStatus('Loading the WebAssembly engine…');
  const hs = await init();
  // Edits come as fast as the reader types: the hash follows once they pause (replaceState of a
  // long URL costs a few ms, too much for every keystroke of a 128-token text).
  let hashTimer = 0;
  const onChange = (view) => () => {
    if (current !== view) return;
    clearTimeout(hashTimer);
    hashTimer = setTimeout(writeHash, 150);
  };
  views = {
    walkthrough: walkthrough.create(document.getElementById('panel-walkthrough'), { engine: hs, onStatus: setStatus,
      onChange: onChange('walkthrough') }),
    heads: heads.create(document.getElementById('panel-heads'), { engine: hs, onStatus: setStatus, onChange: onChange('heads') }),
    train: null,
  };
  // The page's views, for the browser console (and the tests): headscopeDemo.heads.getState() ...;
  // headscopeDemo.engine is the page's engine (headscopeDemo.engine.memory(), say).
  window.headscopeDemo = views;
  Object.defineProperty(views, 'engine', { value: hs, enumerable: false });
  loader.create(document.getElementById('panel-load'), {
    engine: hs,
    onStatus: setStatus,
    onCase: (doc, { target }) => {
      views.walkthrough.setCase(doc);
      views.heads.setCase(doc);
      headsOrigin = { from: 'file', name: typeof doc?.name === 'string' ? doc.name : '' };
      selectTab(target);
    },
  });
  // hs.simd: the relaxed-SIMD build where the browser has relaxed SIMD (its matmuls use FMA).
  setStatus(`Engine ready (${hs.kernelTarget} ${hs.simd === 'relaxed' ? 'relaxed SIMD' : 'SIMD'}).`);
  document.body.dataset.simd = hs.simd;
  applyHash();
  window.addEventListener('hashchange', applyHash);
  document.body.dataset.ready = 'true';
}

main().catch((e) => {
  setStatus(`headscope could not start: ${e.message}`);
  document.body.dataset.ready = 'error';
});
