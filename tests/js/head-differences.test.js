// The Train view's sentences where the two head measures disagree or two heads stand in for each
// other (ablation.js headDifferences): each rule fires on the numbers it names and not just below
// its thresholds; the numbers of issue 31's log-line run give its sentence.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { headDifferences } from '../../web/views/train/ablation.js';

const heads = (values) => values.map((v, k) => ({ l: Math.floor(k / 2), h: k % 2, ...v }));
const pairs = (costs, joint) => {
  const out = [];
  for (let a = 0; a < costs.length; a++) {
    for (let b = a + 1; b < costs.length; b++) out.push({ a: costs[a], b: costs[b], cost: joint[`${a}${b}`] ?? costs[a].cost + costs[b].cost });
  }
  return out;
};

test('a costly head with a small gradient is explained; just above the gradient threshold it is not', () => {
  const costs = heads([{ cost: 0.464 }, { cost: 0.01 }, { cost: 0.2 }, { cost: 0.0 }]);
  const c = { costs, pairs: pairs(costs, {}) };
  const g = (small) => ({ values: heads([{ v: small }, { v: 0.0025 }, { v: 0.002 }, { v: 0.001 }]) });
  const [line] = headDifferences(c, g(0.0003));
  assert.match(line, /^L0 H1: switching it off costs \+0\.464, yet its \|d loss \/ d gate\| is only 0\.0003 \(the largest: 0\.0025\)/);
  assert.ok(!headDifferences(c, g(0.0007)).some((l) => l.startsWith('L0 H1')), 'at 0.28 of the largest: no sentence');
});

test('a large gradient with a cheap removal is explained', () => {
  const costs = heads([{ cost: 0.3 }, { cost: 0.012 }, { cost: 0.2 }, { cost: 0.1 }]);
  const lines = headDifferences({ costs, pairs: [] }, { values: heads([{ v: 0.002 }, { v: 0.0015 }, { v: 0.002 }, { v: 0.001 }]) });
  assert.ok(lines.some((l) => /^L0 H2: its \|d loss \/ d gate\| is 0\.0015, among the largest, yet switching it off costs only \+0\.012/.test(l)), lines.join('\n'));
});

test('redundant pairs: both off costing more than twice the two alone', () => {
  const costs = heads([{ cost: 0.074 }, { cost: 3.864 }, { cost: 0.045 }, { cost: 1.571 }]);
  const lines = headDifferences({ costs, pairs: pairs(costs, { 23: 4.363 }) }, null);
  assert.deepEqual(lines, ['L1 H1 and L1 H2 stand in for each other: off alone they cost +0.045 and +1.571, both off +4.363, ' +
    'more than twice the two added. Each covers for the other when it is gone, which switching one head off at a time does not show.']);
  const additive = headDifferences({ costs, pairs: pairs(costs, { 23: 3.0 }) }, null);
  assert.match(additive[0], /^No two heads stand in for each other/);
  assert.match(headDifferences({ costs, pairs: [] }, null)[0], /at most 16 heads/);
});
