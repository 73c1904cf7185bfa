#!/usr/bin/env bash
# The dashboard's browser tests drive Debian's headless Chromium through playwright-core
# (which never downloads a browser of its own). Installed from Debian's packages when missing.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  echo "[yoke] installing chromium from Debian packages"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-noto-color-emoji >/dev/null
fi
