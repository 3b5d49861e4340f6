// The views' public state (web/views/heads/state.js, walkthrough/state.js) and its URL form
// (each view's url-state.js, over web/views/common/url-state.js): every field checked with an
// error naming it, and the URL round trip exact over random states (fast-check).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { makeTask } from '../../web/lib/tasks.js';
import { applyHeadsState, defaultHeadsState, HEAD_COUNTS, PRESET_NAMES } from '../../web/views/heads/state.js';
import { applyWalkthroughState, publicWalkthroughState } from '../../web/views/walkthrough/state.js';
import { seedState } from '../../web/views/walkthrough/model.js';
import { decodeHeadsState, encodeHeadsState } from '../../web/views/heads/url-state.js';
import { decodeWalkthroughState, encodeWalkthroughState } from '../../web/views/walkthrough/url-state.js';
import { formatHash, parseHash } from '../../web/views/common/url-state.js';

const subset = (max) => fc.uniqueArray(fc.integer({ min: 1, max }), { maxLength: max }).map((a) => a.sort((x, y) => x - y));

const headsState = fc.constantFrom(...HEAD_COUNTS).chain((heads) => fc.record({
  text: fc.string({ unit: 'grapheme', maxLength: 60 }),
  heads: fc.constant(heads),
  weights: fc.constantFrom('presets', 'random'),
  presets: fc.array(fc.constantFrom(...PRESET_NAMES), { minLength: heads, maxLength: heads }),
  seed: fc.integer({ min: 0, max: 0xffffffff }),
  sharpness: fc.double({ min: 0, max: 12, noNaN: true }),
  causal: fc.boolean(),
  padded: subset(40),
  off: subset(heads),
  show: fc.option(subset(heads), { nil: null }),
  view: fc.constantFrom('heads', 'average'),
}));

test('Heads: state -> URL -> state is exact (random states)', () => {
  fc.assert(fc.property(headsState, (s) => {
    const checked = applyHeadsState(s, defaultHeadsState());
    const query = encodeHeadsState(checked);
    const back = applyHeadsState(decodeHeadsState(query), defaultHeadsState());
    assert.deepStrictEqual(back, checked, query);
    // Through a whole hash too.
    const { view, query: q } = parseHash(formatHash('heads', query));
    assert.equal(view, 'heads');
    assert.equal(q, query);
  }), { numRuns: 300 });
});

const float32ish = fc.oneof(fc.double({ min: -3.4e38, max: 3.4e38, noNaN: true, noDefaultInfinity: true }),
  fc.integer({ min: -9, max: 9 }).map((k) => k / 10));
const matrix = (rows, cols) => fc.array(fc.array(float32ish, { minLength: cols, maxLength: cols }), { minLength: rows, maxLength: rows });
const walkthroughState = fc.record({ L: fc.integer({ min: 1, max: 6 }), E: fc.integer({ min: 1, max: 6 }) })
  .chain(({ L, E }) => fc.record({
    L: fc.constant(L), E: fc.constant(E),
    H: fc.constantFrom(...Array.from({ length: E }, (_, k) => k + 1).filter((d) => E % d === 0)),
    x: matrix(L, E), wq: matrix(E, E), wk: matrix(E, E), wv: matrix(E, E), wo: matrix(E, E),
    bias: fc.option(fc.record({ q: matrix(1, E).map((m) => m[0]), k: matrix(1, E).map((m) => m[0]),
      v: matrix(1, E).map((m) => m[0]), o: matrix(1, E).map((m) => m[0]) }), { nil: null }),
    causal: fc.boolean(),
  }));

test('Walkthrough: state -> URL -> state is exact, every number (random states)', () => {
  fc.assert(fc.property(walkthroughState, (s) => {
    const checked = publicWalkthroughState(applyWalkthroughState(s, seedState()));
    const query = encodeWalkthroughState(checked);
    const back = publicWalkthroughState(applyWalkthroughState(decodeWalkthroughState(query), seedState()));
    const numbers = ({ source, ...rest }) => rest;
    assert.deepStrictEqual(numbers(back), numbers(checked), query);
  }), { numRuns: 200 });
  // The seed's example is the empty query.
  assert.equal(encodeWalkthroughState(publicWalkthroughState(seedState())), '');
});

