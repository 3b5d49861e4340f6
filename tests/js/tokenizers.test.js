// headscope/tokenizers: the byte-level BPE round-trips 10,000 random Unicode strings (fast-check:
// any code point, grapheme clusters, mixed scripts) and its training text; training is
// deterministic and greedy by pair count (checked against a plain recount of the text's pairs);
// encoding a chunk reproduces how training merged it; the character tokenizer keeps grapheme
// clusters whole; toJSON / tokenizerFromJSON round trips; bad input is refused by name.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { charTokenizer, tokenizerFromJSON, trainBpe, MAX_VOCAB } from '../../web/lib/tokenizers.js';

// Freely licensed English of the project's own: its README and the demo's guide.
const TEXT = readFileSync(new URL('../../README.md', import.meta.url), 'utf8') +
  readFileSync(new URL('../../docs/demo.md', import.meta.url), 'utf8');
const bpe = trainBpe(TEXT, { vocabSize: 1024, special: ['<pad>', '<bos>'] });

test('BPE: 10,000 random Unicode strings and the training text round-trip', () => {
  assert.equal(bpe.vocabSize, 1024);
  assert.equal(bpe.merges, 1024 - 258);
  const ids = bpe.encode(TEXT);
  assert.equal(bpe.decode(ids), TEXT);
  const bytes = new TextEncoder().encode(TEXT).length;
  assert.ok(ids.length < 0.45 * bytes, `the merges compress the text: ${ids.length} tokens for ${bytes} bytes`);
  fc.assert(fc.property(fc.oneof(
    fc.string({ unit: 'binary', maxLength: 40 }),
    fc.string({ unit: 'grapheme', maxLength: 20 }),
    fc.array(fc.constantFrom('the ', 'héad', ' 注意', '力', '👩‍💻', '\n\t', '1000ms', 'ERROR', '\u0301', ' '), { maxLength: 12 }).map((a) => a.join('')),
  ), (s) => {
    const e = bpe.encode(s);
    assert.ok(e.every((id) => id >= 2 && id < 1024), 'no special token, every id in the vocabulary');
    assert.equal(bpe.decode(e), s);
  }), { numRuns: 10_000 });
});

test('BPE: deterministic, and each merge is the most frequent pair (ties: the smallest ids)', () => {
  const text = TEXT.slice(0, 4000);
  const a = trainBpe(text, { vocabSize: 300 });
  assert.deepEqual(trainBpe(text, { vocabSize: 300 }).toJSON(), a.toJSON());
  // Replay: the text's chunks as byte ids, recounting every adjacent pair before each merge.
  const words = new Map();
  for (const c of text.match(/[ ]?[\p{L}\p{M}]+|[ ]?\p{N}+|[ ]?[^\s\p{L}\p{M}\p{N}]+|\s+/gu)) words.set(c, (words.get(c) ?? 0) + 1);
  const seqs = [...words].map(([c, n]) => ({ ids: Array.from(new TextEncoder().encode(c)), n }));
  a.toJSON().merges.forEach(([x, y], m) => {
    const counts = new Map();
    for (const { ids, n } of seqs) for (let k = 0; k + 1 < ids.length; k++) counts.set(`${ids[k]},${ids[k + 1]}`, (counts.get(`${ids[k]},${ids[k + 1]}`) ?? 0) + n);
    const top = Math.max(...counts.values());
    const best = [...counts].filter(([, n]) => n === top).map(([k]) => k.split(',').map(Number))
      .sort((p, q) => p[0] - q[0] || p[1] - q[1])[0];
    assert.deepEqual([x, y], best, `merge ${m}`);
    for (const s of seqs) {
      const out = [];
      for (let k = 0; k < s.ids.length; k++) {
        if (k + 1 < s.ids.length && s.ids[k] === x && s.ids[k + 1] === y) { out.push(256 + m); k++; } else out.push(s.ids[k]);
      }
      s.ids = out;
    }
  });
  // Encoding each chunk gives the ids training ended with.
  [...words.keys()].forEach((c, i) => assert.deepEqual(Array.from(a.encode(c)), seqs[i].ids, JSON.stringify(c)));
  // A small text stops when no pair occurs twice.
  const tiny = trainBpe('aaabdaaabac', { vocabSize: 400 });
  assert.deepEqual(tiny.toJSON().merges, [[97, 97], [97, 98], [256, 257]]);
  assert.deepEqual(Array.from(tiny.encode('aaabdaaabac')), [258, 100, 258, 97, 99]);
  assert.equal(tiny.vocab[258], 'aaab');
});

