// One schema per object (issue 29, item 1): src/headscope/schema.cc describes each config's
// fields once. This suite fails when any copy drifts from it: the generated web/lib/schema.js,
// the hand-written types of index.d.ts, the case format's tables in docs/case-format.md, the
// error codes of errors.js, index.d.ts and docs/errors.md, the views' choices; and it checks that
// the JS option reading, both case parsers and the engine agree on every field's boundaries.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { init, HeadscopeError } from '../../web/lib/index.js';
import { SCHEMA } from '../../web/lib/schema.js';
import { schemaModuleText } from '../../web/lib/schema-text.js';
import { ERROR_CODES } from '../../web/lib/errors.js';
import { MHA_SCHEMA, OPTIMIZER_SCHEMA, TRANSFORMER_SCHEMA, accepts, expectation } from '../../web/lib/config.js';
import { parseCase } from '../../web/lib/case.js';

const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0));
const root = new URL('../../', import.meta.url);
const read = (path) => readFileSync(new URL(path, root), 'utf8');

test('web/lib/schema.js is what the engine says (node tools/gen-schema.mjs after a schema change)', () => {
  assert.equal(read('web/lib/schema.js'), schemaModuleText(hs._core.schema()));
  assert.deepEqual(SCHEMA.objects.map((o) => o.name), ['mha', 'transformer', 'optimizer']);
  for (const o of SCHEMA.objects) {
    for (const f of o.fields) {
      assert.match(f.torch, /^[a-z][a-z0-9_]*$/, `${o.name}.${f.torch}: PyTorch names are snake_case`);
      assert.match(f.js, /^[a-z][A-Za-z0-9]*$/, `${o.name}.${f.js}: JS names are camelCase`);
      // The naming rule: the JS name is the camelCase of the same words (docs/architecture.md),
      // but for the documented exceptions.
      const camel = f.torch.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
      const exceptions = { add_bias_kv: 'addBiasKV', max_norm: 'clipGradNorm' };
      assert.equal(f.js, exceptions[f.torch] ?? camel, `${o.name}.${f.torch}`);
      assert.ok(f.doc.length > 5, `${o.name}.${f.torch} has a doc line`);
    }
  }
});

