"""test_operations.py — the operational side of outbox-relay against a real
PostgreSQL 15 (wal2json) and the mock Kafka cluster: the reaper and its
safety rule, partition drop, /metrics, /healthz and /readyz, the status
command's exit codes, and the heartbeat.

The reaper's guarantee is checked both ways: rows that are expired AND
delivered go, everything else stays — in particular rows whose events the
broker has not acknowledged (broker down), however old they are.

Some tests wait out the reaper's bounded wait for the slot
(REAPER_CONFIRM_WAIT, 30 s) on purpose: that wait running out is the
behaviour under test.
"""

import math
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid

import psycopg2
import pytest

import harness
from harness import wait_until

SLOT = "outbox_relay"
TOPIC = "order"          # the default topic template "{prefix}" of type order.*
CONFIRM_WAIT = 30        # REAPER_CONFIRM_WAIT in include/outbox_relay/ops/reaper.h


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def insert(pg, n, age=None, type_="order.created", table="events_outbox", created_at=None):
    """Inserts n outbox rows in one transaction; created_at is now() - age
    (an interval text), or the given timestamp text, or now(). Returns the
    ids."""
    if created_at is not None:
        expr, params = "%s::timestamptz", [created_at]
    elif age is not None:
        expr, params = "now() - %s::interval", [age]
    else:
        expr, params = "now()", []
    rows = pg.query("INSERT INTO %s (aggregate_id, type, payload, created_at) "
                    "SELECT gen_random_uuid(), %%s, jsonb_build_object('i', g), %s "
                    "FROM generate_series(1, %%s) g RETURNING id" % (table, expr),
                    [type_] + params + [n])
    return [r[0] for r in rows]


def outbox_ids(pg, table="events_outbox"):
    return {r[0] for r in pg.query("SELECT id FROM %s" % table)}


