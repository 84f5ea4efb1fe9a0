#!/usr/bin/env bash
# run.sh — the outbox-relay benchmark, in one command (issue 5).
#
#   bash bench/run.sh            # the full run (about 15 minutes on 2 cores)
#   bash bench/run.sh --quick    # CI smoke run: small sizes, one repetition;
#                                # fails only on errors (an event missing, a
#                                # process failing), never on timing
#   bash bench/run.sh --out FILE # also write the Markdown table to FILE
#
# It builds what it needs, starts its own PostgreSQL 15 (wal2json; fsync and
# synchronous_commit on) on a free 127.0.0.1 port in a temp dir and
# build/mock-broker (librdkafka's mock cluster, with TCP_NODELAY on its
# connections as a real broker has: tests/tools/nodelay_preload.c), and measures,
# in one run, everything co-located on this machine:
#   drain   the same WAL backlog (BENCH_BACKLOG events: half in one-event
#           transactions, half in 2..20-event ones, ~370-byte payloads; and
#           first a backlog of as many small events, in the same transactions
#           with payloads of a few bytes, without the polling relayer) drained
#           by pg_recvlogical with the relayer's exact wal2json options into
#           /dev/null (the decode limit), by outbox-relay (until a consumer
#           has read every event) and by the seed's polling relayer
#           (bench/polling_relayer.c, same until-consumed clock);
#   steady  producers at 1,000 and 5,000 events/s and unthrottled: commit-to-
#           delivery latency (the relayer's histogram) and the broker's share
#           of it (produce to acknowledgement), the same for pg_recvlogical
#           alone (the floor, bench/w2j_latency.c, also binned as the
#           relayer's histogram is), and, unthrottled or with
#           BENCH_STEADY_CONSUMER=live, transaction-start-to-consumer latency
#           (bench/consumer.c); relayer CPU per event and peak RSS; where
#           every core went;
#   huge    one 1,000,000-row transaction: time and relayer peak RSS;
#   load    producer transactions/s (pgbench, bench/producer.pgbench) and WAL
#           bytes per event with no relayer, outbox-relay, polling relayer;
#   decoder bench/bench_decoder.c: wal2json lines/s on one core;
#   consume BENCH_CONSUME_EVENTS order events (sql/examples/orders.sql's
#           place_order(), published by outbox-relay) applied by
#           outbox-consume with its defaults and the loyalty-points --apply,
#           then by the seed's one-transaction-per-event consumer
#           (bench/seed_consumer.c) on the same topic: events/s after the
#           group join (reported apart), CPU per event, the ratio.
# Medians over repetitions; ratios in the table. Raw numbers and logs stay
# in the work dir when BENCH_KEEP=1 or when the run fails.
#
# Knobs (environment): BENCH_PHASES="drain steady huge load decoder consume",
# BENCH_BACKLOG, BENCH_CONSUME_EVENTS, BENCH_CONSUME_REPS, BENCH_CONSUME_ARGS
# (extra outbox-consume arguments), BENCH_CONSUME_PREFIX (run outbox-consume
# under a profiler, as BENCH_RELAY_PREFIX), BENCH_REPS, BENCH_STEADY_REPS, BENCH_CLIENTS (pgbench
# clients, 16), BENCH_RELAY_ARGS (extra outbox-relay arguments, e.g.
# "-X linger.ms=5"), BENCH_RELAY_PREFIX (run outbox-relay under a profiler,
# e.g. "valgrind --tool=callgrind --callgrind-out-file=/tmp/relay.cg"),
# BENCH_STEADY_CONSUMER (after or live: when the fixed-rate steady runs read
# their events back), BENCH_KAFKA (mock, real or both: the broker, below),
# BENCH_KEEP=1, OUTBOX_RELAY_BUILD (default build/).
#
# The broker (BENCH_KAFKA): "mock" (the default, and what --quick and CI
# run) is build/mock-broker; "real" runs every phase against a real Apache
# Kafka 4.x, one KRaft node (broker and controller) on this machine,
# started by tests/integration/kafka_cluster.py serve (its jars from Maven
# Central through tests/tools/kafka.sh, cached), fresh for every run as the
# mock is; "both" runs the drain and steady phases (their latency rows
# included) once on each broker in the same bench run and prints those rows
# with a column per broker; the other phases then use the mock only. The
# broker's CPU is the JVM's (and its python parent's).
set -euo pipefail

usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit "${1:-0}"
}

QUICK=0
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --out) OUT=${2:?--out needs a file}; shift ;;
    -h | --help) usage 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; usage 2 ;;
    esac
    shift
done

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${OUTBOX_RELAY_BUILD:-$repo/build}
PG_BIN=/usr/lib/postgresql/15/bin

if [ "$QUICK" = 1 ]; then
    BACKLOG=${BENCH_BACKLOG:-5000}; REPS=${BENCH_REPS:-1}
    STEADY_SECONDS=3; STEADY_REPS=1; MAX_EVENTS=5000; HUGE_ROWS=20000
    LOAD_SECONDS=3; LOAD_REPS=1; DEC_ITER=200000; DEC_RUNS=1
    CONSUME_EVENTS=${BENCH_CONSUME_EVENTS:-2000}; CONSUME_REPS=${BENCH_CONSUME_REPS:-1}
else
    BACKLOG=${BENCH_BACKLOG:-100000}; REPS=${BENCH_REPS:-5}
    STEADY_SECONDS=10; STEADY_REPS=${BENCH_STEADY_REPS:-3}; MAX_EVENTS=100000; HUGE_ROWS=1000000
    LOAD_SECONDS=10; LOAD_REPS=3; DEC_ITER=2000000; DEC_RUNS=5
    CONSUME_EVENTS=${BENCH_CONSUME_EVENTS:-100000}; CONSUME_REPS=${BENCH_CONSUME_REPS:-3}
fi
PHASES=${BENCH_PHASES:-drain steady huge load decoder consume}
CLIENTS=${BENCH_CLIENTS:-16}
# When the steady runs at fixed rates read their events back: "after" the
# relayer has delivered them (the default), or "live" while they are
# produced. librdkafka 2.0.2's mock broker answers each fetch with one
# message set per partition and finds it by walking the partition's log
# from its start, so a live reader makes the broker's thread, which also
# answers the relayer's produce requests, walk a growing list about once
# per message set: at 5,000 events/s that was 80 % of the broker's time
# and several ms of every acknowledgement (docs/benchmarks.md). The floor
# runs have no broker and no reader. The unthrottled run always reads live.
STEADY_CONSUMER=${BENCH_STEADY_CONSUMER:-after}
case $STEADY_CONSUMER in after | live) ;; *) echo "BENCH_STEADY_CONSUMER: after or live" >&2; exit 2 ;; esac
# The broker(s): BROKER_KINDS in the order each brokered run uses them.
# With "both", results from the real broker are recorded under their
# phase name + "@real" (rec, med), the mock's under the plain name; a
# measurement that involves no broker (pg_recvlogical, the floor) is
# recorded under both, so each broker's rows and ratios read alike.
KAFKA_MODE=${BENCH_KAFKA:-mock}
case $KAFKA_MODE in
mock) BROKER_KINDS=(mock); ALL_SUFS=("") ;;
real) BROKER_KINDS=(real); ALL_SUFS=("") ;;
both) BROKER_KINDS=(mock real); ALL_SUFS=("" "@real") ;;
*) echo "BENCH_KAFKA: mock, real or both" >&2; exit 2 ;;
esac
BROKER_KIND=${BROKER_KINDS[0]} # the broker broker_start starts (with_broker sets it)
REC_SUFS=("${ALL_SUFS[@]}")    # the suffixes rec records under (with_broker sets it)
read -r -a RELAY_EXTRA <<<"${BENCH_RELAY_ARGS:-}"
# A command to run outbox-relay under, for profiles (timings then mean
# nothing), e.g. "valgrind --tool=callgrind --callgrind-out-file=/tmp/relay.cg".
read -r -a RELAY_PREFIX <<<"${BENCH_RELAY_PREFIX:-}"
read -r -a CONSUME_EXTRA <<<"${BENCH_CONSUME_ARGS:-}"
read -r -a CONSUME_PREFIX <<<"${BENCH_CONSUME_PREFIX:-}"
TOPICS=order,shipment # the {prefix} of bench_type()'s event types

# ------------------------------------------------------------------ helpers

log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}
now_us() { echo $(($(date +%s%N) / 1000)); }
has_phase() { [[ " $PHASES " == *" $1 "* ]]; }

work=$(mktemp -d /tmp/outbox-bench.XXXXXX)
chmod 755 "$work"
RESULTS=$work/results.tsv
: >"$RESULTS"
PIDS=()  # every background process we started, stopped at exit
PG_PID=""
BROKER_PID=""
BROKER_FD=""
ok=0

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [ -n "$PG_PID" ] && kill -0 "$PG_PID" 2>/dev/null; then
        kill -INT "$PG_PID" 2>/dev/null || true # fast shutdown
        for _ in $(seq 300); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$PG_PID" 2>/dev/null || true
        wait "$PG_PID" 2>/dev/null || true
    fi
    if [ "$ok" = 1 ] && [ -z "${BENCH_KEEP:-}" ]; then
        rm -rf "$work"
    else
        log "logs and raw results kept in $work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts "$@" in the background and remembers its pid in $BG_PID.
bg() {
    "$@" &
    BG_PID=$!
    PIDS+=("$BG_PID")
}

# Stops a process we started (SIGTERM, then SIGKILL after 30 s) and reaps it;
# its exit status ends up in $STOP_RC.
stop_pid() {
    local pid=$1
    STOP_RC=0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || STOP_RC=$?
    forget_pid "$pid"
}

