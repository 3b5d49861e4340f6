// Head detectors: how much of a head's attention goes where a kind of head would put it, from
// the attention patterns and the tokens alone (TransformerLens's head_detector, its "mul"
// measure, plus the first-token detector). Plain JavaScript like tasks.js: no WebAssembly, so a
// page, a Worker or a Node script uses it the same way.
//
//   import { headScores, modelHeadScores, DETECTORS } from 'headscope/detectors';
//   const { hooks } = model.forward(tokens, { hooks: ['blocks.1.attn.hook_pattern'] });
//   headScores(hooks['blocks.1.attn.hook_pattern'], tokens);   // { induction: [h0, h1], ... }
//   modelHeadScores(model, probe.tokens);                       // every layer: [l][h] per detector
//
// A detector is a 0/1 "detection pattern" D over (query i, key j), lower triangular like a causal
// pattern; a head's score on one sequence is sum(P * D) / sum(P) over all (i, j): the fraction of
// the head's attention that lands where D has a 1. Over a batch the score is the mean of the
// sequences' scores (TransformerLens's detect_head over a list). The patterns, with tokens t:
//   previous-token  D[i][i - 1] = 1                        (TransformerLens previous_token_head)
//   first-token     D[i][0] = 1                            (attention to <bos>, a sink)
//   same-token      D[i][j] = 1 for j < i, t[j] = t[i]     (duplicate_token_head)
//   induction       D[i][j] = 1 for 1 <= j <= i, t[j - 1] = t[i]   (induction_head: the token
//                   after an earlier occurrence of the current one, the duplicate pattern shifted
//                   one key to the right)
// Two more, asked for by name with their parameter (not in DETECTORS, the default list):
//   keyword         D[i][j] = 1 for j <= i, t[j] in options.keywords   (attention mass on a token
//                   set: a head that reads the log level wherever it stands)
//   custom          D[i][j] = 1 for j <= i where options.custom says so: a (T, T) 0/1 matrix (a
//                   drawn pattern; TransformerLens's detect_head takes a custom detection pattern
//                   the same way), a function (i, j, tokens) => boolean, or a formula string over
//                   i, j (query and key positions), ti, tj (their token ids) and T, with integers,
//                   "quoted" vocabulary tokens (options.vocab), + - * / % (integer division),
//                   comparisons, && || ! and parentheses: 'j == i - 2', 'tj == ti && j < i',
//                   'tj == "ERROR"' (compileFormula).
// Options as TransformerLens's: excludeBos sets P[:, 0] = 0 and excludeCurrentToken P[i][i] = 0
// before both sums. Not in TransformerLens: options.targets ((B, T), as a task's) keeps only the
// query rows whose target is not -100, where the model answers (log-line's answer position reads
// the level with all of one head's attention; over every row that head scores 0.32). A sequence whose (remaining) attention sums to 0 has no score (NaN). Scores are
// summed in float64 in a fixed order: the same numbers in every engine.
import { HeadscopeError } from './errors.js';
import { quoteInput } from './tensor.js';

/** The detector names, in the order results list them. */
export const DETECTORS = Object.freeze(['previous-token', 'first-token', 'same-token', 'induction']);
/** Every detector a call may name: DETECTORS, then the two that take a parameter. */
export const ALL_DETECTORS = Object.freeze([...DETECTORS, 'keyword', 'custom']);

function fail(code, message) {
  throw new HeadscopeError(code, message);
}

function describe(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return `an array of length ${v.length}`;
  return typeof v === 'object' ? `an object (${Object.prototype.toString.call(v).slice(8, -1)})` : `${typeof v} ${String(v)}`;
}

