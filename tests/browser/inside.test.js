// The Train view's "Inside the model" section in Chromium: trained from a link to step 500 of the
// induction preset, its activation patching grids, logit lens and "why is this weight high" are
// the numbers of the same run in Node (the view's Worker is the SIMD128 build: bit for bit), the
// patching finds the induction head (an L1 head restoring most of the correct tokens' logit), and
// the section says which step its numbers are from; the ablation box says in words that the two
// L1 heads stand in for each other.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';
import { trainInNode } from './node-run.js';
import { corrupt, restored } from '../../web/views/train/inside.js';

const STEPS = 500;

// The same run and the same experiments in Node.
async function nodeRun() {
  const { model: m, task } = await trainInNode(STEPS);
  try {
    const probe = task.probe();
    const bad = corrupt(probe.tokens, 'first-half', task.vocabSize);
    const heads = m.activationPatching(probe.tokens, bad, probe.targets, { site: 'heads' });
    const positions = m.activationPatching(probe.tokens, bad, probe.targets, { site: 'positions' });
    const { logits } = m.logitLens(probe.tokens);
    const T = task.seqLen, V = task.vocabSize;
    const top = [];
    for (let r = 0; r < logits.data.length / V; r++) {
      const row = logits.data.subarray(r * V, (r + 1) * V);
      let best = 0;
      for (let v = 1; v < V; v++) if (row[v] > row[best]) best = v;
      top.push(best);
    }
    const { hooks } = m.forward(probe.tokens, { hooks: ['blocks.1.attn.hook_pattern'] });
    const w = hooks['blocks.1.attn.hook_pattern'].data.subarray((T - 1) * T, T * T);  // head 1, last query
    let key = 0;
    for (let j = 1; j < T; j++) if (w[j] > w[key]) key = j;
    const why = m.scoreContributions(probe.tokens, { layer: 1, head: 0, position: T - 1 });
    return { heads, positions, top, key, score: why.score.data[key], terms: Array.from(why.terms.data.subarray(key * 16, key * 16 + 16)) };
  } finally {
    m.dispose();
  }
}

test('Inside the model: patching, the logit lens and score terms at step 500 are Node\'s numbers; the induction head found', { timeout: 240_000 }, async () => {
  const p = await openPage(`/demo/#train?steps=${STEPS}`);
  try {
    const { page } = p;
    await page.waitForFunction((n) => document.querySelector('#panel-train .hs-train-counter')?.textContent.startsWith(`step ${n}`),
      STEPS, { timeout: 180_000 });
    const root = '#panel-train .hs-train-inside';
    assert.match(await page.textContent(`${root} .hs-inside-status`), /Not measured yet/);
    await page.click(`#panel-train [name="inside-run"]`);
    await page.waitForFunction((r) => document.querySelector(r)?.dataset.ready === 'true', root, { timeout: 60_000 });
    assert.equal(await page.getAttribute(root, 'data-step'), String(STEPS));
    assert.match(await page.textContent(`${root} .hs-inside-status`), /Measured at step 500\./);
    const shown = await page.evaluate((r) => {
      const cells = (sel) => Array.from(document.querySelectorAll(`${r} ${sel} td[data-cell]`));
      return {
        heads: cells('.hs-inside-heads').map((td) => [td.dataset.cell, Number(td.dataset.logit), Number(td.dataset.loss), td.textContent]),
        positions: cells('.hs-inside-positions').map((td) => Number(td.dataset.logit)),
        top: cells('.hs-inside-lens-table').map((td) => Number(td.dataset.token)),
        hits: document.querySelectorAll(`${r} .hs-inside-hit`).length,
        key: Number(document.querySelector(`${r} .hs-inside-why-out`).dataset.key),
        score: Number(document.querySelector(`${r} .hs-inside-why-out`).dataset.score),
        terms: Array.from(document.querySelectorAll(`${r} .hs-inside-term`), (d) => Number(d.dataset.term)),
        words: document.querySelector(`${r} .hs-inside-patching`).textContent,
      };
    }, root);
    const want = await nodeRun();
    assert.deepEqual(shown.heads.map((c) => c[1]), Array.from(want.heads.logit.data), 'heads grid: Node\'s logits, bit for bit');
    assert.deepEqual(shown.heads.map((c) => c[2]), Array.from(want.heads.loss.data), 'heads grid: Node\'s losses');
    assert.deepEqual(shown.positions, Array.from(want.positions.logit.data), 'positions grid');
    assert.deepEqual(shown.top, want.top, 'the lens\' top tokens');
    assert.equal(shown.key, want.key);
    assert.equal(shown.score, want.score);
    assert.deepEqual(shown.terms, want.terms.map(Math.fround));
    // What the experiment finds: one head of layer 1 restores most of the clean logit (the
    // induction head); the lens gets the repeated half right after the last block.
    const r = Array.from(want.heads.logit.data, (v) => restored(v, want.heads.clean.logit, want.heads.corrupted.logit));
    const best = r.indexOf(Math.max(...r));
    assert.equal(Math.floor(best / 2), 1, `the most restoring head is in layer 1 (restored: ${r.map((x) => x.toFixed(2))})`);
    assert.ok(r[best] > 0.5, `it restores more than half: ${r[best]}`);
    assert.match(shown.words, new RegExp(`L1 H${(best % 2) + 1} restores the most`));
    assert.ok(shown.hits >= 10, `the lens marks the targets it predicts: ${shown.hits}`);
    // The two head measures, and what they say differently: the L1 heads stand in for each other
    // (each off alone costs less than half of what both off cost).
    await page.click('#panel-train [name="importance"]');
    await page.waitForSelector('#panel-train .hs-train-importance-bars .hs-train-importance');
    await page.click('#panel-train [name="each-off"]');
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train-differences')?.dataset.step === '500', null, { timeout: 60_000 });
    const differences = await page.textContent('#panel-train .hs-train-differences');
    assert.match(differences, /L1 H1 and L1 H2 stand in for each other: off alone they cost \+[\d.]+ and \+[\d.]+, both off \+[\d.]+/);
    // One more step: the numbers are marked as another step's.
    await page.click('#panel-train [name="step"]');
    await page.waitForFunction((rt) => document.querySelector(rt).dataset.stale === 'true', root);
    assert.match(await page.textContent(`${root} .hs-inside-status`), /Measured at step 500; the model is now at step 501/);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
