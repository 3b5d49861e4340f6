// The what-if chart's geometry (web/views/train/whatif-draw.js), without a page: the seeds' mean,
// min and max per evaluated step, the log axis's decades, the step ticks, and labels pushed apart.
// tests/browser/whatif.test.js measures the drawn chart in Chromium.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { decadeLabel, logDomain, seriesOf, spreadLabels, stepTicks } from '../../web/views/train/whatif-draw.js';

const curve = (losses) => losses.map((heldOutLoss, i) => ({ step: 50 * i, heldOutLoss }));

test('seriesOf: per step the mean, min and max over the seeds, head counts in order, variants in the given order', () => {
  const curves = new Map([[8, new Map([[1, curve([4, 0.5])], [2, curve([3, 0.1])], [3, curve([5, 0.3])]])],
    [2, new Map([[1, curve([4, 1])]])]]);
  const s = seriesOf(curves);
  assert.deepEqual(s.map((x) => x.key), [2, 8]);
  assert.deepEqual(s[1].points.map(({ step, min, max, seeds }) => ({ step, min, max, seeds })),
    [{ step: 0, min: 3, max: 5, seeds: 3 }, { step: 50, min: 0.1, max: 0.5, seeds: 3 }]);
  assert.ok(Math.abs(s[1].points[1].mean - 0.3) < 1e-15);
  const variants = new Map([['b', new Map([[1, curve([1])]])], ['a', new Map([[1, curve([2])]])]]);
  assert.deepEqual(seriesOf(variants, ['a', 'b', 'c']).map((x) => x.key), ['a', 'b']);
});

test('logDomain: from the decade under the lowest loss to just over the highest; decade labels', () => {
  const d = logDomain([{ points: [{ min: 0.0013, max: 3.3 }, { min: 0.02, max: 0.05 }] }]);
  assert.deepEqual(d.decades, [-3, -2, -1, 0]);
  assert.equal(d.lo, 1e-3);
  assert.ok(d.hi > 3.3 && d.hi < 4, `trimmed over the step-0 loss, not to 10: ${d.hi}`);
  // At least a decade, and no lower than the floor when a run fits its rows exactly.
  assert.deepEqual(logDomain([{ points: [{ min: 0.2, max: 0.3 }] }]).decades, [-1, 0]);
  assert.equal(logDomain([{ points: [{ min: 0, max: 1e-9 }] }]).lo, 1e-5);
  assert.deepEqual([-5, -3, -1, 0, 1].map(decadeLabel), ['0.00001', '0.001', '0.1', '1', '10']);
});

test('stepTicks: round steps from 0, the last step included', () => {
  assert.deepEqual(stepTicks(300), [0, 100, 200, 300]);
  assert.deepEqual(stepTicks(400), [0, 100, 200, 300, 400]);
  assert.deepEqual(stepTicks(40), [0, 10, 20, 30, 40]);
  assert.deepEqual(stepTicks(7), [0, 2, 4, 7]);
});

test('spreadLabels: apart by the gap, inside [top, bottom], in the order of their lines, unmoved when apart already', () => {
  assert.deepEqual(spreadLabels([50, 100, 150], 13, 0, 200), [50, 100, 150]);
  assert.deepEqual(spreadLabels([100, 100, 100, 100], 13, 0, 200), [100, 113, 126, 139]);
  assert.deepEqual(spreadLabels([200, 200], 13, 0, 200), [187, 200]);
  fc.assert(fc.property(fc.array(fc.double({ min: -50, max: 300, noNaN: true }), { minLength: 1, maxLength: 12 }), (want) => {
    const got = spreadLabels(want, 13, 10, 210);
    const order = want.map((y, i) => [Math.min(Math.max(y, 10), 210), i]).sort((a, b) => a[0] - b[0] || a[1] - b[1]).map(([, i]) => i);
    for (let k = 0; k < order.length; k++) {
      const y = got[order[k]];
      if (y < 10 - 1e-9 || y > 210 + 1e-9) return false;
      if (k && y - got[order[k - 1]] < 13 - 1e-9) return false;
    }
    return true;
  }));
});