// Tokens (T) or (B, T) as [B, T, Int32Array]: nested arrays of integers or { data, shape }.
function readTokens(tokens, name) {
  if (tokens instanceof Int32Array) {  // one sequence (T), as task.probe().tokens.data
    if (tokens.length < 1) fail('SHAPE_MISMATCH', `${name}: expected at least one token`);
    return [1, tokens.length, tokens.slice()];
  }
  if (tokens !== null && typeof tokens === 'object' && !Array.isArray(tokens) && 'data' in tokens) {
    const { data, shape } = tokens;
    if (!(data instanceof Int32Array) || !Array.isArray(shape) || (shape.length !== 1 && shape.length !== 2)) {
      fail('INVALID_ARGUMENT', `${name}: expected { data: Int32Array, shape: [T] or [B, T] }, got ${describe(tokens)}`);
    }
    const [B, T] = shape.length === 1 ? [1, shape[0]] : shape;
    if (!Number.isInteger(B) || !Number.isInteger(T) || B < 1 || T < 1 || B * T !== data.length) {
      fail('SHAPE_MISMATCH', `${name}: shape [${shape.join(', ')}] does not hold ${data.length} token ids`);
    }
    return [B, T, data.slice()];
  }
  if (!Array.isArray(tokens) || tokens.length === 0) {
    fail('INVALID_ARGUMENT', `${name}: expected token ids (T) or (B, T), got ${describe(tokens)}`);
  }
  const rows = Array.isArray(tokens[0]) ? tokens.slice() : [tokens];
  const T = rows[0].length;
  const data = new Int32Array(rows.length * T);
  rows.forEach((row, b) => {
    if (!Array.isArray(row) || row.length !== T) {
      fail('SHAPE_MISMATCH', `${name}[${b}]: expected ${T} token ids like row 0, got ${describe(row)}`);
    }
    for (let t = 0; t < T; t++) {
      const v = row[t];
      if (!Number.isInteger(v)) fail('INVALID_ARGUMENT', `${name}[${b}][${t}]: expected an integer token id, got ${describe(v)}`);
      data[b * T + t] = v;
    }
  });
  if (T < 1) fail('SHAPE_MISMATCH', `${name}: expected at least one token`);
  return [rows.length, T, data];
}

const ALL_LIST = ALL_DETECTORS.map((x) => `'${x}'`).join(', ');

// Options read once (modelHeadScores hands them to headScores per layer): marked as read.
const READ = Symbol('read');

function readOptions(options) {
  if (options === undefined) return { detectors: DETECTORS, excludeBos: false, excludeCurrentToken: false };
  if (options !== null && typeof options === 'object' && options[READ] === true) return options;
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    fail('INVALID_ARGUMENT', `options: expected an object, got ${describe(options)}`);
  }
  const known = ['detectors', 'excludeBos', 'excludeCurrentToken', 'keywords', 'custom', 'vocab', 'targets'];
  const out = {};
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) fail('INVALID_ARGUMENT', `options.${quoteInput(key)}: unknown option (expected one of ${known.join(', ')})`);
    out[key] = options[key];
  }
  const detectors = out.detectors === undefined ? DETECTORS : out.detectors;
  if (!Array.isArray(detectors) || detectors.length === 0 || detectors.length > ALL_DETECTORS.length) {
    fail('INVALID_ARGUMENT', `options.detectors: expected a non-empty array of ${ALL_LIST}, got ${describe(detectors)}`);
  }
  const names = detectors.slice();
  names.forEach((d, i) => {
    if (!ALL_DETECTORS.includes(d)) fail('INVALID_ARGUMENT', `options.detectors[${i}]: expected one of ${ALL_LIST}, got ${describe(d)}`);
  });
  for (const k of ['excludeBos', 'excludeCurrentToken']) {
    if (out[k] !== undefined && typeof out[k] !== 'boolean') fail('INVALID_ARGUMENT', `options.${k}: expected a boolean, got ${describe(out[k])}`);
  }
  const o = { detectors: names, excludeBos: out.excludeBos === true, excludeCurrentToken: out.excludeCurrentToken === true, [READ]: true };
  if (out.targets !== undefined && out.targets !== null) o.targets = readTokens(out.targets, 'options.targets');
  if (names.includes('keyword')) o.keywords = readKeywords(out.keywords);
  if (names.includes('custom')) o.custom = readCustom(out.custom, out.vocab);
  return o;
}

// options.keywords: a non-empty array of token ids, as a Set.
function readKeywords(keywords) {
  if (!Array.isArray(keywords) || keywords.length === 0 || keywords.length > 1 << 16) {
    fail('INVALID_ARGUMENT', `options.keywords: expected a non-empty array of token ids for the keyword detector, got ${describe(keywords)}`);
  }
  const set = new Set();
  keywords.forEach((v, i) => {
    if (!Number.isInteger(v) || v < 0) fail('INVALID_ARGUMENT', `options.keywords[${i}]: expected a token id (an integer >= 0), got ${describe(v)}`);
    set.add(v);
  });
  return set;
}

