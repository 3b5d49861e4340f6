// tools/serve.js over HTTP, without a browser: redirects, security headers, content types, byte
// ranges, and that nothing outside web/ is served. Needs the wasm built into web/lib
// (`npm run build`). tests/js/serve-hostile.test.js attacks it on a root of its own.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { readFile } from 'node:fs/promises';
import { startServer, CONTENT_SECURITY_POLICY } from '../../tools/serve.js';

const EXPECTED_CSP = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; " +
  "img-src 'self' data: blob:; connect-src 'self'; worker-src 'self'; object-src 'none'; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

let server;
before(async () => { server = await startServer({ port: 0 }); });
after(async () => { await server?.close(); });

// fetch() (WHATWG URL) normalizes '..' and '%2e%2e' away before sending; this sends the path as
// written, the way a hostile client would.
function rawGet(path) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: server.port, path, method: 'GET' }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end();
  });
}

function assertSecurityHeaders(headers, what) {
  assert.equal(headers.get('content-security-policy'), EXPECTED_CSP, `${what}: CSP`);
  assert.equal(headers.get('cross-origin-opener-policy'), 'same-origin', `${what}: COOP`);
  assert.equal(headers.get('cross-origin-embedder-policy'), 'require-corp', `${what}: COEP`);
  assert.equal(headers.get('x-content-type-options'), 'nosniff', `${what}: nosniff`);
  assert.equal(headers.get('referrer-policy'), 'no-referrer', `${what}: Referrer-Policy`);
  assert.equal(headers.get('cache-control'), 'no-cache', `${what}: Cache-Control`);
}

test('startServer gives a loopback url and port', () => {
  assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
  assert.equal(server.url, `http://127.0.0.1:${server.port}/`);
  assert.equal(CONTENT_SECURITY_POLICY, EXPECTED_CSP);
  for (const unsafe of ["'unsafe-inline'", "'unsafe-eval'"]) {
    assert.ok(!EXPECTED_CSP.includes(unsafe), unsafe);
  }
});

test('/ redirects (302) to /demo/', async () => {
  const res = await fetch(server.url, { redirect: 'manual' });
  assert.equal(res.status, 302);
  assert.equal(res.headers.get('location'), '/demo/');
  assertSecurityHeaders(res.headers, '/');
});

test('a folder without its slash redirects to the slash', async () => {
  const res = await fetch(`${server.url}demo`, { redirect: 'manual' });
  assert.equal(res.status, 302);
  assert.equal(res.headers.get('location'), '/demo/');
});

test('/demo/ is the demo page, with the security headers', async () => {
  const res = await fetch(`${server.url}demo/`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/html/);
  assertSecurityHeaders(res.headers, '/demo/');
  const html = await res.text();
  assert.equal(html, await readFile(new URL('../../web/demo/index.html', import.meta.url), 'utf8'));
});

test('following the redirect from / lands on the demo page', async () => {
  const res = await fetch(server.url);
  assert.equal(res.status, 200);
  assert.equal(res.url, `${server.url}demo/`);
  assert.match(await res.text(), /<title>headscope/);
});

test('the wasm is application/wasm and the modules text/javascript (UTF-8)', async () => {
  const wasm = await fetch(`${server.url}lib/headscope_core.wasm`);
  assert.equal(wasm.status, 200, 'web/lib/headscope_core.wasm missing: run `npm run build` first');
  assert.equal(wasm.headers.get('content-type'), 'application/wasm');
  assertSecurityHeaders(wasm.headers, 'wasm');
  const bytes = new Uint8Array(await wasm.arrayBuffer());
  assert.deepEqual([...bytes.subarray(0, 4)], [0x00, 0x61, 0x73, 0x6d]);   // \0asm

  for (const path of ['lib/index.js', 'lib/headscope_core.js', 'demo/app.js']) {
    const res = await fetch(server.url + path);
    assert.equal(res.status, 200, path);
    assert.equal(res.headers.get('content-type'), 'text/javascript; charset=utf-8', path);
    await res.arrayBuffer();
  }
});

test('responses revalidate (ETag) and answer 304 when unchanged', async () => {
  const first = await fetch(`${server.url}demo/`);
  await first.text();
  const etag = first.headers.get('etag');
  assert.ok(etag, 'an ETag');
  const second = await fetch(`${server.url}demo/`, { headers: { 'If-None-Match': etag } });
  assert.equal(second.status, 304);
  assertSecurityHeaders(second.headers, '304');
});

