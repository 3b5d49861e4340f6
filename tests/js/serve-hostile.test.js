// tools/serve.js against a hostile client, over raw TCP (node:net) to 127.0.0.1, the way a page on
// another origin or a local program could talk to `npm start`: range headers of every shape,
// paths that try to leave the root or to make the server redirect off-host, methods and malformed
// HTTP, symbolic links out of the root, and a burst of 200 concurrent requests.
//
// The server runs in a child process (startServer on a temp root this file builds), so a request
// that kills it shows up as a dead child, not as a crashed test run; after every hostile request
// the test asks for /demo/ again and wants the page (200), and at the end nothing may have been
// logged as an internal error. Needs no wasm build.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { mkdtemp, mkdir, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SERVE_JS = fileURLToPath(new URL('../../tools/serve.js', import.meta.url));
const INDEX_HTML = '<!doctype html><title>hostile test root</title>\n';
const DATA = Buffer.from(Array.from({ length: 100 }, (_, i) => i));   // /data.bin: bytes 0..99
const ANSWER_MS = 5000;

let root;        // the served folder
let outside;     // a folder beside it, never served
let child;       // the server process
let port;
let childStderr = '';

// Starts startServer({ root }) in its own process and resolves with its port.
function startChild(rootDir) {
  const script = `
    const { startServer } = await import(${JSON.stringify(pathToFileURL(SERVE_JS).href)});
    const server = await startServer({ port: 0, root: ${JSON.stringify(rootDir)} });
    console.log('PORT ' + server.port);`;
  child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (text) => { childStderr += text; });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`server did not start: ${childStderr}`)), 10_000);
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (text) => {
      out += text;
      const match = /PORT (\d+)/.exec(out);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code}) before listening: ${childStderr}`));
    });
  });
}

before(async () => {
  const base = await realpath(await mkdtemp(join(tmpdir(), 'headscope-serve-')));
  root = join(base, 'root');
  outside = join(base, 'outside');
  await mkdir(join(root, 'demo'), { recursive: true });
  await mkdir(join(root, 'empty'));
  await mkdir(join(root, 'ünï'));
  await mkdir(outside);
  await writeFile(join(root, 'demo', 'index.html'), INDEX_HTML);
  await writeFile(join(root, 'data.bin'), DATA);
  await writeFile(join(root, 'empty.txt'), '');
  await writeFile(join(root, 'ünï', 'naïve.txt'), 'non-ASCII names work\n');
  await writeFile(join(outside, 'secret.txt'), 'SECRET outside the root\n');
  await writeFile(join(outside, 'index.html'), 'SECRET index outside the root\n');
  // Links out of the root: to a system file, to a file beside the root, to a folder beside it.
  await symlink('/etc/passwd', join(root, 'demo', 'passwd'));
  await symlink(join(outside, 'secret.txt'), join(root, 'demo', 'secret.txt'));
  await symlink(outside, join(root, 'outdir'));
  await symlink('../../outside/secret.txt', join(root, 'demo', 'relative-secret.txt'));
  // Links that stay inside (served), a dangling one and a loop (404).
  await symlink('../data.bin', join(root, 'demo', 'alias.bin'));
  await symlink('demo', join(root, 'alias-dir'));
  await symlink(join(root, 'missing'), join(root, 'dangling.txt'));
  await symlink('loop-b', join(root, 'loop-a'));
  await symlink('loop-a', join(root, 'loop-b'));
  port = await startChild(root);
});

after(async () => {
  if (child && child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
  if (root) await rm(join(root, '..'), { recursive: true, force: true });
});

// Sends `payload` (a string or Buffer: the whole request, as written) and resolves with what came
// back before the server closed the connection: { status, headers (lower-case names), body }.
// status is null if nothing came back. Requests ask for Connection: close, so every answer ends
// with the server closing; the timer bounds it.
function raw(payload, { timeout = ANSWER_MS } = {}) {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    const chunks = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete answer within ${timeout} ms to ${JSON.stringify(String(payload).slice(0, 120))}`));
    }, timeout);
    socket.on('connect', () => socket.write(payload));
    socket.on('data', (chunk) => chunks.push(chunk));
    // The server may close while a long request is still being written (EPIPE, ECONNRESET): what
    // it answered before that is what counts.
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(parseResponse(Buffer.concat(chunks)));
    });
  });
}

