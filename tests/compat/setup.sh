#!/usr/bin/env bash
# Makes a Python virtual environment with the official `openai` client, for the
# compatibility test (tests/compat/openai_client.py); see tests/venv.sh.
#
#   tests/compat/setup.sh VENV_DIR
set -euo pipefail
exec "$(dirname "$0")/../venv.sh" "${1:?usage: setup.sh VENV_DIR}" "openai==3.54.0"
