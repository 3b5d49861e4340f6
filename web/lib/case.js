// The JSON case format (shared/spec/case-format.md in the headscope repository): a PyTorch
// state_dict, the forward arguments, and optionally the expected results. Errors are
// PARSE_ERROR and name the JSON path ("inputs.query[1][2]: expected a number ...").
import { HeadscopeError } from './errors.js';
import { describe, toFloatTensor, toMask } from './tensor.js';

const CONFIG_KEYS = {
  embed_dim: 'embedDim', num_heads: 'numHeads', bias: 'bias', add_bias_kv: 'addBiasKV',
  add_zero_attn: 'addZeroAttn', kdim: 'kdim', vdim: 'vdim', batch_first: 'batchFirst',
  dropout: null,
};
const INPUT_KEYS = ['query', 'key', 'value', 'key_padding_mask', 'attn_mask', 'need_weights',
  'average_attn_weights', 'is_causal'];
const FLAGS = { need_weights: 'needWeights', average_attn_weights: 'averageAttnWeights',
  is_causal: 'isCausal' };

function parseError(path, what) {
  return new HeadscopeError('PARSE_ERROR', `${path}: ${what}`);
}

function object(value, path) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw parseError(path, `expected an object, got ${describe(value)}`);
  }
  return value;
}

function checkKeys(value, allowed, path) {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) {
      throw parseError(`${path}.${key}`, `unknown key (expected one of ${allowed.join(', ')})`);
    }
  }
}

// Tensor errors already name the path; they become PARSE_ERROR like every other document error.
function asParseError(fn) {
  try {
    return fn();
  } catch (e) {
    if (e instanceof HeadscopeError) throw new HeadscopeError('PARSE_ERROR', e.message);
    throw e;
  }
}

const tensor = (value, path) => asParseError(() => toFloatTensor(value, path, { nonFiniteStrings: true }));
const mask = (value, path) => asParseError(() => toMask(value, path, { nonFiniteStrings: true }));

/**
 * Parses a case document (an object or JSON text) into the arguments of createMultiheadAttention,
 * loadStateDict and forward, plus `expected` ({ output, weights } tensors, or null).
 */
export function parseCase(caseDocument) {
  let doc = caseDocument;
  if (typeof doc === 'string') {
    try {
      doc = JSON.parse(doc);
    } catch (e) {
      throw parseError('$', `not valid JSON (${e.message})`);
    }
  }
  object(doc, '$');
  if (doc.name !== undefined && doc.name !== null && typeof doc.name !== 'string') {
    throw parseError('name', `expected a string, got ${describe(doc.name)}`);
  }

  const cfg = object(doc.config, 'config');
  checkKeys(cfg, Object.keys(CONFIG_KEYS), 'config');
  if (cfg.dropout !== undefined && cfg.dropout !== null && cfg.dropout !== 0) {
    throw parseError('config.dropout', 'headscope computes the forward pass without dropout; ' +
      `expected 0 or null, got ${describe(cfg.dropout)}`);
  }
  const config = {};
  for (const [torchName, jsName] of Object.entries(CONFIG_KEYS)) {
    const v = cfg[torchName];
    if (jsName === null || v === undefined || v === null) continue;
    config[jsName] = v;
  }
  for (const [torchName, jsName] of Object.entries(CONFIG_KEYS)) {
    if (jsName === null || config[jsName] === undefined) continue;
    const v = config[jsName];
    const isSize = ['embed_dim', 'num_heads', 'kdim', 'vdim'].includes(torchName);
    if (isSize ? !(Number.isInteger(v) && v >= 1) : typeof v !== 'boolean') {
      throw parseError(`config.${torchName}`, `expected ${isSize ? 'a positive integer'
        : 'true or false'}, got ${describe(v)}`);
    }
  }
  for (const required of ['embed_dim', 'num_heads']) {
    if (cfg[required] === undefined || cfg[required] === null) {
      throw parseError(`config.${required}`, 'required');
    }
  }
  if (config.embedDim % config.numHeads !== 0) {
    throw parseError('config.num_heads', `embed_dim (${config.embedDim}) must be divisible by ` +
      `num_heads (${config.numHeads})`);
  }

  const sd = object(doc.state_dict, 'state_dict');
  const stateDict = new Map();
  for (const [key, value] of Object.entries(sd)) stateDict.set(key, tensor(value, `state_dict.${key}`));

  const inputs = object(doc.inputs, 'inputs');
  checkKeys(inputs, INPUT_KEYS, 'inputs');
  if (inputs.query === undefined || inputs.query === null) throw parseError('inputs.query', 'required');
  const query = tensor(inputs.query, 'inputs.query');
  // key / value absent or null: self-attention on the query.
  const key = inputs.key == null ? query : tensor(inputs.key, 'inputs.key');
  const value = inputs.value == null ? query : tensor(inputs.value, 'inputs.value');
  const options = {
    keyPaddingMask: mask(inputs.key_padding_mask, 'inputs.key_padding_mask'),
    attnMask: mask(inputs.attn_mask, 'inputs.attn_mask'),
  };
  for (const [torchName, jsName] of Object.entries(FLAGS)) {
    const v = inputs[torchName];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'boolean') throw parseError(`inputs.${torchName}`, `expected true or false, got ${describe(v)}`);
    options[jsName] = v;
  }

  let expected = null;
  if (doc.expected !== undefined && doc.expected !== null) {
    const e = object(doc.expected, 'expected');
    if (e.output === undefined || e.output === null) throw parseError('expected.output', 'required');
    expected = {
      output: tensor(e.output, 'expected.output'),
      weights: e.weights == null ? null : tensor(e.weights, 'expected.weights'),
    };
  }
  return { name: doc.name ?? null, config, stateDict, query, key, value, options, expected };
}

