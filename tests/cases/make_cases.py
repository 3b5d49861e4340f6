#!/usr/bin/env python3
"""Writes the conformance corpus of the two case parsers (src/headscope/case_file.cc and
web/lib/case.js): good/*.json must parse and run in both, bad/* must fail in both with the code,
JSON path and (for JSON that is not well formed) byte offset of bad/expect.json.

    python3 tests/cases/make_cases.py      # deterministic; rewrites good/ and bad/

tests/cpp/case_file_test.cc (natively and in WebAssembly) and tests/js/case-conformance.test.js
(the JS parser, hs.runCase and both CLIs) read the files; neither may drift from the other.
"""
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
SEED_PATH = os.path.join(HERE, '..', 'golden', 'seed-worked-example.json')
with open(SEED_PATH, 'rb') as f:
    SEED_TEXT = f.read()
SEED = json.loads(SEED_TEXT)


def rep(data, old, new, count=1):
    """data with `old` replaced by `new` (`count` times); `old` must be there."""
    assert data.count(old) >= count, (old, data[:200])
    return data.replace(old, new, count)


def compact(doc):
    return json.dumps(doc, separators=(',', ':')).encode()


def seed():
    return json.loads(SEED_TEXT)


good = {}
bad = {}   # name -> (bytes, {code, path, offset?, message?})


def expect(name, data, code, path, offset=None, message=None):
    e = {'code': code, 'path': path}
    if offset is not None:
        e['offset'] = offset
    if message is not None:
        e['message'] = message
    bad[name] = (data, e)


def syntax(name, data, offset, message=None):
    expect(name, data, 'PARSE_ERROR', '$', offset, message)


# --- good: parse and run in both; the seed's expected values still hold where kept -------------
s = compact(seed())
good['bom.json'] = b'\xef\xbb\xbf' + s                     # RFC 8259 lets parsers skip it
good['whitespace-crlf-tabs.json'] = json.dumps(seed(), indent='\t').replace('\n', '\r\n').encode() + b' \r\n\t '
d = seed()
d['name'] = 'caf\u00e9 \u2615 \U0001d11e'                    # raw UTF-8 of 2, 3 and 4 bytes
good['unicode-name.json'] = json.dumps(d, ensure_ascii=False).encode()
good['escaped-strings.json'] = rep(rep(compact(seed()), b'"seed-worked-example"', b'"\\ud83d\\ude00 \\u00e9\\n\\"\\\\\\/\\b\\f\\r\\t"'),
    b'"in_proj_weight"', b'"in_proj\\u005fweight"')           # an escaped key is the same key
d = seed()
del d['expected']
t = compact(d)
# -0 is the integer zero (+0.0 in torch, as Python's json reads it); -0.0 is negative zero.
t = rep(rep(t, b'"query":[[1.0,0.0,1.0,2.0],[0.0,2.0,1.0,0.0]', b'"query":[[1,-0,1.0e0,2],[-0.0,2,1,-0]'), b'"key":[[1.0,0.0', b'"key":[[1.0,-0')
good['negative-zero.json'] = t
# Underflow is 0 (or a float32 denormal); very long literals are fine.
t = rep(compact(d), b'"query":[[1.0,0.0,1.0,2.0],[0.0,2.0,1.0,0.0]', b'"query":[[1,1e-400,1.0000000000000000000000000000000000000001,2],[0.' + b'0' * 300 + b'1,2,1,' + b'1' + b'0' * 300 + b'e-300]')
good['underflow-and-long-numbers.json'] = t
# Finite doubles beyond float32 become +-inf, as torch.tensor(..., dtype=torch.float32) does.
good['float32-overflow-is-inf.json'] = rep(compact(d), b'"query":[[1.0,0.0,1.0,2.0]', b'"query":[[1e39,-3.5e38,1.7976931348623157e308,2]')
# 64 levels of nesting are allowed (the root object is level 1); "meta" holds any value, which
# both parsers ignore.
d = seed()
d['meta'] = json.loads('[' * 63 + ']' * 63)
good['depth-64.json'] = compact(d)
d = seed()
d['config']['embed_dim'] = 4.0                               # an integral float is an integer
d['config']['dropout'] = 0.0
good['integral-floats.json'] = compact(d)
# headscope's forward options alibi and window (not torch's); a window written 2.0 is 2.
d = seed()
del d['expected']
d['inputs'].update(is_causal=True, alibi=True, window=2.0)
good['alibi-window.json'] = compact(d)

