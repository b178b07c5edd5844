#!/usr/bin/env bash
# Readies an npm package of the repository for its tests: its pinned development packages
# (npm ci, from the npm registry the first time, and again only when its lock file changed)
# and, with --chromium, Debian's Chromium for browser tests (apt-get, when missing and this
# runs as root). tests/clients/setup-js.sh, tests/ui/setup.sh and scripts/ui-vendor use it.
#
#   tests/npm-setup.sh DIR [--chromium]
set -euo pipefail
dir="$(cd "$(dirname "$0")/../$1" && pwd)"
name="npm-setup.sh $1"
command -v node >/dev/null && command -v npm >/dev/null || { echo "$name: node and npm are needed (Node 18 or newer)" >&2; exit 1; }
cd "$dir"
if ! cmp -s package-lock.json node_modules/.kbq-installed-lock 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.kbq-installed-lock
fi
if [ "${2:-}" = --chromium ] && [ -z "${CHROMIUM:-}" ] && ! [ -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "$name: installing Debian's chromium for the browser tests" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
  else
    echo "$name: no /usr/bin/chromium: install Debian's chromium package, or set CHROMIUM" >&2
    exit 1
  fi
fi
