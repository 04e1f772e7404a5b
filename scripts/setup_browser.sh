#!/usr/bin/env bash
# Install Debian's Chromium and chromedriver for the search page's browser test
# (tests/test_search.py drives them with selenium). Idempotent: nothing is installed when
# /usr/bin/chromium and /usr/bin/chromedriver exist. Needs apt-get and root (or sudo).
#
#   bash scripts/setup_browser.sh
set -euo pipefail

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup_browser: no apt-get here; install Chromium and chromedriver with your package" \
       "manager (or set CR5_SKIP_BROWSER=1 to skip the browser test)" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup_browser: apt-get needs root: run 'apt-get install -y chromium chromium-driver'" \
         "as root (or set CR5_SKIP_BROWSER=1 to skip the browser test)" >&2
    exit 1
  fi
  sudo=(sudo)
fi
echo "setup_browser: installing chromium and chromium-driver (apt-get, about 300 MB)"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -q
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends chromium chromium-driver
