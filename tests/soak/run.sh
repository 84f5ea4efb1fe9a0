#!/usr/bin/env bash
# run.sh — issue 11's soak (tests/soak/soak.py; SOAK_SECONDS, SOAK_RATE, ... there): build, then run it.
set -euo pipefail; cd "$(dirname "$0")/../.."; bash tests/tools/setup.sh && exec /usr/bin/python3 tests/soak/soak.py "$@"
