#!/usr/bin/env bash
# Installs every system package headscope needs on a fresh Debian 12 machine (run as root).
# Idempotent: packages already present are skipped, so a second run costs a dpkg query.
#
#   tools/setup.sh            build + test toolchain (C++, WASM, golden checking, Chromium for
#                             the browser tests, python3-onnx and python3-torch for the
#                             benchmark's ONNX graphs)
#   tools/setup.sh --golden   also what regenerating tests/golden with tools/make_golden.py needs
#                             (numpy; PyTorch is in the default list, for the benchmark)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  clang libclang-rt-14-dev            # sanitizers and libFuzzer for the native tests
  emscripten                          # em++/emcmake 3.1.6 (pulls its own clang/lld/binaryen)
  clang-19                            # the relaxed-SIMD module: em++ compiles it with clang 19,
                                      # whose relaxed_madd is the final opcode (clang 14's is not);
                                      # it links with Emscripten's own wasm-ld, so no lld-19
  libhwy-dev libeigen3-dev nlohmann-json3-dev
  googletest libgtest-dev libbenchmark-dev
  nodejs                              # Node 20 is preinstalled here; listed so a bare machine gets one
  chromium fonts-dejavu-core          # /usr/bin/chromium for the browser tests (playwright-core
                                      # drives it), with one known font for their screenshots
  python3-onnx                        # tools/bench/make_onnx.py builds onnxruntime-web's graphs
                                      # (npm run bench, and its smoke test in tests/js)
  python3-torch                       # tools/bench/make_transformer_onnx.py: torch.onnx export of
                                      # the reference transformer (npm run bench, its smoke test)
)
if [[ "${1:-}" == "--golden" ]]; then
  packages+=(python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  # A preinstalled Node from outside Debian satisfies the nodejs need.
  if [[ "$p" == nodejs ]] && command -v node >/dev/null 2>&1; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all system packages present"
fi
