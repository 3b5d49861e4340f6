// The case parsers agree: tests/cases/ (written by tests/cases/make_cases.py) is run here through
// the JS parser (parseCase on bytes and on text), hs.runCase, the npm CLI and, when it is built,
// the native CLI; tests/cpp/case_file_test.cc runs the same files through the native parser
// (natively and in WebAssembly). good/ must parse and run; bad/ must fail with the code, JSON
// path and byte offset of bad/expect.json. Then the JS parser's own limits and rules.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { init } from '../../web/lib/index.js';
import {
  MAX_CASE_BYTES, MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, parseCase,
} from '../../web/lib/case.js';
import { expectError } from './helpers.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const casesDir = join(root, 'tests/cases');
const goodDir = join(casesDir, 'good');
const badDir = join(casesDir, 'bad');
const expected = JSON.parse(readFileSync(join(badDir, 'expect.json'), 'utf8'));
const badFiles = readdirSync(badDir).filter((f) => f !== 'expect.json').sort();
const goodFiles = readdirSync(goodDir).sort();
const nativeCli = join(root, 'build/native/headscope');
const seedText = readFileSync(join(root, 'tests/golden/seed-worked-example.json'), 'utf8');

const bytesOf = (dir, f) => new Uint8Array(readFileSync(join(dir, f)));
// Text only for files that are UTF-8 (the .bin files hold bytes that are not text on purpose).
const textOf = (f) => (f.endsWith('.json') ? new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })
  .decode(bytesOf(badDir, f)) : null);

function assertExpected(e, want, what) {
  assert.equal(e.code, want.code, `${what}: ${e.message}`);
  assert.ok(e.message.startsWith(`${want.path}: `), `${what}: path ${want.path}: ${e.message.slice(0, 300)}`);
  if (want.offset !== undefined) {
    assert.ok(e.message.includes(`(at byte ${want.offset}: `), `${what}: offset ${want.offset}: ${e.message}`);
  }
  if (want.message !== undefined) assert.ok(e.message.includes(want.message), `${what}: ${e.message}`);
  assert.doesNotMatch(e.message, /\n/, `${what}: one line`);
}

test('the corpus: every bad file has an expectation and every expectation a file', () => {
  assert.deepEqual(badFiles, Object.keys(expected).sort());
  assert.ok(badFiles.length >= 50 && goodFiles.length >= 9, `${badFiles.length} bad, ${goodFiles.length} good`);
});

test('bad cases fail in parseCase with their code, JSON path and byte offset (bytes and text)', () => {
  for (const f of badFiles) {
    for (const [form, input] of [['bytes', bytesOf(badDir, f)], ['ArrayBuffer', bytesOf(badDir, f).slice().buffer],
      ['text', textOf(f)]]) {
      if (input === null) continue;
      let error = null;
      try {
        parseCase(input);
      } catch (e) {
        error = e;
      }
      assert.ok(error !== null, `${f} (${form}) parsed`);
      assertExpected(error, expected[f], `${f} (${form})`);
    }
  }
});

test('good cases parse from bytes and text alike and run, matching their expected values', async () => {
  const hs = await init();
  for (const f of goodFiles) {
    const bytes = bytesOf(goodDir, f);
    const fromBytes = parseCase(bytes);
    const fromText = parseCase(new TextDecoder().decode(bytes));
    assert.deepEqual(fromText, fromBytes, f);
    const result = hs.runCase(bytes);
    if (fromBytes.expected !== null) {
      const cmp = hs.checkCase(bytes, result);
      assert.ok(cmp.ok, `${f}: ${cmp.detail}`);
    }
  }
  assert.equal(hs.liveHandles(), 0);
});

