// axe-core (npm) in a test page: axe(page, context) -> the violations, [] when there are none.
// page.addScriptTag({ path }) inlines the file, which the server's CSP refuses (no inline
// scripts): the DevTools protocol's evaluation, which a page's CSP does not govern, runs it.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** Runs axe on `context` (a selector, or a document-level include/exclude spec); the violations, shortened. */
export async function axe(page, context) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) {
    const cdp = await page.context().newCDPSession(page);
    const { exceptionDetails } = await cdp.send('Runtime.evaluate', { expression: AXE_SOURCE });
    await cdp.detach();
    assert.equal(exceptionDetails, undefined, 'axe-core loaded');
  }
  return page.evaluate(async (ctx) => {
    const result = await window.axe.run(ctx, { resultTypes: ['violations'] });
    return result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.slice(0, 5).map((n) => `${n.target.join(' ')}: ${n.failureSummary}`) }));
  }, context);
}