# --- bad: JSON that is not well formed (path $, byte offset) ----------------------------------
syntax('empty.json', b'', 0)
syntax('whitespace-only.json', b' \n\t\r ', 5)
syntax('trailing-nul.bin', s + b'\x00', len(s), 'NUL')
syntax('nul-inside.bin', rep(s, b'"config":', b'"config":\x00', 1), s.index(b'"config":') + 9, 'NUL')
syntax('nul-in-string.bin', rep(s, b'"seed-worked-example"', b'"seed\x00"'), s.index(b'"seed-worked') + 5)
syntax('trailing-garbage.json', s + b'\n}', len(s) + 1)
syntax('two-documents.json', s + b' ' + s, len(s) + 1)
syntax('trailing-comma.json', rep(s, b'"batch_first":false', b'"batch_first":false,'), s.index(b'"batch_first":false') + 20)
syntax('truncated.json', s[:200], 200)
syntax('formfeed-is-not-whitespace.bin', b'\x0c' + s, 0)
syntax('double-bom.bin', b'\xef\xbb\xbf\xef\xbb\xbf' + s, 3)
syntax('partial-bom.bin', b'\xef\xbb' + s, 2)
syntax('bom-after-space.bin', b' \xef\xbb\xbf' + s, 1)
i = s.index(b'"seed-worked-example"')
syntax('lone-high-surrogate.json', rep(s, b'"seed-worked-example"', b'"a\\ud800"'), i + 8, 'surrogate')
syntax('high-surrogate-then-letter.json', rep(s, b'"seed-worked-example"', b'"\\ud800\\u0041"'), i + 12, 'surrogate')
j = s.index(b'"embed_dim"')
syntax('lone-low-surrogate-key.json', rep(s, b'"embed_dim"', b'"\\udc00"', 1), j + 6, 'surrogate')
syntax('invalid-utf8-byte.bin', rep(s, b'"seed-worked-example"', b'"a\xffb"'), i + 2, 'UTF-8')
syntax('truncated-utf8.bin', rep(s, b'"seed-worked-example"', b'"a\xc3"'), i + 3, 'UTF-8')
syntax('overlong-utf8.bin', rep(s, b'"seed-worked-example"', b'"\xc0\xaf"'), i + 1, 'UTF-8')
syntax('utf8-encoded-surrogate.bin', rep(s, b'"seed-worked-example"', b'"\xed\xa0\x80"'), i + 2, 'UTF-8')
syntax('utf8-beyond-10ffff.bin', rep(s, b'"seed-worked-example"', b'"\xf4\x90\x80\x80"'), i + 2, 'UTF-8')
syntax('utf8-outside-strings.bin', rep(s, b'"config":', b'\xc3\xa9"config":', 1), s.index(b'"config":'))
syntax('raw-tab-in-string.bin', rep(s, b'"seed-worked-example"', b'"a\tb"'), i + 2, 'control character')
syntax('bad-escape.json', rep(s, b'"seed-worked-example"', b'"a\\x41"'), i + 3)
syntax('short-unicode-escape.json', rep(s, b'"seed-worked-example"', b'"\\u12"'), i + 5)
syntax('nan-literal.json', rep(s, b'"embed_dim":4', b'"embed_dim":NaN'), j + 12)
syntax('infinity-literal.json', rep(s, b'"embed_dim":4', b'"embed_dim":-Infinity'), j + 13)
syntax('leading-zero.json', rep(s, b'"embed_dim":4', b'"embed_dim":04'), j + 13)
syntax('single-quotes.json', rep(s, b'"seed-worked-example"', b"'seed'"), i)
syntax('unquoted-key.json', rep(s, b'"name"', b'name'), 2)

# --- bad: beyond the rules both parsers add to RFC 8259 (named by JSON path) -------------------
d = seed()
q = compact(d)
expect('number-overflow.json', rep(q, b'"query":[[1.0,0.0,1.0,2.0]', b'"query":[[1,1e400,1,2]'),
       'PARSE_ERROR', 'inputs.query[0][1]', message='out of range')
expect('negative-number-overflow.json', rep(q, b'"in_proj_weight":[[1.0,0.0,0.0,0.0]', b'"in_proj_weight":[[1,0,0,-1.5E+309]'),
       'PARSE_ERROR', 'state_dict.in_proj_weight[0][3]', message='out of range')
expect('integer-literal-overflow.json', rep(q, b'"embed_dim":4', b'"embed_dim":1' + b'0' * 400),
       'PARSE_ERROR', 'config.embed_dim', message='out of range')
expect('duplicate-key.json', rep(q, b'"embed_dim":4', b'"embed_dim":4,"embed_dim":4'),
       'PARSE_ERROR', 'config.embed_dim', message='duplicate key')
expect('duplicate-escaped-key.json', rep(q, b'"embed_dim":4', b'"embed_dim":4,"embed\\u005fdim":4'),
       'PARSE_ERROR', 'config.embed_dim', message='duplicate key')
expect('duplicate-section.json', q[:-1] + b',"inputs":{}}', 'PARSE_ERROR', 'inputs', message='duplicate key')
deep = rep(q, b'"in_proj_weight":[', b'"in_proj_weight":' + b'[' * 70, 1)
expect('deep-state-dict.json', deep, 'PARSE_ERROR', 'state_dict.in_proj_weight[0][0][0][0][0][0]...',
       message='nested deeper than 64 levels')
