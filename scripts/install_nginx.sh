#!/usr/bin/env bash
# Debian nginx for deploy/run_local.sh and bench/deploy_check.py (only the deployment bench needs it, not CI).
# Installs the package only; deploy/run_local.sh runs nginx itself, as the current user, with its own config.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then exit 0; fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nginx >/dev/null
# Debian starts the system service on install where it can; this project does not use it.
$SUDO systemctl disable --now nginx >/dev/null 2>&1 || true
