#!/usr/bin/env bash
# Makes a Python virtual environment with a pinned schemathesis, for scripts/fuzz; see
# tests/venv.sh.
#
#   tests/fuzz/setup.sh VENV_DIR
set -euo pipefail
exec "$(dirname "$0")/../venv.sh" "${1:?usage: setup.sh VENV_DIR}" "schemathesis==4.32.5"
