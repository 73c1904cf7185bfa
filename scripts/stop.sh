#!/usr/bin/env bash
# npm stop: stop the worker and every service npm start started.
set -euo pipefail
cd "$(dirname "$0")/.."
pkill -TERM -f "node dist/workers/main.js" 2>/dev/null || true
[ -f dist/scripts/services.js ] && node dist/scripts/services.js down || true
