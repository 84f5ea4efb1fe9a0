"""test_pg_failover.py — failover slots on PostgreSQL 17 and 18 (issue 28).

A primary, a physical standby syncing the relayer's failover slot
(sync_replication_slots, hot_standby_feedback, a physical slot, dbname in
primary_conninfo), the relayer on a multi-host DSN with --failover-slot:

  - under load, the primary stops (fast, immediate) and the standby is
    promoted: the relayer follows, every event the promoted server has is
    in Kafka, per-aggregate order holds, duplicates are counted and bounded,
    and the relayer never exits;
  - without synchronized_standby_slots on the old primary, or with a
    standby that never synced the slot (pg_basebackup -R's primary_conninfo,
    no dbname): after the promotion the relayer refuses with the reason,
    /readyz says it and outbox_relay_failover_refused is 1, and nothing is
    silently skipped (no slot is created; the rows wait in the table).

Kafka is the librdkafka mock broker: the guarantee under test is
PostgreSQL's side.
"""

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request

import psycopg2
import pytest

import harness
from harness import wait_until
from pg_cluster import PgStandby, multi_host_dsn

pytestmark = [pytest.mark.usefixtures("pg_major"), pytest.mark.pg_majors(17, 18)]

SLOT = "outbox_relay"


@pytest.fixture
def standby_factory():
    made = []

    def make(primary, **kw):
        s = PgStandby(primary, **kw)
        made.append(s)
        return s

    yield make
    for s in reversed(made):
        s.cleanup()


def http_get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def metric(port, name):
    status, body = http_get(port, "/metrics")
    for line in (body or "").splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


class FailoverProducers:
    """Threads committing one event per transaction through the multi-host
    DSN; a lost connection (the primary stopping) is retried until the
    promoted server accepts writes. Each thread writes its own aggregate
    with a sequence number in the payload. What the promoted server holds
    at the end is the truth the test compares Kafka with (a commit in
    flight at the stop may or may not have made it)."""

    def __init__(self, dsn, threads=3, rate=150):
        self.dsn = dsn
        self.stop_flag = threading.Event()
        self.commits = 0
        self.retries = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i, rate), daemon=True)
                        for i in range(threads)]

    def _run(self, i, rate):
        import uuid
        agg, seq, conn = str(uuid.uuid4()), 0, None
        while not self.stop_flag.is_set():
            try:
                if conn is None:
                    conn = psycopg2.connect(self.dsn, connect_timeout=3)
                seq += 1
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO events_outbox (aggregate_id, type, payload) "
                                "VALUES (%s, 'order.placed', %s)",
                                (agg, json.dumps({"thread": i, "seq": seq})))
                conn.commit()
                with self.lock:
                    self.commits += 1
                time.sleep(1.0 / rate)
            except psycopg2.Error:
                with self.lock:
                    self.retries += 1
                try:
                    if conn is not None:
                        conn.close()
                except psycopg2.Error:
                    pass
                conn = None
                time.sleep(0.2)
        if conn is not None:
            conn.close()

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(30)


def set_standby_slots(cluster, value):
    conn = psycopg2.connect(cluster.dsn(), connect_timeout=10)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("ALTER SYSTEM SET synchronized_standby_slots = %s", (value,))
        cur.execute("SELECT pg_reload_conf()")
    conn.close()


def setup_pair(pg, standby_factory, protected=True, conninfo_dbname=True):
    sb = standby_factory(pg, conninfo_dbname=conninfo_dbname)
    if protected:
        set_standby_slots(pg, "standby1")
    return sb


def start_relayer(relayer, pg, sb, broker, *extra):
    port = harness.free_port()
    dsn = multi_host_dsn([pg, sb], target_session_attrs="read-write")
    p = relayer("--dsn", dsn, "--brokers", broker.bootstrap, "--failover-slot", "true",
                "--status-interval", "0.5", "--reconnect-max", "2",
                "--metrics-addr", "127.0.0.1:%d" % port, *extra)
    p.wait_for_log(r"streaming public\.events_outbox", timeout=60)
    return p, port


def outbox_rows(cluster):
    """[(id, aggregate_id, seq)] in commit order per aggregate (seq)."""
    return [(str(r[0]), str(r[1]), int(r[2])) for r in cluster.query(
        "SELECT id, aggregate_id, (payload->>'seq')::int FROM events_outbox")]