test('both CLIs: good cases exit 0, bad cases exit 2 naming the code and the JSON path', () => {
  const clis = [['npm', [process.execPath, join(root, 'web/lib/cli.js')]]];
  if (existsSync(nativeCli)) clis.push(['native', [nativeCli]]);
  else console.log(`# ${nativeCli} not built: the native CLI is skipped here`);
  for (const [which, [cmd, ...pre]] of clis) {
    for (const f of goodFiles) {
      const r = spawnSync(cmd, [...pre, 'run', join(goodDir, f)], { encoding: 'utf8' });
      assert.equal(r.status, 0, `${which} ${f}: ${r.stderr}`);
      JSON.parse(r.stdout);
    }
    for (const f of badFiles) {
      const r = spawnSync(cmd, [...pre, 'run', join(badDir, f)], { encoding: 'utf8' });
      const want = expected[f];
      assert.equal(r.status, 2, `${which} ${f}: exit ${r.status}: ${r.stderr}`);
      assert.equal(r.stdout, '', `${which} ${f}`);
      assert.match(r.stderr, /^headscope: [^\n]+\n$/, `${which} ${f}: one line: ${r.stderr.slice(0, 300)}`);
      assert.ok(r.stderr.startsWith(`headscope: ${join(badDir, f)}: ${want.code}: ${want.path}: `),
        `${which} ${f}: ${r.stderr.slice(0, 300)}`);
      if (want.offset !== undefined) assert.ok(r.stderr.includes(`(at byte ${want.offset}: `), `${which} ${f}`);
    }
  }
});

// --- the JS parser's rules, one by one ------------------------------------------------------

test('nesting deeper than 64 levels is PARSE_ERROR at its path, even a million levels deep', () => {
  assert.equal(MAX_JSON_DEPTH, 64);
  for (const depth of [65, 100_000, 1_000_000]) {
    const t0 = performance.now();
    expectError(() => parseCase('['.repeat(depth) + ']'.repeat(depth)), 'PARSE_ERROR',
      '$[0][0][0][0][0][0][0][0]...: nested deeper than 64 levels');
    const doc = `{"config": {"embed_dim": 4, "num_heads": 2, "bias": ${'['.repeat(depth)}${']'.repeat(depth)}}}`;
    const e = expectError(() => parseCase(doc), 'PARSE_ERROR');
    assert.equal(e.message, 'config.bias[0][0][0][0][0][0]...: nested deeper than 64 levels');
    assert.ok(performance.now() - t0 < 5000, `${depth} levels: ${performance.now() - t0} ms`);
  }
  const seed = JSON.parse(seedText);
  seed.meta = JSON.parse(`${'['.repeat(63)}${']'.repeat(63)}`);
  parseCase(JSON.stringify(seed));  // 64 levels with the root object: allowed
});

test('more than 2^24 arrays and objects is PARSE_ERROR before JSON.parse builds them', () => {
  assert.equal(MAX_JSON_CONTAINERS, 2 ** 24);
  const over = `{"meta": [${'[],'.repeat(MAX_JSON_CONTAINERS - 2)}[]]}`;
  const within = `{"meta": [${'[],'.repeat(MAX_JSON_CONTAINERS - 3)}[]]}`;
  const t0 = performance.now();
  expectError(() => parseCase(over), 'PARSE_ERROR',
    `meta[${MAX_JSON_CONTAINERS - 2}]: more than ${MAX_JSON_CONTAINERS} arrays and objects in the document`);
  const t1 = performance.now();
  // One fewer is within the limit (and then not a case): JSON.parse builds its 2^24 arrays.
  expectError(() => parseCase(within), 'PARSE_ERROR', 'config: expected an object');
  const t2 = performance.now();
  // "Before JSON.parse builds them", as a ratio in one process rather than a time limit (a
  // loaded machine took 24 s for both; the refusal, a scan of the text, measured 6-8x cheaper).
  assert.ok(2 * (t1 - t0) < t2 - t1, `refused in ${t1 - t0} ms, parsed the document one under in ${t2 - t1} ms`);
});

