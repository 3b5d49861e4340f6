// Configs read through the schema (web/lib/schema.js, generated from src/headscope/schema.cc):
// the JS option reading of createMultiheadAttention, createTransformer and setOptimizer, and the
// case parser's config sections, derived from the one description of each object's fields.
// JS checks what it must to hand a config over (own keys, each field's type, defaults filled);
// the ranges and the cross-field rules are the engine's (its Validate), whose messages say so.
import { HeadscopeError } from './errors.js';
import { SCHEMA } from './schema.js';
import { describe, quoteInput, readArgument } from './tensor.js';

const byName = Object.fromEntries(SCHEMA.objects.map((o) => [o.name, o]));
/** The schema of torch.nn.MultiheadAttention's constructor, the transformer and the optimizer. */
export const MHA_SCHEMA = byName.mha;
export const TRANSFORMER_SCHEMA = byName.transformer;
export const OPTIMIZER_SCHEMA = byName.optimizer;
/** Every error code the engine's Status can carry (the JS-only ones are errors.js's). */
export const ENGINE_ERROR_CODES = SCHEMA.errorCodes;
/** The largest size a config field takes (kMaxDim). */
export const MAX_DIM = SCHEMA.maxDim;

const fail = (message) => { throw new HeadscopeError('INVALID_ARGUMENT', message); };

/** The field of `schema` named `name` (JS or PyTorch spelling), or undefined. */
export function field(schema, name) {
  return schema.fields.find((f) => f.js === name || f.torch === name);
}

/**
 * Whether `values` ({ jsName: number }) keep the schema's divisibility rules ("d_model must be
 * divisible by n_heads"); a rule whose fields are not both given (or one is null, as n_kv_heads
 * standing for n_heads) holds. For the views, which
 * offer and check settings before any engine sees them.
 */
export function divisible(schema, values) {
  return schema.divisible.every(([a, b]) => {
    const x = values[field(schema, a).js];
    const y = values[field(schema, b).js];
    return x == null || y == null || x % y === 0;  // (null: a nullable size's other field)
  });
}

/** The choices of a choice field, by its JS name: choices(TRANSFORMER_SCHEMA, 'norm'). */
export function choices(schema, name) {
  return field(schema, name).choices;
}

/** The fields a variant of the object has (the optimizer's type), or all of them. */
export function fieldsOf(schema, variant) {
  return schema.fields.filter((f) => variant === undefined || f.variants === undefined || f.variants.includes(variant));
}

/** { jsName: default } of the fields (required ones undefined), for `variant` if given. */
export function defaults(schema, variant) {
  return Object.fromEntries(fieldsOf(schema, variant).map((f) =>
    [f.js, f.default === 'required' ? undefined : f.default.value]));
}

/**
 * One field's value from a caller, type-checked (not range-checked): a number for a size or a
 * number (null too for a nullable size), a boolean, one of the choices, two numbers for a pair.
 * `path` names it in the message ("config.embedDim").
 */
export function checkType(f, value, path) {
  switch (f.type) {
    case 'size':
      if (value === null && f.nullMeans !== undefined) return null;
      if (typeof value !== 'number') {
        fail(`${path}: expected ${f.nullMeans !== undefined ? 'null or ' : ''}a number (the size, an ` +
          `integer), got ${describe(value)}`);
      }
      return value;
    case 'number':
      if (typeof value !== 'number') fail(`${path}: expected a number, got ${describe(value)}`);
      return value;
    case 'bool':
      if (typeof value !== 'boolean') fail(`${path}: expected true or false, got ${describe(value)}`);
      return value;
    case 'choice':
      if (typeof value !== 'string' || !f.choices.includes(value)) {
        fail(`${path}: expected one of ${f.choices.map((c) => `'${c}'`).join(', ')}, got ${describe(value)}`);
      }
      return value;
    case 'pair': {
      if (!Array.isArray(value) || value.length !== 2) {
        fail(`${path}: expected [${f.torch === 'betas' ? 'beta1, beta2' : 'a, b'}], got ${describe(value)}`);
      }
      const pair = [value[0], value[1]];
      for (const v of pair) if (typeof v !== 'number') fail(`${path}: expected two numbers, got ${describe(v)}`);
      return pair;
    }
    default:
      throw new Error(`schema: unknown field type ${f.type}`);
  }
}

