#!/usr/bin/env bash
# Makes a Python virtual environment with a pinned schemathesis, for scripts/fuzz.
# Idempotent: an environment that already holds the pinned version is left as it is.
#
#   tests/fuzz/setup.sh VENV_DIR
set -euo pipefail
venv="${1:?usage: setup.sh VENV_DIR}"
pin="schemathesis==4.32.5"
python="${PYTHON:-python3}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip show schemathesis 2>/dev/null | grep -qx "Version: ${pin#schemathesis==}"; then
  exit 0
fi
command -v "$python" >/dev/null || { echo "setup.sh: $python not found; install Python 3.10 or newer" >&2; exit 1; }
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$pin"