expect('deep-root.json', b'[' * 100_000 + b']' * 100_000, 'PARSE_ERROR', '$[0][0][0][0][0][0][0][0]...',
       message='nested deeper than 64 levels')
d = seed()
d['meta'] = json.loads('[' * 64 + ']' * 64)                 # 65 levels with the root
expect('depth-65.json', compact(d), 'PARSE_ERROR', 'meta[0][0][0][0][0][0][0]...', message='nested deeper than 64 levels')
# Any other top-level key is refused: a misspelt "expected" would otherwise check nothing.
d = seed()
d['expect'] = d.pop('expected')
expect('misspelt-expected.json', compact(d), 'PARSE_ERROR', 'expect', message='unknown key')
long_key = 'k' * 100
expect('deep-long-key.json', b'{"' + long_key.encode() + b'":' + b'{"a":' * 80 + b'1' + b'}' * 80 + b'}',
       'PARSE_ERROR', 'k' * 61 + '....a.a.a.a.a.a.a...', message='nested deeper than 64 levels')
expect('long-unknown-key.json', rep(q, b'"embed_dim":4', b'"embed_dim":4,"' + b'x' * 200 + b'":1'),
       'PARSE_ERROR', 'config.' + 'x' * 61 + '...', message='unknown key')
expect('control-char-key.json', rep(q, b'"query":', b'"que\\nry":'), 'PARSE_ERROR', 'inputs.que\\u000ary',
       message='unknown key')

# --- bad: not a case (both parsers' case checks, in the same order) --------------------------
expect('not-an-object.json', b'[1, 2]', 'PARSE_ERROR', '$')
expect('embed-dim-too-large.json', rep(q, b'"embed_dim":4', b'"embed_dim":16777217'), 'PARSE_ERROR', 'config.embed_dim')
expect('embed-dim-missing-and-bad-flag.json', rep(q, b'"embed_dim":4,', b'').replace(b'"bias":false', b'"bias":"no"'),
       'PARSE_ERROR', 'config.embed_dim')
expect('two-unknown-keys.json', rep(q, b'"embed_dim":4', b'"embed_dim":4,"zeta":1,"alpha":1'), 'PARSE_ERROR', 'config.alpha',
       message='unknown key')
expect('ragged-after-bad-leaf.json', rep(q, b'"query":[[1.0,0.0,1.0,2.0],[0.0,2.0,1.0,0.0]', b'"query":[["x",0,1,2],[0,2,1]'),
       'PARSE_ERROR', 'inputs.query[0][0]')
expect('too-deep-tensor.json', rep(q, b'"query":[[1.0,0.0,1.0,2.0]', b'"query":[[[[[1]]]],[1,0,1,2]'), 'PARSE_ERROR', 'inputs.query')
expect('mask-bad-leaf.json', rep(q, b'"key_padding_mask":null', b'"key_padding_mask":[false,"x",0]'),
       'PARSE_ERROR', 'inputs.key_padding_mask[1]')
expect('mask-mixed.json', rep(q, b'"key_padding_mask":null', b'"key_padding_mask":[false,0,true]'),
       'PARSE_ERROR', 'inputs.key_padding_mask[1]')
# window: 0 (none) or an integer in [1, 2^24]; alibi: a boolean. Both checked after is_causal.
for name, value in (('negative', b'-1'), ('fraction', b'2.5'), ('too-large', b'16777217'),
                    ('string', b'"2"'), ('bool', b'true')):
    expect(f'window-{name}.json', rep(q, b'"is_causal":false', b'"is_causal":false,"window":' + value),
           'PARSE_ERROR', 'inputs.window', message='expected 0 (no window) or an integer in [1, 16777216]')
expect('alibi-not-bool.json', rep(q, b'"is_causal":false', b'"is_causal":false,"alibi":1,"window":-1'),
       'PARSE_ERROR', 'inputs.alibi', message='expected true or false')
expect('first-bad-state-dict-entry.json', rep(rep(q, b'"in_proj_weight":[[1.0', b'"in_proj_weight":[["a"'),
    b'"out_proj.weight":[[1.0', b'"out_proj.weight":[["b"'), 'PARSE_ERROR', 'state_dict.in_proj_weight[0][0]')


def write():
    for sub in ('good', 'bad'):
        shutil.rmtree(os.path.join(HERE, sub), ignore_errors=True)
        os.makedirs(os.path.join(HERE, sub))
    for name, data in sorted(good.items()):
        with open(os.path.join(HERE, 'good', name), 'wb') as f:
            f.write(data)
    table = {}
    for name, (data, e) in sorted(bad.items()):
        with open(os.path.join(HERE, 'bad', name), 'wb') as f:
            f.write(data)
        table[name] = e
    with open(os.path.join(HERE, 'bad', 'expect.json'), 'w') as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write('\n')


write()