@pytest.mark.parametrize("stop_mode", ["fast", "immediate"])
def test_failover_under_load_loses_nothing(pg, standby_factory, broker, kafka, relayer,
                                           stop_mode):
    sb = setup_pair(pg, standby_factory)
    p, port = start_relayer(relayer, pg, sb, broker)
    wait_until(lambda: sb.slot_synced(SLOT), 60, message="the standby to sync the slot")
    wait_until(lambda: metric(port, "outbox_relay_failover_protected") == 1, 30,
               message="outbox_relay_failover_protected 1")
    assert metric(port, "outbox_relay_slot_failover") == 1

    prod = FailoverProducers(multi_host_dsn([pg, sb], target_session_attrs="read-write")).start()
    time.sleep(3)
    p.mark()
    t0 = time.monotonic()
    pg.stop(mode=stop_mode)
    sb.promote()
    p.wait_for_log(r"streaming public\.events_outbox", timeout=90, since_mark=True)
    follow = time.monotonic() - t0
    time.sleep(3)
    prod.stop()

    rows = outbox_rows(sb)
    expected = {r[0] for r in rows}
    seq_of = {r[0]: (r[1], r[2]) for r in rows}
    msgs = []

    def all_in():
        msgs[:] = kafka.read("order", expected=None, timeout=3)
        return expected <= {m.headers.get("event_id") for m in msgs}

    wait_until(all_in, 120, message="every event of the promoted server in Kafka")
    ids = [m.headers.get("event_id") for m in msgs]
    lost = expected - set(ids)
    dups = len(ids) - len(set(ids))
    # Per aggregate, the first arrival of each event follows commit order.
    seen, last = set(), {}
    for m in msgs:
        eid = m.headers.get("event_id")
        if eid in seen or eid not in seq_of:
            continue
        seen.add(eid)
        agg, seq = seq_of[eid]
        assert seq > last.get(agg, 0), "aggregate %s: seq %d after %d" % (agg, seq,
                                                                          last.get(agg, 0))
        last[agg] = seq
    print("failover (%s stop) on PostgreSQL %d: followed in %.1f s; %d events on the promoted "
          "server, %d in Kafka, %d lost, %d duplicates, %d producer retries"
          % (stop_mode, pg.major, follow, len(expected), len(ids), len(lost), dups,
             prod.retries))
    assert not lost, "lost %d events across the failover" % len(lost)
    # Redelivered at most: what the synced copy had not caught up with, a
    # window of the sync worker's interval and our status updates.
    assert dups <= max(1500, len(expected) // 2), dups
    assert "resuming from the slot's confirmed position" in p.log_text()
    assert p.running(), "the relayer exited"
    assert p.terminate() == 0


def test_primary_holds_changes_back_until_the_standby_has_them(pg, standby_factory, broker,
                                                               kafka, relayer):
    """What makes the relayer's confirmations safe is PostgreSQL's own:
    with synchronized_standby_slots, a failover slot's walsender sends a
    change only once the standby confirmed its WAL. With the standby down,
    nothing reaches Kafka (and nothing is confirmed); the gauges say why;
    once it is back, everything arrives."""
    sb = setup_pair(pg, standby_factory)
    p, port = start_relayer(relayer, pg, sb, broker)
    wait_until(lambda: sb.slot_synced(SLOT), 60, message="the standby to sync the slot")
    before = pg.confirmed_flush_lsn(SLOT)
    sb.stop(mode="fast")
    ids = harness_insert(pg, 20)
    wait_until(lambda: metric(port, "outbox_relay_failover_standby_slots_inactive") == 1, 30,
               message="outbox_relay_failover_standby_slots_inactive 1")
    time.sleep(3)
    got = {m.headers.get("event_id") for m in kafka.read("order", expected=None, timeout=3)}
    assert not set(ids) & got, "a change reached Kafka before the standby had its WAL"
    assert pg.confirmed_flush_lsn(SLOT) <= pg.current_wal_lsn()
    held = pg.confirmed_flush_lsn(SLOT)
    sb.start()
    msgs = kafka.read("order", expected=20, timeout=60)
    assert set(ids) <= {m.headers.get("event_id") for m in msgs}
    print("held back while the standby was down: confirmed stayed at %s (was %s)"
          % (harness.int_to_lsn(held), harness.int_to_lsn(before)))
    assert p.terminate() == 0


def test_failover_without_synchronized_standby_slots_is_refused(pg, standby_factory, broker,
                                                                kafka, relayer):
    sb = setup_pair(pg, standby_factory, protected=False)
    p, port = start_relayer(relayer, pg, sb, broker)
    p.wait_for_log(r"synchronized_standby_slots is empty", timeout=30)
    wait_until(lambda: metric(port, "outbox_relay_failover_protected") == 0, 30,
               message="outbox_relay_failover_protected 0")
    wait_until(lambda: sb.slot_synced(SLOT), 60, message="the standby to sync the slot")
    harness_insert(pg, 50)
    pg.stop(mode="fast")
    sb.promote()
    p.wait_for_log(r"while the old primary's synchronized_standby_slots was empty", timeout=90)
    wait_until(lambda: metric(port, "outbox_relay_failover_refused") == 1, 30,
               message="outbox_relay_failover_refused 1")
    status, body = http_get(port, "/readyz")
    assert status == 503 and "synchronized_standby_slots was empty" in body, (status, body)
    after = harness_insert(sb, 20)
    time.sleep(2)
    assert p.running()
    # Nothing skipped: a restart (the operator's go-ahead) delivers
    # everything the promoted server has, from the slot's own position.
    assert p.terminate() == 0
    p2 = relayer("--dsn", multi_host_dsn([pg, sb], target_session_attrs="read-write"),
                 "--brokers", broker.bootstrap, "--failover-slot", "--status-interval", "0.5")
    p2.wait_for_log(r"streaming public\.events_outbox", timeout=60)
    expected = {r[0] for r in outbox_rows(sb)}
    assert set(after) <= expected
    msgs = []

    def all_in():
        msgs[:] = kafka.read("order", expected=None, timeout=3)
        return expected <= {m.headers.get("event_id") for m in msgs}

    wait_until(all_in, 60, message="every event in Kafka after the restart")
    assert p2.terminate() == 0


def test_slot_never_synced_is_refused_not_recreated(pg, standby_factory, broker, kafka, relayer,
                                                    relayer_binary):
    # pg_basebackup -R's primary_conninfo has no dbname: the slot-sync
    # worker never runs, silently.
    sb = setup_pair(pg, standby_factory, conninfo_dbname=False)
    p, port = start_relayer(relayer, pg, sb, broker)
    harness_insert(pg, 30)
    time.sleep(3)
    assert not sb.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                         (SLOT,))
    # check, run against the standby, names the mistake.
    out = check_text(relayer_binary, sb.dsn(), broker)
    assert "FAIL" in out and "pg_basebackup -R" in out and "dbname" in out, out
    pg.stop(mode="fast")
    sb.promote()
    p.wait_for_log(r"slot=outbox_relay is missing on the server", timeout=90)
    wait_until(lambda: metric(port, "outbox_relay_failover_refused") == 1, 30,
               message="outbox_relay_failover_refused 1")
    status, body = http_get(port, "/readyz")
    assert status == 503 and "pg_basebackup -R" in body, (status, body)
    harness_insert(sb, 10)
    time.sleep(3)
    assert p.running()
    # Not created silently: the rows wait in the table for the operator.
    assert not sb.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                         (SLOT,))
    assert sb.scalar("SELECT count(*) FROM events_outbox") >= 40
    assert p.terminate() == 0