// options.custom as a predicate (i, j, t, o, T) => boolean over one sequence of t at offset o.
function readCustom(custom, vocab) {
  if (typeof custom === 'string') {
    const f = compileFormula(custom, { vocab, name: 'options.custom' });
    return (i, j, t, o, T) => f(i, j, t[o + i], t[o + j], T);
  }
  if (typeof custom === 'function') return (i, j, t, o) => Boolean(custom(i, j, t.subarray(o)));
  if (custom !== null && typeof custom === 'object') {
    // A (T, T) matrix: nested arrays or { data, shape }; entries 0 or 1.
    const rows = Array.isArray(custom) ? custom : null;
    const T = rows ? rows.length : custom.shape?.[0];
    const data = rows ? null : custom.data;
    if (!Number.isInteger(T) || T < 1 || (rows && rows.some((r) => !Array.isArray(r) || r.length !== T)) ||
        (!rows && (custom.shape?.length !== 2 || custom.shape[1] !== T || data?.length !== T * T))) {
      fail('INVALID_ARGUMENT', `options.custom: expected a (T, T) detection pattern of 0 and 1, a function (i, j, tokens) or a formula, got ${describe(custom)}`);
    }
    const m = new Uint8Array(T * T);
    for (let k = 0; k < T * T; k++) {
      const v = rows ? rows[Math.floor(k / T)][k % T] : data[k];
      if (v !== 0 && v !== 1) fail('INVALID_ARGUMENT', `options.custom[${Math.floor(k / T)}][${k % T}]: expected 0 or 1, got ${describe(v)}`);
      m[k] = v;
    }
    return (i, j, t, o, n) => {
      if (n !== T) fail('SHAPE_MISMATCH', `options.custom: a (${T}, ${T}) pattern for sequences of ${n} tokens`);
      return m[i * T + j] === 1;
    };
  }
  fail('INVALID_ARGUMENT', `options.custom: expected a (T, T) detection pattern of 0 and 1, a function (i, j, tokens) or a formula for the custom detector, got ${describe(custom)}`);
}

const MAX_FORMULA = 500;

/**
 * A detector formula (see the top of this file) as a function (i, j, ti, tj, T) => boolean: a small
 * recursive-descent parser, no eval, so it runs under any content security policy and a hostile
 * string can only be refused. Errors name `name` and the character where the formula goes wrong.
 * options.vocab: the task's token strings, for "quoted" tokens.
 */