test('characters: grapheme clusters stay one token; unknown ones map to <unk>; specials first', () => {
  const c = charTokenizer('héllo 👨‍👩‍👧 wörld e\u0301', { special: ['<pad>', '<bos>'] });
  assert.deepEqual(c.vocab.slice(0, 3), ['<pad>', '<bos>', '<unk>']);
  assert.ok(c.vocab.includes('👨‍👩‍👧') && c.vocab.includes('e\u0301'));
  assert.equal(c.encode('👨‍👩‍👧').length, 1);
  assert.equal(c.decode(c.encode('wörld 👨‍👩‍👧')), 'wörld 👨‍👩‍👧');
  assert.equal(c.decode(c.encode('help')), 'h<unk>l<unk>');
  assert.equal(c.special['<unk>'], 2);
  const again = tokenizerFromJSON(JSON.parse(JSON.stringify(c.toJSON())));
  assert.deepEqual(again.vocab, c.vocab);
  assert.deepEqual(Array.from(again.encode('höllo')), Array.from(c.encode('höllo')));
});

test('JSON round trip of the BPE, and bad input named', () => {
  const again = tokenizerFromJSON(JSON.parse(JSON.stringify(bpe.toJSON())));
  assert.deepEqual(Array.from(again.encode(TEXT.slice(0, 2000))), Array.from(bpe.encode(TEXT.slice(0, 2000))));
  assert.deepEqual(again.vocab, bpe.vocab);
  const bad = [
    [() => trainBpe(42), /^text: expected a string, got number 42/],
    [() => trainBpe('a\ud800b'), /^text: a lone surrogate \(U\+D800\) at index 1/],
    [() => bpe.encode('ok \udc00'), /^text: a lone surrogate \(U\+DC00\) at index 3/],
    [() => trainBpe('ab', { vocabSize: 100 }), /^options.vocabSize: expected an integer in \[256, 65536\]/],
    [() => trainBpe('ab', { vocabSize: MAX_VOCAB + 1 }), /^options.vocabSize/],
    [() => trainBpe('ab', { special: ['<a>', '<a>'] }), /^options.special\[1\]: '<a>' is listed twice/],
    [() => trainBpe('ab', { special: [''] }), /^options.special\[0\]: expected a non-empty string/],
    [() => trainBpe('ab', { size: 3 }), /^options.size: unknown option/],
    [() => trainBpe('ab', { onProgress: 1 }), /^options.onProgress: expected a function/],
    [() => bpe.decode([1, 1024]), /^ids\[1\]: expected a token id in \[0, 1024\), got number 1024/],
    [() => bpe.decode('12'), /^ids: expected an array or Int32Array/],
    [() => tokenizerFromJSON({ kind: 'bpe', special: [], merges: [[97, 256]] }), /^doc.merges\[0\]: expected two token ids in \[0, 256\)/],
    [() => tokenizerFromJSON({ kind: 'bpe', special: [], merges: [[97, 98], [97, 98]] }), /^doc.merges\[1\]: the pair \[97, 98\] is merged twice/],
    [() => tokenizerFromJSON({ kind: 'char', special: ['<unk>'], unknown: '<unk>', symbols: ['a', 'a'] }), /^doc.symbols: a symbol is listed twice/],
    [() => tokenizerFromJSON({ kind: 'wordpiece' }), /^doc.kind: expected 'char' or 'bpe'/],
    [() => tokenizerFromJSON(null), /^doc: expected a tokenizer's toJSON\(\)/],
  ];
  for (const [f, re] of bad) assert.throws(f, (e) => e.name === 'HeadscopeError' && re.test(e.message), String(re));
  // Progress: every 64 merges, the last count at most the total.
  const seen = [];
  trainBpe(TEXT.slice(0, 3000), { vocabSize: 256 + 200, onProgress: (m, total) => seen.push([m, total]) });
  assert.deepEqual(seen.map(([m]) => m), [64, 128, 192]);
  assert.ok(seen.every(([, total]) => total === 200));
});