function compareTensor(name, got, want, tolerance, result) {
  const gotShape = got.shape.join(', ');
  if (gotShape !== want.shape.join(', ')) {
    result.detail = `${name}: shape [${gotShape}], expected [${want.shape.join(', ')}]`;
    return false;
  }
  let scale = 0;
  for (const e of want.data) if (Number.isFinite(e)) scale = Math.max(scale, Math.abs(e));
  if (scale === 0) scale = 1;
  let worst = 0;
  let worstIndex = 0;
  for (let i = 0; i < want.data.length; i++) {
    const g = got.data[i];
    const e = want.data[i];
    if (!Number.isFinite(g) || !Number.isFinite(e)) {
      if (!(Number.isNaN(g) && Number.isNaN(e)) && g !== e) {
        result.detail = `${name}[${i}]: got ${g}, expected ${e}`;
        return false;
      }
      continue;
    }
    const err = Math.abs(g - e) / scale;
    if (err > worst) {
      worst = err;
      worstIndex = i;
    }
  }
  result.maxRelativeError = Math.max(result.maxRelativeError, worst);
  if (worst > tolerance) {
    result.detail = `${name}[${worstIndex}]: got ${got.data[worstIndex]}, expected ` +
      `${want.data[worstIndex]} (relative error ${worst.toPrecision(3)} > ${tolerance})`;
    return false;
  }
  return true;
}

/**
 * { ok, maxRelativeError, detail }: shapes equal, NaN/inf at the same places, and per tensor
 * max |got - expected| / max |expected| <= tolerance.
 */
export function compareWithExpected(parsedCase, result, tolerance = 1e-4) {
  const out = { ok: false, maxRelativeError: 0, detail: '' };
  const want = parsedCase.expected;
  if (want === null) {
    out.detail = 'the case has no expected values';
    return out;
  }
  if (!compareTensor('output', result.output, want.output, tolerance, out)) return out;
  if ((want.weights === null) !== (result.weights === null)) {
    out.detail = `weights: ${result.weights === null ? 'null' : 'returned'}, expected ` +
      `${want.weights === null ? 'null' : 'an array'}`;
    return out;
  }
  if (want.weights !== null && !compareTensor('weights', result.weights, want.weights, tolerance, out)) {
    return out;
  }
  out.ok = true;
  return out;
}
