#!/usr/bin/env node
// The demo's static server: serves web/ (the demo page, the widgets and the npm package they load)
// on loopback, with the security headers the page is written against, and built to stay up and
// inside its root whatever a client sends (below).
//
//   npm start                          http://localhost:8080/demo/
//   PORT=9000 npm start                another port (PORT=0: any free port)
//   HOST=0.0.0.0 npm start             listen on every interface, to open the demo from another
//                                      machine (the default, 127.0.0.1, is reachable only from here)
//
// As a module (the browser tests use it):
//   import { startServer } from './tools/serve.js';
//   const { url, port, close } = await startServer({ port: 0 });   // url: 'http://127.0.0.1:PORT/'
//   await close();
//
// Every response, 404s and redirects included, carries:
//   Content-Security-Policy  CSP below: only this origin's scripts, styles, workers and fetches;
//                            no inline script or style, no eval; 'wasm-unsafe-eval' lets the page
//                            compile WebAssembly (Chromium refuses it under CSP without it)
//   Cross-Origin-Opener-Policy: same-origin, Cross-Origin-Embedder-Policy: require-corp
//                            the page is cross-origin isolated (SharedArrayBuffer, for a future
//                            threaded wasm build)
//   X-Content-Type-Options: nosniff, Referrer-Policy: no-referrer, Cache-Control: no-cache
// `/` redirects to `/demo/`, a folder without its trailing slash to the slash (so the page's
// relative URLs resolve), and anything outside web/ (`..`, dot files) is 404.
//
// What a hostile client (any page the user has open can send requests here) cannot do:
// - kill the server: malformed HTTP is answered 400 (431 for an oversized head) and the
//   connection closed; an unexpected exception while answering is logged and answered 500; every
//   request, response and socket has an error handler.
// - be redirected off this origin: a Location is always a path with exactly one leading '/'
//   (paths with empty segments, `//demo`, or any backslash are 404, never redirected).
// - read outside the root: a file or folder whose real path (symbolic links resolved) is not
//   inside the root is 404, as are dot files, NULs and control characters, and encoded slashes.
// - break ranges: RFC 9110 byte ranges, by `send` (below): a satisfiable range is 206 with its
//   Content-Range, an end past the file is clamped, a suffix longer than the file is the whole
//   file, an unsatisfiable or invalid one (`bytes=-0`, `bytes=5-1`) is 416 with
//   `Content-Range: bytes */size`, and a malformed one, another unit or several disjoint ranges are
//   ignored (200, the whole file).
//
// The files are sent by `send` (pillarjs, the file sender behind Express's static middleware):
// ranges through range-parser, conditional requests (ETag, Last-Modified, If-Range), HEAD, and
// a read error mid-stream handled. It replaced sirv, whose range code threw on `bytes=5-1` and
// `bytes=0-9007199254740992` (Node exited) and which followed symbolic links out of its root.
// Which file a path names (symbolic links, folders, `index.html`, the `.html` fallback) is decided
// here, before send is asked for it. Every request looks at the file system afresh, so
// `npm run build` needs no restart.
import { createServer, STATUS_CODES } from 'node:http';
import { realpathSync } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import { join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import send from 'send';

export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self' 'wasm-unsafe-eval'",
  "style-src 'self'",
  "img-src 'self' data: blob:",
  "connect-src 'self'",
  "worker-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'self'",
].join('; ');

export const SECURITY_HEADERS = Object.freeze({
  'Content-Security-Policy': CONTENT_SECURITY_POLICY,
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-cache',
});

export const DEFAULT_ROOT = fileURLToPath(new URL('../web/', import.meta.url));

function sendPlain(res, status, text, extraHeaders = {}) {
  const body = `${text}\n`;
  res.writeHead(status, {
    'Content-Type': 'text/plain; charset=utf-8',
    'Content-Length': Buffer.byteLength(body),
    ...extraHeaders,
  });
  res.end(body);
}

