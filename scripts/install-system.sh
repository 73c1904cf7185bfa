#!/usr/bin/env bash
# System packages the tests need that npm cannot bring: OpenSSH's server (real sshd test
# hosts on loopback) and ssh-keygen. Installed from Debian's packages when missing.
set -euo pipefail
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
if [ ${#missing[@]} -gt 0 ]; then
  echo "[yoke] installing ${missing[*]} from Debian packages"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
