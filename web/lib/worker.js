// headscope in a Web Worker (or a Node worker_threads Worker): the same API as init(), run off the
// calling thread. Use it through initWorker() from './worker-client.js'; the protocol below is
// what that client speaks.
//
//   browser: new Worker(new URL('headscope/worker', import.meta.url), { type: 'module' })
//   Node:    new (await import('node:worker_threads')).Worker(new URL('./worker.js', import.meta.url))
//
// Protocol (structured-clone messages):
//   caller -> worker, first: { type: 'init', options: { simd } }  init()'s options (initWorker's
//                            simd); the worker loads its module when this arrives (a first
//                            message of another kind loads it with init()'s defaults)
//   worker -> caller, once:  { type: 'ready', kernelTarget, simd, methods } (methods: the engine's,
//                            { name: [parameter names] }) or { type: 'ready', error: { code, message } }
//   caller -> worker:        { id, op, args }, op one of
//     call          [objectId, method, ...arguments]: any public method of the engine (objectId 0)
//                   or of an object it created, read from their classes (publicMethods)
//     create        [kind, config] -> { id, config, methods, constants }: kind 'MultiheadAttention'
//                   or 'Transformer'; methods as the ready message's, constants the values of
//                   the class's constant methods (parameterShapes, hookNames)
//     dispose       [objectId]
//     generate, generateCancel, train, trainControl: the jobs below
//   worker -> caller:        { id, ok: true, result } or { id, ok: false, error: { code, message, argument? } }
// Training runs (Transformer.train): the reply is { job } at once; the steps then run in chunks of
// about spec.chunkMs (default 30 ms) between which other requests are served (a forward for the
// live patterns, trainControl to pause, resume or cancel), each chunk followed by
//   worker -> caller:        { type: 'train-progress', job, step, losses, gradNorms, elapsedMs }
// and the run's end by      { type: 'train-done', job, status: 'done' | 'cancelled' | 'refused'
//                             | 'error', step, refused?, error? }.
// Generation (Transformer.generate) runs in chunks too: the reply is { generation } once the
// prompt has run (a bad prompt or option is the reply's error); the tokens are then drawn in
// chunks of about 30 ms between which other requests are served, one generation per model at a
// time (later ones wait their turn), and its end is
//   worker -> caller:        { type: 'generate-done', generation, ok: true, result } or
//                            { type: 'generate-done', generation, ok: false, error }
// Transformer.generateCancel [objectId, generation] ends one (error CANCELLED) and answers
// { status: 'cancelled' | 'finished' }; a change of the model's weights between its chunks
// (loadStateDict, trainStep, a training run) ends it with CANCELLED too.
// Replies come in request order. Tensors go out as { data, shape } (data a Float32Array, or an
// Int32Array of token ids), groups of them (headStats, hooks, a stateDict) as objects of those,
// with their buffers transferred. An error is answered and the worker keeps serving; nothing a
// request does ends it. `argument` is the HeadscopeError's structured argument id, if it has one.
//
// The file loads in browsers without touching node: modules: node:worker_threads is imported only
// when there is no worker global scope (`self`).
import { init, HeadscopeError, Tensor } from './index.js';
import { makeTask } from './tasks.js';
import { MAX_DIM, describe, quoteInput, toTokens } from './tensor.js';

// What one request may make the worker walk, checked before anything reads it. A request crosses
// as a structured clone, which keeps holes and shared references: a sparse array of length
// 2^32 - 1, or one array referenced 2^24 times, costs a few bytes to send and billions of steps
// to walk. So every request is measured first, in steps bounded by these numbers, and refused
// (RESOURCE_EXHAUSTED) past them; tensors beyond them go as typed arrays ({ data, shape }), which
// are counted as one value whatever their length.
const MAX_REQUEST_ARGS = 8;            // the most arguments any request has is 5
const MAX_REQUEST_VALUES = 2 ** 25;    // array elements and object entries, counted per visit
const MAX_REQUEST_CONTAINERS = 2 ** 22; // arrays, objects and Maps, counted per visit
// A training run's spec.batches: at most this many batches, each checked before the first step.
export const MAX_TRAIN_BATCHES = 65536;

// object id -> { kind, object }: kind is the class name, 'MultiheadAttention' or 'Transformer'.
const objects = new Map();
let nextObjectId = 1;

