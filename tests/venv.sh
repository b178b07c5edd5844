#!/usr/bin/env bash
# Makes a Python virtual environment holding one pinned package, for the tools the tests and
# scripts drive (tests/compat/setup.sh, tests/fuzz/setup.sh). Idempotent: an environment
# that already holds the pinned version is left as it is.
#
#   tests/venv.sh VENV_DIR PACKAGE==VERSION
set -euo pipefail
venv="${1:?usage: venv.sh VENV_DIR PACKAGE==VERSION}"
pin="${2:?usage: venv.sh VENV_DIR PACKAGE==VERSION}"
package="${pin%%==*}"
python="${PYTHON:-python3}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip show "$package" 2>/dev/null | grep -qx "Version: ${pin#*==}"; then
  exit 0
fi
command -v "$python" >/dev/null || { echo "venv.sh: $python not found; install Python 3.10 or newer" >&2; exit 1; }
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$pin"
