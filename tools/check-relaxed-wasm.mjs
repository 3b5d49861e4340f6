#!/usr/bin/env node
// Checks a relaxed-SIMD module after its link (CMakeLists.txt runs it on
// headscope_core_relaxed.wasm and the relaxed roofline probe): its code section holds
// f32x4.relaxed_madd in the final encoding (fd 85 02; clang 14 would have written the prototype's
// opcode, which no engine accepts) and the module validates in an engine with relaxed SIMD
// (Node 20 needs --experimental-wasm-relaxed-simd, set here at run time). Fails the build
// otherwise, so a toolchain that silently emits something else never reaches web/lib.
//
//   node tools/check-relaxed-wasm.mjs <file.wasm> [...]
import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';

// The probe init() uses (web/lib/index.js RELAXED_PROBE): (v128, v128, v128) -> relaxed_madd.
const PROBE = Uint8Array.from(Buffer.from(
  '0061736d0100000001080160037b7b7b017b030201000a0d010b00200020012002fd85020b', 'hex'));
if (!WebAssembly.validate(PROBE)) setFlagsFromString('--experimental-wasm-relaxed-simd');
if (!WebAssembly.validate(PROBE)) {
  console.error('check-relaxed-wasm: this Node cannot validate relaxed SIMD, even with ' +
    '--experimental-wasm-relaxed-simd');
  process.exit(1);
}

function leb(bytes, at) {
  let value = 0;
  let shift = 0;
  for (;;) {
    const b = bytes[at++];
    value += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if (b < 0x80) return [value, at];
  }
}

// The code section's bytes (id 10).
function codeSection(bytes) {
  let at = 8;
  while (at < bytes.length) {
    const id = bytes[at++];
    let size;
    [size, at] = leb(bytes, at);
    if (id === 10) return bytes.subarray(at, at + size);
    at += size;
  }
  return new Uint8Array(0);
}

let failed = false;
for (const file of process.argv.slice(2)) {
  const bytes = readFileSync(file);
  const code = codeSection(bytes);
  // A byte pattern, not a disassembly: it may also match inside an immediate, but a module
  // without it certainly has no relaxed_madd. WebAssembly.validate below checks the rest.
  let madds = 0;
  for (let i = 0; i + 2 < code.length; i++) {
    if (code[i] === 0xfd && code[i + 1] === 0x85 && code[i + 2] === 0x02) madds++;
  }
  const valid = WebAssembly.validate(bytes);
  if (madds === 0 || !valid) {
    console.error(`check-relaxed-wasm: ${file}: ${madds} f32x4.relaxed_madd (fd 85 02) in its code, ` +
      `${valid ? 'valid' : 'does not validate'} with relaxed SIMD: not the relaxed-SIMD build ` +
      '(was it compiled by clang++-19 with -mrelaxed-simd?)');
    failed = true;
  } else {
    console.log(`check-relaxed-wasm: ${file}: ${bytes.length} bytes, ${madds} relaxed_madd, valid`);
  }
}
process.exit(failed ? 1 : 0);