// object id -> its class name, kept after dispose (a few bytes per object) so that a late call
// names what was disposed.
const kindOf = new Map();

function register(kind, object) {
  const id = nextObjectId++;
  objects.set(id, { kind, object });
  kindOf.set(id, kind);
  return id;
}

// The object of this kind, or the DISPOSED error the calling thread gives for a disposed one
// (index.js's words). An id of another kind is no object of this one.
function lookup(id, kind) {
  const entry = objects.get(id);
  if (entry === undefined || entry.kind !== kind) {
    throw new HeadscopeError('DISPOSED', `${kind}: this object was disposed; create a new one`);
  }
  return entry.object;
}

// A result as it crosses: Tensors as { data, shape } with their buffers collected for transfer,
// groups of them (headStats, hooks, a stateDict) as objects of those, anything else (null, a
// loss, a number) as it is.
function resultOut(value, transfer) {
  if (value === null || typeof value !== 'object') return value;
  if (value instanceof Tensor) {
    if (!transfer.includes(value.data.buffer)) transfer.push(value.data.buffer);
    return { data: value.data, shape: value.shape };
  }
  if (Array.isArray(value)) return value.map((v) => resultOut(v, transfer));
  const out = {};
  for (const [name, v] of Object.entries(value)) out[name] = resultOut(v, transfer);
  return out;
}

// ---- Training runs ----
const jobs = new Map();  // job id -> the run's state
let nextJobId = 1;
const now = () => (typeof performance === 'object' ? performance.now() : Date.now());

// Runs `f` after the messages already queued are handled: setImmediate in Node; a MessageChannel
// in browsers (a nested setTimeout(0) is clamped to 4 ms there).
let yieldChannel = null;
const yieldQueue = [];
function yieldThen(f) {
  if (typeof setImmediate === 'function') {
    setImmediate(f);
    return;
  }
  if (yieldChannel === null) {
    yieldChannel = new MessageChannel();
    yieldChannel.port1.onmessage = () => yieldQueue.shift()?.();
  }
  yieldQueue.push(f);
  yieldChannel.port2.postMessage(0);
}

function integerOption(value, name, min, max) {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new HeadscopeError('INVALID_ARGUMENT', `${name}: expected an integer in [${min}, ${max}], ` +
      `got ${typeof value === 'number' ? value : typeof value}`);
  }
  return value;
}

const TRAIN_SPEC = ['steps', 'batchSize', 'task', 'batches', 'startIndex', 'chunkMs'];

// spec.batches, read once and checked whole before the run starts: a real array of 1 to
// MAX_TRAIN_BATCHES entries (a hole, null or a non-object entry names its index), each batch's
// tokens and targets snapshotted as int32 and checked by the model as trainStep would check them
// (shapes, token ids, targets), so that a bad batch is refused before the first step changes a
// weight rather than ending the run halfway.
function readBatches(model, batches) {
  const help = 'expected a non-empty array of { tokens, targets }';
  if (!Array.isArray(batches)) {
    throw new HeadscopeError('INVALID_ARGUMENT', `spec.batches: ${help}, got ${describe(batches)}`);
  }
  const n = batches.length;
  if (n < 1 || n > MAX_TRAIN_BATCHES) {
    throw new HeadscopeError('INVALID_ARGUMENT', `spec.batches: ${help} of at most ` +
      `${MAX_TRAIN_BATCHES} batches (they are cycled), got an array of length ${n}`);
  }
  const out = new Array(n);
  for (let i = 0; i < n; i++) {
    const at = `spec.batches[${i}]`;
    if (!Object.hasOwn(batches, i)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `${at}: a hole in the array; expected { tokens, targets }`);
    }
    const b = batches[i];
    if (b === null || typeof b !== 'object' || Array.isArray(b)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `${at}: expected { tokens, targets }, got ${describe(b)}`);
    }
    for (const key of Object.keys(b)) {
      if (key !== 'tokens' && key !== 'targets') {
        throw new HeadscopeError('INVALID_ARGUMENT', `${at}.${quoteInput(key)}: unknown key (expected tokens, targets)`);
      }
    }
    try {
      const tokens = toTokens(b.tokens, `${at}.tokens`);
      const targets = toTokens(b.targets, `${at}.targets`);
      const batch = { tokens: { data: tokens.data, shape: tokens.shape },
        targets: { data: targets.data, shape: targets.shape } };
      model.checkBatch(batch.tokens, batch.targets);
      out[i] = batch;
    } catch (e) {
      // The model names tokens / targets; the run's caller needs to know which batch.
      if (e instanceof HeadscopeError && !e.message.startsWith(at)) {
        throw new HeadscopeError(e.code, `${at}: ${e.message}`);
      }
      throw e;
    }
  }
  return out;
}