test('missing files are 404, with the security headers', async () => {
  const res = await fetch(`${server.url}demo/no-such-file.js`);
  assert.equal(res.status, 404);
  assertSecurityHeaders(res.headers, '404');
  await res.text();
});

test('paths outside web/ are 404', async () => {
  // Through fetch (the URL parser resolves the dots first: these ask for web/package.json).
  for (const path of ['/../package.json', '/%2e%2e/package.json']) {
    const res = await fetch(server.url.replace(/\/$/, '') + path);
    assert.equal(res.status, 404, `fetch ${path}`);
    await res.text();
  }
  // As written on the wire.
  for (const path of [
    '/../package.json',
    '/%2e%2e/package.json',
    '/%2E%2E/package.json',
    '/demo/../../package.json',
    '/demo/%2e%2e/%2e%2e/package.json',
    '/lib/..%2f..%2fpackage.json',
    '/lib/%2e%2e%2f%2e%2e%2fpackage.json',
    '/..%5c..%5cpackage.json',
    '/lib/.headscope_core.wasm.tmp',
    '/demo/%00index.html',
    '/%E0%A4%A',
  ]) {
    const res = await rawGet(path);
    assert.equal(res.status, 404, `raw ${path}`);
    assert.ok(!res.body.includes('"name": "headscope"'), `raw ${path} leaked package.json`);
    assert.equal(res.headers['content-security-policy'], EXPECTED_CSP, `raw ${path}: CSP`);
  }
});

test('only GET and HEAD', async () => {
  const head = await fetch(`${server.url}demo/`, { method: 'HEAD' });
  assert.equal(head.status, 200);
  const post = await fetch(`${server.url}demo/`, { method: 'POST', body: 'x' });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get('allow'), 'GET, HEAD');
  await post.text();
});

test('byte ranges of the page\'s files: 206, clamped ends, 416 with bytes */size', async () => {
  const size = (await readFile(new URL('../../web/lib/headscope_core.wasm', import.meta.url))).length;
  const magic = await fetch(`${server.url}lib/headscope_core.wasm`, { headers: { Range: 'bytes=0-3' } });
  assert.equal(magic.status, 206);
  assert.equal(magic.headers.get('content-range'), `bytes 0-3/${size}`);
  assert.deepEqual([...new Uint8Array(await magic.arrayBuffer())], [0x00, 0x61, 0x73, 0x6d]);
  assertSecurityHeaders(magic.headers, '206');
  const clamped = await fetch(`${server.url}lib/headscope_core.wasm`, { headers: { Range: 'bytes=0-9007199254740992' } });
  assert.equal(clamped.status, 206);
  assert.equal(clamped.headers.get('content-range'), `bytes 0-${size - 1}/${size}`);
  assert.equal((await clamped.arrayBuffer()).byteLength, size);
  for (const range of ['bytes=5-1', 'bytes=-0', `bytes=${size}-`]) {
    const res = await fetch(`${server.url}lib/headscope_core.wasm`, { headers: { Range: range } });
    assert.equal(res.status, 416, range);
    assert.equal(res.headers.get('content-range'), `bytes */${size}`, range);
    assertSecurityHeaders(res.headers, `416 ${range}`);
    await res.arrayBuffer();
  }
  const ignored = await fetch(`${server.url}lib/headscope_core.wasm`, { headers: { Range: 'bytes=abc' } });
  assert.equal(ignored.status, 200, 'a malformed range is ignored');
  assert.equal((await ignored.arrayBuffer()).byteLength, size);
  const page = await fetch(`${server.url}demo/`);
  assert.equal(page.status, 200, 'still serving');
  await page.text();
});

test('protocol-relative paths are 404, never a redirect off this origin', async () => {
  for (const path of ['//demo', '///demo', '//demo/', '/\\demo', '/%5Cdemo', '/%2Fdemo', '//example.com/']) {
    const res = await rawGet(path);
    assert.equal(res.status, 404, path);
    assert.equal(res.headers.location, undefined, `${path}: Location`);
    assert.equal(res.headers['content-security-policy'], EXPECTED_CSP, `${path}: CSP`);
  }
});

test('a second server on a taken port fails with EADDRINUSE', async () => {
  await assert.rejects(startServer({ port: server.port }), { code: 'EADDRINUSE' });
});
