#!/usr/bin/env bash
# npm test: install and build if needed, type-check, lint, check formatting, then jest and the fault
# suite. Jest's global setup brings up
# Postgres (local, DATABASE_URL or embedded) and a Temporal dev server for the run; the
# sshd test hosts need openssh-server, installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/install-system.sh
bash scripts/install-chromium.sh
npx tsc --noEmit -p tsconfig.json
npm run --silent lint
npm run --silent format:check
npx jest "$@"
# The fault suite kills and restarts real processes (about 5 minutes on a quiet machine); it runs
# after the main suite on a whole run, not when jest is given files or options to narrow it.
if [ "$#" -eq 0 ]; then npx jest -c jest.faults.config.js; fi
