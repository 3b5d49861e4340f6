#!/usr/bin/env bash
# `npm run build`: compiles the WebAssembly modules (Emscripten, WASM SIMD128) and places them next
# to web/lib/index.js, where the package loads them from: the single-threaded SIMD128 module
# (headscope_core.{js,wasm}), the single-threaded relaxed-SIMD one (headscope_core_relaxed.{js,wasm},
# compiled by clang 19 through em++: see CMakeLists.txt; init() loads it where the engine has
# relaxed SIMD) and the multi-threaded one of init({ threads }) in web/lib/mt/
# (headscope_core_mt.mjs, its pthread worker script and .wasm). Needs the toolchain of
# tools/setup.sh (clang-19 included: configuring fails without it).
set -euo pipefail
cd "$(dirname "$0")/.."
# Emscripten 3.1.6's link step runs acorn-optimizer.js, which needs Debian's acorn.
export NODE_PATH=/usr/share/nodejs
emcmake cmake --preset wasm >/dev/null
cmake --build --preset wasm --target headscope_js headscope_js_relaxed headscope_js_mt
# Replace each file by a rename, and only when it changed: a process reading the package while this
# runs (a test, a dev server) sees the old file or the new one, never a half-written one.
place() {  # place <built file> <destination>
  if ! cmp -s "$1" "$2"; then
    cp "$1" "$(dirname "$2")/.$(basename "$2").tmp"
    mv -f "$(dirname "$2")/.$(basename "$2").tmp" "$2"
  fi
}
for f in headscope_core.js headscope_core.wasm headscope_core_relaxed.js headscope_core_relaxed.wasm; do
  place "build/wasm/$f" "web/lib/$f"
done
for f in headscope_core_mt.mjs headscope_core_mt.worker.js headscope_core_mt.wasm; do
  place "build/wasm/mt/$f" "web/lib/mt/$f"
done
echo "build: web/lib/headscope_core.{js,wasm} ($(stat -c %s web/lib/headscope_core.wasm) bytes of wasm)," \
  "web/lib/headscope_core_relaxed.{js,wasm} ($(stat -c %s web/lib/headscope_core_relaxed.wasm) bytes)," \
  "web/lib/mt/headscope_core_mt.{mjs,worker.js,wasm} ($(stat -c %s web/lib/mt/headscope_core_mt.wasm) bytes)"
