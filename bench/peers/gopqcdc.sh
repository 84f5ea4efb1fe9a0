#!/usr/bin/env bash
# gopqcdc.sh — builds the go-pq-cdc-kafka peer (bench/peers/gopqcdc/, the
# driver; bench/peers/run.sh calls this) and prints the binary's path.
#
#   bash bench/peers/gopqcdc.sh
#   PEERS_GOPQCDC_SRC=DIR bash bench/peers/gopqcdc.sh
#
# The driver's go.mod requires github.com/Trendyol/go-pq-cdc-kafka v1.3.1
# and github.com/Trendyol/go-pq-cdc v1.10.12 (the version v1.3.1 requires).
# They come from the Go module proxy. Where the proxy refuses them (the one
# these machines reach answers 403 "not available" for both), set
# PEERS_GOPQCDC_SRC to a directory holding their sources at those tags, as
# DIR/go-pq-cdc-kafka and DIR/go-pq-cdc:
#
#   git clone -b v1.3.1 https://github.com/Trendyol/go-pq-cdc-kafka DIR/go-pq-cdc-kafka
#   git clone -b v1.10.12 https://github.com/Trendyol/go-pq-cdc DIR/go-pq-cdc
#
# and the build takes them through `replace` directives in a copy of the
# driver (nothing of theirs enters this tree); every other module still
# comes from the proxy. The default DIR is /var/cache/outbox-relay/
# gopqcdc-src when it holds both.
#
# Cache: $PEERS_GOPQCDC_CACHE (default ~/.cache/outbox-relay/peers/gopqcdc).
# Exit status: 0 and the binary's path on stdout; 3 when the peer cannot be
# built here (no go command, or the proxy refuses the modules or cannot be
# reached and no sources are given):
# run.sh then leaves the peer out with a warning; 1 on any other failure.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
# The versions the driver's go.mod requires, and those a binary was built with.
required() { sed -n "s|^[[:space:]]*github.com/Trendyol/$1 \(v[^[:space:]]*\).*|\1|p" "$repo/bench/peers/gopqcdc/go.mod"; }
built() { go version -m "$2" | awk -v m="github.com/Trendyol/$1" '$1 == "dep" && $2 == m { print $3 }'; }
kafka_v=$(required go-pq-cdc-kafka) cdc_v=$(required go-pq-cdc)
cache=${PEERS_GOPQCDC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/peers/gopqcdc}
src=${PEERS_GOPQCDC_SRC:-}
if [ -z "$src" ] && [ -f /var/cache/outbox-relay/gopqcdc-src/go-pq-cdc-kafka/go.mod ] &&
    [ -f /var/cache/outbox-relay/gopqcdc-src/go-pq-cdc/go.mod ]; then
    src=/var/cache/outbox-relay/gopqcdc-src
fi
say() { echo "gopqcdc.sh: $*" >&2; }
command -v go >/dev/null || { say "no go command (Debian: golang-go; Go 1.25 or newer)"; exit 3; }

rm -rf "$cache/build"
mkdir -p "$cache"
cp -r "$repo/bench/peers/gopqcdc" "$cache/build"
cd "$cache/build"
if [ -n "$src" ]; then
    for m in go-pq-cdc-kafka go-pq-cdc; do
        [ -f "$src/$m/go.mod" ] || { say "PEERS_GOPQCDC_SRC=$src has no $m/go.mod"; exit 1; }
        grep -q "^module github.com/Trendyol/$m\$" "$src/$m/go.mod" ||
            { say "$src/$m/go.mod is not github.com/Trendyol/$m"; exit 1; }
    done
    go mod edit -replace "github.com/Trendyol/go-pq-cdc-kafka=$src/go-pq-cdc-kafka" \
        -replace "github.com/Trendyol/go-pq-cdc=$src/go-pq-cdc"
    say "taking go-pq-cdc-kafka and go-pq-cdc from $src (replace directives)"
fi
if ! timeout 600 go mod tidy >tidy.log 2>&1; then
    if grep -qE "Trendyol/go-pq-cdc.*(403|404|410|not available|not found)|dial tcp|i/o timeout|no such host" tidy.log; then
        say "the Go module proxy does not serve go-pq-cdc-kafka $kafka_v / go-pq-cdc $cdc_v here:"
        grep -m2 -E "403|404|410|not available|dial tcp|i/o timeout|no such host" tidy.log >&2 || true
        say "set PEERS_GOPQCDC_SRC to their sources (see this script's header)"
        exit 3
    fi
    tail -20 tidy.log >&2
    say "go mod tidy failed"
    exit 1
fi
go build -trimpath -o "$cache/gopqcdc-peer" . >build.log 2>&1 ||
    { tail -20 build.log >&2; say "go build failed"; exit 1; }
# The versions built are the ones go.mod names, whichever way they came
# (go mod tidy would raise one that the sources given require higher).
got="$(built go-pq-cdc-kafka "$cache/gopqcdc-peer") $(built go-pq-cdc "$cache/gopqcdc-peer")"
[ "$got" = "$kafka_v $cdc_v" ] ||
    { say "built with go-pq-cdc-kafka/go-pq-cdc $got, go.mod requires $kafka_v $cdc_v"; exit 1; }
echo "$cache/gopqcdc-peer"
