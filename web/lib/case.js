// The JSON case format (docs/case-format.md in the headscope repository): a PyTorch state_dict,
// the forward arguments, and optionally the expected results, of one MultiheadAttention call
// ("kind" absent or "mha") or one forward pass of the small transformer ("kind": "transformer":
// tokens, optional targets and head gates; expected logits, loss and hooks). Errors are
// PARSE_ERROR and name the JSON path ("inputs.query[1][2]: expected a number ...").
import { HeadscopeError } from './errors.js';
import { callDims, weightsShape } from './shapes.js';
import { MHA_SCHEMA, TRANSFORMER_SCHEMA, accepts, expectation, field } from './config.js';
import { MAX_DIM, describe, quoteInput, toFloatTensor, toMask, toTokens, typedArrayName } from './tensor.js';

const INPUT_KEYS = ['query', 'key', 'value', 'key_padding_mask', 'attn_mask', 'need_weights',
  'average_attn_weights', 'is_causal', 'alibi', 'window'];
// The boolean inputs (alibi and window are headscope's forward options, not torch's).
const FLAGS = { need_weights: 'needWeights', average_attn_weights: 'averageAttnWeights',
  is_causal: 'isCausal', alibi: 'alibi' };

// The document's "kind" (absent or null: "mha").
const CASE_KINDS = ['mha', 'transformer'];
// The top-level keys of either kind; any other is refused, naming it. "meta" is free-form (any
// JSON value, ignored): where a writer keeps provenance or notes.
const DOCUMENT_KEYS = ['config', 'expected', 'inputs', 'kind', 'meta', 'name', 'state_dict'];

const TRANSFORMER_INPUT_KEYS = ['tokens', 'targets', 'head_gates'];
const TRANSFORMER_EXPECTED_KEYS = ['logits', 'loss', 'hooks'];
/** The target that is not counted in the loss (F.cross_entropy's ignore_index). */
export const IGNORE_INDEX = -100;

// Limits on hostile or mistaken input, the same as the native parser's (src/headscope/
// case_file.h: kMaxCaseBytes, kMaxJsonDepth, kMaxJsonContainers, kMaxResultJsonBytes). A BERT-base
// layer's case is about 30 MB, nests 7 levels deep and holds about 10,000 arrays, so the input
// limits are far above what the format needs. The container limit bounds the memory JSON.parse
// can take: an empty array or object is 3 bytes of text but tens of bytes of V8 heap, and 256 MiB
// of "{}," would exhaust it (a fatal out-of-memory, not an exception).
export const MAX_CASE_BYTES = 256 * 1024 * 1024;
export const MAX_JSON_DEPTH = 64;
export const MAX_JSON_CONTAINERS = 2 ** 24;
export const MAX_RESULT_JSON_BYTES = 256 * 1024 * 1024;

function parseError(path, what) {
  return new HeadscopeError('PARSE_ERROR', `${path}: ${what}`);
}

// ---------------------------------------------------------------------------------------------
// JSON text. JSON.parse alone accepts what the native parser (nlohmann::json) refuses (lone
// surrogates, duplicate keys, 1e400 as Infinity), refuses what it accepts (a byte order mark),
// and says nothing of depth, so the text is first checked by a scanner that follows nlohmann's
// lexer and parser: the same documents pass, and a failure names the same byte offset (the byte
// where the error was detected, or the input's length at an unexpected end). JSON.parse then
// builds the values. tests/cases/ holds the documents both parsers are held to.

const decoder = new TextDecoder('utf-8', { fatal: true });

/** A key in a JSON path: quoteInput's (at most 64 code points, then "...", controls as \\uXXXX). */
const keyInPath = quoteInput;

const memberPath = (parent, key) => `${parent}.${keyInPath(key)}`;

class JsonSyntaxError extends Error {
  constructor(offset, detail) {
    super(detail);
    this.offset = offset;
  }
}

const isDigit = (c) => c >= 0x30 && c <= 0x39;
const isHex = (c) => isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);

// Allowed ranges of the bytes after a UTF-8 lead byte (RFC 3629, as nlohmann checks them).
function utf8Ranges(lead) {
  if (lead >= 0xc2 && lead <= 0xdf) return [0x80, 0xbf];
  if (lead === 0xe0) return [0xa0, 0xbf, 0x80, 0xbf];
  if ((lead >= 0xe1 && lead <= 0xec) || lead === 0xee || lead === 0xef) return [0x80, 0xbf, 0x80, 0xbf];
  if (lead === 0xed) return [0x80, 0x9f, 0x80, 0xbf];
  if (lead === 0xf0) return [0x90, 0xbf, 0x80, 0xbf, 0x80, 0xbf];
  if (lead >= 0xf1 && lead <= 0xf3) return [0x80, 0xbf, 0x80, 0xbf, 0x80, 0xbf];
  if (lead === 0xf4) return [0x80, 0x8f, 0x80, 0xbf, 0x80, 0xbf];
  return null;
}

const T = { BEGIN_ARRAY: 1, END_ARRAY: 2, BEGIN_OBJECT: 3, END_OBJECT: 4, NAME_SEP: 5, VALUE_SEP: 6,
  STRING: 7, NUMBER: 8, LITERAL: 9, END: 10 };
const TOKEN_NAMES = { 1: "'['", 2: "']'", 3: "'{'", 4: "'}'", 5: "':'", 6: "','", 7: 'string literal',
  8: 'number literal', 9: 'literal', 10: 'end of input' };

class Lexer {
  constructor(bytes) {
    this.b = bytes;
    this.pos = 0;
    this.start = 0;   // where the last token began
    this.end = 0;     // one past the last byte the parser read for it (nlohmann's position)
    this.escaped = false;  // the last string token holds a backslash escape
    this.integer = true;       // the last number has neither a fraction nor an exponent
    this.mayOverflow = false;  // ... and could be beyond float64
    this.extra = 0;   // bytes before `pos` beyond their UTF-16 length (multi-byte characters)
  }

  fail(offset, detail) {
    throw new JsonSyntaxError(offset, detail);
  }

  // The offset nlohmann reports for a byte it read at `i` (the length at the end of the input).
  at(i) {
    return Math.min(i, this.b.length);
  }