function parseResponse(bytes) {
  while (/^HTTP\/1\.1 1\d\d /.test(bytes.subarray(0, 13).toString('latin1'))) {   // interim: 100 Continue
    bytes = bytes.subarray(bytes.indexOf('\r\n\r\n') + 4);
  }
  const end = bytes.indexOf('\r\n\r\n');
  if (end < 0) return { status: null, headers: {}, body: bytes, raw: bytes.toString('latin1') };
  const [statusLine, ...lines] = bytes.subarray(0, end).toString('latin1').split('\r\n');
  const headers = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { status: Number(statusLine.split(' ')[1]), headers, body: bytes.subarray(end + 4), raw: statusLine };
}

function request(method, target, headers = {}) {
  const lines = [`${method} ${target} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close'];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  return Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'utf8');
}

const get = (target, headers) => raw(request('GET', target, headers));

async function assertAlive(after) {
  assert.equal(child.exitCode, null, `the server exited (code ${child.exitCode}) after ${after}\n${childStderr}`);
  assert.equal(child.signalCode, null, `the server was killed (${child.signalCode}) after ${after}`);
  const res = await get('/demo/');
  assert.equal(res.status, 200, `GET /demo/ after ${after}`);
  assert.equal(res.body.toString(), INDEX_HTML, `GET /demo/ body after ${after}`);
}

// A redirect may only name a path on this origin: exactly one leading '/', then not '/' or '\'.
function assertSameOriginLocation(res, what) {
  if (res.headers.location === undefined) return;
  assert.match(res.headers.location, /^\/(?![/\\])/, `${what}: Location ${res.headers.location}`);
}

// --- ranges ------------------------------------------------------------------------------------

const satisfiable = [
  // [Range, Content-Range, first byte, length]
  ['bytes=0-9', 'bytes 0-9/100', 0, 10],
  ['bytes=10-10', 'bytes 10-10/100', 10, 1],
  ['bytes=90-199', 'bytes 90-99/100', 90, 10],                       // end past the file: clamped
  ['bytes=0-9007199254740992', 'bytes 0-99/100', 0, 100],             // 2^53: was a crash
  ['bytes=0-9007199254740991', 'bytes 0-99/100', 0, 100],
  ['bytes=50-99999999999999999999999999', 'bytes 50-99/100', 50, 50],
  ['bytes=95-', 'bytes 95-99/100', 95, 5],
  ['bytes=-10', 'bytes 90-99/100', 90, 10],                           // suffix range
  ['bytes=-100', 'bytes 0-99/100', 0, 100],
  ['bytes=-1000', 'bytes 0-99/100', 0, 100],                          // suffix longer than the file: all of it
  ['bytes=-99999999999999999999999999', 'bytes 0-99/100', 0, 100],
  ['bytes=0-4,5-9', 'bytes 0-9/100', 0, 10],                          // adjacent ranges coalesced
  ['bytes= 0-9', 'bytes 0-9/100', 0, 10],                             // optional whitespace
];

test('satisfiable ranges are 206 with the right Content-Range and bytes', async () => {
  for (const [range, contentRange, start, length] of satisfiable) {
    const res = await get('/data.bin', { Range: range });
    assert.equal(res.status, 206, range);
    assert.equal(res.headers['content-range'], contentRange, range);
    assert.equal(res.headers['content-length'], String(length), range);
    assert.deepEqual(res.body, DATA.subarray(start, start + length), range);
    await assertAlive(`Range: ${range}`);
  }
});

test('unsatisfiable and invalid ranges are 416 with Content-Range: bytes */size', async () => {
  for (const range of [
    'bytes=5-1',                        // last < first: an invalid int-range (RFC 9110 14.1.1): was a crash
    'bytes=-0',                         // a zero-length suffix
    'bytes=100-',                       // starts at the end
    'bytes=100-200',
    'bytes=99999999999999999999999999-',
    'bytes=9007199254740992-9007199254740993',
    'bytes=5-1,200-300',
  ]) {
    const res = await get('/data.bin', { Range: range });
    assert.equal(res.status, 416, range);
    assert.equal(res.headers['content-range'], 'bytes */100', range);
    assert.equal(res.headers['content-security-policy']?.startsWith("default-src 'self'"), true, `${range}: CSP`);
    await assertAlive(`Range: ${range}`);
  }
  const empty = await get('/empty.txt', { Range: 'bytes=0-' });
  assert.equal(empty.status, 416, 'a range of an empty file');
  assert.equal(empty.headers['content-range'], 'bytes */0');
  await assertAlive('a range of an empty file');
});

test('malformed ranges, other units and multiple ranges are ignored: 200 with the whole file', async () => {
  for (const range of [
    'bytes=abc',
    'bytes=',
    'bytes=-',
    'bytes=--1',
    'bytes=1-2-3',
    'bytes=0x10-0x20',
    'bytes=1.5-2',
    'bytes=+1-2',
    'bytes=1e3-',
    'bytes=0-1,abc',
    'items=0-9',
    'bytes',
    '=0-9',
    'bytes=0-1,5-6',                                   // two ranges: served whole (RFC 9110 allows it)
    `bytes=${Array.from({ length: 1000 }, (_, i) => `${i * 3}-${i * 3}`).join(',')}`,
    '\u00ff\u00fe',
  ]) {
    const res = await raw(Buffer.concat([
      Buffer.from('GET /data.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nRange: '),
      Buffer.from(range, 'latin1'),
      Buffer.from('\r\n\r\n'),
    ]));
    assert.equal(res.status, 200, range.slice(0, 40));
    assert.equal(res.headers['content-range'], undefined, range.slice(0, 40));
    assert.deepEqual(res.body, DATA, range.slice(0, 40));
    await assertAlive(`Range: ${range.slice(0, 40)}`);
  }
});

test('ranges with HEAD, If-Range, and on paths that are not files', async () => {
  const head = await raw(request('HEAD', '/data.bin', { Range: 'bytes=0-9007199254740992' }));
  assert.equal(head.status, 206);
  assert.equal(head.headers['content-range'], 'bytes 0-99/100');
  assert.equal(head.body.length, 0, 'HEAD has no body');
  await assertAlive('HEAD with a range');

  const stale = await get('/data.bin', { Range: 'bytes=0-9', 'If-Range': '"not-the-etag"' });
  assert.equal(stale.status, 200, 'If-Range with another ETag: the whole file');
  assert.deepEqual(stale.body, DATA);
  await assertAlive('If-Range');

  for (const target of ['/no-such-file', '/demo/passwd', '/outdir/secret.txt', '/..%2f..%2fetc/passwd']) {
    for (const range of ['bytes=5-1', 'bytes=0-9007199254740992', 'bytes=-0']) {
      const res = await get(target, { Range: range });
      assert.equal(res.status, 404, `${target} ${range}`);
      assert.ok(!res.body.toString().includes('SECRET') && !res.body.toString().includes('root:'), target);
      await assertAlive(`${target} with Range: ${range}`);
    }
  }
  const folder = await get('/demo', { Range: 'bytes=5-1' });
  assert.equal(folder.status, 302, 'a folder without its slash still redirects');
  assert.equal(folder.headers.location, '/demo/');
  await assertAlive('a folder with a range');
});

// --- paths -------------------------------------------------------------------------------------

test('no request makes the server redirect off this origin', async () => {
  for (const target of [
    '//demo', '///demo', '//demo/', '////demo', '//127.0.0.2/demo', '//evil.example', '//evil.example/',
    '/\\demo', '/\\\\evil.example', '/%5Cdemo', '/%5C%5Cevil.example', '/%2Fdemo', '/%2F%2Fevil.example',
    '/%2f/demo', '/demo//', '/demo//index.html', '/%09/evil.example', '/%0d%0aX-Injected:%201',
    '/demo?x=//evil.example', '/?next=//evil.example',
  ]) {
    const res = await get(target);
    assertSameOriginLocation(res, target);
    assert.ok(res.status === 302 || res.status === 404 || res.status === 200, `${target}: ${res.status}`);
    if (res.status === 302) {
      assert.match(res.headers.location, /^\/demo\/(\?.*)?$/, `${target}: only /demo/ is a folder here`);
    }
    assert.equal(res.headers['x-injected'], undefined, `${target}: header injection`);
    await assertAlive(target);
  }
  // The protocol-relative ones in particular are 404, not a redirect.
  for (const target of ['//demo', '///demo', '//evil.example', '/\\demo', '/%5Cdemo', '/%2Fdemo']) {
    assert.equal((await get(target)).status, 404, target);
  }
  const query = await get('/demo?x=//evil.example');
  assert.equal(query.headers.location, '/demo/?x=//evil.example', 'the query is kept, after the path');
});

test('paths that leave the root, NULs, encoded slashes, overlong and non-ASCII paths', async () => {
  for (const target of [
    '/%2e%2e/', '/%2e%2e/outside/secret.txt', '/%2E%2E%2Foutside%2Fsecret.txt', '/../outside/secret.txt',
    '/demo/..%2f..%2foutside%2fsecret.txt', '/demo/%2e%2e/%2e%2e/outside/secret.txt', '/.%2e/outside/secret.txt',
    '/%00', '/demo/%00', '/demo/index.html%00', '/demo/index.html%00.txt', '/%C0%AE%C0%AE/outside/secret.txt',
    '/demo%2Findex.html', '/demo%2findex.html', '/%E0%A4%A', '/%', '/%zz', '*', 'demo/', 'http://127.0.0.1/demo/',
    `/${'a'.repeat(300)}`, `/${'a/'.repeat(2000)}`, '/demo/index.html/', '/data.bin/x',
  ]) {
    const res = await get(target);
    assert.ok(res.status === 404 || res.status === 400, `${target.slice(0, 60)}: ${res.status}`);
    assert.ok(!res.body.toString().includes('SECRET'), `${target.slice(0, 60)}: leaked a file outside the root`);
    assertSameOriginLocation(res, target.slice(0, 60));
    await assertAlive(target.slice(0, 60));
  }

  // 100 KB of URL: beyond Node's header limit, refused by the HTTP parser (431).
  const overlong = await raw(request('GET', `/demo/${'x'.repeat(100 * 1024)}`));
  assert.equal(overlong.status, 431, `100 KB URL: ${overlong.raw}`);
  await assertAlive('a 100 KB URL');

  // Non-ASCII names, percent-encoded (UTF-8) as browsers send them, are served; raw bytes are not
  // a valid request target and are refused.
  const encoded = await get('/%C3%BCn%C3%AF/na%C3%AFve.txt');
  assert.equal(encoded.status, 200, 'percent-encoded UTF-8 path');
  assert.equal(encoded.body.toString(), 'non-ASCII names work\n');
  const folder = await get('/%C3%BCn%C3%AF');
  assert.equal(folder.status, 302, 'a non-ASCII folder redirects to its slash');
  assert.equal(folder.headers.location, '/%C3%BCn%C3%AF/');
  for (const target of [Buffer.from('/ünï/naïve.txt', 'utf8'), Buffer.from('/\u00fcn\u00ef/', 'latin1'),
    Buffer.from([0x2f, 0xff, 0xfe]), Buffer.from('/%FF%FE'), Buffer.from('/\u{1F600}', 'utf8')]) {
    const res = await raw(Buffer.concat([Buffer.from('GET '), target,
      Buffer.from(' HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n')]));
    assert.ok(res.status === 404 || res.status === 400, `${target.toString('latin1')}: ${res.status}`);
    await assertAlive(`raw bytes ${target.toString('hex')}`);
  }
});

// --- methods and malformed HTTP ----------------------------------------------------------------

test('methods other than GET and HEAD are 405 with Allow', async () => {
  for (const method of ['POST', 'PUT', 'DELETE', 'OPTIONS', 'TRACE', 'PATCH', 'CONNECT', 'PROPFIND']) {
    const target = method === 'CONNECT' ? '127.0.0.1:1' : '/demo/';
    const res = await raw(request(method, target, { 'Content-Length': '0' }));
    assert.equal(res.status, 405, method);
    assert.equal(res.headers.allow, 'GET, HEAD', method);
    await assertAlive(method);
  }
  const withBody = await raw(Buffer.concat([request('POST', '/demo/', { 'Content-Length': '5' }).subarray(0, -2),
    Buffer.from('\r\nhello')]));
  assert.equal(withBody.status, 405, 'POST with a body');
  await assertAlive('POST with a body');

  // Upgrade and Expect are answered as plain GETs (no WebSocket here) or refused, not dropped.
  const upgrade = await get('/demo/', { Upgrade: 'websocket', 'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==',
    'Sec-WebSocket-Version': '13' });
  assert.equal(upgrade.status, 200, 'GET with Upgrade: websocket');
  await assertAlive('Upgrade: websocket');
  const expect = await get('/demo/', { Expect: 'something-else' });
  assert.equal(expect.status, 417, 'an unknown expectation');
  assert.match(expect.headers['content-security-policy'] ?? '', /^default-src 'self'/, '417: CSP');
  const proceed = await get('/demo/', { Expect: '100-continue' });
  assert.equal(proceed.status, 200, 'Expect: 100-continue');
  await assertAlive('Expect');

  const head = await raw(request('HEAD', '/demo/'));
  assert.equal(head.status, 200, 'HEAD');
  assert.equal(head.headers['content-length'], String(Buffer.byteLength(INDEX_HTML)));
  assert.equal(head.body.length, 0, 'HEAD has no body');
  await assertAlive('HEAD');
});

test('malformed HTTP is 400 and the connection closes', async () => {
  for (const payload of [
    'HELLO\r\n\r\n',
    'GARBAGE /demo/ HTTP/1.1\r\nHost: x\r\n\r\n',
    'G\u0001T /demo/ HTTP/1.1\r\nHost: x\r\n\r\n',
    'GET /demo/ HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n',
    'GET /demo/ HTTP/1.1\r\nHost: x\r\nNo-Colon\r\n\r\n',
    'GET /demo/ HTTP/1.1\r\nHost: x\r\nX: a\u0000b\r\n\r\n',
    'GET /demo/ HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n',
    'GET /demo/ HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n',
    'GET /demo/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
    'GET /demo/ HTTP/1.1\nHost: x\n\n\u0000\u0000\u0000',
    'GET /de mo/ HTTP/1.1\r\nHost: x\r\n\r\n',
    '\r\n\r\n\u0016\u0003\u0001\u0002\u0000\u0001\u0000\u0001\u00fc\u0003\u0003',   // a TLS ClientHello
  ]) {
    const res = await raw(Buffer.from(payload, 'latin1'));
    assert.equal(res.status, 400, `${JSON.stringify(payload.slice(0, 50))}: ${res.raw}`);
    await assertAlive(JSON.stringify(payload.slice(0, 50)));
  }
  // Half a request, then the client hangs up.
  await new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port }, () => socket.end('GET /demo/ HTTP/1.1\r\nHo'));
    socket.on('error', () => {});
    socket.on('close', resolve);
    socket.resume();
  });
  await assertAlive('a half request');
  // A client that resets the connection in the middle of a response.
  await new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port }, () => socket.write(request('GET', '/data.bin')));
    socket.once('data', () => socket.resetAndDestroy());
    socket.on('error', () => {});
    socket.on('close', resolve);
  });
  await assertAlive('a reset mid-response');
});

// --- symbolic links ----------------------------------------------------------------------------

test('symbolic links out of the root are 404; links that stay inside are served', async () => {
  for (const target of ['/demo/passwd', '/demo/secret.txt', '/demo/relative-secret.txt', '/outdir/secret.txt',
    '/outdir/index.html', '/outdir/', '/outdir', '/dangling.txt', '/loop-a', '/loop-a/x']) {
    const res = await get(target);
    assert.equal(res.status, 404, target);
    assert.equal(res.headers.location, undefined, `${target}: no redirect into a folder outside the root`);
    const body = res.body.toString();
    assert.ok(!body.includes('SECRET') && !body.includes('root:'), `${target} leaked ${body.slice(0, 40)}`);
    await assertAlive(target);
  }
  const head = await raw(request('HEAD', '/demo/passwd'));
  assert.equal(head.status, 404, 'HEAD of a link out of the root');

  const alias = await get('/demo/alias.bin');
  assert.equal(alias.status, 200, 'a link to a file inside the root');
  assert.deepEqual(alias.body, DATA);
  const aliasDir = await get('/alias-dir/');
  assert.equal(aliasDir.status, 200, 'a link to a folder inside the root');
  assert.equal(aliasDir.body.toString(), INDEX_HTML);
  const aliasDirNoSlash = await get('/alias-dir');
  assert.equal(aliasDirNoSlash.status, 302);
  assert.equal(aliasDirNoSlash.headers.location, '/alias-dir/');
});

// --- load --------------------------------------------------------------------------------------

test('200 concurrent requests, hostile ones mixed in, are all answered within 10 s', async () => {
  const kinds = [
    () => [request('GET', '/demo/'), 200],
    () => [request('GET', '/data.bin', { Range: 'bytes=5-1' }), 416],
    () => [request('GET', '/data.bin', { Range: 'bytes=0-9007199254740992' }), 206],
    () => [request('GET', '/data.bin', { Range: 'bytes=abc' }), 200],
    () => [request('GET', '//demo'), 404],
    () => [request('GET', '/demo/passwd'), 404],
    () => [request('GET', '/%2e%2e/outside/secret.txt'), 404],
    () => [request('DELETE', '/demo/'), 405],
    () => [Buffer.from('HELLO\r\n\r\n'), 400],
    () => [request('HEAD', '/data.bin'), 200],
  ];
  const started = Date.now();
  const results = await Promise.all(Array.from({ length: 200 }, async (_, i) => {
    const [payload, want] = kinds[i % kinds.length]();
    const res = await raw(payload, { timeout: 10_000 });
    return { i, want, got: res.status };
  }));
  const elapsed = Date.now() - started;
  const wrong = results.filter((r) => r.got !== r.want);
  assert.deepEqual(wrong, [], 'every request answered with its status');
  assert.ok(elapsed < 10_000, `200 requests took ${elapsed} ms`);
  await assertAlive('200 concurrent requests');
});

test('nothing was logged as an internal error', () => {
  assert.equal(childStderr, '', 'the server logged');
});

// --- `npm start` itself ------------------------------------------------------------------------

test('node tools/serve.js (npm start) survives the ranges that used to kill it', async () => {
  const server = spawn(process.execPath, [SERVE_JS], {
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1' }, stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    const startPort = await new Promise((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`npm start printed no url: ${out}`)), 10_000);
      server.stdout.setEncoding('utf8');
      server.stdout.on('data', (text) => {
        out += text;
        const match = /http:\/\/localhost:(\d+)\/demo\//.exec(out);
        if (match) {
          clearTimeout(timer);
          resolve(Number(match[1]));
        }
      });
      server.once('exit', (code) => reject(new Error(`npm start exited (${code})`)));
    });
    const saved = port;
    port = startPort;
    try {
      for (const range of ['bytes=0-9007199254740992', 'bytes=5-1', 'bytes=-0']) {
        const res = await get('/demo/index.html', { Range: range });
        assert.ok(res.status === 206 || res.status === 416, `${range}: ${res.status}`);
        assert.equal(server.exitCode, null, `npm start exited after Range: ${range}`);
      }
      const moved = await get('//demo');
      assert.notEqual(moved.headers.location, '//demo/');
      const page = await get('/demo/');
      assert.equal(page.status, 200);
      assert.match(page.body.toString(), /<title>headscope/);
    } finally {
      port = saved;
    }
  } finally {
    if (server.exitCode === null && server.signalCode === null) {
      const exited = new Promise((resolve) => server.once('exit', resolve));
      server.kill('SIGTERM');
      await exited;
    }
  }
});
