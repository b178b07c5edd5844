#!/usr/bin/env bash
# Makes a Python virtual environment with the official MCP Python SDK, for the MCP test
# (tests/mcp/mcp_client.py, run by tests/it/mcp.rs); see tests/venv.sh.
#
#   tests/mcp/setup.sh VENV_DIR
set -euo pipefail
exec "$(dirname "$0")/../venv.sh" "${1:?usage: setup.sh VENV_DIR}" "mcp==2.3.0"
