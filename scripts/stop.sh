#!/usr/bin/env bash
# npm stop: stop the worker and dashboard this checkout's npm start started (by the pids it
# recorded in $YOKE_HOME/worker.pid and dashboard.pid: never another checkout's), then every
# service npm start started.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f dist/config/paths.js ]; then
  home=$(node -e 'process.stdout.write(require("./dist/config/paths").yokeHome())')
else
  home=$(cd "${YOKE_HOME:-.yoke}" 2>/dev/null && pwd || echo "${YOKE_HOME:-.yoke}")
fi

# Signals the recorded pid while it still runs what npm start started (a pid may be reused),
# and waits a while for it to finish (the worker drains) before the services go.
stop_recorded() {
  local file="$home/$1.pid" pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  rm -f "$file"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  ps -p "$pid" -o args= 2>/dev/null | grep -qF -- "$2" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
}
stop_recorded dashboard "bin/yoke serve"
stop_recorded worker "dist/workers/main.js"
[ -f dist/scripts/services.js ] && node dist/scripts/services.js down || true
