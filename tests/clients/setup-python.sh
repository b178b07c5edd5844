#!/usr/bin/env bash
# Makes a Python virtual environment with the Python client (clients/python) installed from
# this checkout and its pinned test tools, for tests/it/clients.rs. PyPI must be reachable
# the first time; the pinned tools are installed once, the client every time.
#
#   tests/clients/setup-python.sh VENV_DIR
set -euo pipefail
venv="${1:?usage: setup-python.sh VENV_DIR}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="${PYTHON:-python3}"
pins=(httpx==0.28.1 pytest==8.3.4 pytest-asyncio==0.24.0 setuptools==75.8.0)
command -v "$python" >/dev/null || { echo "setup-python.sh: $python not found; install Python 3.9 or newer" >&2; exit 1; }
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --quiet --disable-pip-version-check)
if ! "$venv/bin/python" -m pip show pytest-asyncio 2>/dev/null | grep -qx "Version: 0.24.0"; then
  "${pip[@]}" install "${pins[@]}"
fi
"${pip[@]}" install --no-deps --no-build-isolation --force-reinstall "$root/clients/python"