/**
 * A caller's config read once into a new plain object of the schema's fields, by their JS names:
 * own enumerable keys only (an unknown one is INVALID_ARGUMENT naming it), each read exactly once
 * and type-checked, the defaults filled in; a required field left out is refused by its type
 * check ("got undefined"). `extra`: { jsName: default } of keys the JS API adds (the
 * transformer's seed), returned as given. `variantField`: the field that picks the variant (the
 * optimizer's type), read first.
 */
export function readConfig(schema, config, name, { extra = {}, variantField } = {}) {
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    fail(`${name}: expected an object, got ${describe(config)}`);
  }
  // Each own key read once (a Map: an own "__proto__" key is a key like any other).
  const given = new Map();
  for (const key of Object.keys(config)) given.set(key, config[key]);
  let variant;
  if (variantField !== undefined) {
    variant = checkType(field(schema, variantField), given.get(variantField), `${name}.${variantField}`);
  }
  const fields = fieldsOf(schema, variant);
  const allowed = [...fields.map((f) => f.js), ...Object.keys(extra)];
  for (const key of given.keys()) {
    if (!allowed.includes(key)) {
      fail(`${name}.${quoteInput(key)}: unknown option (expected one of ${allowed.join(', ')})`);
    }
  }
  const out = {};
  for (const f of fields) {
    const v = given.get(f.js) === undefined ? (f.default === 'required' ? undefined : f.default.value) : given.get(f.js);
    // A pair's elements are the caller's to read too: a throwing one names the field.
    out[f.js] = readArgument(`${name}.${f.js}`, () => checkType(f, v, `${name}.${f.js}`));
  }
  for (const [key, value] of Object.entries(extra)) out[key] = given.get(key) === undefined ? value : given.get(key);
  return out;
}

const numberText = (x) => String(x);

function numberExpectation(f) {
  if (f.hi === null) {
    if (f.zero !== undefined) return `a finite number > 0 (or 0: ${f.zero})`;
    return `a finite number ${f.loOpen ? '>' : '>='} ${numberText(f.lo)}`;
  }
  return `in ${f.loOpen ? '(' : '['}${numberText(f.lo)}, ${numberText(f.hi)}${f.hiOpen ? ')' : ']'}`;
}

/**
 * What a field accepts, as the messages say it (the engine's Expectation, schema.cc, in the
 * case file's names): "an integer in [1, 16777216]", "0 (no MLP) or an integer in [1, 16777216]",
 * "null (= embed_dim) or ...", "true or false", 'one of "pre", "post", "none"', "a finite number > 0".
 */
export function expectation(schema, f) {
  switch (f.type) {
    case 'size': {
      let e = `an integer in [${f.zero !== undefined ? Math.max(1, f.min) : f.min}, ${f.max}]`;
      if (f.nullMeans !== undefined) e = `null (= ${f.nullMeans}) or ${e}`;
      if (f.zero !== undefined) e = `0 (${f.zero}) or ${e}`;
      return e;
    }
    case 'bool': return 'true or false';
    case 'choice': return `one of ${f.choices.map((c) => `"${c}"`).join(', ')}`;
    case 'number': return numberExpectation(f);
    case 'pair': return `[${f.torch}[0], ${f.torch}[1]], each ${numberExpectation(f)}`;
    default: throw new Error(`schema: unknown field type ${f.type}`);
  }
}

const inRange = (f, x) => Number.isFinite(x) && (f.loOpen ? x > f.lo : x >= f.lo) &&
  (f.hi === null || (f.hiOpen ? x < f.hi : x <= f.hi));

/** Whether `v` (a JSON value; null means absent) is one of a field's values: type and range. */
export function accepts(f, v) {
  switch (f.type) {
    case 'size':
      return Number.isInteger(v) && ((v >= f.min && v <= f.max) || (v === 0 && f.zero !== undefined));
    case 'bool': return typeof v === 'boolean';
    case 'choice': return typeof v === 'string' && f.choices.includes(v);
    case 'number': return typeof v === 'number' && (inRange(f, v) || (v === 0 && f.zero !== undefined));
    case 'pair': return Array.isArray(v) && v.length === 2 && v.every((x) => typeof x === 'number' && inRange(f, x));
    default: return false;
  }
}