// A whole response written straight to a socket, for the answers given before (or instead of) an
// http.ServerResponse: malformed requests and CONNECT.
function rawResponse(status, text, extraHeaders = {}) {
  const body = `${text}\n`;
  const headers = {
    ...SECURITY_HEADERS,
    'Content-Type': 'text/plain; charset=utf-8',
    'Content-Length': Buffer.byteLength(body),
    Connection: 'close',
    ...extraHeaders,
  };
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('');
  return `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n${head}\r\n${body}`;
}

// The request's path, percent-decoded, or null when it is malformed or names something outside
// root or something never served: a `..` or dot-file segment, an empty segment (`//demo`: a
// redirect built from it would leave the origin), a NUL or other control character, a backslash
// (browsers read `/\host` as `//host`), an encoded slash (one file, one URL). The real path is
// checked against the root too (realPathInside); this refuses such paths before any file system
// lookup and also hides dot files (build temporaries).
function safePathname(rawUrl) {
  const rawPath = rawUrl.split('?')[0].split('#')[0];
  if (!rawPath.startsWith('/') || /%2f/i.test(rawPath)) return null;
  let decoded;
  try {
    decoded = decodeURIComponent(rawPath);
  } catch {
    return null;
  }
  if (/[\x00-\x1f\x7f\\]/.test(decoded) || decoded.includes('//')) return null;
  for (const segment of decoded.split('/')) {
    if (segment.startsWith('.')) return null;   // '.', '..', '.hidden'
  }
  return decoded;
}

// A decoded path, percent-encoded again segment by segment: plain ASCII, safe in a header, and
// the same path to a browser.
const encodePath = (path) => path.split('/').map(encodeURIComponent).join('/');

// The raw query ('?...' or ''), with anything but visible ASCII encoded, to carry over to a
// Location (it cannot change the origin: it comes after the path).
function queryOf(rawUrl) {
  const at = rawUrl.indexOf('?');
  if (at < 0) return '';
  return rawUrl.slice(at).split('#')[0].replace(/[^\x21-\x7e]/g, (c) => encodeURIComponent(c));
}

// Only ever redirects to a path on this origin: exactly one leading '/', then neither '/' nor '\'
// (both would make it protocol-relative). safePathname already refuses what could produce one;
// this is the last line, so a future caller cannot get it wrong.
function redirect(res, location) {
  if (!/^\/(?![/\\])/.test(location) || /[^\x21-\x7e]/.test(location)) {
    sendPlain(res, 404, 'Not found');
    return;
  }
  sendPlain(res, 302, `Found: ${location}`, { Location: location });
}

// File system errors that mean "no such file here" (404) rather than a fault of the server.
const NOT_FOUND_CODES = new Set(['ENOENT', 'ENOTDIR', 'ELOOP', 'ENAMETOOLONG', 'EACCES', 'EPERM']);

// `path`'s real path (every symbolic link resolved) and its stats, or null if it does not exist
// or its real path is outside rootDir: a link inside the root may point anywhere inside it, never
// out (to /etc/passwd, or to a folder beside the root).
async function realPathInside(rootDir, path) {
  try {
    const real = await realpath(path);
    const rootPrefix = rootDir.endsWith(sep) ? rootDir : rootDir + sep;
    if (real !== rootDir && !real.startsWith(rootPrefix)) return null;
    return { real, stats: await stat(real) };   // stat fails too if it was removed in between
  } catch (error) {
    if (NOT_FOUND_CODES.has(error.code)) return null;
    throw error;
  }
}

// What a safe pathname names: { file, stats } to send, { folder: true } for a folder asked for
// without its trailing slash (redirected), or null (404). A folder's page is its index.html, and
// `/x` falls back to `/x.html`, as with sirv's `extensions: ['html']` before.
async function resolveTarget(rootDir, pathname) {
  const requested = join(rootDir, pathname);
  if (pathname.endsWith('/')) {
    const folder = await realPathInside(rootDir, requested);
    if (!folder?.stats.isDirectory()) return null;
    const index = await realPathInside(rootDir, join(folder.real, 'index.html'));
    return index?.stats.isFile() ? { file: index.real, stats: index.stats } : null;
  }
  const found = await realPathInside(rootDir, requested);
  if (found?.stats.isDirectory()) return { folder: true };
  if (found?.stats.isFile()) return { file: found.real, stats: found.stats };
  if (found !== null) return null;   // a FIFO, a device: never opened
  const page = await realPathInside(rootDir, `${requested}.html`);
  return page?.stats.isFile() ? { file: page.real, stats: page.stats } : null;
}