// spec: { steps, task: { name, ...options } and batchSize, or batches: [{ tokens, targets }]
// (cycled), startIndex (the first batch index, default 0), chunkMs } -> a function of the batch
// index and the run's settings. Read once, here, and checked against `model` before any step.
function readTrainSpec(spec, model) {
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) {
    throw new HeadscopeError('INVALID_ARGUMENT', `spec: expected an object like { steps: 100, ` +
      `task: { name: 'induction' }, batchSize: 16 }, got ${spec === null ? 'null' : typeof spec}`);
  }
  for (const key of Object.keys(spec)) {
    if (!TRAIN_SPEC.includes(key)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `spec.${quoteInput(key)}: unknown option (expected one of ` +
        `${TRAIN_SPEC.join(', ')})`);
    }
  }
  const steps = integerOption(spec.steps, 'spec.steps', 1, 1e9);
  const startIndex = integerOption(spec.startIndex ?? 0, 'spec.startIndex', 0, 2 ** 40);
  const chunkMs = spec.chunkMs ?? 30;
  if (typeof chunkMs !== 'number' || !(chunkMs >= 1 && chunkMs <= 10000)) {
    throw new HeadscopeError('INVALID_ARGUMENT', `spec.chunkMs: expected a number in [1, 10000], got ${chunkMs}`);
  }
  let batchAt;
  if (spec.task !== undefined && spec.batches !== undefined) {
    throw new HeadscopeError('INVALID_ARGUMENT', 'spec: give either task (with batchSize) or batches, not both');
  }
  if (spec.task !== undefined) {
    const { name, ...options } = spec.task ?? {};
    const task = makeTask(name, options);
    const batchSize = integerOption(spec.batchSize, 'spec.batchSize', 1, 4096);
    batchAt = (i) => task.batch(batchSize, i);
    // Every batch of a task has the same shape and vocabulary: one checked stands for all (a
    // task whose vocabulary or length the model cannot take is refused before any step).
    const first = batchAt(startIndex);
    try {
      model.checkBatch(first.tokens, first.targets);
    } catch (e) {
      if (!(e instanceof HeadscopeError)) throw e;
      throw new HeadscopeError(e.code, `spec.task: its batches do not fit this model: ${e.message}`);
    }
  } else if (spec.batches !== undefined) {
    const batches = readBatches(model, spec.batches);
    batchAt = (i) => batches[i % batches.length];
  } else {
    throw new HeadscopeError('INVALID_ARGUMENT', 'spec: expected task: { name, ...options } with ' +
      'batchSize, or batches: a non-empty array of { tokens, targets }');
  }
  return { steps, startIndex, chunkMs, batchAt };
}

function finishJob(post, job, status, extra = {}) {
  if (!jobs.has(job.id)) return;
  jobs.delete(job.id);
  send(post, { type: 'train-done', job: job.id, status, step: job.step, ...extra }, []);
}

function runChunk(post, job) {
  job.scheduled = false;
  if (!jobs.has(job.id)) return;
  if (job.cancelled) {
    finishJob(post, job, 'cancelled');
    return;
  }
  if (job.paused) return;  // trainControl('resume') schedules the next chunk
  const start = now();
  const losses = [];
  const gradNorms = [];
  let refused = null;
  try {
    while (job.step < job.steps && now() - start < job.chunkMs) {
      const { tokens, targets } = job.batchAt(job.startIndex + job.step);
      const r = job.model.trainStep(tokens, targets);
      losses.push(r.loss);
      gradNorms.push(r.gradNorm);
      if (!r.stepped) {
        refused = r.refused;
        break;
      }
      job.step++;
    }
  } catch (e) {
    progress(post, job, losses, gradNorms, start);  // the steps this chunk did take
    finishJob(post, job, 'error', { error: errorOut(e) });
    return;
  }
  if (refused !== null) {
    // The refused step took no step: its loss and norm go with the end, not with the steps.
    const loss = losses.pop();
    const gradNorm = gradNorms.pop();
    progress(post, job, losses, gradNorms, start);
    finishJob(post, job, 'refused', { refused, loss, gradNorm });
    return;
  }
  progress(post, job, losses, gradNorms, start);
  if (job.step >= job.steps) finishJob(post, job, 'done');
  else schedule(post, job);
}

