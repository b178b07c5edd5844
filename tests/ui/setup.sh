#!/usr/bin/env bash
# Gets the page's browser tests ready to run (tests/it/ui.rs): ui/'s pinned development
# packages (npm ci, from the npm registry the first time; playwright-core among them) and
# Debian's Chromium (apt-get, when missing and this runs as root).
#
#   tests/ui/setup.sh
set -euo pipefail
ui="$(cd "$(dirname "$0")/../../ui" && pwd)"
command -v node >/dev/null && command -v npm >/dev/null || { echo "tests/ui/setup.sh: node and npm are needed (Node 18 or newer)" >&2; exit 1; }
cd "$ui"
# npm ci again only when the lock file changed since the last one.
if ! cmp -s package-lock.json node_modules/.kbq-installed-lock 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.kbq-installed-lock
fi
if [ -z "${CHROMIUM:-}" ] && ! [ -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "tests/ui/setup.sh: installing Debian's chromium for the browser tests" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
  else
    echo "tests/ui/setup.sh: no /usr/bin/chromium: install Debian's chromium package, or set CHROMIUM" >&2
    exit 1
  fi
fi
