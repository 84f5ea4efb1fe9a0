#!/bin/bash
# healthcheck.sh — installed as /usr/local/bin/outbox-relay-healthcheck, the
# image's HEALTHCHECK. GETs /healthz (or the path given as $1, e.g. /readyz)
# from the relayer's --metrics-addr, read from OUTBOX_RELAY_METRICS_ADDR;
# without one it falls back to `outbox-relay status`. Exit 0 healthy, 1 not.
# Plain bash (/dev/tcp), so the runtime image needs no curl.
set -u

addr=${OUTBOX_RELAY_METRICS_ADDR:-}
path=${1:-/healthz}
if [ -z "$addr" ]; then
    exec /usr/local/bin/outbox-relay status
fi

port=${addr##*:}
host=${addr%:*}
host=${host#[}
host=${host%]}
case $host in
    "" | 0.0.0.0 | :: | "*") host=127.0.0.1 ;;  # listening everywhere: ask loopback
esac

# (The group keeps the 2>/dev/null from sticking to the shell the way a bare
# `exec ... 2>/dev/null` would.)
if ! { exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null; then
    echo "nothing listens on $host:$port" >&2
    exit 1
fi
printf 'GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n' "$path" "$host" >&3
if ! read -r -t 4 _ code _ <&3; then
    echo "no answer from $host:$port$path" >&2
    exit 1
fi
if [ "$code" != 200 ]; then
    echo "$host:$port$path answered $code" >&2
    exit 1
fi
exit 0
