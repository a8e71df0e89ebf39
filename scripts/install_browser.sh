#!/usr/bin/env bash
# Debian Chromium + CJK and emoji fonts for the real-browser tests (Playwright cannot download its own browser here).
set -euo pipefail
if [ -x /usr/bin/chromium ] && fc-list 2>/dev/null | grep -qi "noto sans cjk" && fc-list 2>/dev/null | grep -qi "color emoji"; then exit 0; fi
# --no-install-recommends: Chromium's recommended packages (a printer dialog, a notification daemon, Mesa's GL drivers)
# serve a desktop, not a headless browser, and took a third of this install (28 s against 17 s); fonts-liberation
# (Arial's metrics, a fallback font of plotly's charts) is named instead
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-liberation fonts-noto-cjk fonts-noto-color-emoji >/dev/null