// range-parser (inside send) counts a suffix range longer than the file (`bytes=-1000` of a
// 100-byte file) as unsatisfiable; RFC 9110 14.1.3 says it selects the whole file. Shorten such
// suffixes to the file's size; everything else is left to range-parser.
function clampSuffixRanges(range, size) {
  if (!/^ *bytes=/.test(range)) return range;
  return range.replace(/(^ *bytes=|,)([ \t]*)-(\d+)/g,
    (whole, lead, space, digits) => (Number(digits) > size ? `${lead}${space}-${size}` : whole));
}

async function handleRequest(req, res, rootDir) {
  for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    sendPlain(res, 405, 'Method not allowed', { Allow: 'GET, HEAD' });
    return;
  }
  const rawUrl = req.url ?? '/';
  const pathname = safePathname(rawUrl);
  if (pathname === null) {
    sendPlain(res, 404, 'Not found');
    return;
  }
  const query = queryOf(rawUrl);
  if (pathname === '/') {
    redirect(res, `/demo/${query}`);
    return;
  }
  const target = await resolveTarget(rootDir, pathname);
  if (target === null) {
    sendPlain(res, 404, 'Not found');
    return;
  }
  if (target.folder) {
    redirect(res, `${encodePath(pathname)}/${query}`);
    return;
  }
  if (req.headers.range !== undefined) req.headers.range = clampSuffixRanges(req.headers.range, target.stats.size);
  // A request's `Cache-Control: no-cache` tells caches to revalidate with the origin (RFC 9111
  // 5.2.1.4); this is the origin, and revalidating is what If-None-Match asks. send's `fresh`
  // would answer 200 instead of 304 (fetch() adds the header to every conditional request).
  delete req.headers['cache-control'];

  // send is given the real path (relative to the root, percent-encoded: send decodes it), so it
  // opens the file checked above and applies its own containment and dot-file checks on top.
  const fileUrlPath = `/${encodePath(relative(rootDir, target.file).split(sep).join('/'))}`;
  send(req, fileUrlPath, {
    root: rootDir,
    dotfiles: 'ignore',
    index: false,          // folders were resolved above
    extensions: false,
    etag: true,            // with the response's Cache-Control: no-cache, reloads revalidate (304)
    lastModified: true,
    cacheControl: false,   // keep Cache-Control: no-cache
    acceptRanges: true,
  })
    .on('directory', () => sendPlain(res, 404, 'Not found'))   // became a folder since resolved
    .on('error', (error) => {
      // send's own error page would drop the security headers; answer in the house style.
      if (res.headersSent) {
        res.destroy();   // a read error mid-body: the client sees a truncated response
        return;
      }
      const status = Number.isInteger(error.status) ? error.status : 500;
      if (status >= 500) console.error(`headscope demo: ${req.method} ${rawUrl.slice(0, 200)}: ${error.stack ?? error}`);
      for (const name of ['Content-Type', 'Content-Length', 'Content-Range', 'ETag', 'Last-Modified']) {
        res.removeHeader(name);
      }
      sendPlain(res, status, STATUS_CODES[status] ?? 'Error', error.headers ?? {});
    })
    .pipe(res);
}