  next() {
    const b = this.b;
    let i = this.pos;
    while (i < b.length && (b[i] === 0x20 || b[i] === 0x09 || b[i] === 0x0a || b[i] === 0x0d)) i++;
    this.start = i;
    if (i >= b.length) {
      this.pos = i;
      this.end = b.length + 1;
      return T.END;
    }
    const c = b[i];
    let single = 0;
    switch (c) {
      case 0x5b: single = T.BEGIN_ARRAY; break;
      case 0x5d: single = T.END_ARRAY; break;
      case 0x7b: single = T.BEGIN_OBJECT; break;
      case 0x7d: single = T.END_OBJECT; break;
      case 0x3a: single = T.NAME_SEP; break;
      case 0x2c: single = T.VALUE_SEP; break;
      default: break;
    }
    if (single !== 0) {
      this.pos = this.end = i + 1;
      return single;
    }
    if (c === 0x22) return this.string(i);
    if (c === 0x2d || isDigit(c)) return this.number(i);
    if (c === 0x74) return this.literal(i, 'true');
    if (c === 0x66) return this.literal(i, 'false');
    if (c === 0x6e) return this.literal(i, 'null');
    if (c === 0) this.fail(i, 'unexpected NUL byte');
    this.fail(i, `invalid literal${c >= 0x21 && c < 0x7f ? ` '${String.fromCharCode(c)}'` : ''}`);
  }

  literal(i, word) {
    for (let k = 1; k < word.length; k++) {
      if (this.b[i + k] !== word.charCodeAt(k)) this.fail(this.at(i + k), `invalid literal (expected ${word})`);
    }
    this.pos = this.end = i + word.length;
    return T.LITERAL;
  }

  // Sets `mayOverflow` when the literal could be beyond float64: only then is its value computed
  // here (JSON.parse computes the others).
  number(i) {
    const b = this.b;
    let j = i;
    if (b[j] === 0x2d) {
      j++;
      if (!isDigit(b[j])) this.fail(this.at(j), "invalid number; expected digit after '-'");
    }
    const intStart = j;
    if (b[j] === 0x30) j++;
    else while (isDigit(b[j])) j++;
    const intDigits = j - intStart;
    let integer = true;
    if (b[j] === 0x2e) {
      j++;
      integer = false;
      if (!isDigit(b[j])) this.fail(this.at(j), "invalid number; expected digit after '.'");
      while (isDigit(b[j])) j++;
    }
    let exponent = 0;
    if (b[j] === 0x65 || b[j] === 0x45) {
      j++;
      integer = false;
      let sign = 1;
      if (b[j] === 0x2b || b[j] === 0x2d) {
        if (b[j] === 0x2d) sign = -1;
        j++;
        if (!isDigit(b[j])) this.fail(this.at(j), 'invalid number; expected digit after exponent sign');
      } else if (!isDigit(b[j])) {
        this.fail(this.at(j), "invalid number; expected '+', '-', or digit after exponent");
      }
      while (isDigit(b[j])) {
        if (exponent < 1e9) exponent = exponent * 10 + (b[j] - 0x30);
        j++;
      }
      exponent *= sign;
    }
    // |value| < 10^(intDigits + exponent): below 1e300 it cannot overflow.
    this.integer = integer;
    this.mayOverflow = intDigits + exponent >= 300;
    this.pos = this.end = j;
    return T.NUMBER;
  }

  hex4(j) {
    let v = 0;
    for (let k = 0; k < 4; k++) {
      const c = this.b[j + k];
      if (!isHex(c)) this.fail(this.at(j + k), "invalid string: '\\u' must be followed by 4 hex digits");
      v = v * 16 + parseInt(String.fromCharCode(c), 16);
    }
    return v;
  }

  string(i) {
    const b = this.b;
    let j = i + 1;
    this.escaped = false;
    for (;;) {
      if (j >= b.length) this.fail(b.length, 'invalid string: missing closing quote');
      const c = b[j];
      if (c === 0x22) break;
      if (c === 0x5c) {
        this.escaped = true;
        const e = b[j + 1];
        if (e === 0x75) {
          const cp = this.hex4(j + 2);
          j += 6;
          if (cp >= 0xd800 && cp <= 0xdbff) {
            const unpaired = 'invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF';
            if (b[j] !== 0x5c) this.fail(this.at(j), unpaired);
            if (b[j + 1] !== 0x75) this.fail(this.at(j + 1), unpaired);
            const low = this.hex4(j + 2);
            if (!(low >= 0xdc00 && low <= 0xdfff)) this.fail(j + 5, unpaired);
            j += 6;
          } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            this.fail(j - 1, 'invalid string: surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF');
          }
          continue;
        }
        // " \ / b f n r t
        if (e === 0x22 || e === 0x5c || e === 0x2f || e === 0x62 || e === 0x66 || e === 0x6e ||
            e === 0x72 || e === 0x74) {
          j += 2;
          continue;
        }
        this.fail(this.at(j + 1), 'invalid string: forbidden character after backslash');
      }
      if (c < 0x20) {
        const code = c.toString(16).toUpperCase().padStart(4, '0');
        this.fail(j, `invalid string: control character U+${code} must be escaped`);
      }
      if (c < 0x80) {
        j++;
        continue;
      }
      const ranges = utf8Ranges(c);
      if (ranges === null) this.fail(j, 'invalid string: ill-formed UTF-8 byte');
      for (let k = 0; k < ranges.length; k += 2) {
        const x = b[j + 1 + k / 2];
        if (!(x >= ranges[k] && x <= ranges[k + 1])) {
          this.fail(this.at(j + 1 + k / 2), 'invalid string: ill-formed UTF-8 byte');
        }
      }
      const length = 1 + ranges.length / 2;
      this.extra += length - (length === 4 ? 2 : 1);
      j += length;
    }
    this.pos = this.end = j + 1;
    return T.STRING;
  }

  // The value of the last string token (already checked).
  stringValue() {
    const raw = decoder.decode(this.b.subarray(this.start, this.end));
    return this.escaped ? JSON.parse(raw) : raw.slice(1, -1);
  }

  tokenText() {
    return decoder.decode(this.b.subarray(this.start, this.end));
  }
}

