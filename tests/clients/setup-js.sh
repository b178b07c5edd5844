#!/usr/bin/env bash
# Gets the JavaScript client's tests ready to run (tests/it/clients.rs): its pinned
# development packages and Debian's Chromium for the browser test (tests/npm-setup.sh).
#
#   tests/clients/setup-js.sh
exec "$(dirname "$0")/../npm-setup.sh" clients/js --chromium
