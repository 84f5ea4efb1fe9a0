#!/usr/bin/env bash
# run.sh — outbox-relay side by side with its peers on the same WAL and the
# same broker (issue 29), in one command.
#
#   bash bench/peers/run.sh                  # 100,000 events, one repetition
#   bash bench/peers/run.sh --events 20000 --reps 3
#   bash bench/peers/run.sh --smoke          # 2,000 events, one repetition
#   bash bench/peers/run.sh --peers relay-w2j,debezium
#
# On one PostgreSQL 15 (started here as bench/run.sh starts it, wal2json in
# output_plugin_libraries) it seeds one outbox backlog (events_outbox from
# sql/, events from bench/schema.sql's bench_backlog()) and drains it, one
# peer after another, each from its own copy of a slot made before the
# backlog, each into a fresh single-node Apache Kafka 4.x
# (tests/integration/kafka_cluster.py serve, topics order and shipment of 4
# partitions; one broker, so acks=all means that broker):
#   recv       pg_recvlogical into /dev/null, wal2json (the relayer's
#              options) and pgoutput: the floor, drain time only;
#   relay-w2j  outbox-relay --plugin wal2json (build/outbox-relay);
#   relay-pgo  outbox-relay --plugin pgoutput;
#   debezium   Debezium's embedded engine, PostgreSQL connector (pgoutput)
#              and outbox EventRouter, driven by bench/peers/debezium/
#              DebeziumPeer.java (its jars: bench/peers/debezium.sh);
#   poll       the seed's polling relayer (bench/polling_relayer.c), last:
#              its UPDATEs write WAL the others would decode.
#   gopqcdc    go-pq-cdc-kafka v1.3.1 (Trendyol; pgoutput, segmentio/kafka-go)
#              driven by bench/peers/gopqcdc/main.go, built by
#              bench/peers/gopqcdc.sh; left out with a warning when its
#              modules cannot be had (the Go module proxy here refuses them:
#              see that script for PEERS_GOPQCDC_SRC, their sources);
#
# Drain, for each: events/s from the process's start until our consumer
# (bench/peers/consumer.py, every partition assigned and read to its end
# before the start) has read every event; CPU µs per event of the whole
# process tree (JVM and Go runtime included) up to then; peak RSS of the
# tree; events lost, duplicated and out of per-aggregate order. One
# Markdown table at the end (medians of
# --reps, ratios to outbox-relay with wal2json); the raw results as JSON in
# bench/peers/results/ (not committed), and beside it a PNG chart of them
# (bench/peers/chart.py; docs/img/peers.png is one).
#
# Steady rates, after the drains (not the floor), --reps rounds (medians in
# the table): each relaying peer on a fresh slot and broker, pgbench
# committing 1,000 transactions/s of rate/1,000 events at each of --rates
# events/s for --steady-seconds; latency p50/p99/max from the INSERT's
# clock_timestamp() (in the payload, just before the commit and its flush)
# to our consumer reading the event (the consumer is started, and has read
# every partition to its end, before the rate starts); CPU µs per event of
# the tree over the run. Exits 1 when a run failed or an event was lost,
# duplicated or reordered.
#
# Crash runs (--crash, on in the full run): after the drains, each relaying
# peer drains the backlog once more, from its own copy of the slot, on a
# fresh broker, and is SIGKILLed (its whole process group) once our consumer
# has read half the events, then started again with the same command: the
# events lost, delivered twice and reordered across the crash, and the time
# from the restart to the last new event. Duplicates are expected there
# (at-least-once); outbox-relay losing or reordering one fails the run, a
# peer doing so is reported.
#
# Options: --events N (100000), --reps N (1), --peers LIST (all of the
# above, comma-separated), --rates LIST (2000,5000; "" for none),
# --steady-seconds N (10), --crash / --no-crash (on unless --smoke),
# --smoke (2,000 events, no steady rates, no crash runs),
# --keep (keep logs), --json FILE. Exit status 3: Maven Central (Kafka's or
# Debezium's jars) cannot be reached.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${OUTBOX_RELAY_BUILD:-$repo/build}
events=100000 reps=1 peers=recv,relay-w2j,relay-pgo,debezium,gopqcdc,poll keep=() json=""
rates=2000,5000 steady_seconds=10 crash=(--crash)
while [ $# -gt 0 ]; do
    case "$1" in
    --events) events=${2:?}; shift ;;
    --reps) reps=${2:?}; shift ;;
    --peers) peers=${2:?}; shift ;;
    --rates) rates=${2?}; shift ;;
    --steady-seconds) steady_seconds=${2:?}; shift ;;
    --smoke) events=2000 reps=1 rates="" crash=() ;;
    --crash) crash=(--crash) ;;
    --no-crash) crash=() ;;
    --keep) keep=(--keep) ;;
    --json) json=${2:?}; shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
