# shellcheck shell=bash
# pglib.sh — throwaway PostgreSQL clusters for shell scripts (sourced).
# Configured as docs/operations.md says (wal2json named in
# output_plugin_libraries) unless PGL_SERVER_DEFAULTS=1.
#
# The same recipe as tests/integration/harness.py: a temp dir owned by the
# postgres user (PostgreSQL refuses to run as root), initdb with trust auth,
# pg_ctl start on 127.0.0.1 with wal_level=logical and a Unix socket in the
# cluster dir, then the outbox schema from sql/*.sql.
#
#   pgl_free_port                      print a TCP port free on 127.0.0.1
#   pgl_start DIR PORT [-c name=value …] initdb DIR (if needed) and start it
#   pgl_psql PORT [psql args…]         psql as postgres on that cluster
#   pgl_load_sql PORT SQLDIR           run SQLDIR/*.sql in order
#   pgl_stop DIR [fast|immediate]      stop it (harmless if not running)
#   pgl_tmpdir                         print a new empty dir where DIR may be
#
# PGL_MAJOR=15 (default) runs the host's PostgreSQL; 17 or 18 runs the
# server of tests/tools/pgtrees.sh's Debian tree for that major, chrooted
# as the tree's postgres user: DIR must then be inside the tree (pgl_tmpdir
# makes one); clients still reach it on 127.0.0.1.

PGL_MAJOR=${PGL_MAJOR:-15}
if [ "$PGL_MAJOR" = 15 ]; then
    PGL_TREE=
    PGL_BIN=${PGL_BIN:-/usr/lib/postgresql/15/bin}
else
    PGL_TREE=${OUTBOX_PG_TREES:-/var/cache/outbox-relay/pg-trees}/pg$PGL_MAJOR
    PGL_BIN=/usr/lib/postgresql/$PGL_MAJOR/bin    # as seen inside the tree
fi

# Runs a command as the major's postgres user (inside its tree for 17+).
_pgl_as_postgres() {
    if [ -z "$PGL_TREE" ]; then
        runuser -u postgres -- "$@"
        return
    fi
    local ids
    ids=$(awk -F: '$1 == "postgres" { print $3 ":" $4 }' "$PGL_TREE/etc/passwd")
    [ -n "$ids" ] || { echo "pglib: no PostgreSQL $PGL_MAJOR tree at $PGL_TREE (tests/tools/pgtrees.sh)" >&2; return 1; }
    HOME=/var/lib/postgresql LC_ALL=C chroot --userspec="$ids" --groups="${ids#*:}" "$PGL_TREE" "$@"
}

# A path of ours as the server sees it.
_pgl_path() {
    if [ -z "$PGL_TREE" ]; then
        echo "$1"
        return
    fi
    case $1 in
        "$PGL_TREE"/*) echo "${1#"$PGL_TREE"}" ;;
        *) echo "pglib: $1 is not inside $PGL_TREE (use pgl_tmpdir)" >&2; return 1 ;;
    esac
}

pgl_tmpdir() {
    mktemp -d "${PGL_TREE}/tmp/pgl.XXXXXX"
}

pgl_free_port() {
    # Below the kernel's ephemeral range (usually 32768-60999), where
    # outgoing connections never hold the port while the server binds it.
    local port tries=0 low=32768
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
    [ "$low" -gt 12000 ] || low=32768
    while [ $tries -lt 200 ]; do
        port=$(( 10000 + RANDOM % (low - 10000) ))
        # A port nobody answers on; bash's /dev/tcp needs no extra tools.
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
        tries=$((tries + 1))
    done
    echo "pgl_free_port: no free port found" >&2
    return 1
}

pgl_start() {
    local dir=$1 port=$2 sdir
    shift 2
    sdir=$(_pgl_path "$dir") || return 1
    local opts="-p $port -k $sdir -c listen_addresses=127.0.0.1 -c wal_level=logical"
    opts+=" -c max_replication_slots=10 -c max_wal_senders=10 -c wal_sender_timeout=10s"
    opts+=" -c fsync=off -c full_page_writes=off"
    # As docs/operations.md tells users: since the November 2026 minors a
    # non-core output plugin (wal2json) must be named here. PGL_SERVER_DEFAULTS=1
    # leaves it at the server's default (wal2json refused).
    # Read whole, then searched: piped into grep -q, postgres could take
    # SIGPIPE once grep had its match, and under a caller's pipefail the
    # test failed now and then (demo: "may not be used as an output plugin").
    local params
    params=$(${PGL_TREE:+chroot "$PGL_TREE"} "$PGL_BIN/postgres" --describe-config 2>/dev/null)
    if [ -z "${PGL_SERVER_DEFAULTS:-}" ] && grep -q '^output_plugin_libraries' <<<"$params"; then
        opts+=" -c output_plugin_libraries='pgoutput,test_decoding,wal2json'"
    fi
    while [ $# -gt 0 ]; do
        if [ "$1" = "-c" ] && [ $# -ge 2 ]; then
            opts+=" -c $2"
            shift 2
        else
            echo "pgl_start: expected -c name=value, got '$1'" >&2
            return 2
        fi
    done

    mkdir -p "$dir"
    chmod 755 "$dir"
    _pgl_as_postgres sh -c 'true' || return 1
    if [ -n "$PGL_TREE" ]; then
        chown "$(awk -F: '$1 == "postgres" { print $3 ":" $4 }' "$PGL_TREE/etc/passwd")" "$dir"
    else
        chown postgres:postgres "$dir"
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        _pgl_as_postgres "$PGL_BIN/initdb" -D "$sdir/data" -A trust -U postgres \
            -E UTF8 --no-locale -N >"$dir/initdb.log" 2>&1 || {
            echo "pgl_start: initdb failed:" >&2
            cat "$dir/initdb.log" >&2
            return 1
        }
    fi
    _pgl_as_postgres "$PGL_BIN/pg_ctl" -D "$sdir/data" -l "$sdir/postgres.log" \
        -w -t 60 -o "$opts" start >/dev/null || {
        echo "pgl_start: PostgreSQL did not start; its log:" >&2
        tail -n 20 "$dir/postgres.log" >&2
        return 1
    }
}

pgl_psql() {
    local port=$1
    shift
    psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres "$@"
}

pgl_load_sql() {
    local port=$1 sqldir=$2 f
    for f in "$sqldir"/*.sql; do
        PGOPTIONS="-c client_min_messages=warning" pgl_psql "$port" -f "$f" >/dev/null || {
            echo "pgl_load_sql: $f failed" >&2
            return 1
        }
    done
}

pgl_stop() {
    local dir=$1 mode=${2:-fast} sdir
    [ -f "$dir/data/postmaster.pid" ] || return 0
    sdir=$(_pgl_path "$dir") || return 1
    _pgl_as_postgres "$PGL_BIN/pg_ctl" -D "$sdir/data" -m "$mode" -w -t 30 stop \
        >/dev/null 2>&1 ||
        _pgl_as_postgres "$PGL_BIN/pg_ctl" -D "$sdir/data" -m immediate -w -t 30 stop \
            >/dev/null 2>&1 || true
}
