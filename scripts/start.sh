#!/usr/bin/env bash
# npm start: install if needed, build, bring up Postgres + the Temporal dev server (or reuse
# them), then run a worker in the foreground. Ctrl-C stops the worker and what this run started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
owner="start-$$"
stop_started() { node dist/scripts/services.js down --owner "$owner" || true; }
trap stop_started EXIT
node dist/scripts/services.js up --owner "$owner"
ui=$(node -e 'const s=require("./.yoke/services.json");process.stdout.write(String(s.webUi||""))')
addr=$(node -e 'const s=require("./.yoke/services.json");process.stdout.write(s.temporalAddress)')
cat <<MSG

yoke is up.
  Temporal:   ${addr}${ui:+   Web UI: ${ui}}
  Postgres:   see .yoke/services.json (DATABASE_URL overrides)
  Dashboard:  http://127.0.0.1:${YOKE_DASHBOARD_PORT:-8340}   (yoke serve: board, runs, test machines, machines)
  CLI:        ./bin/yoke --help      (or: npm link, then yoke --help)
  Try:        ./bin/yoke projects create demo
              ./bin/yoke sessions register --session s1 --actor me --project demo
              mkdir -p .yoke/ssh-keys && ssh-keygen -q -t ed25519 -N '' -f .yoke/ssh-keys/lab-1
              ./bin/yoke test-machine add lab-1 --host 127.0.0.1 --port 22 --user qa \\
                  --credential lab-1 --host-key-file .yoke/ssh-keys/lab-1.pub
              ./bin/yoke coordination-claim acquire --key QA_HOST:lab-1 --session s1
              ./bin/yoke coordination-claim list --active-only --json
  Stop:       Ctrl-C here, or npm stop

MSG
node dist/workers/main.js &
worker=$!
# The operator dashboard (read-only); it prints its own address.
node bin/yoke serve --port "${YOKE_DASHBOARD_PORT:-8340}" &
dashboard=$!
trap 'kill -TERM $worker $dashboard 2>/dev/null; wait $worker; stop_started' INT TERM
wait $worker
kill -TERM $dashboard 2>/dev/null || true