// The fields of one interface (or object type) of a .d.ts text: name -> { optional, type }.
function interfaceFields(text, start) {
  const at = text.indexOf(start);
  assert.ok(at >= 0, `${start} in the .d.ts`);
  const body = text.slice(text.indexOf('{', at) + 1, text.indexOf('}', text.indexOf('{', at)));
  const fields = {};
  for (const line of body.split('\n')) {
    const m = /^\s*(\w+)(\?)?:\s*(.+?);?\s*$/.exec(line.replace(/\/\*.*?\*\//g, ''));
    if (m) fields[m[1]] = { optional: m[2] === '?', type: m[3].replace(/;$/, '') };
  }
  return fields;
}

const tsType = (f) => ({
  size: f.nullMeans !== undefined ? 'number | null' : 'number',
  number: 'number',
  bool: 'boolean',
  choice: f.choices?.map((c) => `'${c}'`).join(' | '),
  pair: 'readonly [number, number]',
})[f.type];

test('index.d.ts types every schema field of each config, with its type and whether it has a default', () => {
  const dts = read('web/lib/index.d.ts');
  const check = (schema, fields, extra = []) => {
    assert.deepEqual(Object.keys(fields).sort(), [...schema.fields.map((f) => f.js), ...extra].sort());
    for (const f of schema.fields) {
      assert.equal(fields[f.js].optional, f.default !== 'required', `${schema.name}.${f.js}: optional iff it has a default`);
      assert.equal(fields[f.js].type, tsType(f), `${schema.name}.${f.js}: its type`);
    }
  };
  check(MHA_SCHEMA, interfaceFields(dts, 'export interface MultiheadAttentionConfig'));
  check(TRANSFORMER_SCHEMA, interfaceFields(dts, 'export interface TransformerConfig'), ['seed']);
  // The optimizer: one object type per variant, its `type` the variant's literal.
  const variants = /export type OptimizerOptions =([\s\S]*?);\n/.exec(dts)[1].split('\n  |').map((s) => s.trim()).filter(Boolean);
  for (const variant of OPTIMIZER_SCHEMA.fields[0].choices) {
    const text = variants.find((v) => v.includes(`type: '${variant}'`));
    assert.ok(text, `OptimizerOptions has a ${variant} member`);
    const names = [...text.matchAll(/(\w+)\??:/g)].map((m) => m[1]);
    const want = OPTIMIZER_SCHEMA.fields.filter((f) => f.variants === undefined || f.variants.includes(variant)).map((f) => f.js);
    assert.deepEqual(names, want, `OptimizerOptions ${variant}`);
  }
});

test('one list of error codes: errors.js, index.d.ts and docs/errors.md', () => {
  assert.deepEqual(ERROR_CODES.slice(0, SCHEMA.errorCodes.length), SCHEMA.errorCodes);
  const dts = /export type HeadscopeErrorCode =([\s\S]*?);/.exec(read('web/lib/index.d.ts'))[1];
  assert.deepEqual([...dts.matchAll(/'([A-Z_]+)'/g)].map((m) => m[1]), ERROR_CODES);
  const table = [...read('docs/errors.md').matchAll(/^\| `([A-Z_]+)` \|/gm)].map((m) => m[1]);
  assert.deepEqual(table, ERROR_CODES, 'docs/errors.md: one row per code, in this order');
  const comment = [...read('web/lib/errors.js').matchAll(/^\/\/ {3}([A-Z_]+)\s/gm)].map((m) => m[1]);
  assert.deepEqual(comment, ERROR_CODES, 'errors.js: its header lists every code');
});

test('docs/case-format.md: the transformer config table is the schema\'s', () => {
  const doc = read('docs/case-format.md');
  const section = doc.slice(doc.indexOf('### `config`'), doc.indexOf('### `state_dict`'));
  const rows = [...section.matchAll(/^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|/gm)].map((m) => ({ key: m[1], type: m[2].trim(), dflt: m[3].trim() }));
  assert.deepEqual(rows.map((r) => r.key), TRANSFORMER_SCHEMA.fields.map((f) => f.torch));
  for (const f of TRANSFORMER_SCHEMA.fields) {
    const row = rows.find((r) => r.key === f.torch);
    const written = row.dflt === 'required' ? 'required' : JSON.parse(row.dflt.replace(/`/g, ''));
    assert.deepEqual(written, f.default === 'required' ? 'required' : f.default.value, `${f.torch}: default`);
    const type = { size: `integer >= ${f.min}`, bool: 'boolean',
      number: f.hi === null ? 'number > 0' : `number in (${f.lo}, ${f.hi}]`,
      choice: f.choices?.map((c) => `\`"${c}"\``).join(', ') }[f.type];
    assert.equal(row.type, type, `${f.torch}: type`);
  }
});

// Values at and around each field's bounds, as a case file writes them.
function probes(f) {
  switch (f.type) {
    case 'size': return [f.min - 1, f.min, f.max, f.max + 1, 1.5, '3', true, null, 0];
    case 'number': return [0, 1e-9, -1, 1, NaN, Infinity, 'x'];
    case 'bool': return [true, false, 0, 'true'];
    case 'choice': return [...f.choices, f.choices[0].toUpperCase(), '', 1];
    default: return [];
  }
}

test('the case parser (JS) accepts exactly what the schema accepts, and says what it expects', () => {
  const base = { kind: 'transformer', config: { vocab_size: 8, max_len: 4, d_model: 4, n_heads: 1 }, state_dict: {}, inputs: { tokens: [0] } };
  for (const f of TRANSFORMER_SCHEMA.fields) {
    // (below; n_kv_heads must also divide n_heads, 1 here)
    if (f.torch === 'd_model' || f.torch === 'n_heads' || f.torch === 'max_len' || f.torch === 'n_kv_heads') continue;
    for (const v of probes(f)) {
      if (typeof v === 'number' && !Number.isFinite(v)) continue;  // (not JSON)
      if (f.torch === 'rope_fraction' && v === 1e-9) continue;  // (no pair to turn: below)
      const doc = structuredClone(base);
      doc.config[f.torch] = v;
      if (f.torch.startsWith('rope_')) doc.config.positions = 'rope';  // (only with rope: below)
      let error = null;
      try {
        parseCase(doc);
      } catch (e) {
        error = e;
      }
      const what = `${f.torch} = ${JSON.stringify(v)}`;
      if (accepts(f, v) || (v === null && f.default !== 'required')) {
        assert.equal(error, null, `${what}: ${error?.message}`);
      } else {
        assert.ok(error instanceof HeadscopeError, `${what}: accepted`);
        assert.ok(error.message.startsWith(`config.${f.torch}: `), error.message);
        assert.ok(error.message.includes(`expected ${expectation(TRANSFORMER_SCHEMA, f)}`), error.message);
      }
    }
  }
  const bad = structuredClone(base);
  Object.assign(bad.config, { d_model: 6, n_heads: 4 });
  assert.throws(() => parseCase(bad), { message: 'config.n_heads: d_model (6) must be divisible by n_heads (4)' });
  // n_kv_heads: null or a divisor of n_heads.
  const kv = (n) => { const d = structuredClone(base); Object.assign(d.config, { n_heads: 4, n_kv_heads: n }); return d; };
  for (const n of [null, 1, 2, 4]) assert.equal(parseCase(kv(n)).config.nKvHeads, n);
  assert.throws(() => parseCase(kv(3)), { message: 'config.n_kv_heads: n_heads (4) must be divisible by n_kv_heads (3)' });
  assert.throws(() => parseCase(kv(8)), { message: 'config.n_kv_heads: n_heads (4) must be divisible by n_kv_heads (8)' });
  assert.throws(() => parseCase(kv(0)), { message: 'config.n_kv_heads: expected null (= n_heads) or an integer in [1, 16777216], got number 0' });
  // The rope fields: only with positions "rope" (the schema's onlyWith rule), and a pair of dims
  // to turn (rope_fraction * d_head >= 2).
  const rope = (c) => { const d = structuredClone(base); Object.assign(d.config, c); return d; };
  assert.deepEqual(Object.fromEntries(Object.entries(parseCase(rope({ positions: 'rope', rope_layout: 'interleaved', rope_base: 100, rope_fraction: 0.5 })).config).filter(([k]) => k.startsWith('rope'))),
    { ropeLayout: 'interleaved', ropeBase: 100, ropeFraction: 0.5 });
  assert.equal(parseCase(rope({ rope_layout: 'half', rope_base: 10000, rope_fraction: 1 })).config.positions, 'learned');
  assert.throws(() => parseCase(rope({ rope_layout: 'interleaved' })),
    { message: 'config.rope_layout: applies only with positions "rope" (positions is "learned"): leave it at its default, "half", got "interleaved"' });
  assert.throws(() => parseCase(rope({ positions: 'none', rope_base: 500000 })),
    { message: 'config.rope_base: applies only with positions "rope" (positions is "none"): leave it at its default, 10000, got 500000' });
  assert.throws(() => parseCase(rope({ positions: 'sinusoidal', rope_fraction: 0.5 })),
    { message: 'config.rope_fraction: applies only with positions "rope" (positions is "sinusoidal"): leave it at its default, 1, got 0.5' });
  assert.throws(() => parseCase(rope({ positions: 'rope', rope_fraction: 0.4 })),
    { message: 'config.rope_fraction: 0.4 of the head dim d_model / n_heads = 4 gives no pair of dims to rotate: at least 2 rotary dims are needed (rope_fraction >= 2 / 4)' });
  assert.throws(() => parseCase(rope({ positions: 'rope', n_heads: 4 })),
    { message: 'config.rope_fraction: 1 of the head dim d_model / n_heads = 1 gives no pair of dims to rotate: at least 2 rotary dims are needed (a head of 1 dim has none)' });
  assert.equal(parseCase(rope({ positions: 'rope', rope_fraction: 0.5 })).config.ropeFraction, 0.5);  // 2 of 4
});

test('the engine (the binding and Validate) refuses exactly the values the schema refuses', () => {
  const base = { vocabSize: 8, maxLen: 4, dModel: 4, seed: null };
  for (const f of TRANSFORMER_SCHEMA.fields) {
    for (const v of probes(f)) {
      if (f.torch === 'd_model' || f.torch === 'n_heads' || f.torch === 'n_kv_heads') continue;  // (divisibility: below)
      if (f.torch === 'rope_fraction' && v === 1e-9) continue;  // (no pair to turn: below)
      let error = null;
      let model = null;
      try {
        model = hs.createTransformer({ ...base, [f.js]: v, ...(f.torch.startsWith('rope_') ? { positions: 'rope' } : {}) });
      } catch (e) {
        error = e;
      } finally {
        model?.dispose();
      }
      const ok = accepts(f, v) || (v === null && f.default !== 'required' && false);
      if (ok) assert.equal(error, null, `${f.js} = ${String(v)}: ${error?.message}`);
      else assert.ok(error instanceof HeadscopeError, `${f.js} = ${String(v)}: accepted`);
      if (!ok && typeof v === 'number' && f.type !== 'bool' && f.type !== 'choice') {
        assert.equal(error.message.split(': ')[0], `config.${f.js}`, error.message);
      }
    }
  }
  assert.throws(() => hs.createTransformer({ ...base, dModel: 6, nHeads: 4 }),
    { message: 'config.nHeads: dModel (6) must be divisible by nHeads (4)' });
  assert.throws(() => hs.createMultiheadAttention({ embedDim: 6, numHeads: 4 }),
    { message: 'config.numHeads: embedDim (6) must be divisible by numHeads (4)' });
  assert.throws(() => hs.createTransformer({ ...base, dModel: 8, nHeads: 4, nKvHeads: 3 }),
    { message: 'config.nKvHeads: nHeads (4) must be divisible by nKvHeads (3)' });
  assert.throws(() => hs.createMultiheadAttention({ embedDim: 8, numHeads: 4, numKvHeads: 8 }),
    { message: 'config.numKvHeads: numHeads (4) must be divisible by numKvHeads (8)' });
  assert.throws(() => hs.createMultiheadAttention({ embedDim: 8, numHeads: 4, numKvHeads: 0 }),
    { message: 'config.numKvHeads: expected null (= numHeads) or an integer in [1, 16777216], got number 0' });
  for (const numKvHeads of [null, 1, 2, 4]) hs.createMultiheadAttention({ embedDim: 8, numHeads: 4, numKvHeads }).dispose();
  // The rope rules, in the JS API's names.
  assert.throws(() => hs.createTransformer({ ...base, ropeLayout: 'interleaved' }),
    { message: 'config.ropeLayout: applies only with positions "rope" (positions is "learned"): leave it at its default, "half", got "interleaved"' });
  assert.throws(() => hs.createTransformer({ ...base, positions: 'rope', ropeFraction: 0.4 }),
    { message: 'config.ropeFraction: 0.4 of the head dim dModel / nHeads = 4 gives no pair of dims to rotate: at least 2 rotary dims are needed (ropeFraction >= 2 / 4)' });
  hs.createTransformer({ ...base, positions: 'rope', ropeLayout: 'interleaved', ropeBase: 100, ropeFraction: 0.5 }).dispose();
});

test('the native case parser agrees with the schema on every field\'s boundaries (when built)', () => {
  const cli = new URL('build/native/headscope', root).pathname;
  if (!existsSync(cli)) {
    console.log('# the native CLI is not built: skipped');
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'headscope-schema-'));
  try {
    const base = { kind: 'transformer', config: { vocab_size: 8, max_len: 4, d_model: 4, n_heads: 1 }, state_dict: {}, inputs: { tokens: [0] } };
    for (const f of TRANSFORMER_SCHEMA.fields) {
      for (const v of probes(f)) {
        if (typeof v === 'number' && !Number.isFinite(v)) continue;
        if (f.torch === 'd_model' || f.torch === 'n_heads' || f.torch === 'n_kv_heads') continue;
        const doc = structuredClone(base);
        doc.config[f.torch] = v;
        // (the rope fields: with positions rope, and also without it, where only their default
        // is accepted: both parsers' onlyWith rule and the rotary dims' rule)
        if (f.torch.startsWith('rope_') && v !== 0) doc.config.positions = 'rope';
        // (1e-9 of a head leaves no pair: both refuse, but C++ writes the fraction 1e-09)
        if (f.torch === 'rope_fraction' && v === 1e-9) continue;
        const file = join(dir, 'case.json');
        writeFileSync(file, JSON.stringify(doc));
        const r = spawnSync(cli, ['run', file], { encoding: 'utf8' });
        const js = (() => { try { parseCase(doc); return null; } catch (e) { return e.message; } })();
        const parseError = /PARSE_ERROR: (config\.[^\n]*)/.exec(r.stderr)?.[1] ?? null;
        assert.equal(parseError === null, js === null, `${f.torch} = ${JSON.stringify(v)}: native ${r.stderr.trim()} / JS ${js}`);
        if (js !== null) assert.equal(parseError, js, `${f.torch} = ${JSON.stringify(v)}: the same message`);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
