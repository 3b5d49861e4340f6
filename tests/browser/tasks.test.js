// headscope/tasks in Chromium: the same bits as in Node for every task (training, held-out and
// probe rows, defaults and other options), from the page's own copy of web/lib/tasks.js.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TASKS } from '../../web/lib/tasks.js';
import { openPage } from './harness.js';

// Every batch the comparison covers, as [name, options, stream, batchSize, index].
const CASES = TASKS.flatMap(({ name }) => [
  [name, { seed: 1 }, 'batch', 64, 0],
  [name, { seed: 2 ** 52 + 5 }, 'heldOut', 16, 2 ** 30],
  [name, { seed: 3, seqLen: name === 'log-line' ? 40 : 24 }, 'batch', 32, 7],
  [name, {}, 'probe', 1, 0],
]);

// Runs in Node and, serialized, in the page: each case's tokens and targets as arrays.
async function generate(moduleUrl, cases) {
  const { makeTask: make } = await import(moduleUrl);
  return cases.map(([name, options, stream, batchSize, index]) => {
    const task = make(name, options);
    const b = stream === 'probe' ? task.probe() : task[stream](batchSize, index);
    return [Array.from(b.tokens.data), Array.from(b.targets.data)];
  });
}

test('every task gives the same tokens and targets in Chromium as in Node', async () => {
  const { page, pageErrors, foreignRequests, close } = await openPage('/widgets/example.html', { waitForReady: false });
  try {
    const inPage = await page.evaluate(`(${generate})('/lib/tasks.js', ${JSON.stringify(CASES)})`);
    const inNode = await generate(new URL('../../web/lib/tasks.js', import.meta.url).href, CASES);
    assert.equal(inPage.length, CASES.length);
    CASES.forEach((c, i) => assert.deepEqual(inPage[i], inNode[i], JSON.stringify(c)));
    assert.ok(inNode.every(([tokens, targets]) => tokens.length > 0 && tokens.length === targets.length));
    assert.deepEqual(pageErrors, []);
    assert.deepEqual(foreignRequests, []);
  } finally {
    await close();
  }
});