// One chunk's per-step losses and norms (the steps taken: losses[i] is step job.step - n + i).
function progress(post, job, losses, gradNorms, start) {
  if (losses.length === 0) return;
  const l = Float64Array.from(losses);
  const g = Float64Array.from(gradNorms);
  send(post, { type: 'train-progress', job: job.id, step: job.step, losses: l, gradNorms: g,
    elapsedMs: now() - start }, [l.buffer, g.buffer]);
}

function schedule(post, job) {
  if (job.scheduled) return;
  job.scheduled = true;
  yieldThen(() => runChunk(post, job));
}

// ---- Generation in chunks (Transformer.generate) ----
// The calling thread's generate is one synchronous call; here the model's _generateBegin runs
// the prompt and _generateContinue draws tokens in chunks of about GENERATE_CHUNK_MS, so a long
// generation neither holds the worker (requests are served between chunks) nor resists a cancel.
// The steps and bits are generate()'s whatever the chunking (transformer.h GenerateContinue).
const GENERATE_CHUNK_MS = 30;
const generations = new Map();  // generation id -> its state, running or waiting for its model
let nextGenerationId = 1;

function generationOf(modelId) {
  for (const g of generations.values()) if (g.modelId === modelId && g.started) return g;
  return null;
}

// Begins `g` (its prompt runs now) and schedules its chunks; a refusal ends it with the error.
// Returns the error, if any, for a caller that answers it as its reply.
function startGeneration(post, g) {
  try {
    g.model._generateBegin(g.prompt, g.options);
  } catch (e) {
    generations.delete(g.id);
    return e;
  } finally {
    g.prompt = g.options = null;  // the snapshot of the request is not needed any more
  }
  g.started = true;
  scheduleGeneration(post, g);
  return null;
}

// The next generation waiting for this model, if any, begins once none of its runs (a refused
// one's end is its generate-done, and the next waiting one is tried).
function startNextGeneration(post, modelId) {
  if (generationOf(modelId) !== null) return;
  for (const g of generations.values()) {
    if (g.modelId !== modelId || g.started) continue;
    const error = startGeneration(post, g);
    if (error === null) return;
    send(post, { type: 'generate-done', generation: g.id, ok: false, error: errorOut(error) }, []);
  }
}

function finishGeneration(post, g, reply, transfer = []) {
  if (!generations.delete(g.id)) return;
  send(post, { type: 'generate-done', generation: g.id, ...reply }, transfer);
  startNextGeneration(post, g.modelId);
}

function scheduleGeneration(post, g) {
  if (g.scheduled) return;
  g.scheduled = true;
  yieldThen(() => runGenerationChunk(post, g));
}

function runGenerationChunk(post, g) {
  g.scheduled = false;
  if (!generations.has(g.id)) return;  // cancelled meanwhile
  const start = now();
  try {
    // Steps per call double while the chunk has time: one wasm call per token would cost more
    // than a small model's token, and one call for the whole chunk could overrun it.
    for (let steps = g.steps; ; steps = Math.min(steps * 2, 4096)) {
      const result = g.model._generateContinue(steps);
      if (result !== null) {
        const transfer = [];
        finishGeneration(post, g, { ok: true, result: resultOut(result, transfer) }, transfer);
        return;
      }
      if (now() - start >= GENERATE_CHUNK_MS) {
        g.steps = Math.max(1, steps >> 1);
        break;
      }
    }
  } catch (e) {
    finishGeneration(post, g, { ok: false, error: errorOut(e) });
    return;
  }
  scheduleGeneration(post, g);
}