test('bad states and URL parameters get errors naming the field', () => {
  const d = defaultHeadsState();
  const cases = [
    [{ heads: 3 }, /state\.heads: expected one of 1, 2, 4, 8, 16, got 3/],
    [{ off: [5] }, /state\.off\[0\]: expected an integer in \[1, 4\]/],
    [{ presets: ['x', 'y'] }, /state\.presets: expected an array of 4 preset names/],
    [{ presets: ['blend', 'blend', 'blend', 'nope'] }, /state\.presets\[3\]: expected one of/],
    [{ sharpness: 13 }, /state\.sharpness: expected a number in \[0, 12\]/],
    [{ text: 'a\uD800' }, /state\.text: expected well-formed Unicode text/],
    [{ colour: 'red' }, /state\.colour: unknown field/],
    [null, /state: expected an object/],
  ];
  for (const [patch, message] of cases) {
    assert.throws(() => applyHeadsState(patch, d), (e) => e.name === 'HeadscopeError' && e.code === 'INVALID_ARGUMENT' && message.test(e.message), String(patch && JSON.stringify(patch)));
  }
  const w = seedState();
  for (const [patch, message] of [
    [{ H: 3 }, /state\.H: expected a divisor of E = 4, got 3/],
    [{ wq: [[1]] }, /state\.wq: expected 4 rows of 4 numbers/],
    [{ x: [[1, 0, 1, 2], [0, 2, 1, 0], [1, 1, 0, 1e40]] }, /state\.x\[2\]\[3\]: expected a finite number within float32's range/],
    [{ masked: true }, /state\.masked: read-only/],
    [{ seed: 3 }, /state\.seed: only with preset: 'random'/],
  ]) {
    assert.throws(() => applyWalkthroughState(patch, w), (e) => e.code === 'INVALID_ARGUMENT' && message.test(e.message), JSON.stringify(patch));
  }
  // A heads change keeps what still fits.
  const eight = applyHeadsState({ heads: 8 }, applyHeadsState({ presets: ['numbers', 'keyword', 'blend', 'random'], off: [2, 4] }, d));
  assert.deepEqual(eight.presets.slice(0, 4), ['numbers', 'keyword', 'blend', 'random']);
  assert.deepEqual(eight.off, [2, 4]);
  assert.deepEqual(applyHeadsState({ heads: 2 }, eight).off, [2]);
  // URL parameters.
  assert.throws(() => decodeHeadsState('colour=red'), /URL parameter colour: unknown/);
  assert.throws(() => decodeHeadsState('off=1,x'), /URL parameter off: item 2 \("x"\) is not a number/);
  assert.throws(() => decodeWalkthroughState('L=2&x=1,2,3'), /URL parameter x: expected 2 x 4 = 8 numbers, got 3/);
  assert.throws(() => decodeWalkthroughState('L=2&L=3'), /URL parameter L: given twice/);
  assert.throws(() => decodeWalkthroughState('bq=1'), /URL parameter bk: missing/);
});

test('Train: state -> URL -> state is exact (random states); bad fields named', async () => {
  const { applyTrainState, defaultTrainState, ropeDims, TASK_NAMES, D_MODELS } = await import('../../web/views/train/state.js');
  const { decodeTrainState, encodeTrainState } = await import('../../web/views/train/url-state.js');
  const divisors = (n) => Array.from({ length: n }, (_, k) => k + 1).filter((h) => n % h === 0);
  const state = fc.constantFrom(...D_MODELS).chain((dModel) => fc.constantFrom(...divisors(dModel))).chain((heads) => fc.record({
    task: fc.constantFrom(...TASK_NAMES),
    layers: fc.integer({ min: 1, max: 4 }),
    dModel: fc.constantFrom(...D_MODELS.filter((d) => d % heads === 0)),
    heads: fc.constant(heads),
    kvHeads: fc.constantFrom(...divisors(heads)),
    attnWindow: fc.integer({ min: 0, max: 256 }),
    attnSinks: fc.boolean(),
    mlp: fc.boolean(),
    norm: fc.constantFrom('pre', 'post', 'none'),
    positions: fc.constantFrom('learned', 'sinusoidal', 'none', 'alibi', 'rope'),
    ropeLayout: fc.constantFrom('half', 'interleaved'),
    ropeBase: fc.oneof(fc.constant(10000), fc.double({ min: 1e-3, max: 1e7, noNaN: true })),
    ropeFraction: fc.oneof(fc.constant(1), fc.double({ min: 0.01, max: 1, noNaN: true })),
    lr: fc.double({ min: 1e-6, max: 1, noNaN: true }),
    weightDecay: fc.double({ min: 0, max: 1, noNaN: true }).map((v) => v + 0),
    batch: fc.integer({ min: 1, max: 256 }),
    clip: fc.double({ min: 0, max: 100, noNaN: true }).map((v) => v + 0),
    seed: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
    steps: fc.integer({ min: 0, max: 100_000 }),
    // The reader's detectors: words of the task's vocabulary (chosen below by index), a formula.
    keywordPicks: fc.array(fc.nat(), { maxLength: 4 }),
    pattern: fc.constantFrom('', 'j == i - 2', 'tj == ti && j < i', '(i + j) % 3 == 0 || !(tj != 1)'),
  })).map(({ keywordPicks, ...s }) => {
    const { vocab } = makeTask(s.task, { seed: s.seed });
    return { ...s, keywords: keywordPicks.map((k) => vocab[k % vocab.length]).join(' ') };
  }).map((s) => (s.positions === 'rope' ? s : { ...s, ropeLayout: 'half', ropeBase: 10000, ropeFraction: 1 }))
    .filter((s) => s.positions !== 'rope' || ropeDims(s) >= 2);
  fc.assert(fc.property(state, (s) => {
    const checked = applyTrainState(s, defaultTrainState());
    const back = applyTrainState(decodeTrainState(encodeTrainState(checked)), defaultTrainState());
    assert.deepStrictEqual(back, checked);
  }), { numRuns: 300 });
  for (const [patch, message] of [
    [{ heads: 3 }, /state\.heads: expected a divisor of dModel 32, got 3/],
    [{ lr: 0 }, /state\.lr: expected a number in \(0, 1\]/],
    [{ task: 'nope' }, /state\.task: expected one of copy, /],
    [{ colour: 1 }, /state\.colour: unknown field/],
    [{ keywords: 'ERROR nope' }, /state\.keywords: "ERROR" is not a token of the induction task/],
    [{ task: 'log-line', keywords: 'ERROR nope' }, /state\.keywords: "nope" is not a token of the log-line task/],
    [{ pattern: 'j = i' }, /state\.pattern: at character 3: unexpected = i/],
    [{ pattern: 'k > 1' }, /state\.pattern: at character 1: unknown name k/],
    [{ keywords: 7 }, /state\.keywords: expected text of at most 500 characters, got 7/],
    [{ kvHeads: 3, heads: 4 }, /state\.kvHeads: expected a divisor of heads 4, got 3/],
    [{ attnWindow: 257 }, /state\.attnWindow: expected an integer in \[0, 256\]/],
    [{ attnSinks: 1 }, /state\.attnSinks: expected true or false, got 1/],
    [{ positions: 'rope', ropeLayout: 'diagonal' }, /state\.ropeLayout: expected one of "half", "interleaved", got "diagonal"/],
    [{ positions: 'rope', ropeBase: 0 }, /state\.ropeBase: expected a finite number > 0, got 0/],
    [{ positions: 'rope', ropeFraction: 1.5 }, /state\.ropeFraction: expected a number in \(0, 1\], got 1\.5/],
    [{ ropeLayout: 'interleaved' }, /state\.ropeLayout: applies only with positions 'rope' \(positions is "learned"\): leave it at "half"/],
    [{ positions: 'rope', heads: 32 }, /state\.heads: positions 'rope' turns pairs of dims: ropeFraction 1 of the head dim dModel \/ heads = 1 leaves none/],
    [{ positions: 'rope', ropeFraction: 0.1 }, /state\.heads: positions 'rope' turns pairs of dims: ropeFraction 0\.1 of the head dim dModel \/ heads = 16/],
  ]) {
    assert.throws(() => applyTrainState(patch, defaultTrainState()), (e) => e.code === 'INVALID_ARGUMENT' && message.test(e.message), JSON.stringify(patch));
  }
  assert.throws(() => decodeTrainState('colour=1'), /URL parameter colour: unknown/);
  // The variants' defaults stay out of a link, so links made before them are unchanged, and heads
  // changed alone keep plain multi-head attention (K/V heads follow) unless K/V heads were set.
  const plain = applyTrainState({ heads: 4 }, defaultTrainState());
  assert.equal(plain.kvHeads, 4);
  assert.equal(encodeTrainState(defaultTrainState()),
    'task=induction&layers=2&heads=2&dModel=32&mlp=0&norm=pre&positions=learned&lr=0.003&weightDecay=0.01&batch=16&clip=1&seed=1&steps=0');
  const variant = applyTrainState({ heads: 4, kvHeads: 1, attnWindow: 8, positions: 'alibi' }, defaultTrainState());
  assert.match(encodeTrainState(variant), /&heads=4&kvHeads=1&.*&positions=alibi&attnWindow=8&/);
  assert.equal(applyTrainState({ heads: 8 }, variant).kvHeads, 1, 'set K/V heads stay when they divide');
  // Attention sinks: in a link only when on (attnSinks=1, after attnWindow), off by default.
  assert.equal(defaultTrainState().attnSinks, false);
  const sinks = applyTrainState({ attnSinks: true }, defaultTrainState());
  assert.match(encodeTrainState(sinks), /&positions=learned&attnSinks=1&lr=/);
  assert.deepEqual(applyTrainState(decodeTrainState(encodeTrainState(sinks)), defaultTrainState()), sinks);
  assert.throws(() => applyTrainState(decodeTrainState('attnSinks=yes'), defaultTrainState()), /state\.attnSinks: expected true or false, got "yes"/);
  assert.throws(() => applyTrainState({ heads: 2 }, applyTrainState({ heads: 8, kvHeads: 4 }, defaultTrainState())),
    /kvHeads: expected a divisor of heads 2, got 4/);
  // RoPE: its fields in a link only off their defaults; another positions puts them back.
  const rope = applyTrainState({ positions: 'rope', ropeLayout: 'interleaved', ropeFraction: 0.5 }, defaultTrainState());
  assert.match(encodeTrainState(rope), /&positions=rope&ropeLayout=interleaved&ropeFraction=0\.5&lr=/);
  assert.match(encodeTrainState(applyTrainState({ positions: 'rope' }, defaultTrainState())), /&positions=rope&lr=/);
  assert.deepEqual(applyTrainState({ positions: 'learned' }, rope), defaultTrainState());
  assert.equal(ropeDims(rope), 8, 'half of 16 dims');
  assert.equal(ropeDims(defaultTrainState()), 0);
});

test('Heads, showing a case: the marker names its origin (a Train run, a file) and reads back; bad ones named', async () => {
  const { decodeHeadsOrigin, encodeHeadsOrigin, isHeadsOrigin } = await import('../../web/demo/heads-origin.js');
  const { applyTrainState, defaultTrainState } = await import('../../web/views/train/state.js');
  const state = applyTrainState({ task: 'copy', heads: 4, steps: 350, seed: 7 }, defaultTrainState());
  const query = encodeHeadsOrigin({ from: 'train', layer: 1, head: 3, state });
  assert.ok(isHeadsOrigin(query));
  assert.ok(!isHeadsOrigin(encodeHeadsState({ ...defaultHeadsState(), show: [2] })), 'a sentence\'s link is no marker');
  const back = decodeHeadsOrigin(query);
  assert.deepEqual([back.from, back.layer, back.head, back.state], ['train', 1, 3, state]);
  assert.match(back.trainHash, /^#train\?.*steps=350/);
  assert.deepEqual(decodeHeadsOrigin(encodeHeadsOrigin({ from: 'file', name: 'a & b' })), { from: 'file', name: 'a & b' });
  for (const [bad, message] of [['from=walkthrough', /URL parameter from: expected train or file/],
    [`${query}&text=a`, /URL parameter text: unknown/], ['from=train&layer=-1&head=1&train=', /URL parameter layer: expected an integer >= 0/],
    ['from=train&layer=0&head=1&train=task%3Dnope', /URL parameter train.*task/], ['from=file&name=a&name=b', /URL parameter name: given twice/]]) {
    assert.throws(() => decodeHeadsOrigin(bad), message, bad);
  }
});
