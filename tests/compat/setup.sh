#!/usr/bin/env bash
# Makes a Python virtual environment with the official `openai` client, for the
# compatibility test (tests/compat/openai_client.py). Idempotent: an environment that
# already holds the pinned version is left as it is.
#
#   tests/compat/setup.sh VENV_DIR
set -euo pipefail
venv="${1:?usage: setup.sh VENV_DIR}"
pin="openai==3.54.0"
python="${PYTHON:-python3}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip show openai 2>/dev/null | grep -qx "Version: ${pin#openai==}"; then
  exit 0
fi
command -v "$python" >/dev/null || { echo "setup.sh: $python not found; install Python 3.9 or newer" >&2; exit 1; }
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$pin"
