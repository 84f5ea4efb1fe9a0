#!/usr/bin/env bash
# demo.sh — outbox-relay end to end on one machine, in one command.
#
# Starts a throwaway PostgreSQL 15 with wal2json and the outbox schema, a
# Kafka-protocol broker (build/mock-broker), and build/outbox-relay between
# them; then a "shop" places orders — an INSERT into orders and an
# order.placed outbox row in ONE transaction — and every few seconds rolls
# one back. Events are shown as they arrive in Kafka (kcat), so you can see
# that committed orders arrive, keyed by order id, and rolled-back ones never
# do. Ctrl-C stops it; DEMO_SECONDS=N stops it by itself after N seconds
# (for CI). Either way it checks the outcome, cleans up everything it
# started and exits 0 if every committed order arrived and no rolled-back
# one did.
#
# Needs Debian 12 and root: it first runs tests/tools/setup.sh, which
# installs the Debian packages that are missing (apt-get) and builds into
# build/ (incremental; OUTBOX_SKIP_SETUP=1 skips it).
# Env: OUTBOX_RELAY_BUILD (default <repo>/build), DEMO_SECONDS (0 = until
#      Ctrl-C), DEMO_INTERVAL (seconds between orders, default 1),
#      DEMO_ROLLBACK_EVERY (every Nth order is rolled back, default 4),
#      DEMO_PLUGIN (the relayer's --plugin: wal2json or pgoutput; unset, the
#      relayer's default: wal2json where the server allows it, else pgoutput;
#      the publication is sql/008_publication.sql's, loaded with the schema),
#      DEMO_KAFKA=real (Apache Kafka 4.x, one KRaft broker from Maven Central
#      via tests/tools/kafka.sh, instead of the mock cluster; first run
#      fetches ~80 MB),
#      DEMO_SERVER_DEFAULTS=1 (PostgreSQL's output_plugin_libraries left at
#      its default, which refuses wal2json; otherwise it names wal2json, as
#      docs/operations.md says).

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${OUTBOX_RELAY_BUILD:-$REPO/build}
DEMO_SECONDS=${DEMO_SECONDS:-0}
DEMO_INTERVAL=${DEMO_INTERVAL:-1}
DEMO_ROLLBACK_EVERY=${DEMO_ROLLBACK_EVERY:-4}
DEMO_PLUGIN=${DEMO_PLUGIN:-}
DEMO_KAFKA=${DEMO_KAFKA:-mock}
case $DEMO_KAFKA in mock | real) ;; *) echo "DEMO_KAFKA: mock or real" >&2; exit 2 ;; esac
[ -z "${DEMO_SERVER_DEFAULTS:-}" ] || export PGL_SERVER_DEFAULTS=1

# shellcheck source=tests/tools/pglib.sh
. "$HERE/pglib.sh"

say() { printf '[demo]  %s\n' "$*"; }
die() { printf '[demo]  error: %s\n' "$*" >&2; exit 1; }

# --- prerequisites -----------------------------------------------------------
[ "$(id -u)" -eq 0 ] || die "run as root (PostgreSQL is started as the postgres user via runuser)"
if [ -z "${OUTBOX_SKIP_SETUP:-}" ]; then
    say "installing what is missing and building (tests/tools/setup.sh)"
    OUTBOX_RELAY_BUILD=$BUILD bash "$HERE/setup.sh" || die "setup failed (see above)"
fi
for f in "$BUILD/outbox-relay" "$BUILD/mock-broker" "$BUILD/libnodelay.so"; do
    [ -e "$f" ] || die "$f is missing: cmake -S . -B build && cmake --build build"
done
for c in kcat psql runuser; do
    command -v "$c" >/dev/null || die "$c not found: apt-get install postgresql-15 postgresql-15-wal2json kcat"
done
[ -x "$PGL_BIN/initdb" ] || die "PostgreSQL 15 not found in $PGL_BIN: apt-get install postgresql-15"
[ "$DEMO_PLUGIN" != wal2json ] || [ -f "$(dirname "$PGL_BIN")/lib/wal2json.so" ] || die "wal2json not found: apt-get install postgresql-15-wal2json"