def cli(binary, *args, timeout=120):
    """Runs build/outbox-relay with a clean environment; returns the
    CompletedProcess (stdout and stderr as text)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    return subprocess.run([binary] + [str(a) for a in args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout, env=env)


def wait_confirmed_past(pg, lsn, timeout=30):
    wait_until(lambda: (pg.confirmed_flush_lsn(SLOT) or 0) >= lsn, timeout,
               message="slot to confirm %s" % harness.int_to_lsn(lsn))


def http_get(port, path, timeout=5):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("Content-Type")


def start_with_metrics(relayer, relay_args, *extra):
    port = harness.free_port()
    p = relayer(*relay_args, "--metrics-addr", "127.0.0.1:%d" % port, *extra)
    p.wait_for_log(r"serving /metrics", timeout=20)
    return p, port


# A small validator of the Prometheus text exposition format (0.0.4).
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(r"^(%s)(\{(?:%s(?:,%s)*)?\})? (\S+)( -?\d+)?$" % (_NAME, _LABEL, _LABEL))
_LABEL_ONE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_prometheus(text):
    """Validates text line by line and returns {(name, frozenset(labels)):
    value}. Raises AssertionError naming the first bad line."""
    assert text.endswith("\n"), "exposition does not end with a newline"
    types, helps, done, series = {}, set(), set(), {}
    current = None
    hist = {}
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = "line %d: %r" % (n, line)
        assert line, "empty " + where
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                assert len(parts) == 4 and re.fullmatch(_NAME, parts[2]), "bad " + where
                name = parts[2]
                assert name not in done, "HELP/TYPE after the family's samples, " + where
                if parts[1] == "TYPE":
                    assert name not in types, "second TYPE, " + where
                    assert parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"), where
                    types[name] = parts[3]
                else:
                    assert name not in helps, "second HELP, " + where
                    helps.add(name)
            continue
        m = _SAMPLE.match(line)
        assert m, "not a sample, " + where
        name, labels_text, value_text = m.group(1), m.group(2) or "", m.group(3)
        value = float(value_text.replace("+Inf", "inf").replace("-Inf", "-inf"))
        labels = dict(_LABEL_ONE.findall(labels_text))
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and types.get(name[:-len(suffix)]) == "histogram":
                family = name[:-len(suffix)]
        assert family in types and family in helps, "sample without HELP and TYPE, " + where
        assert name.startswith("outbox_relay_"), "name without the prefix, " + where
        if family != current:
            assert family not in done, "family not contiguous, " + where
            if current is not None:
                done.add(current)
            current = family
        if types[family] == "counter":
            assert name.endswith("_total") and value >= 0, "bad counter, " + where
        if types[family] == "histogram" and name.endswith("_bucket"):
            le = float(labels["le"].replace("+Inf", "inf"))
            h = hist.setdefault(family, [])
            assert not h or value >= h[-1][1], "buckets not cumulative, " + where
            h.append((le, value))
        if types[family] == "histogram" and name.endswith("_count"):
            assert hist[family][-1][0] == math.inf and hist[family][-1][1] == value, \
                "_count differs from the +Inf bucket, " + where
        key = (name, frozenset(labels.items()))
        assert key not in series, "duplicate series, " + where
        series[key] = value
    return series


def metric(series, name, **labels):
    return series.get((name, frozenset(labels.items())))


def scrape(port):
    status, body, ctype = http_get(port, "/metrics")
    assert status == 200, body
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
    return parse_prometheus(body)


def wait_metric(port, predicate, timeout, message):
    """Scrapes until predicate(series) is truthy; returns the series."""
    last = {}

    def check():
        last["s"] = scrape(port)
        return predicate(last["s"])

    try:
        wait_until(check, timeout, interval=0.25, message=message)
    except AssertionError:
        raise AssertionError("%s; last scrape: %s" % (message, {
            k[0] + str(dict(k[1])): v for k, v in last.get("s", {}).items()
            if "bucket" not in k[0]}))
    return last["s"]


def load_partitioned_layout(pg):
    """Replaces the plain outbox of 001 by the partitioned layout of 004."""
    pg.query("DROP TABLE events_outbox CASCADE")
    with open(os.path.join(harness.REPO_ROOT, "sql", "004_outbox_partitioned.sql")) as f:
        pg.query(f.read())
    assert pg.scalar("SELECT relkind::text FROM pg_class WHERE oid = 'events_outbox'::regclass") == "p"


def partitions(pg):
    return {r[0] for r in pg.query(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'events_outbox'::regclass")}


# --------------------------------------------------------------------------
# the exposition validator itself
# --------------------------------------------------------------------------

def test_prometheus_validator_rejects_bad_text():
    good = ("# HELP outbox_relay_x_total h\n# TYPE outbox_relay_x_total counter\n"
            "outbox_relay_x_total{topic=\"a\\\"b\"} 3\n")
    assert metric(parse_prometheus(good), "outbox_relay_x_total", topic='a\\"b') == 3
    for bad in ["outbox_relay_x 1\n",
                "# HELP outbox_relay_x h\n# TYPE outbox_relay_x counter\noutbox_relay_x 1\n",
                "# HELP outbox_relay_x h\n# TYPE outbox_relay_x gauge\noutbox_relay_x{a=b} 1\n",
                "# HELP outbox_relay_x h\n# TYPE outbox_relay_x gauge\noutbox_relay_x 1\noutbox_relay_x 1\n",
                "# HELP outbox_relay_x h\n# TYPE outbox_relay_x gauge\noutbox_relay_x 1"]:
        with pytest.raises(AssertionError):
            parse_prometheus(bad)


# --------------------------------------------------------------------------
# reaper
# --------------------------------------------------------------------------

def test_reaper_deletes_exactly_the_expired_delivered_rows(pg, broker, kafka, relayer, relay_args,
                                                           relayer_binary):
    """Rows older than --retention whose events are delivered are deleted, in
    batches of --reap-batch; younger rows stay; the DELETEs never reach
    Kafka. Run as the least-privilege role of sql/003."""
    p = relayer(*relay_args, "--retention", "0")   # the reaper under test is `reap`
    p.wait_for_log("streaming", timeout=30)
    old = insert(pg, 23, age="2 hours")
    recent = insert(pg, 5, age="30 minutes")
    fresh = insert(pg, 7)
    assert len(kafka.read(TOPIC, expected=35, timeout=30)) == 35
    wait_confirmed_past(pg, pg.current_wal_lsn())

    dsn = pg.dsn(user="outbox_relay")
    t0 = time.monotonic()
    r = cli(relayer_binary, "reap", "--dsn", dsn, "--retention", "1 hour", "--reap-batch", "5")
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert re.search(r"deleted 23 rows in 5 batches, dropped 0 partitions", r.stderr), r.stderr
    assert outbox_ids(pg) == set(recent + fresh)
    assert elapsed < 20, "reap took %.1f s" % elapsed

    # Nothing left to do: a second run deletes nothing and still exits 0.
    r = cli(relayer_binary, "reap", "--dsn", dsn, "--retention", "1 hour", "--reap-batch", "5")
    assert r.returncode == 0 and "deleted 0 rows in 0 batches" in r.stderr, r.stderr

    # The DELETEs are in the WAL before this marker; once the marker is in
    # Kafka, anything they could have produced would be there too.
    marker = insert(pg, 1, type_="order.marker")
    got = kafka.read(TOPIC, expected=36, timeout=30)
    time.sleep(1)
    got = kafka.read(TOPIC, timeout=3)
    assert sorted(int(m.headers["event_id"]) for m in got) == sorted(old + recent + fresh + marker)
    assert kafka.topics() == [TOPIC]
    assert "error" not in p.log_text().lower().replace("errors", "")

    # Retention 0 turns it off.
    r = cli(relayer_binary, "reap", "--dsn", dsn, "--retention", "0")
    assert r.returncode == 0 and "off" in r.stderr, r.stderr
    assert outbox_ids(pg) == set(recent + fresh + marker)


@pytest.mark.parametrize("tuning", harness.TUNINGS)
def test_reaper_keeps_undelivered_rows_while_the_broker_is_down(pg, broker, kafka, relayer,
                                                                relay_args, relayer_binary,
                                                                tuning):
    """During a Kafka outage the slot is not confirmed past the outage's
    events, so rows past retention are kept, however old; once the broker is
    back and they are delivered, the next run deletes them."""
    p = relayer(*relay_args, "--retention", "0", *harness.tuned(tuning, "--status-interval", "0.5"))
    p.wait_for_log("streaming", timeout=30)
    warm = insert(pg, 3)
    assert len(kafka.read(TOPIC, expected=3, timeout=30)) == 3

    broker.cmd("down")
    stuck = insert(pg, 10, age="3 days")
    time.sleep(1)
    t0 = time.monotonic()
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn(), "--retention", "1 day")
    waited = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert "kept expired rows" in r.stderr, r.stderr
    assert outbox_ids(pg) == set(warm + stuck)
    assert CONFIRM_WAIT - 1 <= waited <= CONFIRM_WAIT + 15, waited

    broker.cmd("up")
    assert len(kafka.read(TOPIC, expected=13, timeout=60)) == 13
    # A marker after the outage: the relay only confirms a keepalive's
    # position when nothing is pending as it arrives, so WAL written during
    # the outage (a running-xacts record) stays unconfirmed on an idle
    # server until more WAL comes (see the report on issue 4).
    marker = insert(pg, 1)
    assert len(kafka.read(TOPIC, expected=14, timeout=30)) == 14
    wait_confirmed_past(pg, pg.current_wal_lsn(), timeout=harness.confirm_timeout(tuning, 30))
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn(), "--retention", "1 day")
    assert r.returncode == 0 and "deleted 10 rows in 1 batches" in r.stderr, r.stderr
    assert outbox_ids(pg) == set(warm + marker)


def test_reap_errors_exit_1(pg, relayer_binary):
    # No slot: nothing can be proven delivered.
    insert(pg, 2, age="2 days")
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn(), "--retention", "1 day")
    assert r.returncode == 1 and "does not exist" in r.stderr, r.stderr
    assert len(outbox_ids(pg)) == 2
    pg.create_slot(SLOT)
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn(), "--retention", "one fortnight")
    assert r.returncode == 1 and "not a PostgreSQL interval" in r.stderr, r.stderr
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn(), "--table", "public.nope")
    assert r.returncode == 1 and "does not exist" in r.stderr, r.stderr
    r = cli(relayer_binary, "reap", "--dsn", "host=127.0.0.1 port=1 dbname=x connect_timeout=2")
    assert r.returncode == 1 and "cannot connect" in r.stderr, r.stderr


def test_partition_drop(pg, broker, relayer, relay_args, relayer_binary):
    """On the layout of sql/004, expired partitions are dropped whole — only
    once the slot has confirmed past them — the current ones stay, and
    expired rows in the DEFAULT partition are deleted row by row."""
    load_partitioned_layout(pg)
    pg.query("CREATE TABLE events_outbox_2020_01 PARTITION OF events_outbox "
             "FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-02-01 00:00+00')")
    pg.query("CREATE TABLE events_outbox_2020_02 PARTITION OF events_outbox "
             "FOR VALUES FROM ('2020-02-01 00:00+00') TO ('2020-03-01 00:00+00')")
    # A partition that ends in the future but starts long ago is not expired.
    pg.query("CREATE TABLE events_outbox_long PARTITION OF events_outbox "
             "FOR VALUES FROM ('2019-01-01 00:00+00') TO ('2019-06-01 00:00+00')")
    before = partitions(pg)
    current = {p for p in before if p.startswith("events_outbox_20") and not p.startswith("events_outbox_2020")}
    assert len(current) == 3, before

    # No relayer yet: the slot exists but confirms nothing, so nothing goes.
    pg.create_slot(SLOT)
    jan = insert(pg, 4, created_at="2020-01-15 12:00+00")
    feb = insert(pg, 3, created_at="2020-02-15 12:00+00")
    may19 = insert(pg, 2, created_at="2019-05-31 12:00+00")
    default_old = insert(pg, 2, created_at="2018-03-01 00:00+00")      # no partition: DEFAULT
    default_future = insert(pg, 1, created_at="2999-01-01 00:00+00")   # DEFAULT, not expired
    fresh = insert(pg, 5)
    assert pg.scalar("SELECT count(*) FROM events_outbox_default") == 3

    r = cli(relayer_binary, "reap", "--dsn", pg.dsn(), "--retention", "30 days")
    assert r.returncode == 0 and "kept expired rows" in r.stderr, r.stderr
    assert partitions(pg) == before

    # A relayer streams from the slot and confirms; now they go.
    p = relayer(*relay_args, "--retention", "0")
    p.wait_for_log("streaming", timeout=30)
    wait_confirmed_past(pg, pg.current_wal_lsn())
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn(), "--retention", "30 days", "--reap-batch", "1")
    assert r.returncode == 0, r.stderr
    dropped = re.findall(r"dropped expired partition (\S+)", r.stderr)
    assert sorted(dropped) == ['public.events_outbox_2020_01', 'public.events_outbox_2020_02',
                               'public.events_outbox_long'], r.stderr
    assert "dropped 3 partitions" in r.stderr and "in 5 batches" in r.stderr, r.stderr
    assert partitions(pg) == before - {"events_outbox_2020_01", "events_outbox_2020_02",
                                       "events_outbox_long"}
    assert outbox_ids(pg) == set(default_future + fresh)
    assert not set(jan + feb + may19 + default_old) & outbox_ids(pg)


def test_partitioned_outbox_is_relayed(pg, broker, kafka, relayer, relay_args):
    load_partitioned_layout(pg)
    p = relayer(*relay_args)
    p.wait_for_log("streaming", timeout=30)
    insert(pg, 3)
    assert len(kafka.read(TOPIC, expected=3, timeout=15)) == 3


def test_daemon_reaper_holds_back_and_keeps_polling(pg, broker, kafka, relayer, relay_args):
    """The reaper inside `run`: during a broker outage it keeps expired rows
    (each run gives up after its bounded wait), and while it waits, on the
    same connection, slot polls and heartbeats go on. After the outage the
    rows go."""
    p, port = start_with_metrics(relayer, relay_args, "--retention", "1 hour",
                                 "--reap-interval", "1", "--heartbeat-interval", "1",
                                 "--status-interval", "0.5")
    p.wait_for_log("streaming", timeout=30)
    warm = insert(pg, 2)
    kafka.read(TOPIC, expected=2, timeout=30)

    broker.cmd("down")
    old = insert(pg, 6, age="2 hours")
    since = len(p.log_text())
    polls = []
    deadline = time.monotonic() + CONFIRM_WAIT + 15
    while "kept expired rows" not in p.log_text()[since:]:
        assert time.monotonic() < deadline, p.log_tail()
        polls.append(metric(scrape(port), "outbox_relay_slot_last_poll_timestamp_seconds", slot=SLOT))
        time.sleep(1)
    # Polls went on during the reaper's wait (one every 2 s).
    assert len(set(polls)) >= CONFIRM_WAIT // 3, polls
    assert outbox_ids(pg) >= set(old)
    assert metric(scrape(port), "outbox_relay_reaper_rows_deleted_total") == 0
    log = p.log_text()
    assert "heartbeat turned off" not in log and "maintenance: polling" not in log, p.log_tail()

    broker.cmd("up")
    kafka.read(TOPIC, expected=8, timeout=60)
    wait_metric(port, lambda s: metric(s, "outbox_relay_reaper_rows_deleted_total") == 6,
                CONFIRM_WAIT + 30, "the daemon's reaper to delete the 6 rows after the outage")
    assert outbox_ids(pg) == set(warm)


# --------------------------------------------------------------------------
# metrics, health, readiness
# --------------------------------------------------------------------------

def test_metrics_move_as_events_flow(pg, broker, kafka, relayer, relay_args):
    """/metrics parses as Prometheus text at every scrape; deliveries count
    up by topic; slot lag grows while the broker is down and falls once it
    is back; the in-process reaper reports what it deleted; /readyz follows
    the broker."""
    p, port = start_with_metrics(relayer, relay_args, "--retention", "1 hour",
                                 "--reap-interval", "1", "--status-interval", "0.5")
    assert http_get(port, "/healthz")[:2] == (200, "ok\n")
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 30, message="/readyz 200")
    # The first polls may predate the slot (status "missing") or catch it
    # while it is created (no confirmed position yet, so no lag series).
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_slot_lag_bytes", slot=SLOT) is not None,
                    10, "a slot lag sample")
    assert metric(s, "outbox_relay_streaming") == 1
    assert metric(s, "outbox_relay_slot_wal_status", slot=SLOT, status="reserved") == 1
    assert metric(s, "outbox_relay_slot_wal_status", slot=SLOT, status="missing") == 0

    insert(pg, 20)
    insert(pg, 5, age="2 hours")
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_events_delivered_total", topic=TOPIC) == 25,
                    30, "25 deliveries")
    assert metric(s, "outbox_relay_events_published_total", topic=TOPIC) == 25
    assert metric(s, "outbox_relay_delivery_latency_seconds_count") >= 25
    assert metric(s, "outbox_relay_confirmed_lsn", slot=SLOT) > 0
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_reaper_rows_deleted_total") == 5, 30,
                    "the in-process reaper to delete the 5 expired rows")
    assert metric(s, "outbox_relay_reaper_batches_total") >= 1
    assert metric(s, "outbox_relay_reaper_runs_total") >= 1
    assert pg.scalar("SELECT count(*) FROM events_outbox") == 20
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_slot_lag_bytes", slot=SLOT) < 4096, 20,
                    "slot lag to settle")
    lag_idle = metric(s, "outbox_relay_slot_lag_bytes", slot=SLOT)

    broker.cmd("down")
    for _ in range(10):
        insert(pg, 3)
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_slot_lag_bytes", slot=SLOT) > lag_idle + 2000,
                    20, "slot lag to grow while the broker is down")
    lag_down = metric(s, "outbox_relay_slot_lag_bytes", slot=SLOT)
    wait_until(lambda: http_get(port, "/readyz")[0] == 503, 60, message="/readyz 503 with the broker down")
    status, body, _ = http_get(port, "/readyz")
    assert body.startswith("not ready:"), body
    s = scrape(port)
    assert metric(s, "outbox_relay_events_delivered_total", topic=TOPIC) == 25
    assert metric(s, "outbox_relay_inflight_events") == 30
    assert metric(s, "outbox_relay_oldest_pending_event_age_seconds") > 0
    assert metric(s, "outbox_relay_slot_lag_bytes", slot=SLOT) >= lag_down

    broker.cmd("up")
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_events_delivered_total", topic=TOPIC) == 55,
                    60, "the outage's 30 events delivered")
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_slot_lag_bytes", slot=SLOT) < lag_down / 2,
                    30, "slot lag to fall")
    assert metric(s, "outbox_relay_inflight_events") == 0
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 30, message="/readyz 200 again")
    assert http_get(port, "/nope")[0] == 404
    assert p.running()


def test_kafka_ack_latency_is_the_brokers_share(pg, broker, kafka, relayer, relay_args):
    """outbox_relay_kafka_ack_latency_seconds times the broker's round
    trip, apart from the WAL side: with every broker response delayed by
    300 ms, each event's produce-to-acknowledgement time is above 0.25 s
    (and above 0.3 s on average), and commit-to-delivery contains it."""
    p, port = start_with_metrics(relayer, relay_args)
    # Only rows committed after the slot exists are relayed: committing
    # before the relayer says it streams raced the slot's creation.
    p.wait_for_log("streaming", timeout=30)
    insert(pg, 3)  # warm: metadata, producer id
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_kafka_ack_latency_seconds_count") == 3,
                    30, "3 acknowledgements")
    fast = metric(s, "outbox_relay_kafka_ack_latency_seconds_bucket", le="0.25")
    assert fast == 3, "the warm-up events took over 0.25 s to be acknowledged"
    broker.cmd("rtt -1 300")
    try:
        for _ in range(10):
            insert(pg, 1)
        s = wait_metric(port, lambda s: metric(s, "outbox_relay_kafka_ack_latency_seconds_count") == 13,
                        60, "13 acknowledgements")
    finally:
        broker.cmd("rtt -1 0")
    assert metric(s, "outbox_relay_kafka_ack_latency_seconds_bucket", le="0.25") == fast
    assert metric(s, "outbox_relay_kafka_ack_latency_seconds_bucket", le="+Inf") == 13
    ack_sum = metric(s, "outbox_relay_kafka_ack_latency_seconds_sum")
    assert ack_sum > 10 * 0.3, ack_sum
    assert metric(s, "outbox_relay_delivery_latency_seconds_count") == 13
    assert metric(s, "outbox_relay_delivery_latency_seconds_bucket", le="0.25") == fast
    assert metric(s, "outbox_relay_delivery_latency_seconds_sum") >= ack_sum
    assert p.running()


def test_readyz_standby_and_lag_threshold(pg, broker, relayer, relay_args):
    """A second relayer waiting for the slot is alive but not ready; a lag
    above --max-lag-bytes makes the active one not ready."""
    p1, port1 = start_with_metrics(relayer, relay_args, "--max-lag-bytes", "1M")
    p1.wait_for_log("streaming", timeout=30)
    p2, port2 = start_with_metrics(relayer, relay_args)
    p2.wait_for_log("is active for another process|waiting", timeout=30)
    wait_until(lambda: http_get(port1, "/readyz")[0] == 200, 30, message="active relayer ready")
    assert http_get(port2, "/healthz")[0] == 200
    wait_until(lambda: http_get(port2, "/readyz")[0] == 503, 30, message="standby not ready")
    status, body, _ = http_get(port2, "/readyz")
    assert "standby" in body, body
    assert metric(scrape(port2), "outbox_relay_streaming") == 0

    broker.cmd("down")
    pg.query("CREATE TABLE filler (x text); INSERT INTO filler "
             "SELECT repeat('x', 1000) FROM generate_series(1, 3000)")
    insert(pg, 1)
    wait_until(lambda: "lag" in http_get(port1, "/readyz")[1] or
               "Kafka" in http_get(port1, "/readyz")[1], 30, message="active relayer not ready")
    broker.cmd("up")
    wait_until(lambda: http_get(port1, "/readyz")[0] == 200, 60, message="ready again")


# --------------------------------------------------------------------------
# status
# --------------------------------------------------------------------------

def test_status_exit_codes(pg, broker, kafka, relayer, relay_args, relayer_binary):
    p = relayer(*relay_args, "--status-interval", "0.5")
    p.wait_for_log("streaming", timeout=30)
    insert(pg, 2)
    kafka.read(TOPIC, expected=2, timeout=30)
    wait_confirmed_past(pg, pg.current_wal_lsn())

    r = cli(relayer_binary, "status", "--dsn", pg.dsn())
    assert r.returncode == 0, r.stdout + r.stderr
    out = dict(line.split(None, 1) for line in r.stdout.splitlines() if " " in line)
    assert out["plugin"] == "wal2json" and out["active"] == "yes"
    assert out["active_pid"].isdigit() and out["lag_bytes"].isdigit()
    assert out["wal_status"] == "reserved" and out["status"] == "OK"
    assert out["confirm_lag"].endswith("(pg_stat_replication.flush_lag)"), out
    assert "age" in out["oldest_row"]

    # The least-privilege role of sql/003 cannot read the walsender's
    # timings: the time lag is unknown, said so, and not held against it.
    r = cli(relayer_binary, "status", "--dsn", pg.dsn(user="outbox_relay"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "confirm_lag      unknown (pg_stat_replication details need pg_read_all_stats)" \
        in r.stdout, r.stdout
    assert "warning: --max-age not checked" in r.stdout, r.stdout
    pg.query("GRANT pg_read_all_stats TO outbox_relay")
    # Right after the GRANT's own commit the walsender may have no sample
    # ("unknown … no timing sample yet"): wait for the relayer to confirm it.
    wait_until(lambda: "(pg_stat_replication.flush_lag)" in cli(
        relayer_binary, "status", "--dsn", pg.dsn(user="outbox_relay")).stdout, 15, interval=0.5,
        message="flush_lag readable with pg_read_all_stats")

    broker.cmd("down")
    # The walsender samples commit times for flush_lag at most once a second
    # (WALSND_LOGICAL_LAG_TRACK_INTERVAL_MS): a commit within a second of the
    # GRANT above would not be sampled and flush_lag would not grow.
    time.sleep(1.5)
    insert(pg, 3)
    time.sleep(3)
    r = cli(relayer_binary, "status", "--dsn", pg.dsn(), "--max-lag-bytes", "1")
    assert r.returncode == 1, r.stdout
    assert re.search(r"UNHEALTHY: lag_bytes \d+ > --max-lag-bytes 1", r.stdout), r.stdout
    r = cli(relayer_binary, "status", "--dsn", pg.dsn(), "--max-age", "1")
    assert r.returncode == 1, r.stdout
    assert re.search(r"UNHEALTHY: confirm_lag [\d.]+ s > --max-age 1 s", r.stdout), r.stdout
    r = cli(relayer_binary, "status", "--dsn", pg.dsn())
    assert r.returncode == 0, r.stdout      # under the default thresholds

    broker.cmd("up")
    kafka.read(TOPIC, expected=5, timeout=60)
    insert(pg, 1)   # new WAL after the outage (see the broker-down reaper test)
    kafka.read(TOPIC, expected=6, timeout=30)
    wait_until(lambda: cli(relayer_binary, "status", "--dsn", pg.dsn(), "--max-lag-bytes", "1",
                           "--max-age", "1").returncode == 0, 30, interval=0.5,
               message="status healthy again")

    r = cli(relayer_binary, "status", "--dsn", pg.dsn(), "--slot", "nope")
    assert r.returncode == 1 and "UNHEALTHY: slot nope does not exist" in r.stdout, r.stdout
    p.terminate()
    r = cli(relayer_binary, "status", "--dsn", pg.dsn())
    assert r.returncode == 1 and "not active" in r.stdout, r.stdout
    r = cli(relayer_binary, "status", "--dsn", "host=127.0.0.1 port=1 dbname=x connect_timeout=2")
    assert r.returncode == 1 and "cannot connect" in r.stdout, r.stdout


# --------------------------------------------------------------------------
# heartbeat
# --------------------------------------------------------------------------

def _write_other_database(pg, seconds, stop):
    conn = psycopg2.connect(pg.dsn(dbname="other"), connect_timeout=10)
    conn.autocommit = True
    cur = conn.cursor()
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stop.is_set():
        cur.execute("INSERT INTO busy (v) VALUES (repeat('x', 200))")
        time.sleep(0.05)
    conn.close()


@pytest.mark.parametrize("heartbeat", ["1", "0"])
def test_heartbeat_with_idle_outbox_database(pg, broker, kafka, relayer, relay_args, heartbeat):
    """The outbox's database is idle while another database of the cluster
    is written. With --heartbeat-interval 1 the slot's confirmed_flush_lsn
    must keep following the cluster's WAL. The same scenario without the
    heartbeat is measured for comparison (printed; run with -s)."""
    pg.connect().cursor().execute("CREATE DATABASE other")
    other = psycopg2.connect(pg.dsn(dbname="other"), connect_timeout=10)
    other.autocommit = True
    other.cursor().execute("CREATE TABLE busy (id bigserial PRIMARY KEY, v text)")
    other.close()

    p = relayer(*relay_args, "--heartbeat-interval", heartbeat, "--status-interval", "1")
    p.wait_for_log("streaming", timeout=30)
    time.sleep(2)
    start_wal = pg.current_wal_lsn()
    stop = threading.Event()
    writer = threading.Thread(target=_write_other_database, args=(pg, 20, stop), daemon=True)
    writer.start()
    samples = []
    try:
        for _ in range(20):
            time.sleep(1)
            row = pg.query("SELECT pg_current_wal_lsn()::text, confirmed_flush_lsn::text, "
                           "restart_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                           (SLOT,))[0]
            samples.append(tuple(harness.lsn_to_int(v) for v in row))
    finally:
        stop.set()
        writer.join(10)
    written = samples[-1][0] - start_wal
    behind = [cur - conf for cur, conf, _ in samples]
    advanced = samples[-1][1] - samples[0][1]
    restart_advanced = samples[-1][2] - samples[0][2]
    print("\nheartbeat=%s: WAL written %d bytes in 20 s; confirmed_flush_lsn advanced %d bytes; "
          "restart_lsn advanced %d bytes; behind current WAL: median %d, max %d, last %d bytes"
          % (heartbeat, written, advanced, restart_advanced, sorted(behind)[len(behind) // 2],
             max(behind), behind[-1]))
    assert kafka.topics() == [], "the heartbeat (or the other database) reached Kafka"
    if heartbeat != "0":
        assert written > 100000
        assert samples[-1][1] > start_wal + written // 2, \
            "confirmed_flush_lsn did not follow the cluster's WAL"
        assert "heartbeat turned off" not in p.log_text()


# --------------------------------------------------------------------------
# the maintenance connection rides out a server restart
# --------------------------------------------------------------------------

def test_maintenance_reconnects_after_server_restart(pg, broker, relayer, relay_args):
    p, port = start_with_metrics(relayer, relay_args, "--reconnect-max", "1")
    p.wait_for_log("streaming", timeout=30)
    wait_metric(port, lambda s: metric(s, "outbox_relay_slot_lag_bytes", slot=SLOT) is not None, 20,
                "first slot poll")
    pg.restart()
    p.wait_for_log("maintenance: lost the connection|maintenance: cannot connect|"
                   "maintenance: polling the slot failed", timeout=30)
    t_restart = time.time()
    s = wait_metric(port, lambda s: (metric(s, "outbox_relay_slot_last_poll_timestamp_seconds",
                                            slot=SLOT) or 0) > t_restart, 30,
                    "slot polls to resume after the restart")
    assert p.running()