// ---- The engine's methods, served generically ----
// A request is a method of the engine (object id 0) or of an object it created, with its
// arguments: { op: 'call', args: [objectId, methodName, ...arguments] }. Which methods exist is
// read from the objects' own classes, so a method added to index.js is served here (and offered
// by the client, worker-client.js) without code in either; only what the worker runs as a job
// (train, a chunked generate), creation and disposal have ops of their own.
const NOT_CALLED = new Set(['dispose', 'close', 'generate', 'createMultiheadAttention', 'createTransformer']);

/** The public methods of an object's class chain (no `_private` ones, no constructor). */
export function publicMethods(object) {
  const names = [];
  for (let p = Object.getPrototypeOf(object); p !== null && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const name of Object.getOwnPropertyNames(p)) {
      const d = Object.getOwnPropertyDescriptor(p, name);
      if (name === 'constructor' || name.startsWith('_') || typeof d.value !== 'function') continue;
      if (!NOT_CALLED.has(name) && !names.includes(name)) names.push(name);
    }
  }
  return names;
}

// A method's parameter names, from its own source (index.js writes them plainly: `forward(tokens,
// options = {})`), so that the client names an argument that cannot be sent as the calling thread
// would ("tokens: cannot be sent to the worker ...").
function parameterNames(fn) {
  const m = /^[^(]*\(([^)]*)\)/.exec(Function.prototype.toString.call(fn));
  if (m === null) return [];
  return m[1].split(',').map((p) => p.trim().replace(/\s*=[\s\S]*$/, '').replace(/^\.\.\./, '')).filter(Boolean);
}

/** { name: [parameter names] } of an object's served methods. */
function methodTable(object) {
  return Object.fromEntries(publicMethods(object).map((name) => [name, parameterNames(object[name])]));
}

// The values of an object's constant methods (the class says which: `constants`, answers fixed
// for the object's life), which the client then answers without a round trip.
function constantsOf(object) {
  const names = object.constructor.constants ?? [];
  return Object.fromEntries(names.map((name) => [name, object[name]()]));
}

// The kinds of object the engine creates, by class name: hs['create' + kind](config).
const KINDS = ['MultiheadAttention', 'Transformer'];