/**
 * Checks UTF-8 JSON bytes as the native parser does. Returns the UTF-16 indices of integer "-0"
 * literals (nlohmann reads "-0" as the integer 0, Python's json too, so torch gets +0.0; only
 * "-0.0" is negative zero) and the UTF-16 length of a leading byte order mark's replacement.
 */
function checkJsonBytes(bytes) {
  const lex = new Lexer(bytes);
  if (bytes[0] === 0xef) {
    // nlohmann skips a leading byte order mark, and only a whole one.
    if (bytes[1] !== 0xbb) lex.fail(lex.at(1), 'invalid BOM; must be 0xEF 0xBB 0xBF if given');
    if (bytes[2] !== 0xbf) lex.fail(lex.at(2), 'invalid BOM; must be 0xEF 0xBB 0xBF if given');
    lex.pos = 3;
    lex.extra = 3;  // dropped from the text JSON.parse reads
  }
  const negativeZeros = [];
  const frames = [];  // { array, index, key, keys }
  let containers = 0;
  const syntax = (what, expected) => lex.fail(lex.end - 1, `syntax error while parsing ${what} - ` +
    `unexpected ${TOKEN_NAMES[token]}${expected ? `; expected ${expected}` : ''}`);
  const valuePath = () => {
    let path = '';
    for (let k = 0; k < frames.length; k++) {
      if (k >= 8) return `${path}...`;
      const f = frames[k];
      if (f.array) path += `${path === '' ? '$' : ''}[${f.index}]`;
      else path += path === '' ? keyInPath(f.key) : `.${keyInPath(f.key)}`;
    }
    return path === '' ? '$' : path;
  };
  const beginValue = () => {
    const f = frames[frames.length - 1];
    if (f !== undefined && f.array) f.index++;
  };
  const readKey = () => {
    const f = frames[frames.length - 1];
    f.key = lex.stringValue();
    if (f.keys.has(f.key)) throw parseError(valuePath(), 'duplicate key (the keys of a JSON object must be unique)');
    f.keys.add(f.key);
  };
  const open = (array) => {
    if (frames.length >= MAX_JSON_DEPTH) {
      throw parseError(valuePath(), `nested deeper than ${MAX_JSON_DEPTH} levels`);
    }
    if (++containers > MAX_JSON_CONTAINERS) {
      throw parseError(valuePath(), `more than ${MAX_JSON_CONTAINERS} arrays and objects in the document`);
    }
    frames.push({ array, index: -1, key: '', keys: array ? null : new Set() });
  };
  const VALUE = "'[', '{', or a literal";

  let token = lex.next();
  // nlohmann's sax_parse_internal, step for step: a value, then what its container expects.
  for (;;) {
    let parsedValue = true;
    beginValue();
    if (token === T.BEGIN_OBJECT) {
      open(false);
      token = lex.next();
      if (token === T.END_OBJECT) {
        frames.pop();
      } else {
        if (token !== T.STRING) syntax('object key', 'string literal');
        readKey();
        if ((token = lex.next()) !== T.NAME_SEP) syntax('object separator', "':'");
        token = lex.next();
        continue;
      }
    } else if (token === T.BEGIN_ARRAY) {
      open(true);
      token = lex.next();
      if (token === T.END_ARRAY) {
        frames.pop();
      } else {
        frames[frames.length - 1].index = -1;  // beginValue counts the first element
        continue;
      }
    } else if (token === T.NUMBER) {
      if (lex.mayOverflow && !Number.isFinite(Number(lex.tokenText()))) {
        const text = lex.tokenText();
        const shown = text.length > 40 ? `${text.slice(0, 37)}...` : text;
        throw parseError(valuePath(), `the number ${shown} is out of range (beyond +-1.8e308); ` +
          'write "inf" or "-inf"');
      }
      if (lex.integer && lex.end - lex.start === 2 && bytes[lex.start] === 0x2d && bytes[lex.start + 1] === 0x30) {
        negativeZeros.push(lex.start - lex.extra);
      }
    } else if (token === T.STRING || token === T.LITERAL) {
      // a scalar
    } else {
      parsedValue = false;
      syntax('value', VALUE);
    }
    // A value was read: what follows depends on the container.
    while (parsedValue) {
      const f = frames[frames.length - 1];
      if (f === undefined) {
        if ((token = lex.next()) !== T.END) syntax('value', 'end of input');
        return { negativeZeros, bom: bytes[0] === 0xef };
      }
      token = lex.next();
      if (f.array) {
        if (token === T.VALUE_SEP) {
          token = lex.next();
          break;
        }
        if (token !== T.END_ARRAY) syntax('array', "']'");
        frames.pop();
        continue;
      }
      if (token === T.VALUE_SEP) {
        if ((token = lex.next()) !== T.STRING) syntax('object key', 'string literal');
        readKey();
        if ((token = lex.next()) !== T.NAME_SEP) syntax('object separator', "':'");
        token = lex.next();
        break;
      }
      if (token !== T.END_OBJECT) syntax('object', "'}'");
      frames.pop();
    }
  }
}

function utf8Length(text) {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

function tooLarge(bytes, max) {
  return new HeadscopeError('RESOURCE_EXHAUSTED',
    `$: the document is ${bytes} bytes, more than the limit of ${max} bytes`);
}

/**
 * JSON text (a string, or UTF-8 bytes as a Uint8Array or ArrayBuffer) to a value, under the
 * rules of the native parser. Errors are PARSE_ERROR (RESOURCE_EXHAUSTED past `maxInputBytes`).
 */
export function parseJsonText(input, maxInputBytes = MAX_CASE_BYTES) {
  let bytes;
  let text = null;
  if (typeof input === 'string') {
    if (input.length > maxInputBytes) throw tooLarge(utf8Length(input), maxInputBytes);
    const lone = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
    if (typeof input.isWellFormed === 'function' ? !input.isWellFormed() : lone.test(input)) {
      // UTF-8 cannot hold a lone surrogate: no file can contain this string.
      const i = input.search(lone);
      throw parseError('$', `not valid JSON (at byte ${utf8Length(input.slice(0, i))}: a lone ` +
        `surrogate U+${input.charCodeAt(i).toString(16).toUpperCase()}, which is not Unicode text)`);
    }
    bytes = new TextEncoder().encode(input);
    text = input;
  } else {
    bytes = input instanceof ArrayBuffer ? new Uint8Array(input) : input;
  }
  if (bytes.length > maxInputBytes) throw tooLarge(bytes.length, maxInputBytes);
  let scan;
  try {
    scan = checkJsonBytes(bytes);
  } catch (e) {
    if (e instanceof JsonSyntaxError) throw parseError('$', `not valid JSON (at byte ${e.offset}: ${e.message})`);
    throw e;
  }
  // Valid UTF-8 now; TextDecoder drops a leading BOM, and a string's U+FEFF goes the same way.
  if (text === null) text = decoder.decode(bytes);
  else if (scan.bom) text = text.slice(1);
  if (scan.negativeZeros.length > 0) {
    const parts = [];
    let from = 0;
    for (const i of scan.negativeZeros) {
      parts.push(text.slice(from, i), ' ');  // "-0" -> " 0": the same length, the integer zero
      from = i + 1;
    }
    parts.push(text.slice(from));
    text = parts.join('');
  }
  return JSON.parse(text);
}

function object(value, path) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw parseError(path, `expected an object, got ${describe(value)}`);
  }
  return value;
}