# Drops a reaped pid from PIDS.
forget_pid() {
    local keep=() p
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

# Waits for a pid we started, up to $2 seconds; its status in $WAIT_RC.
wait_pid() {
    local pid=$1 limit=$2 i
    for ((i = 0; i < limit * 20; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        WAIT_RC=124
        return
    fi
    WAIT_RC=0
    wait "$pid" 2>/dev/null || WAIT_RC=$?
    forget_pid "$pid"
}

free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Records one measurement: phase, name, value (under each of REC_SUFS).
rec() {
    local s
    for s in "${REC_SUFS[@]}"; do printf '%s%s\t%s\t%s\n' "$1" "$s" "$2" "$3" >>"$RESULTS"; done
}
# suf_of KIND: the phase suffix KIND's results are recorded under.
suf_of() { if [ "$KAFKA_MODE" = both ] && [ "$1" = real ]; then echo @real; fi; }
# with_broker KIND CMD...: CMD with broker_start starting KIND and rec
# recording under KIND's suffix only (bash's locals are seen by callees).
with_broker() {
    local BROKER_KIND=$1
    local REC_SUFS=("$(suf_of "$1")")
    shift
    "$@"
}
# The last value recorded under name KEY in phase PHASE (this broker's).
last_rec() { awk -F'\t' -v p="$1${REC_SUFS[0]}" -v k="$2" '$1 == p && $2 == k { v = $3 } END { print v }' "$RESULTS"; }

# Median of every value recorded under phase/name ("" if none); the phase
# read is PHASE$TSUF (the table sets TSUF to print the real broker's rows).
med() {
    awk -F'\t' -v p="$1${TSUF:-}" -v k="$2" '$1 == p && $2 == k { print $3 }' "$RESULTS" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2];
                                  else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Arithmetic on decimals: calc '<awk expression>'.
calc() { awk "BEGIN { printf \"%.6g\", $1 }"; }
# A / B and A - B, "" when either is missing (or B is 0 for the quotient).
quot() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print ""; else printf "%.6g", a / b }'; }
diff_of() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") print ""; else printf "%.6g", a - b }'; }
fmt() { # fmt FORMAT VALUE ("—" when the value is empty)
    if [ -z "$2" ]; then echo "—"; else awk -v v="$2" "BEGIN { printf \"$1\", v }"; fi
}

lsn_int() { # 16/B374D848 -> decimal
    local hi=${1%/*} lo=${1#*/}
    echo $(((16#$hi << 32) | 16#$lo))
}

proc_ticks() { # utime + stime of a pid, in clock ticks
    awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}
proc_hwm_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
# Context switches (voluntary + involuntary) of a process's threads: "MAIN
# OTHER", the main thread's and the sum of the others' (librdkafka's). A
# voluntary switch is a wait that ended, i.e. a wake-up.
proc_ctxsw() {
    local t main=0 other=0 n
    for t in /proc/$1/task/*; do
        n=$(awk '/^(non)?voluntary_ctxt_switches:/ { s += $2 } END { print s + 0 }' "$t/status" 2>/dev/null) || continue
        if [ "${t##*/}" = "$1" ]; then main=$((main + n)); else other=$((other + n)); fi
    done
    echo "$main $other"
}
TICK=$(getconf CLK_TCK)
NCPU=$(nproc)

# Where the cores go: CPU ticks of the whole machine (busy, total over all
# CPUs, from /proc/stat) and of all of PostgreSQL (the postmaster, its live
# children and, through cutime/cstime, the children it reaped: backends of
# connections that ended meanwhile).
machine_ticks() { awk '/^cpu / { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6 }' /proc/stat; }
pg_ticks() {
    local total pid t
    total=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$PG_PID/stat")
    for pid in $(ps --ppid "$PG_PID" -o pid=); do
        t=$(proc_ticks "$pid" 2>/dev/null) && total=$((total + t))
    done
    echo "$total"
}
# cpu_begin; ...; cpu_end PHASE PREFIX: records PREFIX_{machine,postgres}_cores
# (average cores busy over the interval) and the interval in seconds.
cpu_begin() {
    read -r CPU_M0 CPU_T0 < <(machine_ticks)
    CPU_P0=$(pg_ticks)
    CPU_W0=$(now_us)
}
cpu_end() {
    local m1 t1 p1 secs
    read -r m1 t1 < <(machine_ticks)
    p1=$(pg_ticks)
    secs=$(calc "($(now_us) - $CPU_W0) / 1e6")
    CPU_SECS=$secs
    rec "$1" "$2_secs" "$secs"
    rec "$1" "$2_machine_cores" "$(calc "$NCPU * ($m1 - $CPU_M0) / ($t1 - $CPU_T0)")"
    rec "$1" "$2_postgres_cores" "$(calc "($p1 - $CPU_P0) / $TICK / $secs")"
}

# ------------------------------------------------------------------- build

log "building outbox-relay, mock-broker and the benchmark tools"
if [ -f "$build/CMakeCache.txt" ]; then
    cmake --build "$build" --target outbox-relay outbox-consume mock-broker outbox_relay_core >/dev/null
else
    OUTBOX_SKIP_APT=1 OUTBOX_RELAY_BUILD="$build" bash "$repo/tests/tools/setup.sh"
fi
bin=$work/bin
mkdir -p "$bin"
CFLAGS=(-O2 -g -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra
        -Wno-unused-parameter -I"$repo/include")
cc "${CFLAGS[@]}" -o "$bin/bench-consumer" "$repo/bench/consumer.c" \
    "$build/liboutbox_relay_core.a" $(pkg-config --libs rdkafka) -lm
cc "${CFLAGS[@]}" -o "$bin/polling-relayer" "$repo/bench/polling_relayer.c" \
    $(pkg-config --cflags --libs rdkafka libpq)
cc "${CFLAGS[@]}" -o "$bin/bench-seed-consumer" "$repo/bench/seed_consumer.c" \
    $(pkg-config --cflags --libs rdkafka libpq)
cc "${CFLAGS[@]}" -shared -fPIC -o "$bin/libnodelay.so" "$repo/tests/tools/nodelay_preload.c" -ldl
cc "${CFLAGS[@]}" -o "$bin/bench-w2j-latency" "$repo/bench/w2j_latency.c" \
    "$build/liboutbox_relay_core.a" $(pkg-config --libs rdkafka) -lm
if has_phase decoder && [ -f "$repo/bench/bench_decoder.c" ]; then
    # The tests' own target when the build has it, else the same compile.
    if cmake --build "$build" --target bench-decoder >/dev/null 2>&1 &&
        [ -x "$build/tests/bench-decoder" ]; then
        cp "$build/tests/bench-decoder" "$bin/bench-decoder"
    else
        cc "${CFLAGS[@]}" -DFIXTURES_DIR="\"$repo/tests/fixtures\"" -o "$bin/bench-decoder" \
            "$repo/bench/bench_decoder.c" "$build/liboutbox_relay_core.a" \
            $(pkg-config --libs rdkafka libpq libmicrohttpd) -lpthread -lm
    fi
fi
RELAY=$build/outbox-relay

# --------------------------------------------------------------- PostgreSQL

# Tuned for a benchmark, durability kept: fsync and synchronous_commit on,
# full_page_writes on; checkpoints pushed out of the way (max_wal_size,
# checkpoint_timeout) and an explicit CHECKPOINT before each primary-load
# run so every run starts from the same point; shared_buffers sized to hold
# the working set.
PG_PORT=$(free_port)
PG_SETTINGS=(
    listen_addresses=127.0.0.1 "port=$PG_PORT" "unix_socket_directories=$work/pg"
    wal_level=logical max_replication_slots=40 max_wal_senders=20 max_connections=100
    fsync=on synchronous_commit=on full_page_writes=on wal_sync_method=fdatasync
    shared_buffers=512MB wal_buffers=16MB max_wal_size=16GB min_wal_size=1GB
    checkpoint_timeout=30min logical_decoding_work_mem=64MB wal_sender_timeout=60s
    autovacuum=on log_min_messages=warning log_checkpoints=on
)
# As docs/operations.md says: since the November 2026 minors wal2json must
# be named in output_plugin_libraries (the bench runs both plugins).
# Read the whole list before matching: with pipefail, grep -q closing the
# pipe early kills postgres with SIGPIPE and fails the test at random.
pg_params=$("$PG_BIN/postgres" --describe-config 2>/dev/null) || die "postgres --describe-config failed"
if grep -q '^output_plugin_libraries' <<<"$pg_params"; then
    PG_SETTINGS+=("output_plugin_libraries=pgoutput,test_decoding,wal2json")
fi
pg_start() {
    mkdir -p "$work/pg"
    chown postgres:postgres "$work/pg"
    runuser -u postgres -- "$PG_BIN/initdb" -D "$work/pg/data" -A trust -U postgres -E UTF8 \
        --no-locale -N >"$work/initdb.log" 2>&1 || die "initdb failed: $(tail -5 "$work/initdb.log")"
    local args=() s
    for s in "${PG_SETTINGS[@]}"; do args+=(-c "$s"); done
    # setpriv execs postgres directly: PG_PID is the postmaster itself.
    setpriv --reuid=postgres --regid=postgres --clear-groups \
        "$PG_BIN/postgres" -D "$work/pg/data" "${args[@]}" >"$work/postgres.log" 2>&1 &
    PG_PID=$!
    for _ in $(seq 300); do
        "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && return 0
        kill -0 "$PG_PID" 2>/dev/null || die "postgres exited: $(tail -5 "$work/postgres.log")"
        sleep 0.1
    done
    die "postgres not ready in 30 s"
}
DSN="host=127.0.0.1 port=$PG_PORT dbname=postgres user=postgres"
psql_q() { PGOPTIONS="-c client_min_messages=warning" "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -d "$DSN" "$@"; }
current_lsn() { lsn_int "$(psql_q -c 'SELECT pg_current_wal_lsn()')"; }
# end_of_backlog: the LSN to stop pg_recvlogical at, just past a backlog,
# followed by a transaction that both plugins send something for (a
# transactional message under a prefix the relayer ignores: pgoutput sends
# it, wal2json sends the transaction's B line). Without it pgoutput, which
# skips transactions that publish nothing (PostgreSQL 15), sends nothing
# past the backlog until the walsender has caught up with the end of the
# WAL, and pg_recvlogical's time would include decoding whatever later runs
# wrote (the polling relayer's UPDATEs and VACUUM FULL): it grew by about
# 0.45 s per repetition.
end_of_backlog() {
    psql_q -c 'SELECT pg_current_wal_lsn()'
    psql_q -c "SELECT pg_logical_emit_message(true, 'bench-end', '')" >/dev/null
}
next_id() { psql_q -c "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM events_outbox_id_seq"; }
create_slot() { psql_q -c "SELECT pg_create_logical_replication_slot('$1', '${2:-wal2json}')" >/dev/null; }
# copy_slot FROM TO PLUGIN: a new slot at FROM's position, decoding with
# PLUGIN: both plugins read the same WAL from the same point.
copy_slot() { psql_q -c "SELECT pg_copy_logical_replication_slot('$1', '$2', false, '$3')" >/dev/null; }
drop_slot() {
    local i
    for i in $(seq 100); do # the walsender of a stopped client may linger a moment
        psql_q -c "SELECT pg_drop_replication_slot('$1')" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "cannot drop slot $1"
}

# The relayer's wal2json options, exactly as stream_build_start_command()
# (src/pg/stream.c) sends them.
W2J_OPTS=(-o format-version=2 -o include-timestamp=1 -o include-types=0
          -o add-tables=public.events_outbox -o actions=insert -o add-msg-prefixes=outbox)
# The relayer's pgoutput options (src/decode/decoder_pgoutput.c); the publication
# is sql/008_publication.sql's, loaded with the schema before any slot.
PGO_OPTS=(-o proto_version=1 -o publication_names=outbox_relay -o messages=true)
recvlogical() { # recvlogical SLOT ENDPOS OUTFILE [PLUGIN]
    local opts=("${W2J_OPTS[@]}")
    [ "${4:-wal2json}" = pgoutput ] && opts=("${PGO_OPTS[@]}")
    "$PG_BIN/pg_recvlogical" -d "$DSN" --slot="$1" --start --endpos="$2" --no-loop -f "$3" \
        "${opts[@]}"
}
# recvlogical_follow SLOT OUTFILE LOGFILE: pg_recvlogical in the background
# (BG_PID), following the slot until stopped; returns once the slot is
# active (up to 10 s).
recvlogical_follow() {
    local i
    bg "$PG_BIN/pg_recvlogical" -d "$DSN" --slot="$1" --start -f "$2" "${W2J_OPTS[@]}" 2>>"$3"
    for ((i = 0; i < 200; i++)); do
        [ "$(psql_q -c "SELECT active FROM pg_replication_slots WHERE slot_name = '$1'")" = t ] && return 0
        sleep 0.05
    done
}

# ---------------------------------------------------------------- the broker

# broker_start [PARTITIONS]: PARTITIONS per topic of $TOPICS (default 4),
# on the broker BROKER_KIND names (mock or real), fresh: no run reads what
# an earlier one left. BOOTSTRAP is its address, BROKER_PID the process
# whose CPU is the broker's (broker_ticks).
BROKER_SERVE_PID=""
broker_start() {
    if [ "$BROKER_KIND" = real ]; then
        kafka_start "${1:-4}"
    else
        mock_start "${1:-4}"
    fi
}
mock_start() {
    local ctl=$work/broker.ctl i nparts=$1
    rm -f "$ctl" "$work/broker.out"
    mkfifo "$ctl"
    # Not through bg(): the FIFO must be opened in the child, or opening it
    # for reading would block this shell until a writer appears. With
    # TCP_NODELAY on its connections, as a real broker has them (see
    # tests/tools/nodelay_preload.c: without it every pipelined response can wait
    # 40 ms for a delayed ACK).
    LD_PRELOAD="$bin/libnodelay.so" "$build/mock-broker" --brokers 1 --partitions 4 \
        <"$ctl" >"$work/broker.out" 2>>"$work/broker.log" &
    BROKER_PID=$!
    PIDS+=("$BROKER_PID")
    exec {BROKER_FD}>"$ctl"
    for ((i = 0; i < 200; i++)); do
        grep -q '^BOOTSTRAP ' "$work/broker.out" 2>/dev/null && break
        sleep 0.05
    done
    BOOTSTRAP=$(sed -n 's/^BOOTSTRAP //p' "$work/broker.out")
    [ -n "$BOOTSTRAP" ] || die "mock-broker did not start"
    local t
    for t in ${TOPICS//,/ }; do broker_cmd "topic $t $nparts"; done
}
broker_cmd() {
    local before i
    before=$(wc -l <"$work/broker.out")
    echo "$1" >&"$BROKER_FD"
    for ((i = 0; i < 200; i++)); do
        [ "$(wc -l <"$work/broker.out")" -gt "$before" ] && break
        sleep 0.05
    done
    [ "$(tail -1 "$work/broker.out")" = ok ] || die "mock-broker: $1: $(tail -1 "$work/broker.out")"
}
broker_stop() {
    if [ -n "$BROKER_SERVE_PID" ]; then
        stop_pid "$BROKER_SERVE_PID" # SIGTERM: kafka_cluster.py kills the JVM, removes its data
        [ "$STOP_RC" = 0 ] || die "kafka_cluster.py serve exited with $STOP_RC: $(tail -5 "$work/kafka.log")"
        BROKER_SERVE_PID=""
        BROKER_PID=""
        return
    fi
    echo quit >&"$BROKER_FD" || true
    exec {BROKER_FD}>&-
    wait_pid "$BROKER_PID" 10
    [ "$WAIT_RC" = 124 ] && stop_pid "$BROKER_PID"
    BROKER_PID=""
}
# The broker's CPU so far, in clock ticks: the mock's process, or the real
# broker's JVM plus the python that serves it (/proc/PID/stat sums every
# thread of a process).
broker_ticks() {
    local t
    t=$(proc_ticks "$BROKER_PID")
    [ -z "$BROKER_SERVE_PID" ] || t=$((t + $(proc_ticks "$BROKER_SERVE_PID")))
    echo "$t"
}

# A real Apache Kafka: one KRaft node (broker and controller in one JVM,
# replication factor 1) from tests/integration/kafka_cluster.py serve,
# which creates the topics, writes the bootstrap address once they exist,
# and on SIGTERM kills the JVM and removes its data dir. Its settings are
# kafka_cluster.py's (small heap, serial GC, C1 only, 2 network and 2 I/O
# threads: sized for tests on 2 cores), the log flush Kafka's default (none:
# the page cache, replication being Kafka's durability, not fsync).
KAFKA_LIB=""
KAFKA_VERSION=""
kafka_lib() { # resolves (and caches) the broker's jars once, before any clock
    [ -z "$KAFKA_LIB" ] || return 0
    local rc=0
    KAFKA_LIB=$(bash "$repo/tests/tools/kafka.sh" 2>"$work/kafka-sh.log") || rc=$?
    [ "$rc" = 3 ] && die "BENCH_KAFKA=$KAFKA_MODE: Maven Central cannot be reached: $(tail -1 "$work/kafka-sh.log")"
    [ "$rc" = 0 ] || die "tests/tools/kafka.sh failed ($rc): $(tail -5 "$work/kafka-sh.log")"
    KAFKA_LIB=$(tail -1 <<<"$KAFKA_LIB")
    local j
    for j in "$KAFKA_LIB"/kafka_2.13-*.jar; do
        [[ "$j" == *-test.jar || "$j" == *-sources.jar ]] && continue
        KAFKA_VERSION=${j##*/kafka_2.13-}
        KAFKA_VERSION=${KAFKA_VERSION%.jar}
    done
}
kafka_start() {
    local nparts=$1 bf=$work/kafka.bootstrap t i args=() kids
    kafka_lib
    rm -f "$bf"
    for t in ${TOPICS//,/ } bench-warmup; do args+=(--topic "$t:$nparts"); done
    /usr/bin/python3 "$repo/tests/integration/kafka_cluster.py" serve --nodes 1 \
        --bootstrap-file "$bf" "${args[@]}" >>"$work/kafka.log" 2>&1 &
    BROKER_SERVE_PID=$!
    PIDS+=("$BROKER_SERVE_PID")
    for ((i = 0; i < 3000; i++)); do # 300 s
        [ -s "$bf" ] && break
        if ! kill -0 "$BROKER_SERVE_PID" 2>/dev/null; then
            wait_pid "$BROKER_SERVE_PID" 1
            [ "$WAIT_RC" = 3 ] && die "BENCH_KAFKA=$KAFKA_MODE: Maven Central cannot be reached: $(tail -1 "$work/kafka.log")"
            die "kafka_cluster.py serve exited ($WAIT_RC): $(tail -5 "$work/kafka.log")"
        fi
        sleep 0.1
    done
    [ -s "$bf" ] || die "Kafka did not start in 300 s: $(tail -5 "$work/kafka.log")"
    BOOTSTRAP=$(cat "$bf")
    # The JVM: the serve process's one child once the broker is up (the
    # storage format's JVM has exited by then).
    kids=$(ps --ppid "$BROKER_SERVE_PID" -o pid= -o comm=)
    BROKER_PID=$(awk '$2 == "java" { print $1 }' <<<"$kids")
    [[ "$BROKER_PID" =~ ^[0-9]+$ ]] || die "no single Kafka JVM under kafka_cluster.py (pid $BROKER_SERVE_PID): $kids"
    kafka_warm
}
# kafka_warm: before any clock, what a broker that has been running has
# done already: handed out a block of idempotent producer ids (a fresh
# KRaft broker answers the first InitProducerId with "coordinator load in
# progress", and librdkafka retries: about 0.5 s of the first drain) and
# run its produce and fetch paths often enough for the JIT compiler.
# BENCH_KAFKA_WARM messages (20,000 by default; 0: none) to bench-warmup,
# read back once.
kafka_warm() {
    local n=${BENCH_KAFKA_WARM:-20000}
    [ "$n" -gt 0 ] || return 0
    # In requests of a few messages: thousands of produce requests, as a
    # relayer with linger.ms=0 sends them (1 to 2 s).
    seq "$n" | kcat -b "$BOOTSTRAP" -P -t bench-warmup -X enable.idempotence=true \
        -X linger.ms=0 -X batch.num.messages=5 2>>"$work/kafka.log" ||
        die "kcat could not warm the Kafka broker up"
    kcat -b "$BOOTSTRAP" -C -t bench-warmup -o beginning -e -q >/dev/null 2>>"$work/kafka.log" ||
        die "kcat could not read the warm-up topic back"
}

# ------------------------------------------------------- relayer and readers

# relay_start SLOT LOG [wait]: outbox-relay on SLOT (with --plugin
# $RELAY_PLUGIN, default wal2json), pid in RELAY_PID; with "wait", returns
# once it streams.
RELAY_PLUGIN=wal2json
relay_start() {
    MPORT=$(free_port)
    bg "${RELAY_PREFIX[@]}" "$RELAY" --dsn "$DSN" --brokers "$BOOTSTRAP" --slot "$1" \
        --plugin "$RELAY_PLUGIN" --metrics-addr "127.0.0.1:$MPORT" "${RELAY_EXTRA[@]}" >"$2" 2>&1
    RELAY_PID=$BG_PID
    if [ "${3:-}" = wait ]; then
        local i
        for ((i = 0; i < 600; i++)); do
            grep -q 'streaming' "$2" && return 0
            kill -0 "$RELAY_PID" 2>/dev/null || die "outbox-relay exited: $(tail -5 "$2")"
            sleep 0.05
        done
        die "outbox-relay did not start streaming: $(tail -5 "$2")"
    fi
}
relay_stop() {
    stop_pid "$RELAY_PID"
    [ "$STOP_RC" = 0 ] || die "outbox-relay exited with $STOP_RC: $(tail -5 "$1")"
}
metrics() {
    /usr/bin/python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
        "http://127.0.0.1:$MPORT/metrics"
}
# The same over a bare socket: no interpreter started inside a CPU window.
metrics_tcp() {
    local fd
    exec {fd}<>"/dev/tcp/127.0.0.1/$MPORT" || return 1
    printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&"$fd"
    cat <&"$fd"
    exec {fd}>&-
}
# wait_delivered N TIMEOUT_S: until the relayer reports N events delivered.
wait_delivered() {
    local i n
    for ((i = 0; i < $2 * 50; i++)); do
        n=$(metrics_tcp | series_sum outbox_relay_events_delivered_total)
        [ "$n" -ge "$1" ] && return 0
        sleep 0.02
    done
    die "the relayer delivered $n of $1 events in $2 s"
}
series_sum() { # series_sum NAME <metrics: the sum of a metric's series
    awk -v n="$1" 'index($1, n) == 1 && (length($1) == length(n) || substr($1, length(n) + 1, 1) == "{") { s += $2 } END { print s + 0 }'
}
metric() { metrics | series_sum "$1"; } # the same, scraped now

# consumer_start MIN_ID COUNT OUT TIMEOUT [--latency]: pid in CONSUMER_PID,
# returns once its partitions are assigned.
consumer_start() {
    rm -f "$work/consumer.ready"
    bg "$bin/bench-consumer" --brokers "$BOOTSTRAP" --topics "$TOPICS" --min-id "$1" \
        --count "$2" --timeout "$4" --ready "$work/consumer.ready" ${5:-} >"$3" \
        2>>"$work/consumer.log"
    CONSUMER_PID=$BG_PID
    local i
    for ((i = 0; i < 400; i++)); do
        [ -e "$work/consumer.ready" ] && return 0
        kill -0 "$CONSUMER_PID" 2>/dev/null || die "bench-consumer exited: $(tail -3 "$work/consumer.log")"
        sleep 0.05
    done
    die "bench-consumer not ready"
}
# consumer_wait OUT TIMEOUT: fails the run when an event is missing.
consumer_wait() {
    wait_pid "$CONSUMER_PID" "$2"
    [ "$WAIT_RC" = 0 ] || die "consumer: not every event arrived (rc $WAIT_RC): $(cat "$1") $(tail -2 "$work/consumer.log")"
}
kv() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p"; } # a key=value of a result line

# Quantile of one of the relayer's latency histograms (the commit-to-delivery
# one unless NAME says which), in ms, linear within a bucket (as
# Prometheus' histogram_quantile does): hist_quantile Q [NAME] <metrics.
hist_quantile() {
    awk -v q="$1" -v name="${2:-outbox_relay_delivery_latency_seconds}" '
        index($0, name "_bucket{") == 1 {
            match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
            n++; b[n] = (le == "+Inf") ? -1 : le + 0; c[n] = $2 + 0 }
        END {
            if (n == 0 || c[n] == 0) { print ""; exit }
            rank = q * c[n]; prev_b = 0; prev_c = 0
            for (i = 1; i <= n; i++) {
                if (c[i] >= rank) {
                    if (b[i] < 0) { printf "%.2f", prev_b * 1000; exit }
                    f = (c[i] > prev_c) ? (rank - prev_c) / (c[i] - prev_c) : 1
                    printf "%.2f", (prev_b + (b[i] - prev_b) * f) * 1000; exit }
                prev_b = b[i]; prev_c = c[i] }
        }'
}
# Mean of a latency histogram (sum / count, exact), in ms: hist_mean [NAME].
hist_mean() {
    awk -v name="${1:-outbox_relay_delivery_latency_seconds}" '
        $1 == name "_sum" { s = $2 } $1 == name "_count" { c = $2 }
        END { if (c > 0) printf "%.3f", s * 1000 / c }'
}
# Share of delivered events whose latency bucket is <= le seconds.
hist_share_le() {
    awk -v le="$1" '
        /^outbox_relay_delivery_latency_seconds_bucket/ {
            match($0, /le="[^"]*"/); l = substr($0, RSTART + 4, RLENGTH - 5)
            if (l == "+Inf") tot = $2; else if (l + 0 == le + 0) at = $2 }
        END { if (tot > 0) printf "%.4f", at / tot }'
}

pgbench_run() { # pgbench_run LOG EVENTS_PER_TX ARGS...: the producer transactions
    local logf=$1 events=$2
    shift 2
    local TIMEFORMAT="%U %S" # bash's time: pgbench's user and system CPU
    { time "$PG_BIN/pgbench" -n -M prepared -f "$repo/bench/producer.pgbench" \
        -D "events=$events" -j 2 "$@" "$DSN" >"$logf" 2>&1 ||
        die "pgbench failed: $(tail -5 "$logf")"; } 2>"$logf.time"
    PGB_CPU_S=$(tail -1 "$logf.time" | awk '{ print $1 + $2 }')
    PGB_TPS=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p;T;q' "$logf")
    PGB_TX=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$logf")
    PGB_LAT=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$logf")
}

# ------------------------------------------------------------------ phases

phase_drain() {
    drain_small
    log "drain: generating a backlog of $BACKLOG events"
    create_slot bench_origin
    local lsn0 end_lsn min_id n r o0 kind
    lsn0=$(current_lsn)
    min_id=$(next_id)
    o0=$(psql_q -c "SELECT coalesce(max(id), 0) FROM bench_orders")
    # The generating session may skip the per-commit flush: it only makes
    # generation faster; the WAL (and so the backlog) is the same.
    psql_q -c "SET synchronous_commit = off" -c "CALL bench_backlog($BACKLOG)"
    psql_q -c "VACUUM ANALYZE events_outbox" -c "VACUUM ANALYZE bench_orders" -c "CHECKPOINT"
    end_lsn=$(end_of_backlog)
    n=$(psql_q -c "SELECT count(*) FROM events_outbox WHERE id >= $min_id")
    [ "$n" = "$BACKLOG" ] || die "backlog has $n events, expected $BACKLOG"
    rec drain wal_mb "$(calc "($(lsn_int "$end_lsn") - $lsn0) / 1048576")"
    rec drain transactions "$(psql_q -c "SELECT count(*) FROM bench_orders WHERE id > $o0")"
    rec drain payload_bytes "$(psql_q -c "SELECT round(avg(length(payload::text))) FROM events_outbox WHERE id >= $min_id")"

    # Untimed warm-up read: what the server sends for this backlog.
    psql_q -c "SELECT pg_copy_logical_replication_slot('bench_origin', 'bench_warm')" >/dev/null
    recvlogical bench_warm "$end_lsn" "$work/backlog.jsonl"
    drop_slot bench_warm
    rec drain w2j_lines "$(wc -l <"$work/backlog.jsonl")"
    rec drain w2j_mb "$(calc "$(stat -c %s "$work/backlog.jsonl") / 1048576")"
    rm -f "$work/backlog.jsonl"

    for ((r = 1; r <= REPS; r++)); do
        local t0 t1 c0 last
        # 1. the decode limit
        psql_q -c "SELECT pg_copy_logical_replication_slot('bench_origin', 'bench_recv')" >/dev/null
        cpu_begin
        t0=$(now_us)
        local TIMEFORMAT="%U %S"
        { time recvlogical bench_recv "$end_lsn" /dev/null; } 2>"$work/recv.time"
        t1=$(now_us)
        cpu_end drain recv
        rec drain recv_client_cores "$(calc "$(tail -1 "$work/recv.time" | awk '{ print $1 + $2 }') / $CPU_SECS")"
        drop_slot bench_recv
        rec drain recvlogical_s "$(calc "($t1 - $t0) / 1e6")"
        # and pgoutput's decode limit (no broker either: recorded for each)
        drain_pgoutput_recv "$end_lsn"

        # 2.-4. on each broker
        for kind in "${BROKER_KINDS[@]}"; do
            with_broker "$kind" drain_brokered "$r" "$min_id" "$end_lsn"
        done
    done
    drop_slot bench_origin
}

# drain_brokered REP MIN_ID END_LSN: one repetition's brokered drains on
# BROKER_KIND: outbox-relay (wal2json), the polling relayer, outbox-relay
# --plugin pgoutput, and their ratios to the decode limits.
drain_brokered() {
    local r=$1 min_id=$2 end_lsn=$3 t0 last
    # 2. outbox-relay, until the consumer has every event
    drain_relay wal2json relay "$r" "$min_id" "$end_lsn"

    # 3. the polling relayer, same clock; the table reset to "nothing
    #    dispatched" and rewritten so every run starts alike
    psql_q -c "UPDATE events_outbox SET dispatched_at = NULL WHERE dispatched_at IS NOT NULL" \
        -c "VACUUM FULL events_outbox" -c "ANALYZE events_outbox" -c "CHECKPOINT"
    broker_start
    consumer_start "$min_id" "$BACKLOG" "$work/drain-poll.out" 600
    local b0
    b0=$(broker_ticks)
    cpu_begin
    t0=$(now_us)
    bg "$bin/polling-relayer" --dsn "$DSN" --brokers "$BOOTSTRAP" --exit-when-empty \
        >"$work/drain-poll-$r.log" 2>&1
    local poller=$BG_PID
    consumer_wait "$work/drain-poll.out" 600
    cpu_end drain poll
    last=$(kv "$work/drain-poll.out" last_unix_us)
    rec drain poll_broker_cores "$(calc "($(broker_ticks) - $b0) / $TICK / $CPU_SECS")"
    rec drain poll_consumer_cores "$(calc "$(kv "$work/drain-poll.out" cpu_ms) / 1000 / $CPU_SECS")"
    wait_pid "$poller" 60
    [ "$WAIT_RC" = 0 ] || die "polling relayer failed: $(tail -3 "$work/drain-poll-$r.log")"
    rec drain poll_poller_cores "$(calc "$(kv "$work/drain-poll-$r.log" cpu_ms) / 1000 / $CPU_SECS")"
    broker_stop
    rec drain poll_s "$(calc "($last - $t0) / 1e6")"
    # Ratios within one repetition: its three runs are minutes apart at
    # most, so a burst of other load skews fewer of them.
    local rs rr rp
    rs=$(last_rec drain recvlogical_s)
    rr=$(last_rec drain relay_s)
    rp=$(last_rec drain poll_s)
    rec drain ratio_decode "$(calc "$rs / $rr")"
    rec drain ratio_poll "$(calc "$rp / $rr")"
    drain_pgoutput "$r" "$end_lsn" "$min_id"
    log "drain $r/$REPS ($BROKER_KIND broker): pg_recvlogical $rs s, outbox-relay $rr s, polling $rp s"
}

# drain_relay PLUGIN KEY REP MIN_ID END_LSN [PHASE ORIGIN COUNT]:
# outbox-relay --plugin PLUGIN on a copy of ORIGIN (bench_origin) made with
# that plugin, timed until its slot is confirmed at END_LSN (every event
# acknowledged by the broker, as pg_recvlogical's time is until it has
# written everything to END_LSN) and until the consumer has every one of
# COUNT ($BACKLOG) events; the PHASE's (drain's) KEY_* rows (KEY_s until
# consumed, KEY_confirmed_s, KEY_cpu_us_per_event, the cores of each
# process, the walsender's CPU per event, peak RSS).
drain_relay() {
    local plugin=$1 key=$2 r=$3 min_id=$4 end_lsn=$5 phase=${6:-drain} origin=${7:-bench_origin}
    local count=${8:-$BACKLOG} t0 last c0 ws b0 waiter confirmed
    copy_slot "$origin" bench_relay "$plugin"
    broker_start
    consumer_start "$min_id" "$count" "$work/drain-$key.out" 300
    # One session watching the slot (every 2 ms), started before the clock.
    bg "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -d "$DSN" \
        -c "SELECT bench_wait_confirmed('bench_relay', '$end_lsn', 300)" >"$work/drain-confirmed.out" 2>&1
    waiter=$BG_PID
    b0=$(broker_ticks)
    cpu_begin
    t0=$(now_us)
    RELAY_PLUGIN=$plugin relay_start bench_relay "$work/drain-$key-$r.log"
    consumer_wait "$work/drain-$key.out" 300
    cpu_end "$phase" "$key"
    wait_pid "$waiter" 300
    confirmed=$(cat "$work/drain-confirmed.out")
    [ "$WAIT_RC" = 0 ] && [ -n "$confirmed" ] ||
        die "slot bench_relay not confirmed at $end_lsn: $confirmed $(tail -3 "$work/drain-$key-$r.log")"
    last=$(kv "$work/drain-$key.out" last_unix_us)
    c0=$(proc_ticks "$RELAY_PID")
    ws=$(psql_q -c "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bench_relay'")
    rec "$phase" "${key}_walsender_cores" "$(calc "$(proc_ticks "$ws") / $TICK / $CPU_SECS")"
    rec "$phase" "${key}_walsender_us_per_event" "$(calc "$(proc_ticks "$ws") * 1e6 / $TICK / $count")"
    rec "$phase" "${key}_relay_cores" "$(calc "$c0 / $TICK / $CPU_SECS")"
    rec "$phase" "${key}_broker_cores" "$(calc "($(broker_ticks) - $b0) / $TICK / $CPU_SECS")"
    rec "$phase" "${key}_consumer_cores" "$(calc "$(kv "$work/drain-$key.out" cpu_ms) / 1000 / $CPU_SECS")"
    rec "$phase" "${key}_hwm_mib" "$(calc "$(proc_hwm_kb "$RELAY_PID") / 1024")"
    relay_stop "$work/drain-$key-$r.log"
    broker_stop
    drop_slot bench_relay
    rec "$phase" "${key}_s" "$(calc "($last - $t0) / 1e6")"
    rec "$phase" "${key}_confirmed_s" "$(calc "($confirmed - $t0) / 1e6")"
    rec "$phase" "${key}_cpu_us_per_event" "$(calc "$c0 * 1e6 / $TICK / $count")"
}

# The small-event backlog: as many events as the mixed one, in the same
# transactions, with payloads of a few bytes: what each event costs apart
# from its bytes. Drained by pg_recvlogical and outbox-relay with each
# plugin, before the mixed backlog exists, and deleted before that one is
# made, so that no drain reads the other's WAL.
drain_small() {
    log "drain: generating a backlog of $BACKLOG small events"
    create_slot bench_small
    local lsn0 end_lsn min_id n r t0 t1 kind
    lsn0=$(current_lsn)
    min_id=$(next_id)
    psql_q -c "SET synchronous_commit = off" -c "CALL bench_backlog($BACKLOG, true)"
    psql_q -c "CHECKPOINT"
    end_lsn=$(end_of_backlog)
    n=$(psql_q -c "SELECT count(*) FROM events_outbox WHERE id >= $min_id")
    [ "$n" = "$BACKLOG" ] || die "small backlog has $n events, expected $BACKLOG"
    rec small wal_mb "$(calc "($(lsn_int "$end_lsn") - $lsn0) / 1048576")"
    rec small payload_bytes "$(psql_q -c "SELECT round(avg(length(payload::text))) FROM events_outbox WHERE id >= $min_id")"
    local plugin p
    for ((r = 1; r <= REPS; r++)); do
        for plugin in wal2json pgoutput; do
            p=${plugin/wal2json/w2j}
            p=${p/pgoutput/pgo}
            copy_slot bench_small bench_recv "$plugin"
            cpu_begin
            t0=$(now_us)
            recvlogical bench_recv "$end_lsn" /dev/null "$plugin"
            t1=$(now_us)
            cpu_end small "${p}_recv"
            drop_slot bench_recv
            rec small "${p}_recvlogical_s" "$(calc "($t1 - $t0) / 1e6")"
            for kind in "${BROKER_KINDS[@]}"; do
                with_broker "$kind" drain_small_relay "$plugin" "$p" "$r" "$min_id" "$end_lsn"
            done
        done
    done
    drop_slot bench_small
    psql_q -c "DELETE FROM events_outbox WHERE id >= $min_id" -c "VACUUM events_outbox" >/dev/null
}

# drain_small_relay PLUGIN P REP MIN_ID END_LSN: outbox-relay on the
# small-event backlog (BROKER_KIND's broker), its ratio to the decode limit.
drain_small_relay() {
    local plugin=$1 p=$2 r=$3 min_id=$4 end_lsn=$5 rs rr
    drain_relay "$plugin" "${p}_relay" "$r" "$min_id" "$end_lsn" small bench_small "$BACKLOG"
    rs=$(last_rec small "${p}_recvlogical_s")
    rr=$(last_rec small "${p}_relay_s")
    rec small "${p}_ratio_decode" "$(calc "$rs / $rr")"
    log "drain $r/$REPS small events, $plugin ($BROKER_KIND broker): pg_recvlogical $rs s, outbox-relay $rr s"
}

# drain_pgoutput_recv END_LSN: the backlog through pgoutput (a slot copied
# from bench_origin with that plugin) by pg_recvlogical into /dev/null.
drain_pgoutput_recv() {
    local end_lsn=$1 t0 t1
    copy_slot bench_origin bench_recv pgoutput
    cpu_begin
    t0=$(now_us)
    recvlogical bench_recv "$end_lsn" /dev/null pgoutput
    t1=$(now_us)
    cpu_end drain pgo_recv
    drop_slot bench_recv
    rec drain pgo_recvlogical_s "$(calc "($t1 - $t0) / 1e6")"
}

# drain_pgoutput REP END_LSN MIN_ID: the same backlog through outbox-relay
# --plugin pgoutput until consumed, and its ratio to pgoutput's decode limit.
drain_pgoutput() {
    local r=$1 end_lsn=$2 min_id=$3
    drain_relay pgoutput pgo_relay "$r" "$min_id" "$end_lsn"
    local ps pr ws_
    ps=$(last_rec drain pgo_recvlogical_s)
    pr=$(last_rec drain pgo_relay_s)
    ws_=$(last_rec drain recvlogical_s)
    rec drain ratio_decode_pgo "$(calc "$ps / $pr")"
    rec drain ratio_decode_pgo_w2j "$(calc "$ws_ / $ps")"
    log "drain $r/$REPS pgoutput ($BROKER_KIND broker): pg_recvlogical $ps s, outbox-relay $pr s"
}

# steady_run NAME RATE|max EVENTS_PER_TX: producers committing RATE events/s
# (RATE / EVENTS_PER_TX transactions/s) for STEADY_SECONDS, or MAX_EVENTS
# unthrottled.
steady_run() {
    local name=$1 rate=$2 k=$3 total per min_id t0 t1 c0 c1 last
    if [ "$rate" = max ]; then
        total=$MAX_EVENTS
    else
        total=$((rate * STEADY_SECONDS))
    fi
    per=$(((total / k + CLIENTS - 1) / CLIENTS)) # transactions per client
    total=$((per * CLIENTS * k))
    psql_q -c "TRUNCATE events_outbox, bench_orders" -c "CHECKPOINT" # every run alike
    create_slot bench_steady
    broker_start
    relay_start bench_steady "$work/steady-$name.log" wait
    min_id=$(next_id)
    local live=1
    [ "$rate" != max ] && [ "$STEADY_CONSUMER" = after ] && live=0
    [ $live = 1 ] && consumer_start "$min_id" "$total" "$work/steady-$name.out" 300 --latency
    local ws b0 b1 w0 w1
    ws=$(psql_q -c "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bench_steady'")
    c0=$(proc_ticks "$RELAY_PID")
    b0=$(broker_ticks)
    w0=$(proc_ticks "$ws")
    local x0 x1
    x0=$(proc_ctxsw "$RELAY_PID")
    cpu_begin
    t0=$(now_us)
    if [ "$rate" = max ]; then
        pgbench_run "$work/pgbench-steady-$name.log" "$k" -c "$CLIENTS" -t "$per"
    else
        pgbench_run "$work/pgbench-steady-$name.log" "$k" -c "$CLIENTS" -t "$per" \
            --rate "$((rate / k))"
    fi
    if [ $live = 1 ]; then
        consumer_wait "$work/steady-$name.out" 300
        t1=$(now_us)
        last=$(kv "$work/steady-$name.out" last_unix_us)
    else
        wait_delivered "$total" 300
        t1=$(now_us)
        last=$t1
    fi
    c1=$(proc_ticks "$RELAY_PID")
    b1=$(broker_ticks)
    w1=$(proc_ticks "$ws")
    x1=$(proc_ctxsw "$RELAY_PID")
    cpu_end "steady_$name" cpu
    if [ $live = 0 ]; then # every event is in Kafka, read back after the window
        consumer_start "$min_id" "$total" "$work/steady-$name.out" 300
        consumer_wait "$work/steady-$name.out" 300
    fi
    rec "steady_$name" ctxsw_main_per_event "$(calc "(${x1% *} - ${x0% *}) / $total")"
    rec "steady_$name" ctxsw_rdk_per_event "$(calc "(${x1#* } - ${x0#* }) / $total")"
    rec "steady_$name" cpu_relay_cores "$(calc "($c1 - $c0) / $TICK / $CPU_SECS")"
    rec "steady_$name" cpu_walsender_cores "$(calc "($w1 - $w0) / $TICK / $CPU_SECS")"
    rec "steady_$name" cpu_broker_cores "$(calc "($b1 - $b0) / $TICK / $CPU_SECS")"
    [ $live = 1 ] &&
        rec "steady_$name" cpu_consumer_cores "$(calc "$(kv "$work/steady-$name.out" cpu_ms) / 1000 / $CPU_SECS")"
    rec "steady_$name" cpu_pgbench_cores "$(calc "$PGB_CPU_S / $CPU_SECS")"
    metrics >"$work/steady-$name.metrics"
    rec "steady_$name" produced_per_s "$(calc "$PGB_TPS * $k")"
    rec "steady_$name" delivered_per_s "$(calc "$total / (($last - $t0) / 1e6)")"
    rec "steady_$name" hist_p50_ms "$(hist_quantile 0.50 <"$work/steady-$name.metrics")"
    rec "steady_$name" hist_p95_ms "$(hist_quantile 0.95 <"$work/steady-$name.metrics")"
    rec "steady_$name" hist_p99_ms "$(hist_quantile 0.99 <"$work/steady-$name.metrics")"
    rec "steady_$name" hist_mean_ms "$(hist_mean <"$work/steady-$name.metrics")"
    local ack=outbox_relay_kafka_ack_latency_seconds
    rec "steady_$name" ack_p50_ms "$(hist_quantile 0.50 $ack <"$work/steady-$name.metrics")"
    rec "steady_$name" ack_p99_ms "$(hist_quantile 0.99 $ack <"$work/steady-$name.metrics")"
    rec "steady_$name" ack_mean_ms "$(hist_mean $ack <"$work/steady-$name.metrics")"
    rec "steady_$name" share_le_5ms "$(hist_share_le 0.005 <"$work/steady-$name.metrics")"
    rec "steady_$name" share_le_10ms "$(hist_share_le 0.01 <"$work/steady-$name.metrics")"
    rec "steady_$name" share_le_25ms "$(hist_share_le 0.025 <"$work/steady-$name.metrics")"
    if [ $live = 1 ]; then
        rec "steady_$name" e2e_p50_ms "$(kv "$work/steady-$name.out" lat_p50_ms)"
        rec "steady_$name" e2e_p95_ms "$(kv "$work/steady-$name.out" lat_p95_ms)"
        rec "steady_$name" e2e_p99_ms "$(kv "$work/steady-$name.out" lat_p99_ms)"
    fi
    rec "steady_$name" cpu_us_per_event "$(calc "($c1 - $c0) * 1e6 / $TICK / $total")"
    rec "steady_$name" cpu_pct "$(calc "($c1 - $c0) * 100 / $TICK / (($t1 - $t0) / 1e6)")"
    rec "steady_$name" hwm_mib "$(calc "$(proc_hwm_kb "$RELAY_PID") / 1024")"
    # for the floor run that follows at the same load (issue 14's ratios, per
    # repetition), per broker (the suffix its results are recorded under)
    local sf=${REC_SUFS[0]}
    LAST_STEADY_CPU_US[x$sf]=$(calc "($c1 - $c0) * 1e6 / $TICK / $total")
    LAST_STEADY_P50[x$sf]=$(hist_quantile 0.50 <"$work/steady-$name.metrics")
    LAST_STEADY_P99[x$sf]=$(hist_quantile 0.99 <"$work/steady-$name.metrics")
    LAST_STEADY_MEAN[x$sf]=$(hist_mean <"$work/steady-$name.metrics")
    relay_stop "$work/steady-$name.log"
    broker_stop
    drop_slot bench_steady
    log "steady $name ($BROKER_KIND broker): $(calc "$total / (($last - $t0) / 1e6)") events/s delivered," \
        "p50/p99 $(hist_quantile 0.50 <"$work/steady-$name.metrics")/$(hist_quantile 0.99 <"$work/steady-$name.metrics") ms," \
        "cpu $(calc "($c1 - $c0) * 100 / $TICK / (($t1 - $t0) / 1e6)") %"
}

# floor_run NAME RATE EVENTS_PER_TX: the same producers with no relayer,
# only pg_recvlogical (the relayer's wal2json options) piped into
# bench/w2j_latency.c: commit to arrival at a client that does nothing, the
# part of commit-to-delivery latency that is PostgreSQL's.
floor_run() {
    local name=$1 rate=$2 k=$3 per probe recv
    per=$((((rate * STEADY_SECONDS) / k + CLIENTS - 1) / CLIENTS))
    psql_q -c "TRUNCATE events_outbox, bench_orders" -c "CHECKPOINT"
    create_slot bench_floor
    rm -f "$work/floor.fifo"
    mkfifo "$work/floor.fifo"
    "$bin/bench-w2j-latency" <"$work/floor.fifo" >"$work/floor-$name.out" & # not bg(): FIFO
    probe=$!
    PIDS+=("$probe")
    recvlogical_follow bench_floor "$work/floor.fifo" "$work/floor.log"
    recv=$BG_PID
    local r0 r1 x0 x1 events=$((per * CLIENTS * k))
    r0=$(proc_ticks "$recv")
    x0=$(proc_ctxsw "$recv")
    pgbench_run "$work/pgbench-floor-$name.log" "$k" -c "$CLIENTS" -t "$per" --rate "$((rate / k))"
    sleep 1 # the last commits reach the client
    r1=$(proc_ticks "$recv")
    x1=$(proc_ctxsw "$recv")
    kill -INT "$recv" 2>/dev/null || true
    wait_pid "$recv" 10
    wait_pid "$probe" 10
    drop_slot bench_floor
    rec "floor_$name" p50_ms "$(kv "$work/floor-$name.out" lat_p50_ms)"
    rec "floor_$name" p95_ms "$(kv "$work/floor-$name.out" lat_p95_ms)"
    rec "floor_$name" p99_ms "$(kv "$work/floor-$name.out" lat_p99_ms)"
    # pg_recvlogical's own CPU as the client of this load (issue 14: the
    # relayer's CPU per event is held to 2x it), and its wake-ups per event
    rec "floor_$name" cpu_us_per_event "$(calc "($r1 - $r0) * 1e6 / $TICK / $events")"
    rec "floor_$name" ctxsw_per_event "$(calc "(${x1% *} - ${x0% *}) / $events")"
    local sf REC_SUFS=("${REC_SUFS[@]}")
    for sf in "${ALL_SUFS[@]}"; do # against each broker's steady run
        REC_SUFS=("$sf")
        if [ -n "${LAST_STEADY_CPU_US[x$sf]:-}" ] && [ "$r1" -gt "$r0" ]; then
            rec "floor_$name" ratio_cpu "$(quot "${LAST_STEADY_CPU_US[x$sf]}" "$(calc "($r1 - $r0) * 1e6 / $TICK / $events")")"
        fi
    done
    REC_SUFS=("${ALL_SUFS[@]}")
    # the floor as the relayer's histogram would report it (its buckets),
    # and its exact mean: the "over the floor" figures compare like with like
    local fh=floor_latency_seconds h50 h99 hmean
    h50=$(hist_quantile 0.50 $fh <"$work/floor-$name.out")
    h99=$(hist_quantile 0.99 $fh <"$work/floor-$name.out")
    hmean=$(hist_mean $fh <"$work/floor-$name.out")
    rec "floor_$name" h50_ms "$h50"
    rec "floor_$name" h99_ms "$h99"
    rec "floor_$name" mean_ms "$hmean"
    for sf in "${ALL_SUFS[@]}"; do
        REC_SUFS=("$sf")
        if [ -n "${LAST_STEADY_P50[x$sf]:-}" ]; then
            rec "floor_$name" over_p50_ms "$(diff_of "${LAST_STEADY_P50[x$sf]}" "$h50")"
            rec "floor_$name" over_p99_ms "$(diff_of "${LAST_STEADY_P99[x$sf]}" "$h99")"
            rec "floor_$name" over_mean_ms "$(diff_of "${LAST_STEADY_MEAN[x$sf]}" "$hmean")"
        fi
    done
    log "floor $name: commit->client p50/p99 $(kv "$work/floor-$name.out" lat_p50_ms)/$(kv "$work/floor-$name.out" lat_p99_ms) ms"
}

# 1,000 events/s as 1,000 one-event transactions/s; 5,000 events/s as
# 1,000 transactions/s of 5 events, since this machine cannot commit 5,000
# fsync'd transactions/s next to everything else (the unthrottled run says
# how many it can); unthrottled with 5-event transactions.
# With BENCH_KAFKA=both each steady run is made on each broker, one after
# the other, before the floor run they are both compared with.
declare -A LAST_STEADY_CPU_US=() LAST_STEADY_P50=() LAST_STEADY_P99=() LAST_STEADY_MEAN=()
phase_steady() {
    local r kind
    for ((r = 1; r <= STEADY_REPS; r++)); do
        for kind in "${BROKER_KINDS[@]}"; do with_broker "$kind" steady_run 1k 1000 1; done
        floor_run 1k 1000 1
        for kind in "${BROKER_KINDS[@]}"; do with_broker "$kind" steady_run 5k 5000 5; done
        floor_run 5k 5000 5
    done
    for kind in "${BROKER_KINDS[@]}"; do with_broker "$kind" steady_run max max 5; done
}

# The transaction is committed first, with two slots created before it;
# then outbox-relay (timed from its start until the consumer has every row)
# and pg_recvlogical (until the commit) each read it through the whole
# decode: PostgreSQL spills a transaction this size to disk and sends nothing
# before the commit, so a reader that ran during the insert would only time
# the replay.
phase_huge() {
    local min_id t0 t1 last end_lsn
    log "huge: one transaction of $HUGE_ROWS rows"
    create_slot bench_huge
    create_slot bench_huge_recv
    create_slot bench_huge_pgo pgoutput
    create_slot bench_huge_pgo_recv pgoutput
    min_id=$(next_id)
    t0=$(now_us)
    psql_q -c "INSERT INTO events_outbox (aggregate_id, type, payload)
               SELECT md5(g::text)::uuid, e.type, e.payload
               FROM generate_series(1, $HUGE_ROWS) AS g JOIN bench_events AS e ON e.k = g % 1000"
    t1=$(now_us)
    end_lsn=$(end_of_backlog)
    rec huge insert_s "$(calc "($t1 - $t0) / 1e6")"

    broker_start
    consumer_start "$min_id" "$HUGE_ROWS" "$work/huge.out" 900
    t0=$(now_us)
    relay_start bench_huge "$work/huge.log"
    consumer_wait "$work/huge.out" 900
    last=$(kv "$work/huge.out" last_unix_us)
    rec huge relay_s "$(calc "($last - $t0) / 1e6")"
    rec huge relay_hwm_mib "$(calc "$(proc_hwm_kb "$RELAY_PID") / 1024")"
    relay_stop "$work/huge.log"
    broker_stop
    drop_slot bench_huge

    t0=$(now_us)
    recvlogical bench_huge_recv "$end_lsn" /dev/null
    t1=$(now_us)
    drop_slot bench_huge_recv
    rec huge recvlogical_s "$(calc "($t1 - $t0) / 1e6")"

    broker_start
    consumer_start "$min_id" "$HUGE_ROWS" "$work/huge-pgo.out" 900
    t0=$(now_us)
    RELAY_PLUGIN=pgoutput relay_start bench_huge_pgo "$work/huge-pgo.log"
    consumer_wait "$work/huge-pgo.out" 900
    last=$(kv "$work/huge-pgo.out" last_unix_us)
    rec huge pgo_relay_s "$(calc "($last - $t0) / 1e6")"
    rec huge pgo_relay_hwm_mib "$(calc "$(proc_hwm_kb "$RELAY_PID") / 1024")"
    relay_stop "$work/huge-pgo.log"
    broker_stop
    drop_slot bench_huge_pgo
    t0=$(now_us)
    recvlogical bench_huge_pgo_recv "$end_lsn" /dev/null pgoutput
    t1=$(now_us)
    drop_slot bench_huge_pgo_recv
    rec huge pgo_recvlogical_s "$(calc "($t1 - $t0) / 1e6")"
    log "huge: outbox-relay $(med huge relay_s) s until consumed, pg_recvlogical alone" \
        "$(med huge recvlogical_s) s; relayer peak RSS $(med huge relay_hwm_mib) MiB;" \
        "pgoutput: $(med huge pgo_relay_s) s / $(med huge pgo_recvlogical_s) s, $(med huge pgo_relay_hwm_mib) MiB"
}

# load_run MODE REP: MODE none, relay (outbox-relay), poll (the polling
# relayer) or decode (pg_recvlogical into /dev/null: PostgreSQL's own share
# of outbox-relay's cost, the part that stays on the primary when the
# relayer and Kafka run elsewhere).
load_run() {
    local mode=$1 r=$2 lsn0 lsn1 poller="" recv="" i
    psql_q -c "TRUNCATE events_outbox, bench_orders" -c "CHECKPOINT"
    case "$mode" in
    decode)
        create_slot bench_load
        recvlogical_follow bench_load /dev/null "$work/load-decode.log"
        recv=$BG_PID
        ;;
    relay)
        create_slot bench_load
        broker_start
        relay_start bench_load "$work/load-relay-$r.log" wait
        ;;
    poll)
        broker_start
        bg "$bin/polling-relayer" --dsn "$DSN" --brokers "$BOOTSTRAP" >"$work/load-poll-$r.log" 2>&1
        poller=$BG_PID
        ;;
    esac
    local x0=0 x1=0 b0=0 b1=0 w0=0 w1=0 xpid="" ws=""
    case "$mode" in relay) xpid=$RELAY_PID ;; poll) xpid=$poller ;; esac
    [ -z "$xpid" ] || { x0=$(proc_ticks "$xpid"); b0=$(broker_ticks); }
    if [ "$mode" = relay ] || [ "$mode" = decode ]; then
        ws=$(psql_q -c "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bench_load'")
        w0=$(proc_ticks "$ws")
    fi
    lsn0=$(current_lsn)
    cpu_begin
    pgbench_run "$work/pgbench-load-$mode-$r.log" 1 -c "$CLIENTS" -T "$LOAD_SECONDS"
    cpu_end "load_$mode" cpu
    lsn1=$(current_lsn)
    [ -z "$xpid" ] || { x1=$(proc_ticks "$xpid"); b1=$(broker_ticks); }
    [ -z "$ws" ] || w1=$(proc_ticks "$ws")
    rec "load_$mode" cpu_walsender_cores "$(calc "($w1 - $w0) / $TICK / $CPU_SECS")"
    rec "load_$mode" cpu_relayer_cores "$(calc "($x1 - $x0) / $TICK / $CPU_SECS")"
    rec "load_$mode" cpu_broker_cores "$(calc "($b1 - $b0) / $TICK / $CPU_SECS")"
    rec "load_$mode" cpu_pgbench_cores "$(calc "$PGB_CPU_S / $CPU_SECS")"
    rec "load_$mode" tps "$PGB_TPS"
    [ "$mode" = none ] && LOAD_NONE_TPS=$PGB_TPS
    rec "load_$mode" ratio "$(calc "$PGB_TPS / $LOAD_NONE_TPS")"
    rec "load_$mode" latency_ms "$PGB_LAT"
    rec "load_$mode" wal_bytes_per_event "$(calc "($lsn1 - $lsn0) / $PGB_TX")"
    case "$mode" in
    relay)
        # Every event must be delivered; how long the tail takes says
        # whether the relayer kept up.
        local t0 delivered
        t0=$(now_us)
        for ((i = 0; i < 1200; i++)); do
            delivered=$(metric outbox_relay_events_delivered_total)
            [ "${delivered:-0}" -ge "$PGB_TX" ] && break
            sleep 0.05
        done
        [ "${delivered:-0}" -ge "$PGB_TX" ] || die "outbox-relay delivered ${delivered:-0} of $PGB_TX events"
        rec load_relay tail_s "$(calc "($(now_us) - $t0) / 1e6")"
        relay_stop "$work/load-relay-$r.log"
        drop_slot bench_load
        ;;
    decode)
        kill -INT "$recv" 2>/dev/null || true
        wait_pid "$recv" 10
        drop_slot bench_load
        ;;
    poll)
        rec load_poll behind_at_end "$(psql_q -c "SELECT count(*) FROM events_outbox WHERE dispatched_at IS NULL")"
        stop_pid "$poller"
        [ "$STOP_RC" = 0 ] || die "polling relayer failed: $(tail -3 "$work/load-poll-$r.log")"
        ;;
    esac
    [ "$mode" = none ] || [ "$mode" = decode ] || broker_stop
    log "load $mode $r/$LOAD_REPS: $PGB_TPS tx/s, $(calc "($lsn1 - $lsn0) / $PGB_TX") WAL bytes/event"
}

phase_load() {
    local r
    for ((r = 1; r <= LOAD_REPS; r++)); do
        load_run none "$r"
        load_run decode "$r"
        load_run relay "$r"
        load_run poll "$r"
    done
}

phase_decoder() {
    if [ ! -x "$bin/bench-decoder" ]; then
        log "decoder: bench/bench_decoder.c not found, skipped"
        return
    fi
    "$bin/bench-decoder" "$repo/tests/fixtures/wal2json/typical_insert.jsonl" "$DEC_ITER" \
        "$DEC_RUNS" >"$work/decoder.out" || die "bench-decoder failed"
    rec decoder lines_per_s "$(sed -n 's/^median of [0-9]* runs: \([0-9]*\) lines\/s.*/\1/p' "$work/decoder.out")"
    rec decoder line_bytes "$(sed -n 's/^line: \([0-9]*\) bytes.*/\1/p' "$work/decoder.out")"
}

# The seed's loyalty-points statement (sql/examples/orders.sql).
APPLY_POINTS="INSERT INTO loyalty_points(customer_id, points) VALUES ((\$4->>'customer_id')::uuid, (\$4->>'points')::int) ON CONFLICT (customer_id) DO UPDATE SET points = loyalty_points.points + EXCLUDED.points"
# Customers whose balances disagree with the committed orders (0 = exact).
POINTS_WRONG="SELECT count(*) FROM (
    (SELECT customer_id, sum(amount_cents / 100)::bigint FROM orders GROUP BY 1
     EXCEPT SELECT customer_id, points FROM loyalty_points)
    UNION ALL
    (SELECT customer_id, points FROM loyalty_points
     EXCEPT SELECT customer_id, sum(amount_cents / 100)::bigint FROM orders GROUP BY 1)) d"

# consume_run KIND REP: outbox-consume (KIND outbox, its defaults) or the
# seed's consumer (KIND seed) from an empty processed_events and
# loyalty_points, in a new group, until every event is applied.
consume_run() {
    local kind=$1 r=$2 logf=$work/consume-$1-$2.log pid t0 tj="" td="" n=0 i ticks pgc
    psql_q -c "TRUNCATE processed_events, loyalty_points" -c "CHECKPOINT"
    local args=(--brokers "$BOOTSTRAP" --group "bench-$kind-$r" --topics order --dsn "$DSN"
                --consumer "bench-$kind" --apply "$APPLY_POINTS")
    t0=$(now_us)
    if [ "$kind" = outbox ]; then
        bg "${CONSUME_PREFIX[@]}" "$build/outbox-consume" "${args[@]}" "${CONSUME_EXTRA[@]}" >"$logf" 2>&1
    else
        bg "$bin/bench-seed-consumer" "${args[@]}" >"$logf" 2>&1
    fi
    pid=$BG_PID
    # The group join (the coordinator's first-join delay: 3 s on the mock),
    # then the apply, timed apart.
    for ((i = 0; i < 6000; i++)); do
        kill -0 "$pid" 2>/dev/null || die "consume $kind exited: $(tail -5 "$logf")"
        grep -q 'assigned' "$logf" && { tj=$(now_us); cpu_begin; break; }
        sleep 0.01
    done
    [ -n "$tj" ] || die "consume $kind: no partition assignment in 60 s: $(tail -5 "$logf")"
    # The clock: one session counting processed_events every 50 ms, or 1 %
    # of the time so far (the error stays under 1 % and the count(*) does
    # not load PostgreSQL for long), returning when it saw them all. A
    # loop here spawning psql, date and awk per look cost a tenth of the
    # machine while the consumer ran; a plpgsql loop held the xmin. The
    # same process samples where the consumer's PostgreSQL sessions spend
    # the apply (their wait events every 10 ms; bench/consume_watch.py).
    local app=outbox-consume
    [ "$kind" = seed ] && app=""
    bg /usr/bin/python3 "$repo/bench/consume_watch.py" "$DSN" "$CONSUME_EVENTS" "$tj" 600 "$app" >"$work/consume-wait.out" 2>&1
    local waiter=$BG_PID
    for ((i = 0; i < 6000; i++)); do
        kill -0 "$waiter" 2>/dev/null || break
        kill -0 "$pid" 2>/dev/null || die "consume $kind exited: $(tail -5 "$logf")"
        sleep 0.1
    done
    wait_pid "$waiter" 10
    td=$(head -1 "$work/consume-wait.out" | tr -d ' \n')
    [[ "$td" =~ ^[0-9]+$ ]] || td=""
    n=$(psql_q -c "SELECT count(*) FROM processed_events")
    [ -n "$td" ] || die "consume $kind: $n of $CONSUME_EVENTS events applied in time: $(tail -5 "$logf")"
    ticks=$(proc_ticks "$pid")
    cpu_end consume "$kind"
    rec consume "${kind}_waits" "$(sed -n 2p "$work/consume-wait.out")"
    log "consume $kind: the consumer's PostgreSQL sessions: $(sed -n 2p "$work/consume-wait.out")"
    # PostgreSQL's CPU per event over the same interval (this run's value:
    # the last one recorded; it includes the polling count(*) above).
    pgc=$(awk -F'\t' -v k="${kind}_postgres_cores" '$1 == "consume" && $2 == k { v = $3 } END { print v }' "$RESULTS")
    rec consume "${kind}_pg_us_per_event" "$(calc "$pgc * $CPU_SECS * 1e6 / $CONSUME_EVENTS")"
    stop_pid "$pid"
    [ "$STOP_RC" = 0 ] || die "consume $kind exited with $STOP_RC: $(tail -5 "$logf")"
    n=$(psql_q -c "SELECT count(*) FROM processed_events WHERE consumer = 'bench-$kind'")
    [ "$n" = "$CONSUME_EVENTS" ] || die "consume $kind: processed_events has $n rows, expected $CONSUME_EVENTS"
    n=$(psql_q -c "$POINTS_WRONG")
    [ "$n" = 0 ] || die "consume $kind: $n customers' loyalty points differ from their orders"
    rec consume "${kind}_join_s" "$(calc "($tj - $t0) / 1e6")"
    rec consume "${kind}_apply_s" "$(calc "($td - $tj) / 1e6")"
    rec consume "${kind}_per_s" "$(calc "$CONSUME_EVENTS * 1e6 / ($td - $tj)")"
    rec consume "${kind}_cpu_us_per_event" "$(calc "$ticks * 1e6 / $TICK / $CONSUME_EVENTS")"
    CONSUME_RATE=$(calc "$CONSUME_EVENTS * 1e6 / ($td - $tj)")
    log "consume $kind $r/$CONSUME_REPS: join $(calc "($tj - $t0) / 1e6") s, $CONSUME_RATE events/s," \
        "$(calc "$ticks * 1e6 / $TICK / $CONSUME_EVENTS") µs CPU/event"
}

phase_consume() {
    local n=$CONSUME_EVENTS per=10000 done_=0 k r i delivered rate_outbox
    log "consume: publishing $n order events (place_order, outbox-relay)"
    psql_q -f "$repo/sql/examples/orders.sql" >/dev/null
    psql_q -c "TRUNCATE orders, events_outbox"
    # 16 partitions: the mock keeps about 5 MB per partition and drops the
    # oldest messages past that (checked below).
    broker_start 16
    create_slot bench_consume
    # Published in large message sets: the mock broker answers a fetch with
    # one message set per partition, found by a walk from the partition's
    # first one, so with the relayer's default linger of 0 (a message set
    # per few events) both consumers measured the mock's quadratic fetch
    # more than themselves (27 % of the machine in one spot of it, perf).
    # A real broker returns every batch that fits a fetch. Only the
    # publishing is tuned; both consumers run as they are.
    local RELAY_EXTRA=("${RELAY_EXTRA[@]}" -X linger.ms=200 -X batch.num.messages=10000)
    relay_start bench_consume "$work/consume-relay.log" wait
    # 1,000 customers; transactions of up to 10,000 orders.
    while [ "$done_" -lt "$n" ]; do
        k=$((n - done_ < per ? n - done_ : per))
        psql_q -c "SET synchronous_commit = off" -c "SELECT count(place_order(
            ('00000000-0000-4000-8000-' || lpad((g % 1000)::text, 12, '0'))::uuid,
            100 + (g * 7919) % 20000)) FROM generate_series($done_ + 1, $done_ + $k) g" >/dev/null
        done_=$((done_ + k))
    done
    for ((i = 0; i < 6000; i++)); do
        delivered=$(metric outbox_relay_events_delivered_total)
        [ "${delivered:-0}" -ge "$n" ] && break
        sleep 0.05
    done
    [ "${delivered:-0}" -ge "$n" ] || die "outbox-relay delivered ${delivered:-0} of $n order events"
    relay_stop "$work/consume-relay.log"
    drop_slot bench_consume
    local p first
    for ((p = 0; p < 16; p++)); do
        first=$(kcat -b "$BOOTSTRAP" -C -t order -p "$p" -o beginning -c 1 -e -q -f '%o' 2>/dev/null) ||
            die "consume: kcat cannot read order[$p]"
        [ "${first:-0}" = 0 ] || die "consume: the broker dropped order[$p]'s first $first messages (too many events per partition for the mock)"
    done
    psql_q -c "VACUUM ANALYZE orders"
    for ((r = 1; r <= CONSUME_REPS; r++)); do
        consume_run outbox "$r"
        rate_outbox=$CONSUME_RATE
        consume_run seed "$r"
        rec consume ratio "$(calc "$rate_outbox / $CONSUME_RATE")"
    done
    broker_stop
}