log() { echo "[peers $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# What runs: outbox-relay, the polling relayer, Kafka's and Debezium's jars,
# the Debezium driver. All before any clock.
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
    log "installing python3-matplotlib (the chart)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-matplotlib >/dev/null ||
        die "apt-get install python3-matplotlib failed"
fi
log "building outbox-relay and the polling relayer"
if [ -f "$build/CMakeCache.txt" ]; then
    cmake --build "$build" --target outbox-relay >/dev/null
else
    OUTBOX_SKIP_APT=1 OUTBOX_RELAY_BUILD="$build" bash "$repo/tests/tools/setup.sh"
fi
cache=${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/peers
mkdir -p "$cache"
cc -O2 -g -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -o "$cache/polling-relayer" \
    "$repo/bench/polling_relayer.c" $(pkg-config --cflags --libs rdkafka libpq)
# Exit 3 (as kafka.sh and debezium.sh) when Maven Central cannot be reached.
kafka_lib=$(bash "$repo/tests/tools/kafka.sh" | tail -1) || {
    rc=$?; log "ERROR: tests/tools/kafka.sh failed (rc $rc)"; exit $((rc == 3 ? 3 : 1)); }
kafka_version=$(ls "$kafka_lib" | sed -n 's/^kafka_2\.13-\([0-9.]*\)\.jar$/\1/p' | head -1)
dbz_version=${PEERS_DEBEZIUM_VERSION:-3.6.1.Final}
dbz_lib=""
if [[ ",$peers," == *,debezium,* ]]; then
    dbz_lib=$(PEERS_DEBEZIUM_VERSION=$dbz_version bash "$repo/bench/peers/debezium.sh" | tail -1) || {
        rc=$?; log "ERROR: bench/peers/debezium.sh failed (rc $rc)"; exit $((rc == 3 ? 3 : 1)); }
    javac -d "$cache/debezium-classes" -cp "$dbz_lib/*" "$repo/bench/peers/debezium/DebeziumPeer.java" ||
        die "javac DebeziumPeer.java failed"
fi
gpc_bin="" gpc_version=""
if [[ ",$peers," == *,gopqcdc,* ]]; then
    rc=0
    gpc_bin=$(bash "$repo/bench/peers/gopqcdc.sh" | tail -1) || rc=$?
    if [ "$rc" -eq 3 ]; then
        log "WARNING: go-pq-cdc-kafka left out: its modules cannot be had (bench/peers/gopqcdc.sh)"
        peers=$(echo ",$peers," | sed 's/,gopqcdc,/,/; s/^,//; s/,$//')
        gpc_bin=""
    elif [ "$rc" -ne 0 ]; then
        die "bench/peers/gopqcdc.sh failed (rc $rc)"
    else
        gpc_version=$(go version -m "$gpc_bin" |
            awk '$1 == "dep" && $2 == "github.com/Trendyol/go-pq-cdc-kafka" { print $3 }')
    fi
fi
[ -n "$json" ] || json=$repo/bench/peers/results/peers-$(date -u +%Y%m%dT%H%M%SZ).json
rc=0
/usr/bin/python3 "$repo/bench/peers/peers.py" --events "$events" --reps "$reps" --peers "$peers" \
    --relay "$build/outbox-relay" --poll "$cache/polling-relayer" \
    --dbz-lib "$dbz_lib" --dbz-classes "$cache/debezium-classes" --dbz-version "$dbz_version" \
    --gopqcdc "$gpc_bin" --gopqcdc-version "$gpc_version" \
    --kafka-version "$kafka_version" --json "$json" --rates "$rates" \
    --steady-seconds "$steady_seconds" "${keep[@]}" "${crash[@]}" || rc=$?
# The chart (bench/peers/chart.py) beside the JSON, when the run wrote one.
if [ -s "$json" ]; then
    /usr/bin/python3 "$repo/bench/peers/chart.py" "$json" "${json%.json}.png" >/dev/null &&
        log "chart: ${json%.json}.png" || log "WARNING: no chart drawn (bench/peers/chart.py failed)"
fi
exit "$rc"
