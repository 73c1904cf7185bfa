#!/usr/bin/env bash
# Installs dependencies when missing or stale, and builds. The allowScripts field of
# package.json records which install scripts npm may run, so a clean clone installs the same.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
npm run build --silent
