// A hand check of the walkthrough's "explain this cell" texts, as a learner with a calculator
// would do it: read the written numbers back, compute the written sum (or softmax) exactly, round
// it to the written result's decimals and compare. Shared by tests/js/walkthrough-model.test.js
// (every cell of many states) and tests/browser/walkthrough.test.js (the texts the page shows).
//
// handCheck(text) -> { kind, checks: [{ expression, written, computed }] } where `computed` is the
// written terms' value rounded like `written`; a text with nothing to check (a copy, a masked
// cell) has no checks. Throws on a text it cannot read.

const num = (s) => {
  const t = s.trim().replace(/^\((.*)\)$/, '$1').replace('−', '-');
  if (t === '-∞') return -Infinity;
  if (t === '∞') return Infinity;
  if (!/^-?\d+(\.\d+)?$/.test(t)) throw new Error(`not a written number: ${JSON.stringify(s)}`);
  return Number(t);
};

const decimalsOf = (written) => (written.includes('.') ? written.split('.')[1].length : 0);

/** `value` written like `written` (same decimals, no "-0.000"). */
function roundLike(value, written) {
  if (!Number.isFinite(value)) return value === -Infinity ? '−∞' : value === Infinity ? '∞' : 'NaN';
  const d = decimalsOf(written);
  const s = value.toFixed(d);
  return /^-0\.?0*$/.test(s) ? s.slice(1) : s;
}

/** "a*b + c*d + e" -> the sum of products (a term without "*" is added as it is). */
function sumOfProducts(expression) {
  let sum = 0;
  for (const term of expression.split(' + ')) {
    const factors = term.split('*');
    sum += factors.map(num).reduce((a, b) => a * b, 1);
  }
  return sum;
}

/** "exp(a) / (exp(b) + exp(c - m))" or "e / (e1 + e2)": numerator / sum of the denominator's terms. */
function ratio(expression, { exp }) {
  const m = /^(.*?) \/ \((.*)\)$/.exec(expression);
  if (!m) throw new Error(`not a ratio: ${expression}`);
  const value = (t) => {
    if (!exp) return num(t);
    const e = /^exp\((.*)\)$/.exec(t.trim());
    if (!e) throw new Error(`not exp(...): ${t}`);
    const [a, shift] = e[1].split(' - ');
    const arg = num(a) - (shift === undefined ? 0 : num(shift));
    return arg === -Infinity ? 0 : Math.exp(arg);
  };
  const denominator = m[2].split(' + ').reduce((s, t) => s + value(t), 0);
  return value(m[1]) / denominator;
}

export function handCheck(text) {
  const lines = text.trim().split('\n');
  const last = lines.at(-1);
  const checks = [];
  const add = (expression, computedValue, written) => {
    checks.push({ expression, written, computed: roundLike(computedValue, written) });
  };
  if (/^(Head \d+: )?(concat|every key)/.test(lines[0]) || /every key is masked/.test(text)) {
    return { kind: 'copy', checks };
  }
  if (/scores\[\d+\]\[\d+\]/.test(lines[0])) {
    const parts = last.split(' = ');
    const written = parts.at(-1);
    if (/\(−∞\)/.test(last)) return { kind: 'masked score', checks };
    const m = /^\((.*)\) \/ ([\d.]+)(?: \+ (.*))?$/.exec(parts[1]);
    if (!m) throw new Error(`unreadable score: ${last}`);
    add(parts[1], sumOfProducts(m[1]) / num(m[2]) + (m[3] ? num(m[3]) : 0), written);
    return { kind: 'score', checks };
  }
  if (/softmax/.test(lines[0])) {
    const first = lines.find((l) => l.startsWith('exp(s['));
    const [, exps] = first.split(' = ');
    const parts = last.replace(/^= /, '').split(' = ');
    const written = parts.at(-1);
    add(exps, ratio(exps, { exp: true }), written);
    add(parts[0], ratio(parts[0], { exp: false }), written);
    return { kind: 'softmax', checks };
  }
  // Q, K, V, head outputs, Y: "= a*b + c*d (+ bias) = r".
  const parts = last.replace(/^= /, '').split(' = ');
  if (parts.length !== 2) throw new Error(`unreadable sum: ${last}`);
  add(parts[0], sumOfProducts(parts[0]), parts[1]);
  return { kind: 'sum', checks };
}
