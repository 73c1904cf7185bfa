#!/usr/bin/env bash
# npm start: install if needed, build, bring up Postgres + the Temporal dev server (or reuse
# them), then run a worker in the foreground. Ctrl-C stops the worker and what this run started.
set -euo pipefail
cd "$(dirname "$0")/.."
# One npm start per checkout (per YOKE_HOME): a second one used to rebuild dist under the running
# worker, fail on the dashboard's port, and, ending, drop the pid files npm stop finds the first
# run's worker and dashboard by, so they outlived npm stop. It now says so and changes nothing.
running=$(cat "${YOKE_HOME:-.yoke}/worker.pid" 2>/dev/null || true)
if [[ "$running" =~ ^[0-9]+$ ]] && ps -p "$running" -o args= 2>/dev/null | grep -qF -- "dist/workers/main.js"; then
  echo "npm start is already running for this checkout (worker pid $running, state in ${YOKE_HOME:-.yoke}); it reuses Postgres and Temporal already." >&2
  echo "recovery: use that one, or stop it first (npm stop, or Ctrl-C in its terminal), then npm start again" >&2
  exit 1
fi
bash scripts/install.sh
owner="start-$$"
home=$(node -e 'process.stdout.write(require("./dist/config/paths").yokeHome())')
# The worker's key directory (YOKE_SSH_KEY_DIR, else $YOKE_HOME/ssh-keys): the hints below name it,
# so a key made as they say is one the worker finds (a fixed .yoke/ssh-keys missed it under another YOKE_HOME).
keys=$(node -e 'process.stdout.write(require("./dist/config/paths").sshKeyDir())')
worker=""
dashboard=""
# However this run ends (Ctrl-C, npm stop, the worker dying, even by kill -9), it stops the
# dashboard and the worker it started, drops their pid files, then stops the services it brought up.
stop_started() {
  trap - EXIT INT TERM
  for pid in $dashboard $worker; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $worker $dashboard; do wait "$pid" 2>/dev/null || true; done
  for name in worker dashboard; do
    # only this run's records: npm stop may have dropped them, a later npm start rewritten them
    if [ -n "${!name}" ] && [ "$(cat "$home/$name.pid" 2>/dev/null)" = "${!name}" ]; then rm -f "$home/$name.pid"; fi
  done
  node dist/scripts/services.js down --owner "$owner" || true
}
trap stop_started EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
node dist/scripts/services.js up --owner "$owner"
ui=$(node -e 'const s=require(process.argv[1]);process.stdout.write(String(s.webUi||""))' "$home/services.json")
addr=$(node -e 'const s=require(process.argv[1]);process.stdout.write(s.temporalAddress)' "$home/services.json")
cat <<MSG

yoke is up.
  Temporal:   ${addr}${ui:+   Web UI: ${ui}}
  Postgres:   see $home/services.json (DATABASE_URL overrides)
  Dashboard:  http://127.0.0.1:${YOKE_DASHBOARD_PORT:-8340}   (yoke serve: board, runs, test machines, machines)
  CLI:        ./bin/yoke --help      (or: npm link, then yoke --help)
  Try:        ./bin/yoke projects create demo
              ./bin/yoke sessions register --session s1 --actor me --project demo
              mkdir -p $keys && ssh-keygen -q -t ed25519 -N '' -f $keys/lab-1
              ./bin/yoke test-machine add lab-1 --host 127.0.0.1 --port 22 --user qa \\
                  --credential lab-1 --host-key-file $keys/lab-1.pub
              (or --identity-file KEY instead of --credential: yoke copies KEY into $keys)
              ./bin/yoke coordination-claim acquire --key QA_HOST:lab-1 --session s1
              ./bin/yoke coordination-claim list --active-only --json
  Stop:       Ctrl-C here, or npm stop

MSG
# npm stop signals these pids (and only these: other checkouts' workers are not ours).
node dist/workers/main.js &
worker=$!
echo "$worker" >"$home/worker.pid"
# The operator dashboard (read-only); it prints its own address. It views as no session: a
# YOKE_SESSION_ID left in the starting shell (an agent's, perhaps never registered) is not the operator's.
env -u YOKE_SESSION_ID node bin/yoke serve --port "${YOKE_DASHBOARD_PORT:-8340}" &
dashboard=$!
echo "$dashboard" >"$home/dashboard.pid"
# The worker's end (its exit status, whatever it is) ends the run; the EXIT trap stops the rest.
wait "$worker"