// Keys in the order the native parser visits them (std::map: by UTF-8 bytes, i.e. by code
// point), so that a document with several problems gets the same first error from both.
function byCodePoint(a, b) {
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const x = a.codePointAt(i);
    const y = b.codePointAt(j);
    if (x !== y) return x - y;
    i += x > 0xffff ? 2 : 1;
    j += y > 0xffff ? 2 : 1;
  }
  return (a.length - i) - (b.length - j);
}
const sortedKeys = (value) => Object.keys(value).sort(byCodePoint);

// `path` null: the document's own keys, whose paths are the bare key ("inputs.query"'s "inputs").
function checkKeys(value, allowed, path) {
  for (const key of sortedKeys(value)) {
    if (!allowed.includes(key)) {
      throw parseError(path === null ? keyInPath(key) : memberPath(path, key),
        `unknown key (expected one of ${allowed.join(', ')})`);
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
 * Parses a case document (an object or JSON text). "kind" absent, null or "mha": the arguments of
 * createMultiheadAttention, loadStateDict and forward, plus `expected` ({ output, weights }
 * tensors, or null); "transformer": see parseTransformerCase. Either has `kind`.
 */
// parseCase's own results, so that a parsed case handed on (the page parses a loaded file
// once and gives the result to every view) is not parsed again. Private to this module: nothing
// else can mark an object, and a marked object is only what this function returned.
const parsedCases = new WeakSet();

export function parseCase(caseDocument, { maxInputBytes = MAX_CASE_BYTES } = {}) {
  if (caseDocument !== null && typeof caseDocument === 'object' && parsedCases.has(caseDocument)) {
    return caseDocument;
  }
  let doc = caseDocument;
  if (typeof doc === 'string' || doc instanceof Uint8Array || doc instanceof ArrayBuffer) {
    doc = parseJsonText(doc, maxInputBytes);
  }
  object(doc, '$');
  // "kind" first: it decides what the rest of the document must be.
  const kind = doc.kind === undefined || doc.kind === null ? 'mha' : doc.kind;
  if (!CASE_KINDS.includes(kind)) {
    throw parseError('kind', `expected one of ${CASE_KINDS.map((k) => `"${k}"`).join(', ')} (absent or ` +
      `null: "mha"), got ${describe(doc.kind)}`);
  }
  checkKeys(doc, DOCUMENT_KEYS, null);
  if (doc.name !== undefined && doc.name !== null && typeof doc.name !== 'string') {
    throw parseError('name', `expected a string, got ${describe(doc.name)}`);
  }
  const parsed = kind === 'transformer' ? parseTransformerCase(doc) : parseMhaCase(doc);
  parsedCases.add(parsed);
  return parsed;
}

// The "mha" kind: the arguments of createMultiheadAttention, loadStateDict and forward.
function parseMhaCase(doc) {
  const cfg = object(doc.config, 'config');
  // The schema's fields (config.js) and `dropout`, which the forward pass does not use.
  checkKeys(cfg, [...MHA_SCHEMA.fields.map((f) => f.torch), 'dropout'], 'config');
  if (cfg.dropout !== undefined && cfg.dropout !== null && cfg.dropout !== 0) {
    throw parseError('config.dropout', 'headscope computes the forward pass without dropout; ' +
      `expected 0 or null, got ${describe(cfg.dropout)}`);
  }
  // Only the fields given: createMultiheadAttention fills the others (kdim, vdim: embed_dim).
  const config = caseConfig(MHA_SCHEMA, cfg, false);

  const sd = object(doc.state_dict, 'state_dict');
  const stateDict = new Map();
  for (const key of sortedKeys(sd)) stateDict.set(key, tensor(sd[key], memberPath('state_dict', key)));

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
  // window: null or absent 0 (none); else an integer in [0, 2^24] (the native parser's rule).
  if (inputs.window !== undefined && inputs.window !== null) {
    const w = inputs.window;
    if (!Number.isInteger(w) || w < 0 || w > MAX_DIM) {
      throw parseError('inputs.window', `expected 0 (no window) or an integer in [1, ${MAX_DIM}], got ${describe(w)}`);
    }
    options.window = w;
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
  return { kind: 'mha', name: doc.name ?? null, config, stateDict, query, key, value, options, expected };
}

// ---------------------------------------------------------------------------------------------
// "kind": "transformer" (docs/case-format.md): one forward pass of the small transformer.

/** Token ids (or targets) read like forward()'s tokens, as PARSE_ERROR naming the JSON path. */
const tokenIds = (value, path) => asParseError(() => toTokens(value, path));

// The path of element `i` of a (T) or (B, T) tensor.
function elementPath(path, shape, i) {
  return shape.length === 1 ? `${path}[${i}]` : `${path}[${Math.floor(i / shape[1])}][${i % shape[1]}]`;
}

/**
 * A case document's config section through the schema (config.js): the schema's fields by their
 * PyTorch names, each of its type and in its range, then the divisibility rules, the first
 * problem named by its path (`config.n_heads: d_model (8) must be divisible by n_heads (3)`) in
 * the schema's order, which the native parser follows too. `fill`: an absent or null field takes
 * its default (a required one is refused); else it is left out.
 */
function caseConfig(schema, cfg, fill) {
  const config = {};
  for (const f of schema.fields) {
    const path = `config.${f.torch}`;
    const v = cfg[f.torch];
    if (v === undefined || v === null) {
      if (f.default === 'required') throw parseError(path, `required, expected ${expectation(schema, f)}`);
      if (fill) config[f.js] = f.default.value;
      continue;
    }
    if (!accepts(f, v)) throw parseError(path, `expected ${expectation(schema, f)}, got ${describe(v)}`);
    config[f.js] = v;
  }
  for (const [a, b] of schema.divisible) {
    const x = config[field(schema, a).js];
    const y = config[field(schema, b).js];
    if (x == null || y == null) continue;  // an absent or null field (n_kv_heads: n_heads) holds
    if (x % y !== 0) throw parseError(`config.${b}`, `${a} (${x}) must be divisible by ${b} (${y})`);
  }
  // (value null: the size `when` > 0.)
  for (const [name, when, value] of schema.onlyWith ?? []) {
    const f = field(schema, name);
    const w = config[field(schema, when).js] ?? field(schema, when).default.value;
    const v = config[f.js];
    if (v === undefined || (value === null ? w !== 0 : w === value) || v === f.default.value) continue;
    throw parseError(`config.${name}`, `applies only with ${when} ${value === null ? '> 0' : `"${value}"`} ` +
      `(${when} is ${JSON.stringify(w)}): leave it at its default, ${JSON.stringify(f.default.value)}, got ${JSON.stringify(v)}`);
  }
  if (schema === TRANSFORMER_SCHEMA) rotaryDimsRule(config);
  if (schema === MHA_SCHEMA) mhaRopeRule(config);
  return config;
}

/**
 * MultiheadAttention's ropeDims: even and at most the head dim (ValidateConfig in
 * src/headscope/schema.cc says it natively, with this message).
 */
function mhaRopeRule(config) {
  const r = config.ropeDims ?? 0;
  if (config.embedDim === undefined) return;
  const dh = Math.floor(config.embedDim / (config.numHeads ?? 1));
  if (r % 2 === 0 && r <= dh) return;
  throw parseError('config.rope_dims', `expected 0 (no rotation) or an even number of dims up to the head dim ` +
    `embed_dim / num_heads = ${dh}, got ${r}`);
}

/**
 * positions "rope" needs a pair of dims to turn: 2 * floor(ropeFraction * dHead / 2) >= 2 (the
 * rule no schema row can say; ValidateTransformerConfig in src/headscope/transformer.cc says it
 * natively, with this message).
 */
function rotaryDimsRule(config) {
  if (config.positions !== 'rope' || config.dModel === undefined) return;
  const dh = Math.floor(config.dModel / (config.nHeads ?? 1));
  const fraction = config.ropeFraction ?? 1;
  if (2 * Math.floor(fraction * dh / 2) >= 2) return;
  throw parseError('config.rope_fraction', `${fraction} of the head dim d_model / n_heads = ${dh} gives no pair ` +
    `of dims to rotate: at least 2 rotary dims are needed${dh >= 2 ? ` (rope_fraction >= 2 / ${dh})` : ' (a head of 1 dim has none)'}`);
}

function transformerConfig(cfg) {
  checkKeys(cfg, TRANSFORMER_SCHEMA.fields.map((f) => f.torch), 'config');
  return caseConfig(TRANSFORMER_SCHEMA, cfg, true);
}

function transformerInputs(inputs, config) {
  checkKeys(inputs, TRANSFORMER_INPUT_KEYS, 'inputs');
  if (inputs.tokens === undefined || inputs.tokens === null) throw parseError('inputs.tokens', 'required');
  const tokens = tokenIds(inputs.tokens, 'inputs.tokens');
  const { shape } = tokens;
  if (shape.length !== 1 && shape.length !== 2) {
    throw parseError('inputs.tokens', `expected (T) or (B, T) token ids, got shape [${shape.join(', ')}]`);
  }
  const T = shape[shape.length - 1];
  if (shape[0] < 1 || T < 1) {
    throw parseError('inputs.tokens', `expected at least one row of at least one token, got shape [${shape.join(', ')}]`);
  }
  if (T > config.maxLen) {
    throw parseError('inputs.tokens', `T = ${T} tokens, more than config.max_len = ${config.maxLen}`);
  }
  const V = config.vocabSize;
  for (let i = 0; i < tokens.count; i++) {
    const t = tokens.data[i];
    if (t < 0 || t >= V) {
      throw parseError(elementPath('inputs.tokens', shape, i), `expected a token id in [0, ${V - 1}] ` +
        `(config.vocab_size ${V}), got ${t}`);
    }
  }
  let targets = null;
  if (inputs.targets !== undefined && inputs.targets !== null) {
    targets = tokenIds(inputs.targets, 'inputs.targets');
    if (targets.shape.join(', ') !== shape.join(', ')) {
      throw parseError('inputs.targets', `expected the shape of inputs.tokens, [${shape.join(', ')}], ` +
        `got [${targets.shape.join(', ')}]`);
    }
    let counted = 0;
    for (let i = 0; i < targets.count; i++) {
      const t = targets.data[i];
      if (t === IGNORE_INDEX) continue;
      if (t < 0 || t >= V) {
        throw parseError(elementPath('inputs.targets', shape, i), `expected ${IGNORE_INDEX} (not ` +
          `counted) or a token id in [0, ${V - 1}] (config.vocab_size ${V}), got ${t}`);
      }
      counted++;
    }
    if (counted === 0) {
      throw parseError('inputs.targets', `every target is ${IGNORE_INDEX}: there is no loss to ` +
        'compute (at least one position must be counted)');
    }
  }
  let headGates = null;
  if (inputs.head_gates !== undefined && inputs.head_gates !== null) {
    headGates = tensor(inputs.head_gates, 'inputs.head_gates');
    const want = [config.nLayers, config.nHeads];
    if (headGates.shape.join(', ') !== want.join(', ')) {
      throw parseError('inputs.head_gates', `expected shape (n_layers, n_heads) = [${want.join(', ')}], ` +
        `got [${headGates.shape.join(', ')}]`);
    }
  }
  return { tokens, targets, headGates };
}

function transformerExpected(e, hasTargets) {
  object(e, 'expected');
  checkKeys(e, TRANSFORMER_EXPECTED_KEYS, 'expected');
  if (e.logits === undefined || e.logits === null) throw parseError('expected.logits', 'required when expected is given');
  const logits = tensor(e.logits, 'expected.logits');
  let loss = null;
  if (e.loss !== undefined && e.loss !== null) {
    if (!hasTargets) throw parseError('expected.loss', 'given without inputs.targets (the loss is of the targets)');
    if (typeof e.loss !== 'number') throw parseError('expected.loss', `expected a number, got ${describe(e.loss)}`);
    loss = e.loss;
  } else if (hasTargets) {
    throw parseError('expected.loss', 'required when inputs.targets is given');
  }
  const hooks = new Map();
  if (e.hooks !== undefined && e.hooks !== null) {
    // The document's order (the reference's), not sorted: results and reports follow it.
    for (const name of Object.keys(object(e.hooks, 'expected.hooks'))) {
      hooks.set(name, tensor(e.hooks[name], memberPath('expected.hooks', name)));
    }
  }
  return { logits, loss, hooks };
}

/**
 * The "transformer" kind: { kind, name, config (createTransformer's, camelCase, defaults filled
 * in), stateDict (Map), tokens, targets (or null), headGates (or null), expected: null or
 * { logits, loss (a number, or null without targets), hooks (Map from hook name to tensor) } }.
 * Whether the expected hook names are hooks of the config is checked when the case runs
 * (transformerCaseHooks), against the engine's own list.
 */
function parseTransformerCase(doc) {
  const config = transformerConfig(object(doc.config, 'config'));
  const sd = object(doc.state_dict, 'state_dict');
  const stateDict = new Map();
  for (const key of sortedKeys(sd)) stateDict.set(key, tensor(sd[key], memberPath('state_dict', key)));
  const { tokens, targets, headGates } = transformerInputs(object(doc.inputs, 'inputs'), config);
  const expected = doc.expected === undefined || doc.expected === null ? null
    : transformerExpected(doc.expected, targets !== null);
  return { kind: 'transformer', name: doc.name ?? null, config, stateDict, tokens, targets, headGates, expected };
}

/**
 * The hooks a run of the parsed transformer case asks for: those `expected.hooks` names, then
 * `extra` ones not among them. Names that are not among `hookNames` (the model's hookNames())
 * are PARSE_ERROR naming them in the document.
 */
export function transformerCaseHooks(parsedCase, hookNames, extra = []) {
  const names = parsedCase.expected === null ? [] : [...parsedCase.expected.hooks.keys()];
  for (const name of names) {
    if (!hookNames.includes(name)) {
      throw parseError(memberPath('expected.hooks', name), `not a hook of this config (its hooks: ` +
        `${hookNames.join(', ')})`);
    }
  }
  for (const name of extra) if (!names.includes(name)) names.push(name);
  return names;
}

/**
 * The most a transformer case may ask of the engine: `bytes` of WebAssembly memory for its weights
 * (twice: the loaded entries and their packed copies) and its forward pass (activations, logits and
 * the hooks asked for, each also copied out to JavaScript), and `multiplyAdds` for that pass. A
 * case is a test or an exchange of one small model's numbers, and the page runs it for a reader:
 * beyond these it would take seconds of a browser tab's time and gigabytes of its memory, which a
 * 183-byte file with a large vocab_size can ask for. runCase and the page refuse it
 * (RESOURCE_EXHAUSTED) before creating anything.
 */
export const TRANSFORMER_CASE_BUDGET = Object.freeze({ bytes: 2 ** 30, multiplyAdds: 2 ** 34 });

/**
 * What a run of the parsed transformer case costs, estimated from its config, its tokens' shape
 * and the hooks asked for: { parameters (floats), bytes, multiplyAdds } (see
 * TRANSFORMER_CASE_BUDGET for what `bytes` counts). An upper estimate, not the engine's exact
 * accounting.
 */
export function transformerCaseCost(parsedCase, hooks = []) {
  const { vocabSize: V, maxLen, dModel: D, nLayers: L, nHeads: H, dMlp, positions, norm, bias } = parsedCase.config;
  const shape = parsedCase.tokens.shape;
  const B = shape.length === 2 ? shape[0] : 1;
  const T = shape[shape.length - 1];
  const M = B * T;
  // The state_dict's floats (docs/case-format.md's table), as the engine will hold them.
  const perLayer = 4 * D * D + (bias ? 4 * D : 0) + (norm === 'none' ? 0 : 2 * D) +
    (dMlp > 0 ? 2 * D * dMlp + (bias ? dMlp + D : 0) + (norm === 'none' ? 0 : 2 * D) : 0);
  const parameters = 2 * V * D + (bias ? V : 0) + (positions === 'learned' ? maxLen * D : 0) +
    L * perLayer + (norm === 'pre' ? 2 * D : 0);
  const hookFloats = (name) => {
    if (name === 'logits') return M * V;
    if (name.endsWith('.hook_attn_scores') || name.endsWith('.hook_pattern')) return B * H * T * T;
    return M * D;
  };
  // The forward's working rows: the stream and its stages, q | k | v, the MLP's hidden rows, one
  // 64-row tile of scores per head at a time, and the logits (kept and copied out).
  const activations = M * (8 * D + 2 * dMlp) + 64 * T * H + 2 * M * V;
  const hooked = hooks.reduce((sum, name) => sum + 2 * hookFloats(name), 0);
  const bytes = 4 * (2 * parameters + activations + hooked);
  const multiplyAdds = M * (L * (4 * D * D + 2 * D * dMlp) + V * D) + 2 * L * B * T * T * D;
  return { parameters, bytes, multiplyAdds };
}

const formatBytes = (n) => (n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${(n / 2 ** 20).toFixed(1)} MiB`);

/**
 * Checks a parsed transformer case against the model its config makes, before any weight is
 * copied or any pass runs: the state_dict has exactly the keys of `parameterShapes` (the model's
 * parameterShapes()), each of that shape, and the run (with `hooks`) fits TRANSFORMER_CASE_BUDGET.
 * Throws what loadStateDict would (UNKNOWN_PARAMETER, SHAPE_MISMATCH, MISSING_PARAMETER, naming
 * stateDict['key'] as it does), or RESOURCE_EXHAUSTED with the estimate.
 */
export function checkTransformerCase(parsedCase, parameterShapes, hooks = []) {
  const keys = Object.keys(parameterShapes);
  for (const [key, t] of parsedCase.stateDict) {
    const want = Object.hasOwn(parameterShapes, key) ? parameterShapes[key] : undefined;
    if (want === undefined) {
      throw new HeadscopeError('UNKNOWN_PARAMETER', `stateDict['${keyInPath(key)}']: not a state_dict ` +
        `key of this config (its keys: ${keys.join(', ')})`, { argument: 'stateDict' });
    }
    if (t.shape.length !== want.length || t.shape.some((d, i) => d !== want[i])) {
      throw new HeadscopeError('SHAPE_MISMATCH', `stateDict['${key}']: expected shape [${want.join(', ')}], ` +
        `got [${t.shape.join(', ')}]`, { argument: 'stateDict' });
    }
  }
  const missing = keys.filter((k) => !parsedCase.stateDict.has(k));
  if (missing.length > 0) {
    throw new HeadscopeError('MISSING_PARAMETER', `stateDict: missing ${missing.map((k) =>
      `${k} [${parameterShapes[k].join(', ')}]`).join(', ')}`, { argument: 'stateDict' });
  }
  const cost = transformerCaseCost(parsedCase, hooks);
  const { bytes, multiplyAdds } = TRANSFORMER_CASE_BUDGET;
  if (cost.bytes > bytes || cost.multiplyAdds > multiplyAdds) {
    throw new HeadscopeError('RESOURCE_EXHAUSTED', `case: this transformer case would need about ` +
      `${formatBytes(cost.bytes)} of engine memory and ${cost.multiplyAdds.toExponential(1)} ` +
      `multiply-adds, more than a case may ask for (${formatBytes(bytes)}, ` +
      `${multiplyAdds.toExponential(1)}): config ${cost.parameters} weights, tokens ` +
      `[${parsedCase.tokens.shape.join(', ')}], ${hooks.length} hooks`);
  }
  return cost;
}

/**
 * Mean cross-entropy of logits [..., V] (a Float32Array) against targets (an Int32Array of the
 * positions), over the positions whose target is not -100, in double: per row
 * log(sum exp(x - max)) - (x[t] - max), Transformer::Loss's order of operations
 * (src/headscope/kernels/rowwise.cc), as F.cross_entropy(ignore_index=-100) defines it.
 * The targets are the parsed case's (checked: in range, at least one counted).
 */
export function caseLoss(logits, targets, vocab) {
  let total = 0;
  let counted = 0;
  for (let p = 0; p < targets.length; p++) {
    const t = targets[p];
    if (t === IGNORE_INDEX) continue;
    const row = p * vocab;
    let max = logits[row];
    for (let j = 1; j < vocab; j++) max = logits[row + j] > max ? logits[row + j] : max;
    let sum = 0;
    for (let j = 0; j < vocab; j++) sum += Math.exp(logits[row + j] - max);
    // log(sum) - (x[t] - max), not max + log(sum) - x[t]: with |max| large the addition rounds
    // log(sum) away (ten equal logits of 7.6e22 gave 0, not ln 10).
    total += Math.log(sum) - (logits[row + t] - max);
    counted++;
  }
  return total / counted;
}

/**
 * runCase's result from forward()'s { logits, hooks? }: the same, plus `loss` when the case has
 * targets.
 */
export function transformerCaseResult(parsedCase, forwardResult) {
  const out = { logits: forwardResult.logits };
  if (forwardResult.hooks !== undefined) out.hooks = forwardResult.hooks;
  if (parsedCase.targets !== null) {
    out.loss = caseLoss(forwardResult.logits.data, parsedCase.targets.data, parsedCase.config.vocabSize);
  }
  return out;
}

// A result's tensor read once: a real typed array as `data` and an array as `shape` (then a
// tensor of headscope's own), else bad().
function resultTensor(t, name, bad) {
  if (t === null || typeof t !== 'object') bad();
  const data = t.data;
  const shape = t.shape;
  if (typedArrayName(data) === undefined || !Array.isArray(shape)) bad();
  return toFloatTensor({ data, shape }, name);
}

/**
 * A result as checkCase reads it (from a caller, or from across a worker boundary: plain
 * objects), each field read once into tensors of headscope's own: { output, weights } of an
 * attention case, { logits, hooks (a Map), loss } of a transformer case.
 */
export function readCaseResult(parsedCase, result) {
  const fail = (expected) => {
    throw new HeadscopeError('INVALID_ARGUMENT', `result: expected ${expected}, got ${describe(result)}`);
  };
  if (parsedCase.kind !== 'transformer') {
    const bad = () => fail('{ output: Tensor, weights: Tensor | null } as forward() and runCase() return');
    if (result === null || typeof result !== 'object') bad();
    const { output, weights } = result;
    return {
      output: resultTensor(output, 'result.output', bad),
      weights: weights === null ? null : resultTensor(weights, 'result.weights', bad),
    };
  }
  const bad = () => fail('{ logits: Tensor, hooks?: { [name]: Tensor }, loss?: number } as runCase() ' +
    'returns for a transformer case');
  if (result === null || typeof result !== 'object') bad();
  const { logits, hooks, loss } = result;
  const out = { logits: resultTensor(logits, 'result.logits', bad), hooks: new Map(), loss: null };
  if (hooks !== undefined && hooks !== null) {
    if (typeof hooks !== 'object') bad();
    for (const name of Object.keys(hooks)) out.hooks.set(name, resultTensor(hooks[name], `result.hooks['${name}']`, bad));
  }
  if (loss !== undefined && loss !== null) {
    if (typeof loss !== 'number') bad();
    out.loss = loss;
  }
  return out;
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
  if (parsedCase.kind === 'transformer') return compareTransformerCase(parsedCase, result, tolerance);
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

// A result's hook by name: runCase's object of hooks, or readTransformerCaseResult's Map.
function resultHook(hooks, name) {
  if (hooks === undefined || hooks === null) return undefined;
  if (hooks instanceof Map) return hooks.get(name);
  return Object.hasOwn(hooks, name) ? hooks[name] : undefined;
}

/**
 * A transformer case: compareWithExpected's { ok, maxRelativeError (the worst of the tensors),
 * detail (the first failure) } plus every tensor's own check, `tensors`: [{ name, ok,
 * maxRelativeError, detail }] (logits, then the expected hooks in the document's order, named
 * "hooks.<name>"), and `loss`: { got, expected, error, ok } (null without an expected loss), where
 * error = |got - expected| / max(1, |expected|) must be <= tolerance.
 */
function compareTransformerCase(parsedCase, result, tolerance) {
  const out = { ok: false, maxRelativeError: 0, detail: '', tensors: [], loss: null };
  const want = parsedCase.expected;
  if (want === null) {
    out.detail = 'the case has no expected values';
    return out;
  }
  const fail = (detail) => {
    if (out.detail === '') out.detail = detail;
  };
  const check = (name, got, wanted) => {
    const one = { maxRelativeError: 0, detail: '' };
    const ok = got === undefined ? false : compareTensor(name, got, wanted, tolerance, one);
    if (got === undefined) one.detail = `${name}: not in the result`;
    out.tensors.push({ name, ok, maxRelativeError: one.maxRelativeError, detail: one.detail });
    out.maxRelativeError = Math.max(out.maxRelativeError, one.maxRelativeError);
    if (!ok) fail(one.detail);
  };
  check('logits', result.logits, want.logits);
  for (const [name, t] of want.hooks) check(`hooks.${name}`, resultHook(result.hooks, name), t);
  if (want.loss !== null) {
    const got = typeof result.loss === 'number' ? result.loss : null;
    const error = got === null ? NaN : Math.abs(got - want.loss) / Math.max(1, Math.abs(want.loss));
    const ok = error <= tolerance;
    out.loss = { got, expected: want.loss, error, ok };
    if (!ok) {
      fail(got === null ? 'loss: not in the result' : `loss: got ${got}, expected ${want.loss} ` +
        `(error ${error.toPrecision(3)} > ${tolerance})`);
    }
  }
  out.ok = out.detail === '';
  return out;
}

// ---------------------------------------------------------------------------------------------
// The size of a printed result, known from the shapes before anything is computed (the CLIs
// refuse a case whose result could not sensibly be printed: a 65 KB case can ask for 4.5 GB of
// weights). The same bound as the native ResultJsonBytesBound.

// Most bytes a tensor of `shape` takes as JSON text: a float32 is at most 15 characters
// ("-1.17549435e-38"; '"-inf"' is 6) plus ", ", an array 2 brackets plus ", ".
export function tensorJsonBytesBound(shape) {
  let elements = 1;
  let arrays = 0;
  for (const d of shape) {
    arrays += elements;
    elements *= Math.max(d, 0);
  }
  return elements * 17 + arrays * 4;
}

/** The shape of the weights a run of the parsed case returns, or null when it returns none. */
export function resultWeightsShape(parsedCase) {
  const { config, query, key, options } = parsedCase;
  // Only where the call can succeed (null for a query of neither rank 2 nor 3, or a key of
  // another rank); any other case fails in forward() before it has a result.
  return weightsShape(callDims(config, query.shape, key.shape), options);
}

// A transformer case's printed result: {"logits": ..., "loss": <at most 24 characters>, "hooks":
// {<name>: ..., ...}} and a newline is at most 64 bytes besides the tensors and the hook names;
// each hook at most the largest hook shape of the config ([B,T,D], [B,H,T,dh], [B,H,T,T],
// [B,T,V]; no B unbatched) plus its quoted name and ": " ", ".
function transformerResultJsonBytesBound(parsedCase) {
  const { shape } = parsedCase.tokens;
  const lead = shape.length === 2 ? [shape[0]] : [];
  const T = shape[shape.length - 1];
  const { dModel: D, nHeads: H, vocabSize: V } = parsedCase.config;
  const hook = Math.max(...[[T, D], [H, T, D / H], [H, T, T], [T, V]].map((s) => tensorJsonBytesBound([...lead, ...s])));
  let bytes = 64 + tensorJsonBytesBound([...lead, T, V]);
  for (const name of parsedCase.expected?.hooks.keys() ?? []) bytes += hook + name.length + 6;
  return bytes;
}

/**
 * An upper bound of the bytes of {"output": ..., "weights": ...} and a newline (a transformer
 * case: of {"logits": ..., "loss": ..., "hooks": {...}} and a newline).
 */
export function resultJsonBytesBound(parsedCase) {
  if (parsedCase.kind === 'transformer') return transformerResultJsonBytesBound(parsedCase);
  const weights = resultWeightsShape(parsedCase);
  return 32 + tensorJsonBytesBound(parsedCase.query.shape) +
    (weights === null ? 0 : tensorJsonBytesBound(weights));
}

/** Throws RESOURCE_EXHAUSTED when the printed result could take more than `maxBytes`. */
export function checkResultJsonSize(parsedCase, maxBytes = MAX_RESULT_JSON_BYTES) {
  const bound = resultJsonBytesBound(parsedCase);
  if (bound <= maxBytes) return;
  const shown = bound >= 1.8e19 ? '18446744073709551615' : String(bound);
  if (parsedCase.kind === 'transformer') {
    const { shape } = parsedCase.tokens;
    const hooks = parsedCase.expected?.hooks.size ?? 0;
    throw new HeadscopeError('RESOURCE_EXHAUSTED', `result: its JSON text could take ${shown} bytes ` +
      `(logits [${[...shape, parsedCase.config.vocabSize].join(', ')}], ${hooks} hook${hooks === 1 ? '' : 's'}), ` +
      `more than the limit of ${maxBytes} bytes`);
  }
  const weights = resultWeightsShape(parsedCase);
  throw new HeadscopeError('RESOURCE_EXHAUSTED', `result: its JSON text could take ${shown} bytes ` +
    `(output [${parsedCase.query.shape.join(', ')}], weights ${weights === null ? 'null'
      : `[${weights.join(', ')}]`}), more than the limit of ${maxBytes} bytes`);
}
