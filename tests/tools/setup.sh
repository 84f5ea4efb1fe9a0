#!/usr/bin/env bash
# setup.sh — install what building, testing and the demo need on Debian 12,
# then build into ./build. Idempotent: packages already installed are not
# fetched again, and the build is incremental.
#
#   bash tests/tools/setup.sh            # packages + build
#   OUTBOX_SKIP_APT=1 bash tests/tools/setup.sh   # build only
#   OUTBOX_BUILD_ONLY=1 bash tests/tools/setup.sh # only the packages the build needs
#                                                 # (docker/Dockerfile's build stage)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${OUTBOX_RELAY_BUILD:-$repo/build}

packages=(
    build-essential cmake pkg-config
    libpq-dev librdkafka-dev libmicrohttpd-dev
)
# What the tests and the demo need on top of the build.
[ -n "${OUTBOX_BUILD_ONLY:-}" ] || packages+=(
    postgresql-15 postgresql-15-wal2json postgresql-client-15
    kcat procps openssl
    clang libclang-rt-14-dev
    python3 python3-pytest python3-pytest-xdist python3-psycopg2 python3-confluent-kafka python3-yaml
    prometheus systemd man-db
)

# PostgreSQL at the newest minor the archive serves (bookworm-security):
# the tests prove what users install today, never the image's older minor.
upgrade=(postgresql-15 postgresql-client-15 libpq5 libpq-dev)

if [ -z "${OUTBOX_SKIP_APT:-}" ]; then
    missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    if [ -z "${OUTBOX_BUILD_ONLY:-}" ] && [ "$(id -u)" -eq 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q || echo "setup: apt-get update failed; the package lists stay as they were" >&2
        for p in "${upgrade[@]}"; do
            have=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)
            want=$(apt-cache policy "$p" | sed -n 's/^  Candidate: //p')
            if [ -n "$want" ] && [ "$want" != "(none)" ] && [ "$have" != "$want" ]; then
                missing+=("$p")
            fi
        done
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "setup: missing packages: ${missing[*]} (run as root to install them)" >&2
            exit 1
        fi
        echo "setup: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        [ -n "${OUTBOX_BUILD_ONLY:-}" ] && apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
fi

cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE="${OUTBOX_BUILD_TYPE:-RelWithDebInfo}" \
    ${OUTBOX_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
echo "setup: built $build/outbox-relay" >&2