export function compileFormula(text, { vocab = null, name = 'formula' } = {}) {
  if (typeof text !== 'string' || text.trim() === '' || text.length > MAX_FORMULA) {
    fail('INVALID_ARGUMENT', `${name}: expected a formula of at most ${MAX_FORMULA} characters over i, j, ti, tj, T (like 'j == i - 2'), got ${describe(text)}`);
  }
  const tokens = [];
  const re = /\s*(?:(\d+)|([A-Za-z_]\w*)|"((?:[^"\\]|\\.)*)"|(==|!=|<=|>=|&&|\|\||[-+*\/%<>!()]))/y;
  let at = 0;
  while (at < text.length) {
    if (/^\s*$/.test(text.slice(at))) break;
    re.lastIndex = at;
    const m = re.exec(text);
    if (!m) {
      const start = at + /^\s*/.exec(text.slice(at))[0].length;
      fail('INVALID_ARGUMENT', `${name}: at character ${start + 1}: unexpected ${quoteInput(text.slice(start, start + 8))}`);
    }
    const where = m.index + m[0].length - (m[1] ?? m[2] ?? (m[3] !== undefined ? `"${m[3]}"` : m[4])).length;
    if (m[1] !== undefined) tokens.push({ kind: 'num', value: Number(m[1]), at: where });
    else if (m[2] !== undefined) tokens.push({ kind: 'name', value: m[2], at: where });
    else if (m[3] !== undefined) tokens.push({ kind: 'str', value: m[3].replace(/\\(.)/g, '$1'), at: where });
    else tokens.push({ kind: 'op', value: m[4], at: where });
    at = re.lastIndex;
  }
  let k = 0;
  const peek = () => tokens[k];
  const expectedAt = (what) => fail('INVALID_ARGUMENT', `${name}: at character ${(peek()?.at ?? text.length) + 1}: expected ${what}` +
    (peek() ? `, got ${quoteInput(String(peek().value))}` : ', got the end'));
  const VARS = { i: 0, j: 1, ti: 2, tj: 3, T: 4 };
  // Each node is a function of the argument array [i, j, ti, tj, T].
  function primary() {
    const tok = peek();
    if (!tok) return expectedAt('a number, i, j, ti, tj, T, a "token" or (');
    k++;
    if (tok.kind === 'num') return () => tok.value;
    if (tok.kind === 'str') {
      const id = Array.isArray(vocab) ? vocab.indexOf(tok.value) : -1;
      if (id < 0) fail('INVALID_ARGUMENT', `${name}: at character ${tok.at + 1}: "${quoteInput(tok.value)}" is not a token of the vocabulary`);
      return () => id;
    }
    if (tok.kind === 'name') {
      if (!(tok.value in VARS)) fail('INVALID_ARGUMENT', `${name}: at character ${tok.at + 1}: unknown name ${quoteInput(tok.value)} (expected i, j, ti, tj or T)`);
      const v = VARS[tok.value];
      return (a) => a[v];
    }
    if (tok.value === '(') {
      const e = or();
      if (peek()?.value !== ')') expectedAt(')');
      k++;
      return e;
    }
    if (tok.value === '-' || tok.value === '!') {
      const e = primary();
      return tok.value === '-' ? (a) => -e(a) : (a) => (e(a) ? 0 : 1);
    }
    k--;
    return expectedAt('a number, i, j, ti, tj, T, a "token" or (');
  }
  const binary = (next, ops, apply) => () => {
    let left = next();
    while (peek()?.kind === 'op' && ops.includes(peek().value)) {
      const op = tokens[k++].value;
      const l = left, r = next();
      left = (a) => apply(op, l(a), r(a));
    }
    return left;
  };
  const arith = (op, x, y) => {
    switch (op) {
      case '*': return x * y;
      case '/': return y === 0 ? 0 : Math.trunc(x / y);
      case '%': return y === 0 ? 0 : x % y;
      case '+': return x + y;
      default: return x - y;
    }
  };
  const compare = (op, x, y) => {
    switch (op) {
      case '==': return x === y ? 1 : 0;
      case '!=': return x !== y ? 1 : 0;
      case '<': return x < y ? 1 : 0;
      case '<=': return x <= y ? 1 : 0;
      case '>': return x > y ? 1 : 0;
      default: return x >= y ? 1 : 0;
    }
  };
  const product = binary(primary, ['*', '/', '%'], arith);
  const sum = binary(product, ['+', '-'], arith);
  const relation = binary(sum, ['<', '<=', '>', '>='], compare);
  const equality = binary(relation, ['==', '!='], compare);
  const and = binary(equality, ['&&'], (_, x, y) => (x && y ? 1 : 0));
  const or = binary(and, ['||'], (_, x, y) => (x || y ? 1 : 0));
  const f = or();
  if (k < tokens.length) expectedAt('an operator or the end');
  const args = [0, 0, 0, 0, 0];
  return (i, j, ti, tj, T) => {
    args[0] = i; args[1] = j; args[2] = ti; args[3] = tj; args[4] = T;
    return f(args) !== 0;
  };
}

/**
 * The detection pattern of `name` for one sequence of token ids (T numbers or an Int32Array):
 * a (T, T) row-major Uint8Array of 0 and 1 (see the top of this file).
 */
export function detectionPattern(name, tokens, options) {
  if (!ALL_DETECTORS.includes(name)) fail('INVALID_ARGUMENT', `name: expected one of ${ALL_LIST}, got ${describe(name)}`);
  const o = readOptions({ ...(options ?? {}), detectors: [name] });
  const [B, T, t] = readTokens(tokens, 'tokens');
  if (B !== 1) fail('SHAPE_MISMATCH', `tokens: expected one sequence (T), got ${B} rows`);
  const d = new Uint8Array(T * T);
  for (let i = 0; i < T; i++) {
    for (let j = 0; j <= i; j++) d[i * T + j] = isDetected(name, t, 0, i, j, o, T) ? 1 : 0;
  }
  return d;
}