const OPS = {
  // [kind, config] -> { id, config, methods, constants }: the object's id here, its config with
  // the defaults filled in, the methods it serves (methodTable) and its constants' values.
  create(hs, [kind, config]) {
    if (!KINDS.includes(kind)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `headscope worker: create: expected one of ${KINDS.join(', ')}, ` +
        `got ${describe(kind)}`);
    }
    const object = hs[`create${kind}`](config);
    return { id: register(kind, object), config: object.config, methods: methodTable(object),
      constants: constantsOf(object) };
  },
  // [objectId (0: the engine), method, ...arguments] -> its result, tensors transferred.
  call(hs, [id, name, ...args], transfer) {
    const object = id === 0 ? hs : objects.get(id)?.object;
    if (object === undefined) {
      // (index.js's words for a disposed object, naming its class.)
      throw new HeadscopeError('DISPOSED', `${kindOf.get(id) ?? 'object'}: this object was disposed; create a new one`);
    }
    if (typeof name !== 'string' || !publicMethods(object).includes(name)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `headscope worker: ${describe(name)} is not a method ` +
        `this object serves (${publicMethods(object).join(', ')})`);
    }
    // (undefined stays undefined: a method that returns nothing resolves to nothing.)
    return resultOut(object[name](...args), transfer);
  },
  // [id, prompt, options] -> { generation } once the prompt has run (or queued behind the model's
  // generation in progress); the tokens follow in a generate-done event (the protocol above).
  generate(hs, [id, prompt, options], transfer, post) {
    const model = lookup(id, 'Transformer');
    const g = { id: nextGenerationId++, modelId: id, model, prompt, options, started: false,
      scheduled: false, steps: 1 };
    generations.set(g.id, g);
    if (generationOf(id) === null) {
      const error = startGeneration(post, g);
      if (error !== null) throw error;
    }
    return { generation: g.id };
  },
  // [id, generation] -> { status: 'cancelled' | 'finished' }: served between chunks, so the
  // generation ends here (its caches freed) and its generate-done, CANCELLED, follows this reply.
  generateCancel(hs, [id, generationId], transfer, post) {
    const g = generations.get(generationId);
    if (g === undefined || g.modelId !== id) return { status: 'finished' };
    generations.delete(g.id);  // a chunk already scheduled finds it gone
    if (g.started) g.model._generateCancel();
    yieldThen(() => {
      send(post, { type: 'generate-done', generation: g.id, ok: false, error: { code: 'CANCELLED',
        message: 'generate: cancelled by the caller (options.signal was aborted)' } }, []);
      startNextGeneration(post, id);
    });
    return { status: 'cancelled' };
  },
  // A training run in chunks (the protocol above); the model needs an optimizer already.
  train(hs, [id, spec], transfer, post) {
    const model = lookup(id, 'Transformer');
    const settings = readTrainSpec(spec, model);
    if (model.optimizer === null) {
      throw new HeadscopeError('INVALID_ARGUMENT', 'train: no optimizer set (call setOptimizer first)');
    }
    // One run at a time per model: two would take turns by time on the same weights, and the
    // result would depend on the timing.
    for (const other of jobs.values()) {
      if (other.modelId === id) {
        throw new HeadscopeError('INVALID_ARGUMENT', `train: this model is training already (run ` +
          `${other.id} at step ${other.step}); cancel it or await its done first`);
      }
    }
    const job = { id: nextJobId++, modelId: id, model, step: 0, paused: false, cancelled: false,
      scheduled: false, ...settings };
    jobs.set(job.id, job);
    schedule(post, job);
    return { job: job.id };
  },
  // [id, job, 'pause' | 'resume' | 'cancel'] -> { status: 'running' | 'paused' | 'cancelled' |
  // 'finished', step }: served between chunks, so a paused run's step stays as returned.
  trainControl(hs, [id, jobId, action], transfer, post) {
    lookup(id, 'Transformer');
    if (!['pause', 'resume', 'cancel'].includes(action)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `action: expected 'pause', 'resume' or 'cancel', got ${String(action)}`);
    }
    const job = jobs.get(jobId);
    if (job === undefined || job.modelId !== id) return { status: 'finished', step: null };
    if (action === 'pause') job.paused = true;
    if (action === 'resume' && job.paused) {
      job.paused = false;
      schedule(post, job);
    }
    if (action === 'cancel') {
      job.cancelled = true;
      schedule(post, job);  // ends it at once, paused or not, after this reply
      return { status: 'cancelled', step: job.step };
    }
    return { status: job.paused ? 'paused' : 'running', step: job.step };
  },
  dispose(hs, [id], transfer, post) {
    // Disposing twice is a no-op, as in the calling thread.
    const entry = objects.get(id);
    if (entry !== undefined) {
      objects.delete(id);
      for (const job of jobs.values()) {
        if (job.modelId === id) {
          job.cancelled = true;
          schedule(post, job);
        }
      }
      entry.object.dispose();
    }
    return null;
  },
};

function errorOut(e) {
  if (e instanceof HeadscopeError) {
    return e.argument === undefined ? { code: e.code, message: e.message }
      : { code: e.code, message: e.message, argument: e.argument };
  }
  // Not a HeadscopeError: a TypeError from a malformed argument the API did not anticipate, or a
  // bug. Either way the caller gets a HeadscopeError and the worker carries on.
  return { code: 'INTERNAL', message: `headscope worker: ${e?.message ?? String(e)}` };
}

// Refuses a request whose arguments would make the worker walk more than MAX_REQUEST_VALUES
// values (see there); the walk itself stops at that many steps, so it is bounded too.
function checkRequestSize(args) {
  if (args.length > MAX_REQUEST_ARGS) {
    throw new HeadscopeError('INVALID_ARGUMENT', `headscope worker: expected at most ` +
      `${MAX_REQUEST_ARGS} arguments, got an args array of length ${args.length}`);
  }
  let budget = MAX_REQUEST_VALUES;
  let containers = MAX_REQUEST_CONTAINERS;
  const pending = [args];
  while (pending.length > 0) {
    const v = pending.pop();
    if (v === null || typeof v !== 'object' || ArrayBuffer.isView(v) || v instanceof ArrayBuffer) continue;
    let values;
    if (--containers < 0) {
      throw new HeadscopeError('RESOURCE_EXHAUSTED', `headscope worker: the request holds more than ` +
        `${MAX_REQUEST_CONTAINERS} arrays and objects (each time one is referenced counts); send ` +
        'large tensors as typed arrays ({ data, shape })');
    }
    if (Array.isArray(v) && v.length > MAX_DIM) {
      // Every array the API reads has its length checked first, against MAX_DIM at most
      // (tensors; spec.batches and hooks against less), so this one is refused, in the calling
      // thread's own words, before anything walks it.
      continue;
    } else if (Array.isArray(v)) {
      budget -= v.length;
      values = budget >= 0 ? v : null;
    } else if (v instanceof Map) {
      budget -= v.size;
      values = budget >= 0 ? [...v.values()] : null;
    } else {
      const keys = Object.keys(v);
      budget -= keys.length;
      values = budget >= 0 ? keys.map((k) => v[k]) : null;
    }
    if (values === null) {
      throw new HeadscopeError('RESOURCE_EXHAUSTED', `headscope worker: the request holds more than ` +
        `${MAX_REQUEST_VALUES} values in arrays and objects (holes, and an array each time it is ` +
        'referenced, count too); send large tensors as typed arrays ({ data, shape })');
    }
    for (let i = 0; i < values.length; i++) {
      const x = values[i];  // (a hole reads as undefined: nothing to walk)
      if (x !== null && typeof x === 'object') pending.push(x);
    }
  }
}

