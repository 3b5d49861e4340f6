#!/usr/bin/env bash
# `npm run build`: compiles the WebAssembly module (Emscripten, WASM SIMD128) and places it next to
# web/lib/index.js, where the package loads it from. Needs the toolchain of tools/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# Emscripten 3.1.6's link step runs acorn-optimizer.js, which needs Debian's acorn.
export NODE_PATH=/usr/share/nodejs
emcmake cmake --preset wasm >/dev/null
cmake --build --preset wasm --target headscope_js
# Replace each file by a rename, and only when it changed: a process reading the package while this
# runs (a test, a dev server) sees the old file or the new one, never a half-written one.
for f in headscope_core.js headscope_core.wasm; do
  if ! cmp -s "build/wasm/$f" "web/lib/$f"; then
    cp "build/wasm/$f" "web/lib/.$f.tmp"
    mv -f "web/lib/.$f.tmp" "web/lib/$f"
  fi
done
echo "build: web/lib/headscope_core.{js,wasm} ($(stat -c %s web/lib/headscope_core.wasm) bytes of wasm)"
