// "Explain this cell": how one computed cell of the walkthrough was obtained, written out with the
// trace's numbers (explain-numbers.js chooses how many decimals each number needs).
import { formatNumber } from '../common/numbers.js';
import { headDim } from './shape.js';
import { maskTerms } from './pytorch.js';
import { at, dotCheck, factorAt, formatTerm, precisionFor, sumOf } from './explain-numbers.js';

/**
 * How one computed cell was obtained, written out with the trace's numbers.
 * `stage`: 'Q' | 'K' | 'V' | 'S' (scores) | 'A' (softmax weights) | 'H' (head output) for head
 * `h` (0-based), or 'CONCAT' | 'Y' (h ignored). (i, j): row and column as shown.
 * `sources` names the cells the value came from (data-matrix name plus a row and/or a column;
 * a missing row or column means the whole column or row), for highlighting.
 * @returns {{ text: string, sources: { matrix: string, row?: number, col?: number }[] }}
 */
export function explainCell(stage, { state, trace, masks = maskTerms(state) }, h, i, j) {
  const { L, E } = state;
  const hd = headDim(state);
  const head = `Head ${h + 1}`;
  const n = h + 1;
  switch (stage) {
    case 'Q': case 'K': case 'V': {
      const key = stage.toLowerCase();
      const w = state[`w${key}`];
      const col = h * hd + j;
      const xs = state.x[i].slice(0, E);
      const ws = Array.from({ length: E }, (_, d) => w[d][col]);
      const bias = state.bias ? state.bias[key][col] : null;
      const result = at(trace[key], h, i, j);
      const { dr, dt: [d] } = precisionFor(result, [dotCheck(xs, ws, bias)]);
      const f = factorAt(d);
      const terms = xs.map((x, k) => `${f(x)}*${f(ws[k])}`);
      const sources = [{ matrix: 'X', row: i }, { matrix: `W${stage}${n}`, col: j }];
      if (state.bias) sources.push({ matrix: `B${stage}${n}`, col: j });
      return {
        text: `${head}: ${stage}[${i}][${j}] = x_${i} · W_${stage}[:, ${j}]` +
          `${state.bias ? ` + b_${stage}[${j}]` : ''}\n` +
          `= ${sumOf(terms)}${state.bias ? ` + ${f(bias)}` : ''} = ${formatNumber(result, dr)}`,
        sources,
      };
    }
    case 'S': {
      const qs = Array.from({ length: hd }, (_, d) => at(trace.q, h, i, d));
      const ks = Array.from({ length: hd }, (_, d) => at(trace.k, h, j, d));
      const score = at(trace.scores, h, i, j);
      const m = masks ? masks[(h * L + i) * L + j] : 0;
      const root = Math.sqrt(hd);
      const sources = [{ matrix: `Q${n}`, row: i }, { matrix: `K${n}`, row: j }];
      let text = `${head}: scores[${i}][${j}], query token ${i} against key token ${j}:\n`;
      if (m === -Infinity) {
        const f = factorAt(3);
        const raw = `(${sumOf(qs.map((q, k) => `${f(q)}*${f(ks[k])}`))}) / ${formatTerm(root)}`;
        text += `q_${i} · k_${j} / sqrt(d_k) + mask = ${raw} + (−∞) = ${formatNumber(score)}` +
          ` (the mask blocks key ${j} for query ${i})`;
        return { text, sources };
      }
      const dot = dotCheck(qs, ks);
      const { dr, dt: [d] } = precisionFor(score, [(w) => dot(w) / w(root) + w(m)]);
      const f = factorAt(d);
      const raw = `(${sumOf(qs.map((q, k) => `${f(q)}*${f(ks[k])}`))}) / ${formatTerm(root, d)}`;
      if (m !== 0) {
        text += `q_${i} · k_${j} / sqrt(d_k) + mask = ${raw} + ${f(m)} = ${formatNumber(score, dr)}`;
      } else {
        text += `q_${i} · k_${j} / sqrt(d_k) = ${raw} = ${formatNumber(score, dr)}`;
      }
      return { text, sources };
    }
    case 'A': {
      const row = Array.from({ length: L }, (_, c) => at(trace.scores, h, i, c));
      const weight = at(trace.weights, h, i, j);
      const sources = [{ matrix: `S${n}`, row: i }];
      const max = Math.max(...row);
      let text = `${head}: A[${i}][${j}] = softmax of scores row ${i}, entry ${j}:\n`;
      if (max === -Infinity) {
        text += `every key is masked for query ${i}: headscope returns an all-zero row ` +
          `(PyTorch would give NaN), so A[${i}][${j}] = ${formatNumber(weight)}`;
        return { text, sources };
      }
      // Written with exp(s) as in a textbook; past exp(20) the terms are shifted by the row's
      // maximum, as the engine itself computes them, so they stay readable.
      const shift = max > 20 ? max : 0;
      const ex = (s) => (s === -Infinity ? 0 : Math.exp(s - shift));
      const exps = row.map(ex);
      // Line 1 from the written scores, line 2 from the written exponentials.
      const fromScores = (w) => {
        const e = (s) => (s === -Infinity ? 0 : Math.exp(w(s) - w(shift)));
        let sum = 0;
        for (const s of row) sum += e(s);
        return e(row[j]) / sum;
      };
      const fromExps = (w) => {
        let sum = 0;
        for (const e of exps) sum += w(e);
        return w(exps[j]) / sum;
      };
      const { dr, dt: [d1, d2] } = precisionFor(weight, [fromScores, fromExps]);
      const arg = (s) => (s === -Infinity ? '-∞' : shift ? `${formatTerm(s, d1)} - ${formatTerm(shift, d1)}` : formatTerm(s, d1));
      const expOf = (s) => `exp(${arg(s)})`;
      if (shift) text += `(every score minus the row's maximum ${formatTerm(shift, d1)}, which leaves softmax unchanged)\n`;
      text += `exp(s[${i}][${j}]) / Σ_c exp(s[${i}][c]) = ${expOf(row[j])} / (${row.map(expOf).join(' + ')})\n` +
        `= ${formatTerm(exps[j], d2)} / (${exps.map((e) => formatTerm(e, d2)).join(' + ')}) = ${formatNumber(weight, dr)}`;
      return { text, sources };
    }
    case 'H': {
      const as = Array.from({ length: L }, (_, c) => at(trace.weights, h, i, c));
      const vs = Array.from({ length: L }, (_, c) => at(trace.v, h, c, j));
      const result = at(trace.headOutputs, h, i, j);
      const { dr, dt: [d] } = precisionFor(result, [dotCheck(as, vs)]);
      const f = factorAt(d);
      return {
        text: `${head}: output[${i}][${j}] = Σ_c A[${i}][c] * V[c][${j}]\n` +
          `= ${sumOf(as.map((a, k) => `${f(a)}*${f(vs[k])}`))} = ${formatNumber(result, dr)}`,
        sources: [{ matrix: `A${n}`, row: i }, { matrix: `V${n}`, col: j }],
      };
    }
    case 'CONCAT': {
      const from = Math.floor(j / hd);
      const c = j - from * hd;
      return {
        text: `concat[${i}][${j}] = head ${from + 1} output[${i}][${c}] (head ${from + 1} fills ` +
          `columns ${from * hd}${hd > 1 ? `–${from * hd + hd - 1}` : ''} of the concatenation)\n` +
          `= ${formatNumber(at(trace.concat, i, j))}`,
        sources: [{ matrix: `H${from + 1}`, row: i, col: c }],
      };
    }
    case 'Y': {
      const cs = Array.from({ length: E }, (_, d) => at(trace.concat, i, d));
      const ws = Array.from({ length: E }, (_, d) => state.wo[d][j]);
      const bias = state.bias ? state.bias.o[j] : null;
      const result = at(trace.output, i, j);
      const { dr, dt: [d] } = precisionFor(result, [dotCheck(cs, ws, bias)]);
      const f = factorAt(d);
      const sources = [{ matrix: 'CONCAT', row: i }, { matrix: 'WO', col: j }];
      if (state.bias) sources.push({ matrix: 'BO', col: j });
      return {
        text: `Y[${i}][${j}] = concat row ${i} · W_O column ${j}${state.bias ? ` + b_O[${j}]` : ''}\n` +
          `= ${sumOf(cs.map((x, k) => `${f(x)}*${f(ws[k])}`))}${state.bias ? ` + ${f(bias)}` : ''} = ${formatNumber(result, dr)}`,
        sources,
      };
    }
    default:
      throw new RangeError(`explainCell: unknown stage ${stage}`);
  }
}