# --- state and cleanup -----------------------------------------------------------
WORK=$(mktemp -d /tmp/outbox-demo.XXXXXX)
chmod 755 "$WORK"   # the postgres user must reach the cluster dir inside
PGDIR=$WORK/pg
PGPORT=
MB_PID=
KAFKA_PID=
MB_W=
RELAY_PID=
VIEW_PID=
TAIL_PID=
STOP=0
CLEANED=0

cleanup() {
    [ "$CLEANED" -eq 1 ] && return
    CLEANED=1
    trap '' INT TERM
    if [ -n "$VIEW_PID" ]; then
        kill -TERM -- "-$VIEW_PID" 2>/dev/null
        wait "$VIEW_PID" 2>/dev/null   # gone before the broker stops under it
    fi
    if [ -n "$RELAY_PID" ] && kill -0 "$RELAY_PID" 2>/dev/null; then
        say "stopping outbox-relay (SIGTERM: it waits for outstanding deliveries and confirms them)"
        kill -TERM "$RELAY_PID" 2>/dev/null
        for _ in $(seq 1 400); do kill -0 "$RELAY_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$RELAY_PID" 2>/dev/null
        wait "$RELAY_PID" 2>/dev/null
        say "outbox-relay exited with status $?"
    fi
    if [ -n "${KAFKA_PID:-}" ]; then
        kill -TERM "$KAFKA_PID" 2>/dev/null
        for _ in $(seq 1 300); do kill -0 "$KAFKA_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$KAFKA_PID" 2>/dev/null
        wait "$KAFKA_PID" 2>/dev/null
    fi
    if [ -n "$MB_PID" ]; then
        [ -n "$MB_W" ] && { echo quit >&"$MB_W"; } 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$MB_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$MB_PID" 2>/dev/null
        wait "$MB_PID" 2>/dev/null
    fi
    [ -n "$TAIL_PID" ] && kill -TERM -- "-$TAIL_PID" 2>/dev/null
    pgl_stop "$PGDIR" fast
    if [ "${DEMO_KEEP:-0}" = 1 ]; then
        say "logs kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'STOP=1' INT TERM

# --- PostgreSQL ------------------------------------------------------------------
# A port seen free can still be taken before the server binds it (other
# servers starting at the same moment): then another port, twice more.
for try in 1 2 3; do
    PGPORT=$(pgl_free_port) || exit 1
    say "starting PostgreSQL 15 (wal_level=logical$([ -n "${PGL_SERVER_DEFAULTS:-}" ] || echo ", wal2json allowed")) on 127.0.0.1:$PGPORT in $PGDIR"
    pgl_start "$PGDIR" "$PGPORT" 2>"$PGDIR.start.err" && break
    if [ "$try" = 3 ] || ! grep -q "Address already in use" "$PGDIR.start.err"; then
        cat "$PGDIR.start.err" >&2
        exit 1
    fi
done
rm -f "$PGDIR.start.err"
pgl_load_sql "$PGPORT" "$REPO/sql" || exit 1
pgl_psql "$PGPORT" <<'SQL' || exit 1
CREATE TABLE IF NOT EXISTS public.orders (
    id        UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    customer  TEXT NOT NULL,
    amount    NUMERIC(10,2) NOT NULL,
    placed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
SQL

# --- Kafka-protocol broker --------------------------------------------------------
if [ "$DEMO_KAFKA" = real ]; then
    # A real Apache Kafka broker (KRaft), served until this script stops it;
    # its JVM dies with the server process (tests/integration/kafka_cluster.py).
    say "starting Apache Kafka (one KRaft broker; tests/tools/kafka.sh fetches it from Maven Central once)"
    setsid /usr/bin/python3 "$REPO/tests/integration/kafka_cluster.py" serve --nodes 1 \
        --bootstrap-file "$WORK/kafka.bootstrap" --topic order:4 >"$WORK/kafka.log" 2>&1 &
    KAFKA_PID=$!
    for _ in $(seq 1 3000); do
        [ -s "$WORK/kafka.bootstrap" ] && break
        kill -0 "$KAFKA_PID" 2>/dev/null || die "Kafka did not start: $(tail -5 "$WORK/kafka.log")"
        sleep 0.1
    done
    [ -s "$WORK/kafka.bootstrap" ] || die "Kafka did not start within 300 s: $(tail -5 "$WORK/kafka.log")"
    BOOTSTRAP=$(cat "$WORK/kafka.bootstrap")
    say "Apache Kafka broker at $BOOTSTRAP, topic 'order' with 4 partitions"
else
# setsid: Ctrl-C goes to this script only, which then stops everything in order.
# LD_PRELOAD: TCP_NODELAY on its connections, as a real broker has them
# (tests/tools/nodelay_preload.c).
coproc BROKER { LD_PRELOAD="$BUILD/libnodelay.so" exec setsid "$BUILD/mock-broker" 2>"$WORK/mock-broker.log"; }
# Own copies of the pid and pipe ends: bash drops BROKER/BROKER_PID as soon
# as it notices the coprocess is gone.
MB_PID=$BROKER_PID
exec {MB_R}<&"${BROKER[0]}" {MB_W}>&"${BROKER[1]}"
read -r -t 15 line <&"$MB_R" || die "mock-broker did not start"
BOOTSTRAP=${line#BOOTSTRAP }
echo "topic order 4" >&"$MB_W"
read -r -t 15 answer <&"$MB_R"
[ "$answer" = ok ] || die "mock-broker: topic order: $answer"
say "Kafka-protocol broker (librdkafka mock cluster) at $BOOTSTRAP, topic 'order' with 4 partitions"
fi

# --- outbox-relay --------------------------------------------------------------------
DSN="host=127.0.0.1 port=$PGPORT dbname=postgres user=outbox_relay"
plugin_args=()
[ -z "$DEMO_PLUGIN" ] || plugin_args=(--plugin "$DEMO_PLUGIN")
say "starting: outbox-relay --dsn '$DSN' --brokers $BOOTSTRAP ${plugin_args[*]} --status-interval 1"
setsid "$BUILD/outbox-relay" --dsn "$DSN" --brokers "$BOOTSTRAP" "${plugin_args[@]}" --status-interval 1 \
    2>"$WORK/relay.log" &
RELAY_PID=$!
# shellcheck disable=SC2016  # $1 is expanded by the inner bash
setsid bash -c 'tail -n +1 -F "$1" 2>/dev/null | sed -u "s/^/[relay] /"' _ "$WORK/relay.log" &
TAIL_PID=$!

for _ in $(seq 1 300); do
    active=$(pgl_psql "$PGPORT" -At -c \
        "SELECT active FROM pg_replication_slots WHERE slot_name = 'outbox_relay'" 2>/dev/null)
    [ "$active" = t ] && break
    kill -0 "$RELAY_PID" 2>/dev/null || die "outbox-relay exited; see its log above"
    sleep 0.1
done
[ "${active:-}" = t ] || die "outbox-relay did not start streaming within 30 s"

# --- live view of the topic ------------------------------------------------------
say "events as they arrive in Kafka:  kcat -C -b $BOOTSTRAP -t order -f 'partition %p offset %o key %k headers %h: %s\\n'"
# shellcheck disable=SC2016  # $1 is expanded by the inner bash
setsid bash -c 'exec kcat -C -q -u -b "$1" -t order -o beginning \
    -f "partition %p offset %o key %k headers %h: %s\n"' _ "$BOOTSTRAP" &
VIEW_PID=$!

# --- the shop ----------------------------------------------------------------------
if [ "$DEMO_SECONDS" -gt 0 ]; then
    say "placing an order every ${DEMO_INTERVAL}s for ${DEMO_SECONDS}s (every ${DEMO_ROLLBACK_EVERY}th rolled back)"
else
    say "placing an order every ${DEMO_INTERVAL}s (every ${DEMO_ROLLBACK_EVERY}th rolled back); Ctrl-C to stop"
fi
: >"$WORK/committed"
: >"$WORK/rolled_back"
START=$SECONDS
n=0
while [ "$STOP" -eq 0 ]; do
    if [ "$DEMO_SECONDS" -gt 0 ] && [ $((SECONDS - START)) -ge "$DEMO_SECONDS" ]; then
        break
    fi
    n=$((n + 1))
    amount=$(printf '%d.%02d' $((RANDOM % 300 + 1)) $((RANDOM % 100)))
    customer="customer-$((RANDOM % 20 + 1))"
    if [ $((n % DEMO_ROLLBACK_EVERY)) -eq 0 ]; then end=ROLLBACK; else end=COMMIT; fi
    # The business row and its event in ONE transaction.
    order_id=$(pgl_psql "$PGPORT" -At <<SQL
BEGIN;
WITH o AS (
    INSERT INTO public.orders (customer, amount) VALUES ('$customer', $amount)
    RETURNING id, customer, amount
)
INSERT INTO public.events_outbox (aggregate_id, type, payload)
SELECT id, 'order.placed',
       jsonb_build_object('order_id', id, 'customer', customer, 'amount', amount, 'n', $n)
FROM o
RETURNING aggregate_id;
$end;
SQL
    )
    rc=$?
    if [ "$STOP" -ne 0 ]; then
        break   # Ctrl-C may have cut that transaction short: it did not commit
    fi
    if [ $rc -ne 0 ] || [ -z "$order_id" ]; then
        die "placing order $n failed"
    fi
    if [ "$end" = COMMIT ]; then
        echo "$order_id" >>"$WORK/committed"
        say "shop: order #$n committed  ($customer, $amount)  id=$order_id"
    else
        echo "$order_id" >>"$WORK/rolled_back"
        say "shop: order #$n ROLLED BACK ($customer, $amount)  id=$order_id — its order.placed event must never reach Kafka"
    fi
    sleep "$DEMO_INTERVAL" 2>/dev/null
done
trap '' INT TERM

[ "$DEMO_KAFKA" = real ] || kill -0 "$MB_PID" 2>/dev/null || say "note: mock-broker is not running any more"
# --- outcome -----------------------------------------------------------------------
committed=$(wc -l <"$WORK/committed")
rolled=$(wc -l <"$WORK/rolled_back")
say "stopping the shop: $committed orders committed, $rolled rolled back; checking Kafka ..."
keys=$WORK/kafka_keys
for _ in $(seq 1 30); do
    timeout 20 kcat -C -q -b "$BOOTSTRAP" -t order -o beginning -e -f '%k\n' >"$keys" 2>/dev/null
    missing=$(grep -cvxF -f "$keys" "$WORK/committed" 2>/dev/null)
    [ -s "$WORK/committed" ] || missing=0
    [ "${missing:-1}" -eq 0 ] && break
    sleep 0.5
done
leaked=0
[ -s "$WORK/rolled_back" ] && leaked=$(grep -cxF -f "$WORK/rolled_back" "$keys")
lsns=$(pgl_psql "$PGPORT" -At -c "SELECT confirmed_flush_lsn || ' (current WAL ' || pg_current_wal_lsn() || ')' FROM pg_replication_slots WHERE slot_name = 'outbox_relay'")
say "Kafka topic 'order': $(wc -l <"$keys") events; committed orders missing: $missing; rolled-back orders present: $leaked"
say "slot outbox_relay confirmed up to $lsns"
ok=0
if [ "$missing" -eq 0 ] && [ "$leaked" -eq 0 ]; then
    say "OK: every committed order arrived, no rolled-back order did"
else
    say "FAILED: see the relay log above"
    ok=1
fi
cleanup
exit $ok
