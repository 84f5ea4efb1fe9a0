#!/usr/bin/env bash
# run.sh — the whole test suite, from a fresh Debian 12 machine (as root):
# installs packages, builds, runs the unit tests (ctest), the same unit tests
# under ASan/UBSan, the fuzz targets for 20 s each (tests/fuzz/run.sh), then
# the integration tests (pytest) against a real PostgreSQL 15 with wal2json
# and a Kafka-protocol broker, both started by the tests themselves on
# 127.0.0.1.
#
#   bash tests/run.sh              # everything
#   bash tests/run.sh -k core      # pytest selection passed through
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bash tests/tools/setup.sh

echo "== unit tests"
ctest --test-dir build --output-on-failure

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
OUTBOX_SKIP_APT=1 OUTBOX_RELAY_BUILD="$repo/build-asan" OUTBOX_BUILD_TYPE=Debug \
    OUTBOX_CMAKE_ARGS="-DOUTBOX_SANITIZE=ON" bash tests/tools/setup.sh
ctest --test-dir build-asan --output-on-failure

echo "== fuzzing the decoder and the wire parser (clang, ASan/UBSan; docs/failure-modes.md has a longer run)"
FUZZ_SECONDS=${FUZZ_SECONDS:-20} bash tests/fuzz/run.sh

echo "== benchmark smoke run (small sizes; fails on a missing event, never on timing)" && bash bench/run.sh --quick
echo "== integration tests"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration "$@"
