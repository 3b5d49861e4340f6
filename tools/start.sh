#!/usr/bin/env bash
# The main job. Sets everything up, builds the native engine and walks through the seed's worked
# example (3 tokens, 2 heads) with the case runner, checking it against PyTorch's numbers.
# (The demo page, served by `npm start`, takes this command's place once it lands: issue 4.)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake --preset native >/dev/null
cmake --build --preset native
case_file=tests/golden/seed-worked-example.json
echo
echo "headscope: the seed's worked example ($case_file), computed by build/native/headscope:"
build/native/headscope run "$case_file" --check
