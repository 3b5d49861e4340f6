// The demo page: three views over one headscope engine. Each view module mounts itself into its
// panel and owns its state; this file only loads the engine, switches tabs and routes a loaded
// case file to both views.
import { init } from '../lib/index.js';
import { mountWalkthrough } from './walkthrough.js';
import { mountHeads } from './heads.js';
import { mountLoader } from './loader.js';

const status = document.querySelector('.hs-status');
const setStatus = (text) => { status.textContent = text; };

function setupTabs() {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  const select = (tab) => {
    for (const t of tabs) {
      const selected = t === tab;
      t.setAttribute('aria-selected', String(selected));
      t.tabIndex = selected ? 0 : -1;
      document.getElementById(t.getAttribute('aria-controls')).hidden = !selected;
    }
    history.replaceState(null, '', `#${tab.id.replace('tab-', '')}`);
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
  const fromHash = tabs.find((t) => t.id === `tab-${location.hash.slice(1)}`);
  if (fromHash) select(fromHash);
  return select;
}

async function main() {
  const selectTab = setupTabs();
  setStatus('Loading the WebAssembly engine…');
  const hs = await init();
  const walkthrough = mountWalkthrough(document.getElementById('panel-walkthrough'), { hs, onStatus: setStatus });
  const heads = mountHeads(document.getElementById('panel-heads'), { hs, onStatus: setStatus });
  mountLoader(document.getElementById('panel-load'), {
    hs,
    onStatus: setStatus,
    onCase: (doc, { target }) => {
      walkthrough.loadCase(doc);
      heads.loadCase(doc);
      selectTab(document.getElementById(`tab-${target}`));
    },
  });
  // hs.simd: the relaxed-SIMD build where the browser has relaxed SIMD (its matmuls use FMA).
  setStatus(`Engine ready (${hs.kernelTarget} ${hs.simd === 'relaxed' ? 'relaxed SIMD' : 'SIMD'}).`);
  document.body.dataset.simd = hs.simd;
  document.body.dataset.ready = 'true';
}

main().catch((e) => {
  setStatus(`headscope could not start: ${e.message}`);
  document.body.dataset.ready = 'error';
});
