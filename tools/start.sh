#!/usr/bin/env bash
# The main job: sets everything up, builds the WebAssembly engine into web/lib and serves the demo
# page (tools/serve.js), printing where to open it. Ctrl-C stops the server.
#
#   tools/start.sh                  http://localhost:8080/demo/
#   PORT=9000 tools/start.sh        another port
#   HOST=0.0.0.0 tools/start.sh     reachable from other machines too (default: this one only)
#
# The native build and its case runner are not needed for this: see docs/building.md.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
# npm ci only when node_modules is missing or older than the lockfile (npm ci empties it first).
if [[ ! -d node_modules || package-lock.json -nt node_modules ]]; then
  npm ci --no-audit --no-fund
  touch node_modules
fi
npm run build
# What `npm start` runs, exec'd directly: a SIGTERM to this script then reaches the server (npm
# exits on SIGTERM without passing it on, which would leave the server running).
exec node tools/serve.js