function isDetected(name, t, o, i, j, options, T) {
  switch (name) {
    case 'previous-token': return j === i - 1;
    case 'first-token': return j === 0;
    case 'same-token': return j < i && t[o + j] === t[o + i];
    case 'keyword': return options.keywords.has(t[o + j]);
    case 'custom': return options.custom(i, j, t, o, T);
    default: return j >= 1 && t[o + j - 1] === t[o + i];  // induction
  }
}

/**
 * Scores of every head of one layer's attention patterns, (B, H, T, T) (or (H, T, T) for one
 * sequence), as forward's 'blocks.{l}.attn.hook_pattern' returns them, on the tokens they were
 * computed from, (B, T) or (T): { [detector]: number[H] }, each the mean over the sequences.
 */
export function headScores(pattern, tokens, options) {
  const o = readOptions(options);
  const [B, T, t] = readTokens(tokens, 'tokens');
  if (pattern === null || typeof pattern !== 'object' || !(pattern.data instanceof Float32Array || pattern.data instanceof Float64Array) ||
      !Array.isArray(pattern.shape)) {
    fail('INVALID_ARGUMENT', `pattern: expected a Tensor { data: Float32Array, shape: [B, H, T, T] }, got ${describe(pattern)}`);
  }
  const shape = pattern.shape.slice();
  const data = pattern.data;
  const full = shape.length === 3 ? [1, ...shape] : shape;
  const H = full[1];
  if (full.length !== 4 || full[0] !== B || full[2] !== T || full[3] !== T || !Number.isInteger(H) || H < 1 ||
      B * H * T * T !== data.length) {
    fail('SHAPE_MISMATCH', `pattern: expected (B, H, T, T) = [${B}, H, ${T}, ${T}] for tokens (${B}, ${T}), got [${shape.join(', ')}]`);
  }
  // options.targets: only the query rows whose target is not -100 count.
  const counted = o.targets === undefined ? null : o.targets[2];
  if (o.targets !== undefined && (o.targets[0] !== B || o.targets[1] !== T)) {
    fail('SHAPE_MISMATCH', `options.targets: expected the tokens' shape (${B}, ${T}), got (${o.targets[0]}, ${o.targets[1]})`);
  }
  const out = {};
  for (const name of o.detectors) {
    const scores = new Array(H).fill(0);
    for (let h = 0; h < H; h++) {
      let sum = 0;
      for (let b = 0; b < B; b++) {
        const base = (b * H + h) * T * T;
        let hit = 0;
        let all = 0;
        for (let i = 0; i < T; i++) {
          if (counted !== null && counted[b * T + i] === -100) continue;
          for (let j = 0; j < T; j++) {
            if ((o.excludeBos && j === 0) || (o.excludeCurrentToken && j === i)) continue;
            const p = data[base + i * T + j];
            all += p;
            if (j <= i && isDetected(name, t, b * T, i, j, o, T)) hit += p;
          }
        }
        sum += hit / all;  // 0 / 0: NaN, no score
      }
      scores[h] = sum / B;
    }
    out[name] = scores;
  }
  return out;
}

/**
 * Every layer's head scores of a Transformer (hs.createTransformer) on tokens: one forward with
 * every layer's pattern hook, then headScores per layer. { [detector]: number[nLayers][nHeads] };
 * for a worker's model (initWorker().createTransformer), a promise of it.
 */
export function modelHeadScores(model, tokens, options) {
  const o = readOptions(options);
  const L = model?.config?.nLayers;
  if (!Number.isInteger(L) || typeof model.forward !== 'function') {
    fail('INVALID_ARGUMENT', `model: expected a Transformer (hs.createTransformer), got ${describe(model)}`);
  }
  const hooks = Array.from({ length: L }, (_, l) => `blocks.${l}.attn.hook_pattern`);
  const [B, T, t] = readTokens(tokens, 'tokens');
  const batched = { data: t, shape: [B, T] };
  const score = (result) => {
    const out = Object.fromEntries(o.detectors.map((d) => [d, []]));
    for (let l = 0; l < L; l++) {
      const scores = headScores(result.hooks[hooks[l]], batched, o);
      for (const d of o.detectors) out[d].push(scores[d]);
    }
    return out;
  };
  const result = model.forward(batched, { hooks });
  // A worker's model (initWorker().createTransformer) answers with a promise: so does this.
  return typeof result?.then === 'function' ? result.then(score) : score(result);
}