test('input over maxInputBytes is RESOURCE_EXHAUSTED, as text or bytes, before it is parsed', () => {
  assert.equal(MAX_CASE_BYTES, 256 * 2 ** 20);
  const bytes = new TextEncoder().encode(seedText);
  parseCase(seedText, { maxInputBytes: bytes.length });
  parseCase(bytes, { maxInputBytes: bytes.length });
  const message = `$: the document is ${bytes.length} bytes, more than the limit of ${bytes.length - 1} bytes`;
  expectError(() => parseCase(seedText, { maxInputBytes: bytes.length - 1 }), 'RESOURCE_EXHAUSTED', message);
  expectError(() => parseCase(bytes, { maxInputBytes: bytes.length - 1 }), 'RESOURCE_EXHAUSTED', message);
  // Bytes, not UTF-16 units: 'é' is two bytes.
  const e = expectError(() => parseCase('"é"', { maxInputBytes: 3 }), 'RESOURCE_EXHAUSTED');
  assert.equal(e.message, '$: the document is 4 bytes, more than the limit of 3 bytes');
});

test('numbers: -0 is +0, -0.0 is -0, 1e-400 is 0, beyond float32 is inf, 1e400 is refused', () => {
  const doc = JSON.parse(seedText);
  delete doc.expected;
  const text = JSON.stringify(doc).replace('"query":[[1,0,1,2]', '"query":[[-0,-0.0,1e-400,1e39]');
  assert.ok(text.includes('1e39'), 'the query row was replaced');
  const c = parseCase(text);
  assert.ok(Object.is(c.query.data[0], 0));
  assert.ok(Object.is(c.query.data[1], -0));
  assert.equal(c.query.data[2], 0);
  assert.equal(c.query.data[3], Infinity);
  // A JS object is not text: a -0 in it stays -0, as the caller wrote it.
  doc.inputs.query[0][0] = -0;
  assert.ok(Object.is(parseCase(doc).query.data[0], -0));
  for (const big of ['1e400', '-1e400', '1.8e308', `1${'0'.repeat(400)}`]) {
    const bad = text.replace('1e39', big);
    const shown = big.length > 40 ? `${big.slice(0, 37)}...` : big;
    expectError(() => parseCase(bad), 'PARSE_ERROR',
      `inputs.query[0][3]: the number ${shown} is out of range (beyond +-1.8e308); write "inf" or "-inf"`);
  }
});

test('a JS string with a lone surrogate is not Unicode text: PARSE_ERROR with its byte offset', () => {
  const e = expectError(() => parseCase('{"name": "é\ud800"}'), 'PARSE_ERROR');
  assert.equal(e.message, '$: not valid JSON (at byte 12: a lone surrogate U+D800, which is not Unicode text)');
  expectError(() => parseCase('{"name": "\udc00x"}'), 'PARSE_ERROR', '(at byte 10: a lone surrogate U+DC00');
  // A pair is fine, raw or escaped.
  const doc = JSON.parse(seedText);
  doc.name = '\ud83d\ude00';
  assert.equal(parseCase(JSON.stringify(doc)).name, '\ud83d\ude00');
  assert.equal(parseCase(JSON.stringify(doc).replace('\ud83d\ude00', '\\ud83d\\ude00')).name, '\ud83d\ude00');
});

test('keys in paths are abbreviated past 64 code points and control characters escaped', () => {
  const doc = JSON.parse(seedText);
  doc.config['\u{1d11e}'.repeat(70)] = 1;
  let e = expectError(() => parseCase(JSON.stringify(doc)), 'PARSE_ERROR');
  assert.ok(e.message.startsWith(`config.${'\u{1d11e}'.repeat(61)}...: unknown key`), e.message);
  delete doc.config['\u{1d11e}'.repeat(70)];
  doc.config['a\u0001b'] = 1;
  e = expectError(() => parseCase(doc), 'PARSE_ERROR');
  assert.ok(e.message.startsWith('config.a\\u0001b: unknown key'), e.message);
});
