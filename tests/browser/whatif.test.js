// The Train view's "What if?" in Chromium (issue 31): no empty chart before a run and disabled
// buttons that look disabled; the chart's log loss axis with its titles, head-count labels that do
// not overlap (their boxes measured), a band per line from the seeds' min to their max; and the
// documented sinks experiment run in the page equal to docs/experiments.md's table and verdict and
// to the committed runs (the accuracies bit for bit, the losses to an ulp).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ARTIFACTS_DIR, openPage } from './harness.js';
import { describeResult, EXPERIMENTS } from '../../web/lib/experiments.js';
import { DOC_PATH, loadResults, resultOfRecord, runRecord, sameRun } from '../../tools/whatif.mjs';

const ready = (page) => page.waitForFunction(() => document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true', null, { timeout: 60_000 });

// Everything the chart shows, measured in the page: boxes in CSS pixels, coordinates in the SVG's.
function readChart() {
  const svg = document.querySelector('#panel-train .hs-train-whatif-chart');
  const box = (e) => { const r = e.getBoundingClientRect(); return { left: r.left, right: r.right, top: r.top, bottom: r.bottom }; };
  const points = (s) => s.trim().split(/\s+/).map((p) => p.split(',').map(Number));
  return {
    svg: box(svg),
    labels: [...svg.querySelectorAll('.hs-train-whatif-label')].map((t) => ({ heads: t.dataset.heads, text: t.textContent, box: box(t) })),
    yticks: [...svg.querySelectorAll('.hs-train-whatif-ytick')].map((t) => ({ value: Number(t.dataset.value), y: Number(t.dataset.y), text: t.textContent })),
    xticks: [...svg.querySelectorAll('.hs-train-whatif-xtick')].map((t) => t.textContent),
    ytitle: svg.querySelector('.hs-train-whatif-ytitle')?.textContent, xtitle: svg.querySelector('.hs-train-whatif-xtitle')?.textContent,
    bands: [...svg.querySelectorAll('polygon.hs-train-whatif-band')].map((b) => ({ heads: b.dataset.heads, points: points(b.getAttribute('points')) })),
    lines: [...svg.querySelectorAll('path.hs-train-whatif-line')].map((p) => ({ heads: p.dataset.heads,
      points: [...p.getAttribute('d').matchAll(/[ML]([\d.]+) ([\d.]+)/g)].map((m) => [Number(m[1]), Number(m[2])]) })),
  };
}

// The what-if part only (tests/browser/artifacts/<name>.png): the chart is what a reader checks.
function shoot(page, name) {
  mkdirSync(ARTIFACTS_DIR, { recursive: true });
  return page.locator('#panel-train .hs-train-whatif').screenshot({ path: join(ARTIFACTS_DIR, `${name}.png`) });
}

const overlap = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;

function assertLabelsApart(chart, heads) {
  assert.deepEqual(chart.labels.map((l) => l.heads), heads);
  for (const [i, a] of chart.labels.entries()) {
    assert.ok(a.box.left >= chart.svg.left && a.box.right <= chart.svg.right + 0.5 && a.box.top >= chart.svg.top && a.box.bottom <= chart.svg.bottom,
      `label ${a.text} inside the chart: ${JSON.stringify(a.box)} in ${JSON.stringify(chart.svg)}`);
    for (const b of chart.labels.slice(i + 1)) assert.ok(!overlap(a.box, b.box), `labels ${a.text} and ${b.text} overlap: ${JSON.stringify([a.box, b.box])}`);
  }
}

// The loss axis read off its ticks: powers of ten, evenly spaced (a log axis), and the SVG y of any loss.
function logAxis(yticks) {
  assert.ok(yticks.length >= 3, `at least two decades: ${JSON.stringify(yticks)}`);
  yticks.forEach((t, k) => {
    assert.ok(Math.abs(Math.log10(t.value) - Math.round(Math.log10(t.value))) < 1e-9, `${t.value}: a power of ten`);
    assert.equal(Number(t.text), t.value);
    if (k) {
      assert.ok(Math.abs(Math.log10(t.value / yticks[k - 1].value) - 1) < 1e-9, 'one decade apart');
      assert.ok(Math.abs((t.y - yticks[k - 1].y) - (yticks[1].y - yticks[0].y)) < 0.11, 'evenly spaced');
    }
  });
  const [a, b] = [yticks[0], yticks[yticks.length - 1]];
  assert.ok(b.y < a.y, 'larger losses higher up');
  // A loss under the lowest tick sits on it (the axis starts there).
  return (v) => a.y + ((b.y - a.y) * (Math.log10(Math.max(v, a.value)) - Math.log10(a.value))) / (Math.log10(b.value) - Math.log10(a.value));
}

// One page for both tests (a page load is seconds of the suite's budget): the first draws into the
// runner's chart before any run, the second runs.
let p;
before(async () => {
  p = await openPage('/demo/#train');
  await ready(p.page);
});
after(() => p?.close());

test('What if?: no empty chart before a run, disabled buttons look disabled; the chart\'s log axis, titles and labels apart', { timeout: 120_000 }, async () => {
  const { page } = p;
  const idle = await page.evaluate(() => {
    const box = document.querySelector('#panel-train .hs-train-whatif');
    const style = (e) => ({ opacity: Number(getComputedStyle(e).opacity), cursor: getComputedStyle(e).cursor });
    return {
      chart: box.querySelector('.hs-train-whatif-chart').getBoundingClientRect().height,
      table: box.querySelector('.hs-train-whatif-table').getBoundingClientRect().height,
      cancel: { disabled: box.querySelector('.hs-train-whatif-cancel').disabled, ...style(box.querySelector('.hs-train-whatif-cancel')) },
      run: { disabled: box.querySelector('.hs-train-whatif-run').disabled, ...style(box.querySelector('.hs-train-whatif-run')) },
    };
  });
  // A button per documented experiment.
  assert.deepEqual(await page.$$eval('#panel-train .hs-train-whatif-run', (bs) => bs.map((b) => b.dataset.experiment)), Object.keys(EXPERIMENTS));
  assert.equal(idle.chart, 0, 'no chart box before a run');
  assert.equal(idle.table, 0, 'no table before a run');
  assert.equal(idle.cancel.disabled, true);
  assert.equal(idle.run.disabled, false);
  assert.ok(idle.cancel.opacity <= 0.6 && idle.run.opacity === 1, `disabled Cancel faded, Run not: ${JSON.stringify(idle)}`);
  assert.equal(idle.cancel.cursor, 'not-allowed');
  // The chart drawn from curves like the issue's: 4, 8, 16 and 64 heads from a step-0 loss near
  // ln V down to losses that end all but equal (their labels would stack on one another).
  const chart = await page.evaluate(async () => {
    const { drawCurves } = await import('/views/train/whatif-draw.js');
    const curves = new Map();
    for (const [k, heads] of [4, 8, 16, 64].entries()) {
      curves.set(heads, new Map([1, 2, 3].map((seed) => [seed, [0, 100, 200, 300].map((step, i) => ({ step,
        heldOutLoss: [3.3 + 0.01 * seed, 0.3 / (k + 1) + 0.001 * seed, 0.01 + 0.001 * k, 0.0012 + 0.0001 * seed][i] }))])));
    }
    const svg = document.querySelector('#panel-train .hs-train-whatif-chart');
    drawCurves(svg, curves, 300);
    return { seen: svg.getBoundingClientRect().height > 0 };
  });
  assert.ok(chart.seen, 'drawn, the chart shows');
  const c = await page.evaluate(readChart);
  assertLabelsApart(c, ['4', '8', '16', '64']);
  const y = logAxis(c.yticks);
  assert.deepEqual(c.yticks.map((t) => t.text), ['0.001', '0.01', '0.1', '1'], 'from the decade under the lowest loss, not to the one over the highest');
  assert.deepEqual(c.xticks, ['0', '100', '200', '300']);
  assert.match(c.ytitle, /^held-out loss \(log scale\)$/);
  assert.equal(c.xtitle, 'training step');
  // On the log axis the step-300 losses (about 0.0014) and the step-200 ones (0.01 to 0.013) are
  // far apart, which a linear axis up to 3.3 would put within a pixel of each other.
  const line4 = c.lines.find((l) => l.heads === '4').points;
  assert.ok(Math.abs(line4[3][1] - y(0.0014)) < 0.2 && line4[3][1] - line4[2][1] > 30, JSON.stringify(line4));
  await shoot(page, 'whatif-chart-labels');
  assert.deepEqual(p.pageErrors, []);
});

// The doc's table of an experiment (its rows' cells) and its verdict sentence.
function docTable(name) {
  const block = readFileSync(DOC_PATH, 'utf8').match(new RegExp(`<!-- whatif:begin ${name} [^]*?<!-- whatif:end ${name} -->`))[0];
  const lines = block.split('\n');
  return {
    rows: lines.filter((l) => l.startsWith('| ')).slice(1).map((l) => l.split('|').slice(1, -1).map((x) => x.trim())),
    verdict: lines.find((l) => l.startsWith('The verdict')).replace(/^[^:]*: /, ''),
  };
}

// The whole sinks table (the cheapest documented experiment, which tests/js/experiments-doc.test.js
// does not rerun: this is the suite's one fresh run of a whole table against the committed one).
test('What if?: the sinks experiment run in the page is docs/experiments.md\'s table and verdict and the committed runs; bands at the seeds\' min and max', { timeout: 240_000 }, async () => {
  const name = 'sinks';
  const record = loadResults().experiments[name];
  const { page } = p;
  const shown = await page.evaluate(async (n) => {
    const w = window.headscopeDemo.train.whatIf;
    await w.run(n);
    const r = document.querySelector('#panel-train .hs-train-whatif');
    return {
      done: r.dataset.done,
      rows: [...r.querySelectorAll('.hs-train-whatif-table tbody tr')].map((tr) => [...tr.children].map((x) => x.textContent)),
      verdict: r.querySelector('.hs-train-whatif-verdict').textContent,
      runs: w.result().runs,
    };
  }, name);
  assert.equal(shown.done, name);
  // The doc's rows but their last cell, the time per run (the machine's).
  const doc = docTable(name);
  assert.equal(doc.rows.length, 2);
  assert.deepEqual(shown.rows.map((r) => r.slice(0, -1)), doc.rows.map((r) => r.slice(0, -1)), 'the page\'s rows are the doc\'s');
  assert.equal(shown.verdict, doc.verdict);
  // And every run is the committed run (the same config and seed): its accuracies exact, its
  // losses within an ulp or so (LOSS_TOLERANCE: Chromium's Math.exp and Math.log against Node's).
  assert.equal(shown.runs.length, record.runs.length);
  shown.runs.forEach((r, k) => assert.ok(sameRun(record.runs[k], runRecord(r)), `run ${k + 1}: ${JSON.stringify(runRecord(r))}`));
  assert.equal(describeResult(resultOfRecord(record)), doc.verdict);
  // The chart: a band per variant whose top and bottom are the seeds' max and min held-out loss
  // at each evaluated step (from the committed runs, mapped through the drawn ticks).
  const c = await page.evaluate(readChart);
  const y = logAxis(c.yticks);
  const variants = EXPERIMENTS[name].variants.map((v) => v.name);
  assert.deepEqual(c.bands.map((b) => b.heads), variants);
  assert.deepEqual(c.lines.map((l) => l.heads), variants);
  for (const band of c.bands) {
    const runs = record.runs.filter((r) => r.variant === band.heads);
    assert.equal(runs.length, 3, 'three seeds');
    const n = runs[0].curve.length;
    assert.equal(band.points.length, 2 * n, 'the max along the steps, then the min back');
    runs[0].curve.forEach(([step], i) => {
      const losses = runs.map((r) => r.curve[i][2]);
      const [xTop, yTop] = band.points[i];
      const [xBottom, yBottom] = band.points[2 * n - 1 - i];
      assert.equal(xTop, xBottom);
      assert.ok(Math.abs(yTop - y(Math.max(...losses))) < 0.11, `${band.heads}, step ${step}: top ${yTop} is the max ${Math.max(...losses)}`);
      assert.ok(Math.abs(yBottom - y(Math.min(...losses))) < 0.11, `${band.heads}, step ${step}: bottom ${yBottom} is the min ${Math.min(...losses)}`);
      if (i === n - 1) assert.equal(step, EXPERIMENTS[name].steps);
    });
    assert.ok(band.points.some(([, yy], i) => Math.abs(yy - band.points[2 * n - 1 - i][1]) > 1), 'the seeds differ somewhere: a band, not a line');
  }
  // The two variants end at all but the same loss: their labels are pushed apart.
  assertLabelsApart(c, variants);
  await shoot(page, 'whatif-sinks');
  assert.deepEqual(p.pageErrors, []);
});
