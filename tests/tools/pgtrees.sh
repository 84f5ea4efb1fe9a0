#!/usr/bin/env bash
# pgtrees.sh — Debian trees with PostgreSQL 17 and 18 (+ wal2json) for the
# integration tests, which run those servers inside them (harness.py,
# PgCluster(major=17)). PostgreSQL 15 is the host's own (bookworm).
#
#   bash tests/tools/pgtrees.sh            # build what is missing: 17 18
#   bash tests/tools/pgtrees.sh 18         # only these majors
#   OUTBOX_PG_TREES=/path bash ...         # cache dir (default below)
#
# Each major's tree is built with mmdebstrap from the Debian suite that
# ships it at its newest minor (17: trixie, 18: forky) into
# CACHE/pgNN.tmp, fixed up, checked, renamed to CACHE/pgNN, and only then
# is CACHE/pgNN.stamp written: a tree without its stamp (an interrupted
# build) is built again. A tree with its stamp is kept (idempotent; remove
# the stamp to refresh it to a newer minor). ~25 s and ~520 MB per major.
#
# When a tree cannot be built (no archive, no mmdebstrap) this prints why,
# writes the reason to CACHE/pgNN.unavailable and goes on: the tests on
# that major are then SKIPPED with that reason (conftest.py), never passed.
# The exit status is 0 unless the arguments are wrong.
set -uo pipefail

cache=${OUTBOX_PG_TREES:-/var/cache/outbox-relay/pg-trees}
mirror=${OUTBOX_PG_MIRROR:-http://deb.debian.org/debian}
majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(17 18)

suite_of() {
    case $1 in
        17) echo trixie ;;
        18) echo forky ;;
        *) return 1 ;;
    esac
}

for m in "${majors[@]}"; do
    suite_of "$m" >/dev/null || { echo "pgtrees.sh: no Debian suite known for PostgreSQL $m" >&2; exit 2; }
done

mkdir -p "$cache"
# Several checkouts on one machine share the cache: one builder at a time.
exec 9>"$cache/.lock"
flock 9

unavailable() {
    local m=$1 why=$2
    echo "pgtrees.sh: PostgreSQL $m unavailable: $why" >&2
    printf '%s\n' "$why" >"$cache/pg$m.unavailable"
}

need_mmdebstrap() {
    command -v mmdebstrap >/dev/null && return 0
    echo "pgtrees.sh: installing mmdebstrap"
    if ! { apt-get install -y -q mmdebstrap >/dev/null 2>&1 ||
           { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q mmdebstrap >/dev/null 2>&1; }; }; then
        return 1
    fi
    command -v mmdebstrap >/dev/null
}

build() {
    local m=$1 suite tree tmp log
    suite=$(suite_of "$m")
    tree=$cache/pg$m
    tmp=$cache/pg$m.tmp
    log=$cache/pg$m.log
    if [ -f "$cache/pg$m.stamp" ] && [ -x "$tree/usr/lib/postgresql/$m/bin/postgres" ]; then
        echo "pgtrees.sh: PostgreSQL $m: $(cat "$cache/pg$m.stamp")"
        return 0
    fi
    if ! need_mmdebstrap; then
        unavailable "$m" "mmdebstrap is not installed and apt-get could not install it (no Debian archive?)"
        return 0
    fi
    rm -f "$cache/pg$m.stamp"
    rm -rf "$tmp"
    echo "pgtrees.sh: building the PostgreSQL $m tree (Debian $suite, $mirror) in $tmp"
    # forky is Debian testing: its Release file may be past Valid-Until in
    # a snapshot mirror; the signature is still checked.
    if ! mmdebstrap --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
            --include="postgresql-$m,postgresql-$m-wal2json" "$suite" "$tmp" "$mirror" >"$log" 2>&1; then
        rm -rf "$tmp"
        unavailable "$m" "mmdebstrap of Debian $suite from $mirror failed (archive unreachable?): $(grep -E '^E:' "$log" | head -n 3 | tr '\n' ' ')(log: $log)"
        return 0
    fi
    # The server runs as the tree's postgres user: POSIX shared memory
    # (dynamic_shared_memory_type=posix) lives in /dev/shm, which
    # mmdebstrap leaves root-only.
    chmod 1777 "$tmp/dev/shm" "$tmp/tmp"
    local bin=$tmp/usr/lib/postgresql/$m/bin lib=$tmp/usr/lib/postgresql/$m/lib version
    if [ ! -x "$bin/postgres" ] || [ ! -f "$lib/wal2json.so" ] || ! grep -q '^postgres:' "$tmp/etc/passwd"; then
        rm -rf "$tmp"
        unavailable "$m" "the Debian $suite tree lacks postgres, wal2json.so or the postgres user (log: $log)"
        return 0
    fi
    version=$(chroot "$tmp" "/usr/lib/postgresql/$m/bin/postgres" --version 2>&1)
    rm -rf "$tree"
    mv "$tmp" "$tree"
    rm -f "$cache/pg$m.unavailable"
    echo "$version, wal2json $(chroot "$tree" dpkg-query -W -f '${Version}' "postgresql-$m-wal2json"), Debian $suite, built $(date -u +%FT%TZ)" \
        >"$cache/pg$m.stamp"
    echo "pgtrees.sh: PostgreSQL $m: $(cat "$cache/pg$m.stamp")"
}

for m in "${majors[@]}"; do
    build "$m"
done
exit 0
