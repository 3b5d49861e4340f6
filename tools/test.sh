#!/usr/bin/env bash
# The test command: sets everything up on a fresh Debian 12 machine, builds every target and runs
# every test: the C++ suite natively (Release), under AddressSanitizer + UBSan, the libFuzzer
# harnesses for about a minute each, and the suite compiled to WebAssembly under Node; then the
# npm package (npm ci, build, node --test).
#
#   tools/test.sh            everything
#   tools/test.sh native     any of: native, sanitize, fuzz, wasm, js
#   HEADSCOPE_FUZZ_SECONDS=300 tools/test.sh fuzz    fuzz longer (default 60 s per fuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
# Emscripten 3.1.6's link step runs acorn-optimizer.js, which needs Debian's acorn.
export NODE_PATH=/usr/share/nodejs

run_native() {
  cmake --preset native
  cmake --build --preset native
  ctest --preset native
}
run_sanitize() {
  cmake --preset sanitize
  cmake --build --preset sanitize
  ctest --preset sanitize
}
run_fuzz() {
  # libFuzzer harnesses (fuzz/): each fuzzes for HEADSCOPE_FUZZ_SECONDS (default 60) after
  # replaying fuzz/regressions and the seeds. New corpus inputs stay in build/fuzz.
  cmake --preset fuzz ${HEADSCOPE_FUZZ_SECONDS:+-DHEADSCOPE_FUZZ_SECONDS=$HEADSCOPE_FUZZ_SECONDS}
  cmake --build --preset fuzz
  ctest --preset fuzz
}
run_wasm() {
  emcmake cmake --preset wasm
  cmake --build --preset wasm
  ctest --preset wasm
}

run_js() {
  npm ci --no-audit --no-fund
  npm run build
  npm test
}

targets=("$@")
((${#targets[@]})) || targets=(native sanitize fuzz wasm js)
for t in "${targets[@]}"; do
  case "$t" in
    native|sanitize|fuzz|wasm|js) echo "== $t"; "run_$t" ;;
    *) echo "tools/test.sh: unknown target '$t' (expected native, sanitize, fuzz, wasm or js)" >&2; exit 2 ;;
  esac
done
