// Loading and releasing: every init() / initWorker() settles in bounded time, a failed load leaves
// nothing running (a Node process with nothing else to do exits by itself), a threaded module can
// be closed and its memory and threads go away, and init()'s cache never lets one caller's load
// stand in for another's. Scripts that must exit on their own run in child processes with a
// timeout, so a leak shows as a timeout instead of hanging the suite.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, writeFileSync, rmSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { init, initWorker, HeadscopeError } from '../../web/lib/index.js';
import { seedWorkedExample as seed } from '../../web/lib/examples.js';

const INDEX = fileURLToPath(new URL('../../web/lib/index.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'headscope-lifecycle-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));

// Runs an ES module script in a fresh Node; resolves { code, stdout, stderr, ms } or rejects
// when it has not exited within `timeoutMs` (then it is killed).
function runScript(source, { timeoutMs = 20_000, args = [] } = {}) {
  const file = join(dir, `script-${Math.random().toString(36).slice(2)}.mjs`);
  writeFileSync(file, source.replaceAll('HEADSCOPE', JSON.stringify(INDEX)));
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const child = spawn(process.execPath, [...args, file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`script did not exit within ${timeoutMs} ms; stdout: ${stdout}; stderr: ${stderr}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}

test('a failed init({ threads }) rejects with LOAD_ERROR and leaves nothing running; retries do not pile up', async () => {
  const r = await runScript(`
    import { init } from HEADSCOPE;
    for (let i = 0; i < 5; i++) {
      try { await init({ threads: 2 + i, wasmBinary: new Uint8Array([0, 97, 115, 109, 9, 9, 9, 9]) }); }
      catch (e) { console.log(e.code); }
    }
    // Emscripten's process-wide handlers were taken off again.
    console.log(process.listeners('unhandledRejection').length, process.listeners('uncaughtException').length);
  `);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(r.stdout.trim().split('\n'), ['LOAD_ERROR', 'LOAD_ERROR', 'LOAD_ERROR', 'LOAD_ERROR', 'LOAD_ERROR', '0 0']);
});

test('a threaded module can be closed: its threads end, the process exits, memory does not pile up', async () => {
  const r = await runScript(`
    import { init } from HEADSCOPE;
    const x = { data: new Float32Array(64 * 64).fill(0.5), shape: [64, 64] };
    for (let threads = 2; threads <= 16; threads++) {
      const hs = await init({ threads });
      const mha = hs.createMultiheadAttention({ embedDim: 64, numHeads: 4, bias: false });
      mha.loadStateDict({ in_proj_weight: { data: new Float32Array(192 * 64).fill(0.01), shape: [192, 64] },
        'out_proj.weight': { data: new Float32Array(64 * 64).fill(0.01), shape: [64, 64] } });
      mha.forward(x, x, x);
      hs.close();
      if (hs.liveHandles() !== 0 || !mha.disposed) throw new Error('close() left objects alive');
      let refused = false;
      try { mha.forward(x, x, x); } catch (e) { refused = e.code === 'DISPOSED'; }
      if (!refused) throw new Error('a closed engine\\'s object still computes');
      // close() forgot the module: the next init({ threads }) loads a new one.
      const again = await init({ threads });
      if (again === hs) throw new Error('init() returned a closed engine');
      again.close();
    }
    globalThis.gc();
    await new Promise((r) => setTimeout(r, 200));
    globalThis.gc();
    console.log(Math.round(process.memoryUsage().rss / 2 ** 20));
  `, { timeoutMs: 120_000, args: ['--expose-gc'] });
  assert.equal(r.code, 0, r.stderr);
  const rssMiB = Number(r.stdout.trim());
  // 30 threaded modules of 2..16 threads were loaded and closed (each holds >= 16 MiB of shared
  // memory and a worker per thread): what stays is far below what keeping them would take.
  assert.ok(rssMiB < 1024, `RSS after 30 load/close cycles: ${rssMiB} MiB`);
});

test('init() caches per module and source: a bad wasmBinary or wasmUrl never stands in for another caller', async () => {
  const garbage = init({ wasmBinary: new Uint8Array([1, 2, 3]) });
  const plain = init();
  await assert.rejects(garbage, { code: 'LOAD_ERROR' });
  const hs = await plain;
  assert.equal(hs.kernelTarget, 'WASM');
  // A later wasmUrl is honoured, not answered from the cache of the default module.
  await assert.rejects(init({ wasmUrl: join(dir, 'missing.wasm') }), (e) => e.code === 'LOAD_ERROR' &&
    e.message.includes('missing.wasm'));
  assert.equal(await init(), hs);
  // wasmBinary loads are never shared: two calls, two engines; the caller's bytes are copied.
  const bytes = new Uint8Array(execFileSync('cat', [fileURLToPath(new URL('../../web/lib/headscope_core.wasm', import.meta.url))]));
  const p1 = init({ wasmBinary: bytes });
  bytes.fill(0);   // changing the bytes after the call does not change what loads
  const a = await p1;
  assert.notEqual(a, hs);
  const m = a.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  m.loadStateDict(seed.state_dict);
  assert.equal(m.forward(seed.inputs.query, seed.inputs.query, seed.inputs.query).output.shape.join(), '3,4');
  a.close();
});

test('init({ wasmUrl }) on a device, a FIFO, a huge file, a silent or endless server: LOAD_ERROR, quickly', async () => {
  const t0 = Date.now();
  await assert.rejects(init({ wasmUrl: '/dev/zero' }), (e) => e.code === 'LOAD_ERROR' && /not a regular file/.test(e.message));
  const fifo = join(dir, 'fifo.wasm');
  execFileSync('mkfifo', [fifo]);
  await assert.rejects(init({ wasmUrl: fifo }), (e) => e.code === 'LOAD_ERROR' && /not a regular file/.test(e.message));
  const huge = join(dir, 'huge.wasm');
  writeFileSync(huge, '');
  truncateSync(huge, 2 ** 31);   // sparse: 2 GiB that take no disk
  await assert.rejects(init({ wasmUrl: huge }), (e) => e.code === 'LOAD_ERROR' && /more than a headscope module/.test(e.message));
  assert.ok(Date.now() - t0 < 5000, `local refusals took ${Date.now() - t0} ms`);

  // Over HTTP (loopback): a server that never answers, and one whose body never ends.
  const sockets = new Set();
  const server = createServer((req, res) => {
    if (req.url === '/silent.wasm') return;   // never answers
    res.writeHead(200, { 'Content-Type': 'application/wasm' });
    const chunk = Buffer.alloc(1 << 20);
    const pump = () => { while (res.write(chunk)); };
    res.on('drain', pump);
    pump();
  });
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${server.address().port}`;
  try {
    const t1 = Date.now();
    await assert.rejects(init({ wasmUrl: `${base}/silent.wasm`, timeoutMs: 500 }),
      (e) => e.code === 'LOAD_ERROR' && /500 ms/.test(e.message));
    assert.ok(Date.now() - t1 < 3000, `a silent server took ${Date.now() - t1} ms to give up on`);
    const t2 = Date.now();
    await assert.rejects(init({ wasmUrl: `${base}/endless.wasm` }),
      (e) => e.code === 'LOAD_ERROR' && /more than 67108864 bytes/.test(e.message));
    assert.ok(Date.now() - t2 < 15000, `an endless body took ${Date.now() - t2} ms to give up on`);
  } finally {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  }
  // Bad options.
  for (const [options, fragment] of [[{ timeoutMs: 0 }, 'options.timeoutMs'], [{ timeoutMs: 'soon' }, 'options.timeoutMs'],
    [{ wasmUrl: 5 }, 'options.wasmUrl: expected a string or a URL'], [{ wasmBinary: 'bytes' }, 'options.wasmBinary'],
    [{ wasmUrl: { toString: () => '/etc/passwd' } }, 'options.wasmUrl']]) {
    await assert.rejects(init(options), (e) => e instanceof HeadscopeError && e.code === 'INVALID_ARGUMENT' &&
      e.message.includes(fragment));
  }
});

test('initWorker() on a worker that never says ready rejects with LOAD_ERROR in time and ends it', async () => {
  const silent = join(dir, 'silent-worker.mjs');
  writeFileSync(silent, 'setInterval(() => {}, 1000);\n');
  const r = await runScript(`
    import { initWorker } from HEADSCOPE;
    const t0 = Date.now();
    try { await initWorker(${JSON.stringify(silent)}, { timeoutMs: 300 }); }
    catch (e) { console.log(e.code, Date.now() - t0 < 5000, /300 ms/.test(e.message)); }
  `);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.trim(), 'LOAD_ERROR true true');
  await assert.rejects(initWorker(undefined, { timeoutMs: -1 }), { code: 'INVALID_ARGUMENT' });
  await assert.rejects(initWorker(undefined, { tmeout: 5 }), { code: 'INVALID_ARGUMENT', message: /options\.tmeout: unknown option/ });
});

test('close() on the single-threaded engine: its objects are disposed, init() loads a new one', async () => {
  const hs = await init();
  const m = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  m.loadStateDict(seed.state_dict);
  hs.close();
  hs.close();   // a no-op
  assert.equal(hs.closed, true);
  assert.equal(m.disposed, true);
  assert.throws(() => m.forward(seed.inputs.query, seed.inputs.query, seed.inputs.query),
    { code: 'DISPOSED', message: /engine was closed/ });
  assert.throws(() => hs.memory(), { code: 'DISPOSED' });
  const fresh = await init();
  assert.notEqual(fresh, hs);
  const m2 = fresh.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  m2.loadStateDict(seed.state_dict);
  const out = m2.forward(seed.inputs.query, seed.inputs.query, seed.inputs.query).output.data;
  seed.expected.output.flat().forEach((x, i) => assert.ok(Math.abs(out[i] - x) < 1e-5));
  m2.dispose();
});