function urlHost(host) {
  if (host === '0.0.0.0' || host === '') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * Starts the static server. Resolves once it listens; rejects (error.code 'EADDRINUSE', ...) if it
 * cannot.
 * @param {{ port?: number, host?: string, root?: string }} [options]
 * @returns {Promise<{ url: string, port: number, close: () => Promise<void> }>}
 */
export async function startServer({ port = 0, host = '127.0.0.1', root = DEFAULT_ROOT } = {}) {
  const rootDir = realpathSync(resolve(root));

  const server = createServer((req, res) => {
    // A client that goes away mid-request or mid-response must not become an uncaught 'error'.
    req.on('error', () => res.destroy());
    res.on('error', () => res.destroy());
    handleRequest(req, res, rootDir).catch((error) => {
      // A bug, not a hostile client: log it and answer 500, but keep serving.
      console.error(`headscope demo: internal error answering ${req.method} ${String(req.url).slice(0, 200)}: ${error.stack ?? error}`);
      try {
        if (res.headersSent) res.destroy();
        else sendPlain(res, 500, 'Internal server error');
      } catch {
        res.destroy();
      }
    });
  });
  server.keepAliveTimeout = 5000;

  // Malformed HTTP (garbage request line, bad header, oversized head). Node's own handler would
  // answer too, but without the security headers; answer only on a connection that has not sent
  // anything yet (otherwise the bytes could land inside another response), then close it.
  server.on('clientError', (error, socket) => {
    if (error.code !== 'ECONNRESET' && socket.writable && socket.bytesWritten === 0) {
      const status = error.code === 'HPE_HEADER_OVERFLOW' ? 431
        : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
      socket.end(rawResponse(status, STATUS_CODES[status]), () => socket.destroy());
    } else {
      socket.destroy();
    }
  });
  // `Expect: 100-continue` is answered by Node; any other expectation is refused (417), here so
  // that the answer carries the security headers like every other.
  server.on('checkExpectation', (req, res) => {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
    sendPlain(res, 417, 'Expectation failed');
  });
  // CONNECT never reaches the request handler: Node hands over the socket, and without a listener
  // drops it unanswered. It is one more method this server does not serve.
  server.on('connect', (req, socket) => {
    socket.on('error', () => socket.destroy());
    socket.end(rawResponse(405, 'Method not allowed', { Allow: 'GET, HEAD' }), () => socket.destroy());
  });

  await new Promise((resolveListen, rejectListen) => {
    const onError = (error) => rejectListen(error);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      // Once listening, a server error (e.g. EMFILE when accepting) is logged, never fatal.
      server.on('error', (error) => console.error(`headscope demo: server error: ${error.message}`));
      resolveListen();
    });
  });

  const actualPort = server.address().port;
  let closing = null;
  return {
    url: `http://${urlHost(host)}:${actualPort}/`,
    port: actualPort,
    close() {
      closing ??= new Promise((resolveClose) => {
        server.close(() => resolveClose());
        server.closeAllConnections();   // keep-alive sockets (browsers) would hold close() open
      });
      return closing;
    },
  };
}

async function main() {
  const port = process.env.PORT === undefined || process.env.PORT === '' ? 8080 : Number(process.env.PORT);
  const host = process.env.HOST || '127.0.0.1';
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`headscope demo: PORT must be a port number (0-65535), got "${process.env.PORT}"`);
    process.exit(2);
  }
  let server;
  try {
    server = await startServer({ port, host });
  } catch (error) {
    if (error.code === 'EADDRINUSE') {
      console.error(`headscope demo: port ${port} on ${host} is already in use; free it or pick another, e.g. PORT=${port === 8080 ? 8081 : 8080} npm start`);
    } else if (error.code === 'EACCES') {
      console.error(`headscope demo: not allowed to listen on ${host}:${port} (${error.code}); pick a port above 1023, e.g. PORT=8080 npm start`);
    } else if (error.code === 'EADDRNOTAVAIL' || error.code === 'ENOTFOUND') {
      console.error(`headscope demo: cannot listen on HOST=${host} (${error.code}); use 127.0.0.1, or 0.0.0.0 for every interface`);
    } else {
      console.error(`headscope demo: could not start the server on ${host}:${port}: ${error.message}`);
    }
    process.exit(1);
  }
  const shownHost = host === '127.0.0.1' || host === '0.0.0.0' || host === '::' || host === '::1'
    ? 'localhost' : urlHost(host);
  const base = `http://${shownHost}:${server.port}`;
  console.log(`headscope demo: ${base}/demo/ (widgets: ${base}/widgets/example.html)`);

  let stopping = false;
  const stop = () => {
    if (stopping) process.exit(130);   // a second Ctrl-C: leave at once
    stopping = true;
    server.close().then(() => process.exit(0));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

function invokedAsScript() {
  try {
    return Boolean(process.argv[1]) && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href;
  } catch {
    return false;
  }
}
if (invokedAsScript()) main();