# -------------------------------------------------------------------- main

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
log "starting PostgreSQL 15 on 127.0.0.1:$PG_PORT (data in $work/pg)"
pg_start
for f in "$repo"/sql/*.sql "$repo/bench/schema.sql"; do
    psql_q -f "$f" >/dev/null
done

# Only drain and steady run on each broker (BENCH_KAFKA=both); the others
# on the first (the mock with "both"), recorded under the plain names.
for p in drain steady huge load decoder consume; do
    has_phase "$p" || continue
    case $p in
    drain | steady) "phase_$p" ;;
    *) with_broker "${BROKER_KINDS[0]}" "phase_$p" ;;
    esac
done

# ------------------------------------------------------------------- table

c2() { fmt %.2f "$(med "$1" "$2")"; } # a median number of cores
# other PHASE MACHINE_KEY KEY...: cores busy that none of ours used (the
# rest of the machine: other users' processes, the kernel's own threads).
other() {
    local phase=$1 total k
    total=$(med "$phase" "$2")
    shift 2
    [ -n "$total" ] || { echo "—"; return; }
    for k in "$@"; do total=$(calc "$total - 0$(med "$phase" "$k")"); done
    fmt %.2f "$total"
}

# table_rows: the table's rows, each "| measurement | result | target |",
# read from the results of phase$TSUF (med).
table_rows() {
    local d_recv d_relay d_poll
    if has_phase drain; then
        d_recv=$(med drain recvlogical_s)
        d_relay=$(med drain relay_s)
        d_poll=$(med drain poll_s)
        echo "| backlog: $(med drain transactions) transactions, $BACKLOG events, $(med drain payload_bytes)-byte payloads, $(fmt %.1f "$(med drain wal_mb)") MB of WAL, $(med drain w2j_lines) wal2json lines ($(fmt %.1f "$(med drain w2j_mb)") MB) | medians of $REPS | |"
        echo "| drain: pg_recvlogical (decode limit) | $(fmt %.2f "$d_recv") s = $(fmt %.0f "$(calc "$BACKLOG / $d_recv")") events/s | |"
        echo "| drain: outbox-relay, until consumed | $(fmt %.2f "$d_relay") s = $(fmt %.0f "$(calc "$BACKLOG / $d_relay")") events/s (slot confirmed at the end after $(fmt %.2f "$(med drain relay_confirmed_s)") s); $(fmt %.2f "$(med drain relay_cpu_us_per_event)") µs CPU/event, peak RSS $(fmt %.1f "$(med drain relay_hwm_mib)") MiB | |"
        echo "| drain: polling relayer, until consumed | $(fmt %.2f "$d_poll") s = $(fmt %.0f "$(calc "$BACKLOG / $d_poll")") events/s | |"
        echo "| drain CPU, cores busy (of $NCPU): pg_recvlogical | machine $(c2 drain recv_machine_cores): PostgreSQL $(c2 drain recv_postgres_cores), pg_recvlogical $(c2 drain recv_client_cores), other $(other drain recv_machine_cores recv_postgres_cores recv_client_cores) | |"
        echo "| drain CPU: outbox-relay | machine $(c2 drain relay_machine_cores): PostgreSQL $(c2 drain relay_postgres_cores) (walsender $(c2 drain relay_walsender_cores)), relayer $(c2 drain relay_relay_cores), broker $(c2 drain relay_broker_cores), consumer $(c2 drain relay_consumer_cores), other $(other drain relay_machine_cores relay_postgres_cores relay_relay_cores relay_broker_cores relay_consumer_cores) | |"
        echo "| drain CPU: polling relayer | machine $(c2 drain poll_machine_cores): PostgreSQL $(c2 drain poll_postgres_cores), poller $(c2 drain poll_poller_cores), broker $(c2 drain poll_broker_cores), consumer $(c2 drain poll_consumer_cores), other $(other drain poll_machine_cores poll_postgres_cores poll_poller_cores poll_broker_cores poll_consumer_cores) | |"
        echo "| drain speed: outbox-relay ÷ decode limit (of the medians; median of the $REPS per-repetition ratios) | **$(fmt %.2f "$(calc "$d_recv / $d_relay")")×** ($(fmt %.2f "$(med drain ratio_decode)")×, range $(awk -F'\t' -v p="drain${TSUF:-}" '$1 == p && $2 == "ratio_decode" { v = $3 + 0; if (n++ == 0 || v < lo) lo = v; if (n == 1 || v > hi) hi = v } END { printf "%.2f–%.2f", lo, hi }' "$RESULTS")); $(fmt %.2f "$(med drain relay_cpu_us_per_event)") µs CPU/event | ≥ 1.0×; ≤ 5 µs |"
        echo "| drain speed: outbox-relay ÷ polling relayer (same) | **$(fmt %.1f "$(calc "$d_poll / $d_relay")")×** ($(fmt %.1f "$(med drain ratio_poll)")×) | ≥ 30× |"
        local p_recv p_relay
        p_recv=$(med drain pgo_recvlogical_s)
        p_relay=$(med drain pgo_relay_s)
        echo "| drain, pgoutput: pg_recvlogical (its decode limit) | $(fmt %.2f "$p_recv") s = $(fmt %.0f "$(calc "$BACKLOG / $p_recv")") events/s; wal2json's ÷ pgoutput's time $(fmt %.2f "$(med drain ratio_decode_pgo_w2j)")× | |"
        echo "| drain, pgoutput: outbox-relay --plugin pgoutput, until consumed | $(fmt %.2f "$p_relay") s = $(fmt %.0f "$(calc "$BACKLOG / $p_relay")") events/s (slot confirmed after $(fmt %.2f "$(med drain pgo_relay_confirmed_s)") s); $(fmt %.2f "$(med drain pgo_relay_cpu_us_per_event)") µs CPU/event, peak RSS $(fmt %.1f "$(med drain pgo_relay_hwm_mib)") MiB | |"
        echo "| drain speed, pgoutput: outbox-relay ÷ its decode limit (of the medians; median of per-repetition ratios) | **$(fmt %.2f "$(calc "$p_recv / $p_relay")")×** ($(fmt %.2f "$(med drain ratio_decode_pgo)")×); $(fmt %.2f "$(med drain pgo_relay_cpu_us_per_event)") µs CPU/event | ≥ 1.0×; ≤ 5 µs |"
        echo "| walsender CPU per event while outbox-relay drains: wal2json / pgoutput | $(fmt %.2f "$(med drain relay_walsender_us_per_event)") / $(fmt %.2f "$(med drain pgo_relay_walsender_us_per_event)") µs | |"
        local sp sr pl pn
        echo "| small-event backlog: the same transactions, $BACKLOG events, $(med small payload_bytes)-byte payloads, $(fmt %.1f "$(med small wal_mb)") MB of WAL | medians of $REPS | |"
        for pl in w2j pgo; do
            sp=$(med small "${pl}_recvlogical_s")
            sr=$(med small "${pl}_relay_s")
            [ -n "$sp" ] && [ -n "$sr" ] || continue
            pn=wal2json
            [ $pl = pgo ] && pn=pgoutput
            echo "| drain, small events, $pn: pg_recvlogical (decode limit) / outbox-relay until consumed | $(fmt %.0f "$(calc "$BACKLOG / $sp")") / $(fmt %.0f "$(calc "$BACKLOG / $sr")") events/s (slot confirmed after $(fmt %.2f "$(med small "${pl}_relay_confirmed_s")") s); walsender $(fmt %.2f "$(med small "${pl}_relay_walsender_us_per_event")") µs CPU/event; cores: relayer $(c2 small "${pl}_relay_relay_cores"), walsender $(c2 small "${pl}_relay_walsender_cores"), broker $(c2 small "${pl}_relay_broker_cores"), consumer $(c2 small "${pl}_relay_consumer_cores") | |"
            echo "| drain speed, small events, $pn: outbox-relay ÷ decode limit (of the medians; median of per-repetition ratios); relayer CPU per event | **$(fmt %.2f "$(calc "$sp / $sr")")×** ($(fmt %.2f "$(med small "${pl}_ratio_decode")")×); **$(fmt %.2f "$(med small "${pl}_relay_cpu_us_per_event")") µs** | ≥ 1.0×; ≤ 5 µs |"
        done
    fi
    if has_phase steady; then
        local s label
        echo "| steady state: pgbench, $CLIENTS clients, fixed rates for ${STEADY_SECONDS} s, medians of $STEADY_REPS runs; floor: the same load with pg_recvlogical in place of the relayer; at the fixed rates the events are read back from Kafka $([ "$STEADY_CONSUMER" = after ] && echo "after the relayer has delivered them (the mock broker's fetch would slow its produce answers), unthrottled while they are produced" || echo "while they are produced") | | |"
        for s in 1k 5k max; do
            case $s in
            1k) label="1,000 events/s (1,000 tx/s × 1)" ;;
            5k) label="5,000 events/s (1,000 tx/s × 5)" ;;
            max) label="unthrottled (tx × 5, $CLIENTS clients)" ;;
            esac
            echo "| steady $label: produced / delivered | $(fmt %.0f "$(med "steady_$s" produced_per_s)") / $(fmt %.0f "$(med "steady_$s" delivered_per_s)") events/s | |"
            echo "| steady $label: commit→delivery p50 / p95 / p99 (relayer histogram) | $(fmt %.2f "$(med "steady_$s" hist_p50_ms)") / $(fmt %.2f "$(med "steady_$s" hist_p95_ms)") / $(fmt %.2f "$(med "steady_$s" hist_p99_ms)") ms ($(fmt %.1f "$(calc "100 * $(med "steady_$s" share_le_5ms)")") % ≤ 5 ms, $(fmt %.1f "$(calc "100 * $(med "steady_$s" share_le_10ms)")") % ≤ 10 ms, $(fmt %.2f "$(calc "100 * $(med "steady_$s" share_le_25ms)")") % ≤ 25 ms) | $([ $s = 5k ] && echo "p50 ≤ 5, p99 ≤ 20 ms") |"
            [ $s = max ] || echo "| steady $label: floor, commit→pg_recvlogical p50 / p95 / p99 (no relayer); binned as the relayer's histogram, p50 / p99; mean | $(fmt %.2f "$(med "floor_$s" p50_ms)") / $(fmt %.2f "$(med "floor_$s" p95_ms)") / $(fmt %.2f "$(med "floor_$s" p99_ms)") ms; binned $(fmt %.2f "$(med "floor_$s" h50_ms)") / $(fmt %.2f "$(med "floor_$s" h99_ms)") ms; mean $(fmt %.2f "$(med "floor_$s" mean_ms)") ms | |"
            echo "| steady $label: the broker's share, event handed to librdkafka→acknowledged p50 / p99 (relayer histogram); mean; commit→delivery mean | $(fmt %.2f "$(med "steady_$s" ack_p50_ms)") / $(fmt %.2f "$(med "steady_$s" ack_p99_ms)") ms; mean $(fmt %.2f "$(med "steady_$s" ack_mean_ms)") ms; commit→delivery mean $(fmt %.2f "$(med "steady_$s" hist_mean_ms)") ms | |"
            echo "| steady $label: tx start→consumer p50 / p95 / p99 | $(fmt %.2f "$(med "steady_$s" e2e_p50_ms)") / $(fmt %.2f "$(med "steady_$s" e2e_p95_ms)") / $(fmt %.2f "$(med "steady_$s" e2e_p99_ms)") ms | |"
            echo "| steady $label: cores busy (of $NCPU) | machine $(c2 "steady_$s" cpu_machine_cores): PostgreSQL $(c2 "steady_$s" cpu_postgres_cores) (walsender $(c2 "steady_$s" cpu_walsender_cores)), relayer $(c2 "steady_$s" cpu_relay_cores), broker $(c2 "steady_$s" cpu_broker_cores), consumer $(c2 "steady_$s" cpu_consumer_cores), pgbench $(c2 "steady_$s" cpu_pgbench_cores), other $(other "steady_$s" cpu_machine_cores cpu_postgres_cores cpu_relay_cores cpu_broker_cores cpu_consumer_cores cpu_pgbench_cores) | |"
            echo "| steady $label: relayer CPU, peak RSS | $(fmt %.1f "$(med "steady_$s" cpu_pct)") % of a core ($(fmt %.1f "$(med "steady_$s" cpu_us_per_event)") µs/event), $(fmt %.1f "$(med "steady_$s" hwm_mib)") MiB; context switches per event: main thread $(fmt %.2f "$(med "steady_$s" ctxsw_main_per_event)"), librdkafka threads $(fmt %.2f "$(med "steady_$s" ctxsw_rdk_per_event)") | $([ $s = 5k ] && echo "≤ 10 %, ≤ 32 MiB") |"
            [ $s = max ] && continue
            # issue 14's targets, beside their rows: ratios of the medians,
            # and in parentheses the median of the per-repetition ratios
            # (each steady run against the floor run right after it)
            local cu fu du
            cu=$(med "steady_$s" cpu_us_per_event)
            fu=$(med "floor_$s" cpu_us_per_event)
            du=$(med drain relay_cpu_us_per_event)
            # (with a column per broker the draining cost, which differs,
            # moves from the measurement's text into each result)
            local dl="" dr=""
            if [ -n "$du" ] && [ "$KAFKA_MODE" = both ]; then
                dl="; ÷ the relayer's own draining cost on the same broker"
                dr=" ($(fmt %.2f "$du") µs/event)"
            elif [ -n "$du" ]; then
                dl="; ÷ the relayer's own draining cost ($(fmt %.2f "$du") µs/event)"
            fi
            echo "| steady $label: relayer CPU per event ÷ pg_recvlogical's as the client of the same load (its $(fmt %.1f "$fu") µs/event, $(fmt %.2f "$(med "floor_$s" ctxsw_per_event)") context switches per event)$dl | **$(fmt %.2f "$(quot "$cu" "$fu")")×** ($(fmt %.2f "$(med "floor_$s" ratio_cpu)")×)$([ -n "$du" ] && echo "; **$(fmt %.2f "$(quot "$cu" "$du")")×**$dr") | ≤ 2×$([ -n "$du" ] && echo "; ≤ 1.5×") |"
            echo "| steady $label: commit→delivery over the floor, p50 / p99 (relayer histogram − the floor binned alike) | **$(fmt %+.2f "$(diff_of "$(med "steady_$s" hist_p50_ms)" "$(med "floor_$s" h50_ms)")") / $(fmt %+.2f "$(diff_of "$(med "steady_$s" hist_p99_ms)" "$(med "floor_$s" h99_ms)")") ms** ($(fmt %+.2f "$(med "floor_$s" over_p50_ms)") / $(fmt %+.2f "$(med "floor_$s" over_p99_ms)")) | p50 ≤ floor + 1 ms, p99 ≤ floor + 10 ms |"
            # where the mean over the floor goes (means add up exactly):
            # the broker's round trip, and the rest (WAL to the relayer,
            # decoding, producing) beyond the floor's commit→client
            local om am
            om=$(diff_of "$(med "steady_$s" hist_mean_ms)" "$(med "floor_$s" mean_ms)")
            am=$(med "steady_$s" ack_mean_ms)
            echo "| steady $label: commit→delivery over the floor, mean; of it the broker's round trip / the rest (WAL to the relayer, decode, produce) | $(fmt %+.2f "$om") ms ($(fmt %+.2f "$(med "floor_$s" over_mean_ms)")); $(fmt %.2f "$am") / $(fmt %+.2f "$(diff_of "$om" "$am")") ms | |"
        done
    fi
    if has_phase huge; then
        echo "| one transaction of $HUGE_ROWS rows, committed, then read whole: outbox-relay until consumed / pg_recvlogical alone | $(fmt %.1f "$(med huge relay_s)") s / $(fmt %.1f "$(med huge recvlogical_s)") s (insert and commit took $(fmt %.1f "$(med huge insert_s)") s) | |"
        echo "| one transaction of $HUGE_ROWS rows: relayer peak RSS | **$(fmt %.1f "$(med huge relay_hwm_mib)") MiB** | ≤ 64 MiB |"
        echo "| the same with pgoutput: outbox-relay until consumed / pg_recvlogical alone; relayer peak RSS | $(fmt %.1f "$(med huge pgo_relay_s)") s / $(fmt %.1f "$(med huge pgo_recvlogical_s)") s; **$(fmt %.1f "$(med huge pgo_relay_hwm_mib)") MiB** | ≤ 64 MiB |"
    fi
    if has_phase load; then
        local none relay poll
        none=$(med load_none tps); relay=$(med load_relay tps); poll=$(med load_poll tps)
        local dec
        dec=$(med load_decode tps)
        echo "| primary load ($CLIENTS pgbench clients, ${LOAD_SECONDS} s, medians of $LOAD_REPS): producer tx/s with no relayer / outbox-relay / polling relayer / decoding only (pg_recvlogical) | $(fmt %.0f "$none") / $(fmt %.0f "$relay") / $(fmt %.0f "$poll") / $(fmt %.0f "$dec") | |"
        echo "| producer throughput with outbox-relay ÷ none (of the medians; median of per-repetition ratios) | **$(fmt %.3f "$(calc "$relay / $none")")×** ($(fmt %.3f "$(med load_relay ratio)")×); polling: $(fmt %.3f "$(calc "$poll / $none")")× ($(fmt %.3f "$(med load_poll ratio)")×); decoding only: $(fmt %.3f "$(calc "$dec / $none")")× ($(fmt %.3f "$(med load_decode ratio)")×) | ≥ 0.95× |"
        local m
        for m in none decode relay poll; do
            echo "| primary load CPU, cores busy (of $NCPU): $(case $m in none) echo "no relayer" ;; decode) echo "decoding only" ;; relay) echo "outbox-relay" ;; poll) echo "polling relayer" ;; esac) | machine $(c2 "load_$m" cpu_machine_cores): PostgreSQL $(c2 "load_$m" cpu_postgres_cores)$([ $m = relay ] || [ $m = decode ] && echo " (walsender $(c2 "load_$m" cpu_walsender_cores))"), pgbench $(c2 "load_$m" cpu_pgbench_cores)$([ $m = relay ] || [ $m = poll ] && echo ", relayer $(c2 "load_$m" cpu_relayer_cores), broker $(c2 "load_$m" cpu_broker_cores)"), other $(other "load_$m" cpu_machine_cores cpu_postgres_cores cpu_pgbench_cores cpu_relayer_cores cpu_broker_cores) | |"
        done
        echo "| WAL bytes per event: none / outbox-relay / polling relayer | $(fmt %.0f "$(med load_none wal_bytes_per_event)") / **$(fmt %.0f "$(med load_relay wal_bytes_per_event)")** / $(fmt %.0f "$(med load_poll wal_bytes_per_event)") | no extra |"
        echo "| primary load: outbox-relay tail after producers stop / polling rows behind at end | $(fmt %.2f "$(med load_relay tail_s)") s / $(fmt %.0f "$(med load_poll behind_at_end)") | |"
    fi
    if has_phase consume; then
        local co cs
        co=$(med consume outbox_per_s); cs=$(med consume seed_per_s)
        echo "| consume: $CONSUME_EVENTS order events (1,000 customers, 16 partitions), the loyalty-points --apply, from an empty processed_events; medians of $CONSUME_REPS; events/s from the partition assignment to the last event applied | | |"
        echo "| consume: outbox-consume, defaults | $(fmt %.0f "$co") events/s, $(fmt %.1f "$(med consume outbox_cpu_us_per_event)") µs CPU/event; group join $(fmt %.2f "$(med consume outbox_join_s)") s | |"
        echo "| consume: seed consumer (one transaction per event, bench/seed_consumer.c) | $(fmt %.0f "$cs") events/s, $(fmt %.1f "$(med consume seed_cpu_us_per_event)") µs CPU/event; group join $(fmt %.2f "$(med consume seed_join_s)") s | |"
        echo "| consume: outbox-consume ÷ seed consumer (of the medians; median of per-repetition ratios) | **$(fmt %.1f "$(calc "$co / $cs")")×** ($(fmt %.1f "$(med consume ratio)")×) | ≥ 20× |"
        echo "| consume: while applying, cores busy (of $NCPU): outbox-consume / seed consumer | machine $(c2 consume outbox_machine_cores), PostgreSQL $(c2 consume outbox_postgres_cores) ($(fmt %.1f "$(med consume outbox_pg_us_per_event)") µs/event) / machine $(c2 consume seed_machine_cores), PostgreSQL $(c2 consume seed_postgres_cores) ($(fmt %.1f "$(med consume seed_pg_us_per_event)") µs/event) | |"
        echo "| consume: the consumer's PostgreSQL sessions' time, sampled every 10 ms (last repetition; CPU: running or waiting for a core): outbox-consume / seed consumer | $(last_rec consume outbox_waits) / $(last_rec consume seed_waits) | |"
    fi
    if has_phase decoder && [ -n "$(med decoder lines_per_s)" ]; then
        echo "| decoder: typical $(med decoder line_bytes)-byte insert line, one core | **$(fmt %.0f "$(med decoder lines_per_s)") lines/s** | ≥ 1,000,000 |"
    fi
}

# The table: one result column, or with BENCH_KAFKA=both one per broker:
# the drain and steady rows made twice (TSUF "" and "@real"), joined on the
# measurement (the same text: its figures are those recorded for both),
# "same" where both runs read the one value (no broker involved), "mock
# only" on the phases that ran on the mock alone; then real ÷ mock rows.
table() {
    if [ "$KAFKA_MODE" != both ]; then
        echo "| measurement | result | target |"
        echo "|---|---|---|"
        table_rows
        return
    fi
    local p real_phases=""
    for p in drain steady; do has_phase "$p" && real_phases+=" $p"; done
    table_rows >"$work/rows-mock.md"
    (TSUF=@real PHASES=$real_phases table_rows) >"$work/rows-real.md"
    echo "| measurement | mock broker (build/mock-broker) | real Kafka $KAFKA_VERSION (1 KRaft node) | target |"
    echo "|---|---|---|---|"
    awk -v real="$work/rows-real.md" '
        function cells(line, c,   f, i) { # "| a | b | c |" -> c[1..3] (no cell has a "|")
            split(line, f, "|")
            for (i = 1; i <= 3; i++) { c[i] = f[i + 1]; gsub(/^ +| +$/, "", c[i]) }
        }
        BEGIN { while ((getline l < real) > 0) { cells(l, c); r[c[1]] = c[2] } }
        {
            cells($0, c)
            if (!(c[1] in r)) v = "mock only"
            else if (r[c[1]] == c[2]) v = (c[2] == "") ? "" : "same"
            else v = r[c[1]]
            printf "| %s | %s | %s | %s |\n", c[1], c[2], v, c[3]
        }' "$work/rows-mock.md"
    ratio_rows
}

# ratio_rows: real ÷ mock of the medians, on the rows that say most.
ratio_rows() {
    local s label
    q() { quot "$(TSUF=@real med "$1" "$2")" "$(med "$1" "$2")"; }
    if has_phase drain; then
        echo "| real Kafka ÷ mock, drain time until consumed: outbox-relay wal2json / pgoutput / polling relayer; relayer CPU per event (wal2json) | | $(fmt %.2f "$(q drain relay_s)")× / $(fmt %.2f "$(q drain pgo_relay_s)")× / $(fmt %.2f "$(q drain poll_s)")×; $(fmt %.2f "$(q drain relay_cpu_us_per_event)")× | |"
        echo "| real Kafka ÷ mock, broker cores while outbox-relay drains (wal2json) | | $(fmt %.2f "$(q drain relay_broker_cores)")× ($(fmt %.2f "$(TSUF=@real med drain relay_broker_cores)") / $(fmt %.2f "$(med drain relay_broker_cores)")) | |"
    fi
    if has_phase steady; then
        for s in 1k 5k max; do
            case $s in 1k) label="1,000 events/s" ;; 5k) label="5,000 events/s" ;; max) label="unthrottled" ;; esac
            echo "| real Kafka ÷ mock, steady $label: commit→delivery p50 / p99; broker ack mean; relayer CPU per event; delivered events/s | | $(fmt %.2f "$(q "steady_$s" hist_p50_ms)")× / $(fmt %.2f "$(q "steady_$s" hist_p99_ms)")×; $(fmt %.2f "$(q "steady_$s" ack_mean_ms)")×; $(fmt %.2f "$(q "steady_$s" cpu_us_per_event)")×; $(fmt %.2f "$(q "steady_$s" delivered_per_s)")× | |"
        done
    fi
}

describe() {
    local rev
    rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo "?")
    git -C "$repo" diff --quiet HEAD -- src include 2>/dev/null || rev="$rev + uncommitted changes in src/"
    echo "Run: \`bash bench/run.sh$([ "$QUICK" = 1 ] && echo " --quick")\`, $STARTED, outbox-relay $rev" \
         "$([ ${#RELAY_EXTRA[@]} -gt 0 ] && echo "with ${RELAY_EXTRA[*]}")"
    echo
    echo "Machine: $NCPU vCPU ($(sed -n 's/^model name[[:space:]]*: //p;T;q' /proc/cpuinfo))," \
         "$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM, Linux $(uname -r);" \
         "$("$PG_BIN/postgres" --version | sed 's/^postgres (PostgreSQL) /PostgreSQL /')," \
         "wal2json $(dpkg-query -W -f '${Version}' postgresql-15-wal2json 2>/dev/null)," \
         "librdkafka $(pkg-config --modversion rdkafka); PostgreSQL, broker ($(broker_words))," \
         "relayers, consumer and pgbench ($CLIENTS clients) all on this machine." \
         "Load average (1/5/15 min) before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
}
broker_words() {
    local real="a real Apache Kafka $KAFKA_VERSION (one KRaft node, broker and controller in one JVM, replication factor 1, tests/integration/kafka_cluster.py's settings), 4 partitions per topic"
    case $KAFKA_MODE in
    mock) echo "build/mock-broker, 1 broker, 4 partitions per topic" ;;
    real) echo "$real" ;;
    both) echo "build/mock-broker (1 broker, 4 partitions per topic) and $real: drain and steady on each, the other phases on the mock only" ;;
    esac
}

echo
{ describe; table; } | tee "$work/table.md"
[ -z "$OUT" ] || cp "$work/table.md" "$OUT"
ok=1
log "done"
