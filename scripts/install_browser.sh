#!/usr/bin/env bash
# Installs Debian's chromium (the headless browser tests/report.rs opens the HTML reports in) unless a
# browser is already there ($SERVERBENCH_BROWSER, chromium, chromium-browser or google-chrome).
# Exits non-zero when none is there and none can be installed.
set -euo pipefail
if [[ -n "${SERVERBENCH_BROWSER:-}" ]] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then
    exit 0
fi
command -v apt-get >/dev/null || { echo "install_browser: no apt-get here" >&2; exit 1; }
sudo=""
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install_browser: not root and no sudo" >&2; exit 1; }
    sudo="sudo -n"
fi
export DEBIAN_FRONTEND=noninteractive
timeout 600 $sudo apt-get update -qq
timeout 900 $sudo apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null
