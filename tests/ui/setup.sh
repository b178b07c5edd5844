#!/usr/bin/env bash
# Gets the page's browser tests ready to run (tests/it/ui.rs): ui/'s pinned development
# packages (playwright-core among them) and Debian's Chromium (tests/npm-setup.sh).
#
#   tests/ui/setup.sh
exec "$(dirname "$0")/../npm-setup.sh" ui --chromium