def check_text(binary, dsn, broker, *extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    res = subprocess.run([binary, "check", "--dsn", dsn, "--brokers", broker.bootstrap] +
                         list(extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=120, env=env)
    return res.stdout


def test_check_names_the_failover_mistakes(pg, standby_factory, broker, relayer, relayer_binary):
    """check on the primary: a failover slot with synchronized_standby_slots
    empty FAILs with the fix, then PASSes once set; on the standby: a synced
    copy PASSes."""
    sb = standby_factory(pg)
    out = check_text(relayer_binary, pg.dsn(), broker, "--failover-slot")
    assert "synchronized_standby_slots is empty" in out, out
    assert "ALTER SYSTEM SET synchronized_standby_slots" in out, out
    set_standby_slots(pg, "standby1")
    p, port = start_relayer(relayer, pg, sb, broker)
    wait_until(lambda: sb.slot_synced(SLOT), 60, message="the standby to sync the slot")
    out = check_text(relayer_binary, pg.dsn(), broker)
    assert "synchronized_standby_slots = 'standby1'" in out, out
    out = check_text(relayer_binary, sb.dsn(), broker)
    assert "holds a synced copy of slot outbox_relay" in out, out
    assert p.terminate() == 0


def harness_insert(cluster, n):
    rows = cluster.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
                         "SELECT gen_random_uuid(), 'order.placed', "
                         "jsonb_build_object('seq', g) FROM generate_series(1, %s) g "
                         "RETURNING id", (n,))
    return [str(r[0]) for r in rows]