function serve(post, hsPromise) {
  // Every request waits for init(); reactions run in registration order, so replies (and the
  // effects of dispose before a later forward) keep the order of the requests.
  return (message) => {
    if (message === null || typeof message !== 'object' || message.id === undefined) return;
    const { id, op, args } = message;
    hsPromise.then((hs) => {
      const transfer = [];
      let reply;
      try {
        if (typeof op !== 'string' || !Object.hasOwn(OPS, op)) {
          throw new HeadscopeError('INVALID_ARGUMENT', `headscope worker: unknown request ${describe(op)}`);
        }
        const list = Array.isArray(args) ? args : [];
        checkRequestSize(list);
        reply = { id, ok: true, result: OPS[op](hs, list, transfer, post) };
      } catch (e) {
        reply = { id, ok: false, error: errorOut(e) };
      }
      send(post, reply, transfer);
    }, (e) => {
      send(post, { id, ok: false, error: errorOut(e) }, []);
    });
  };
}

function send(post, reply, transfer) {
  try {
    post(reply, transfer);
  } catch (e) {
    // A result that cannot be cloned: answer with the error instead of dying.
    try {
      post({ id: reply.id, ok: false, error: errorOut(e) }, []);
    } catch {
      // Nothing more can be sent; stay alive for the next request.
    }
  }
}

// The module loads when the first message comes: initWorker's { type: 'init' } carries the
// options init() takes in a worker (simd; not threads: a threaded worker is not built). Requests
// queue behind the load as before.
function start(post) {
  let handle = null;
  const begin = (options) => {
    const hsPromise = init(options);
    hsPromise.then(
      (hs) => post({ type: 'ready', kernelTarget: hs.kernelTarget, simd: hs.simd, methods: methodTable(hs) }, []),
      (e) => post({ type: 'ready', error: errorOut(e) }, []));
    handle = serve(post, hsPromise);
  };
  return (message) => {
    const isInit = message !== null && typeof message === 'object' && message.type === 'init';
    if (handle === null) {
      const o = isInit && message.options !== null && typeof message.options === 'object' ? message.options : {};
      begin(o.simd === undefined ? {} : { simd: o.simd });
    }
    if (!isInit) handle(message);
  };
}

const workerScope = typeof self === 'object' && self !== null && typeof self.postMessage === 'function' &&
  typeof window === 'undefined' ? self : null;

if (workerScope !== null) {
  // Browser (module) worker: install the handler before anything is awaited, so no early message
  // is dispatched to nobody.
  const handle = start((message, transfer) => workerScope.postMessage(message, transfer));
  workerScope.onmessage = (event) => handle(event.data);
} else if (typeof importScripts === 'undefined' && typeof globalThis.process?.versions?.node === 'string') {
  // Node worker_threads (no worker global scope). parentPort queues messages until a listener is
  // attached.
  const { parentPort } = await import(/* webpackIgnore: true */ 'node:worker_threads');
  if (parentPort !== null) {
    const handle = start((message, transfer) => parentPort.postMessage(message, transfer));
    parentPort.on('message', handle);
  }
  // Imported in a main thread (no parentPort): nothing to serve.
}
