// The docs as a reader follows them: every relative Markdown link in the repository's Markdown
// (README.md, docs/, tests/, fuzz/) reaches a file, every #anchor a heading of its target (GitHub's
// slug rule) or an explicit <a id>, and every repository path the text cites (`web/lib/index.js`,
// tools/serve.js, tests/golden/transformer/) exists. Plus the README's own promises: at most 200
// lines, and the table of the two commands that .ci/run relies on. Reads files only (no build).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));
const rel = (p) => relative(root, p).split(sep).join('/');

// Folders never walked for Markdown: installed or generated.
const SKIP_DIRS = new Set(['node_modules', 'build', '.git', 'artifacts', '__pycache__']);

function markdownFiles() {
  const out = [join(root, 'README.md')];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (SKIP_DIRS.has(entry.name)) continue;
      const p = join(dir, entry.name);
      if (entry.isDirectory()) walk(p);
      else if (entry.name.endsWith('.md')) out.push(p);
    }
  };
  for (const dir of ['docs', 'tests', 'fuzz', 'tools']) if (existsSync(join(root, dir))) walk(join(root, dir));
  return out;
}

// Paths a doc may cite that a checkout does not hold until something generates them. Each entry
// is a prefix of the cited path.
const GENERATED = [
  'build/', // CMake's build trees (cmake --preset ...; the bench's ONNX graphs in build/bench/onnx/)
  'node_modules/', // npm ci
  'web/lib/headscope_core', // the WebAssembly modules and their glue: npm run build
  'web/lib/mt/headscope_core_mt', // the threaded module: npm run build
  'tests/browser/artifacts/', // screenshots the browser tests write
];
const generated = (path) => GENERATED.some((prefix) => path.startsWith(prefix));

// The top-level folders a cited repository path starts with. `shared/` is not in the repository
// (the project's specs live beside it); it is listed so that a citation of it is caught.
const TOP = ['web', 'src', 'tools', 'tests', 'docs', 'fuzz', 'shared', 'build', 'node_modules', '.ci'];
// A path: a top folder, then segments; globs (*), braces ({js,wasm}) and placeholders (<cpu model>)
// allowed. It must end in a file extension or in '/' (a folder). Not preceded by a path character,
// so /node_modules/headscope/web/... (a URL path) and ../x/y are not read as repository paths.
const PATH_RE = new RegExp(
  String.raw`(?<![\w./\-<>*{}@~])((?:${TOP.map((t) => t.replace('.', '\\.')).join('|')})/` +
  String.raw`(?:[\w.\-*{},]|<[\w ]+>)*(?:/(?:[\w.\-*{},]|<[\w ]+>)*)*)`, 'g');

// GitHub's heading anchors: the heading's text (inline markup removed), lower-cased, every
// character that is not a letter, digit, space, '-' or '_' dropped, spaces to '-'; a repeated slug
// gets -1, -2, ... in order.
function slug(heading) {
  const text = heading
    .replace(/!\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]+>/g, '')
    .replace(/[*`]/g, '');
  return text.trim().toLowerCase().replace(/[^\p{L}\p{N}\p{M} _-]/gu, '').replace(/ /g, '-');
}

// Fenced code blocks hold no links or headings; their text can still cite paths.
function splitFences(text) {
  const prose = [];
  const code = [];
  let fence = null;
  for (const line of text.split('\n')) {
    const m = /^\s*(```+|~~~+)/.exec(line);
    if (fence) {
      if (m && m[1][0] === fence[0] && m[1].length >= fence.length) fence = null;
      code.push(line);
      prose.push('');
    } else if (m) {
      fence = m[1];
      code.push(line);
      prose.push('');
    } else {
      prose.push(line);
    }
  }
  return { prose: prose.join('\n'), code: code.join('\n') };
}

const anchorCache = new Map();
function anchorsOf(file) {
  if (anchorCache.has(file)) return anchorCache.get(file);
  const anchors = new Set();
  if (file.endsWith('.md')) {
    const { prose } = splitFences(readFileSync(file, 'utf8'));
    const seen = new Map();
    for (const line of prose.split('\n')) {
      const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
      if (h) {
        const base = slug(h[1]);
        const n = seen.get(base) ?? 0;
        seen.set(base, n + 1);
        anchors.add(n === 0 ? base : `${base}-${n}`);
      }
      for (const a of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(a[1]);
    }
  }
  anchorCache.set(file, anchors);
  return anchors;
}

// Every inline link and image target of the prose (inline code removed first: `[a](b)` in
// backticks is code, not a link), and reference-style definitions.
function linkTargets(prose) {
  const text = prose.replace(/`[^`\n]*`/g, '');
  const targets = [];
  for (const m of text.matchAll(/!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) targets.push(m[1]);
  for (const m of text.matchAll(/^\s*\[[^\]]+\]:\s*(\S+)/gm)) targets.push(m[1]);
  for (const m of text.matchAll(/<(?:a|img)\s[^>]*(?:href|src)="([^"]+)"/g)) targets.push(m[1]);
  return targets;
}

function brokenLinks(file) {
  const problems = [];
  const { prose } = splitFences(readFileSync(file, 'utf8'));
  for (const target of linkTargets(prose)) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
    const [pathPart, anchor] = target.split('#');
    const dest = pathPart === '' ? file : normalize(join(dirname(file), decodeURIComponent(pathPart)));
    if (!dest.startsWith(root)) {
      problems.push(`${rel(file)}: link ${target}: outside the repository`);
      continue;
    }
    if (!existsSync(dest)) {
      problems.push(`${rel(file)}: link ${target}: no such file ${rel(dest)}`);
      continue;
    }
    if (anchor !== undefined && anchor !== '' && statSync(dest).isFile() && !anchorsOf(dest).has(anchor)) {
      problems.push(`${rel(file)}: link ${target}: no heading #${anchor} in ${rel(dest)}`);
    }
  }
  return problems;
}

