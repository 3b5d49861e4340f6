#!/usr/bin/env node
// The demo's static server: serves web/ (the demo page, the widgets and the npm package they load)
// on loopback, with the security headers the page is written against. Built on sirv, in dev mode:
// every request reads the file system afresh, so `npm run build` needs no restart.
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
import { createServer } from 'node:http';
import { existsSync, realpathSync, statSync } from 'node:fs';
import { join, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import sirv from 'sirv';

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

// The request's path, percent-decoded, or null when it is malformed or names something outside
// root: a `..` or dot-file segment, a NUL, a backslash. sirv checks containment itself too; this
// refuses such paths before any file system lookup and also hides dot files (build temporaries).
function safePathname(rawUrl) {
  const rawPath = rawUrl.split('?')[0].split('#')[0];
  if (!rawPath.startsWith('/')) return null;
  let decoded;
  try {
    decoded = decodeURIComponent(rawPath);
  } catch {
    return null;
  }
  if (decoded.includes('\0') || decoded.includes('\\')) return null;
  for (const segment of decoded.split('/')) {
    if (segment.startsWith('.')) return null;   // '.', '..', '.hidden'
  }
  return decoded;
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
  const serveStatic = sirv(rootDir, {
    dev: true,        // look files up per request: rebuilt files are served at once
    etag: true,       // with dev: Cache-Control no-cache + ETag, so reloads revalidate
    dotfiles: false,
    extensions: ['html'],   // a folder's index.html (sirv looks up `<folder>/index` + '.html')
    onNoMatch: (req, res) => sendPlain(res, 404, 'Not found'),
  });

  const server = createServer((req, res) => {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      sendPlain(res, 405, 'Method not allowed', { Allow: 'GET, HEAD' });
      return;
    }
    const pathname = safePathname(req.url ?? '/');
    if (pathname === null) {
      sendPlain(res, 404, 'Not found');
      return;
    }
    const query = req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : '';
    if (pathname === '/') {
      sendPlain(res, 302, 'Found: /demo/', { Location: `/demo/${query}` });
      return;
    }
    if (!pathname.endsWith('/')) {
      const abs = join(rootDir, pathname);
      if (abs.startsWith(rootDir + sep) && existsSync(abs) && statSync(abs).isDirectory()) {
        const location = `${req.url.split('?')[0]}/${query}`;
        sendPlain(res, 302, `Found: ${location}`, { Location: location });
        return;
      }
    }
    serveStatic(req, res);
  });
  server.keepAliveTimeout = 5000;

  await new Promise((resolveListen, rejectListen) => {
    const onError = (error) => rejectListen(error);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
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