// A cited path exists: a glob or placeholder matches at least one file, each brace choice exists.
function expandBraces(path) {
  const m = /\{([^{}]*)\}/.exec(path);
  if (!m) return [path];
  return m[1].split(',').flatMap((choice) => expandBraces(path.slice(0, m.index) + choice + path.slice(m.index + m[0].length)));
}
function globExists(path) {
  const isDir = path.endsWith('/');
  const parts = path.replace(/\/$/, '').split('/');
  const walk = (dir, i) => {
    if (i === parts.length) return isDir ? statSync(dir).isDirectory() : true;
    const part = parts[i];
    if (!/[*<]/.test(part)) {
      const next = join(dir, part);
      return existsSync(next) && (i === parts.length - 1 || statSync(next).isDirectory()) && walk(next, i + 1);
    }
    if (!existsSync(dir) || !statSync(dir).isDirectory()) return false;
    const re = new RegExp(`^${part.replace(/[.+?^$()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/<[^>]*>/g, '.+')}$`);
    return readdirSync(dir).some((name) => re.test(name) && walk(join(dir, name), i + 1));
  };
  return walk(root, 0);
}

function citedPaths(text) {
  const paths = new Set();
  for (const m of text.matchAll(PATH_RE)) {
    let p = m[1].replace(/[.,:;]+$/, ''); // sentence punctuation after a path
    if (p.endsWith('/*')) p = p.slice(0, -1);
    const last = p.split('/').pop();
    // A file (a name with an extension) or a folder (a trailing '/'); a bare word such as
    // `tests/cpp` is a name in a list, not a path we can tell from prose.
    if (!p.endsWith('/') && !/\.[A-Za-z0-9]+$/.test(last) && !/[*<]/.test(last)) continue;
    paths.add(p);
  }
  return [...paths];
}

function missingPaths(file) {
  const problems = [];
  for (const cited of citedPaths(readFileSync(file, 'utf8'))) {
    if (generated(cited)) continue;
    for (const p of expandBraces(cited)) {
      if (!globExists(p)) problems.push(`${rel(file)}: cites ${cited}${p === cited ? '' : ` (${p})`}, which is not in the repository`);
    }
  }
  return problems;
}

test('every relative link and #anchor in the Markdown resolves', () => {
  const problems = markdownFiles().flatMap(brokenLinks);
  assert.deepEqual(problems, [], problems.join('\n'));
});

test('every repository path the Markdown cites exists', () => {
  const problems = markdownFiles().flatMap(missingPaths);
  assert.deepEqual(problems, [], problems.join('\n'));
});

// Code cites the project's documents too (comments, doc strings, generated READMEs): the
// repository's copies, never the specification folder beside the checkout. The one file that
// says where its verbatim copy comes from names it on purpose.
const CITES_SPEC_ON_PURPOSE = new Set(['tools/tiny_transformer.py']);
test('code cites the repository\'s copies of the specs, not shared/', () => {
  const problems = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (SKIP_DIRS.has(entry.name)) continue;
      const p = join(dir, entry.name);
      if (entry.isDirectory()) { walk(p); continue; }
      if (!/\.(cc|h|js|mjs|ts|py|sh|md|txt|dict|json|html|css)$/.test(entry.name)) continue;
      if (statSync(p).size > 2_000_000 || CITES_SPEC_ON_PURPOSE.has(rel(p))) continue;
      const text = readFileSync(p, 'utf8');
      for (const m of text.matchAll(/(?:\.\.\/)?shared\/(?:spec|seeds)\/[\w.*\-]*/g)) {
        const line = text.slice(0, m.index).split('\n').length;
        problems.push(`${rel(p)}:${line}: ${m[0]}`);
      }
    }
  };
  for (const dir of ['src', 'web', 'tools', 'tests', 'fuzz', 'docs']) walk(join(root, dir));
  assert.deepEqual(problems, [], problems.join('\n'));
});

test('the README is a front door: at most 200 lines, with the table of the two commands', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const lines = readme.split('\n').length - (readme.endsWith('\n') ? 1 : 0);
  assert.ok(lines <= 200, `README.md has ${lines} lines; at most 200 (move detail to docs/)`);
  // .ci/run runs tools/test.sh, the README's promise; both commands stay in one table.
  assert.match(readme, /^\| main job \| `tools\/start\.sh` \| /m);
  assert.match(readme, /^\| all tests \| `tools\/test\.sh` \| /m);
  assert.match(readFileSync(join(root, '.ci/run'), 'utf8'), /tools\/test\.sh/);
});
