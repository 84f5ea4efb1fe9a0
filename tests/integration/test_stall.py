"""test_stall.py — stalled and half-open network paths (issue 11).

A stalled middlebox, NAT or load balancer keeps a connection open and
forwards nothing; new connections still pass. tests/tools/fault_proxy.py
(harness.FaultProxy) sits between the relayer and PostgreSQL (or each
broker, harness.ProxiedBroker) and stalls the connections that are open at
a moment chosen mid-stream. The relayer must notice by itself, reconnect,
take its slot back from the walsender of its dead connection, and deliver
every committed event; its HTTP endpoints must keep answering meanwhile.

Timings are measured from the stall and printed.
"""

import json
import threading
import time
import uuid

import psycopg2
import pytest

import harness
from harness import wait_until
from test_operations import http_get, insert, metric, scrape

SLOT = "outbox_relay"


class Writer(threading.Thread):
    """Commits one small outbox transaction every `period` seconds on its
    own direct connection (not through the proxy) until stopped; .ids are
    the committed event ids, in commit order."""

    def __init__(self, pg, typ, period=0.05):
        super().__init__(daemon=True)
        self.pg, self.typ, self.period = pg, typ, period
        self.ids = []
        self.stop = threading.Event()
        self.conn = pg.connect()
        self.start()

    def run(self):
        cur = self.conn.cursor()
        i = 0
        while not self.stop.wait(self.period):
            i += 1
            cur.execute("INSERT INTO public.events_outbox (aggregate_id, type, payload) "
                        "VALUES (%s, %s, %s::jsonb) RETURNING id",
                        (str(uuid.uuid4()), self.typ, json.dumps({"i": i})))
            self.ids.append(cur.fetchone()[0])

    def finish(self):
        self.stop.set()
        self.join(10)
        return list(self.ids)


def walsender_pids(pg):
    return {r[0] for r in pg.query("SELECT pid FROM pg_stat_replication")}


def active_pid(pg):
    info = pg.slot_info(SLOT)
    return info["active_pid"] if info and info["active"] else None


def read_all(kafka, topic, ids, timeout):
    """Reads topic until every id arrived (redeliveries allowed); returns
    the set of event ids seen."""
    want = set(ids)
    deadline = time.monotonic() + timeout
    seen = set()
    expected = len(want)
    while True:
        msgs = kafka.read(topic, expected=expected, timeout=max(1, deadline - time.monotonic()))
        seen = {int(m.headers["event_id"]) for m in msgs}
        if want <= seen or time.monotonic() >= deadline:
            return seen
        expected = len(msgs) + len(want - seen)


def start_proxied(relayer, pg, broker, proxy, *extra, user="postgres"):
    dsn = "host=127.0.0.1 port=%d dbname=postgres user=%s" % (proxy.port, user)
    r = relayer("--dsn", dsn, "--brokers", broker.bootstrap, *extra)
    wait_until(lambda: active_pid(pg) is not None or (not r.running() and
                                                      pytest.fail(r.log_tail())),
               30, message="relayer to stream")
    return r


def stalled_pg_path(pg, broker, kafka, relayer, proxy, direction, timeout, extra, user,
                    topic):
    """The scenario: stream, stall `direction` of every open connection,
    keep committing, and watch the relayer come back. Returns timings."""
    r = start_proxied(relayer, pg, broker, proxy, *extra, user=user)
    writer = Writer(pg, topic + ".ev")
    try:
        wait_until(lambda: len(writer.ids) >= 40, 20, message="writer warm-up")
        assert len(read_all(kafka, topic, writer.ids[:40], 60)) >= 40
        old_pid = active_pid(pg)
        assert old_pid
        r.mark()
        t_stall = time.monotonic()
        proxy.stall(direction)
        m = r.wait_for_log(r"--wal-receiver-timeout\)|reconnecting \(\d+ deliveries",
                           timeout=timeout + 30, since_mark=True)
        t_detect = time.monotonic() - t_stall
        # A new walsender streams the slot; the old one is gone.
        wait_until(lambda: (active_pid(pg) or old_pid) != old_pid, 60,
                   message="a new walsender on the slot")
        t_stream = time.monotonic() - t_stall
        wait_until(lambda: old_pid not in walsender_pids(pg), 60,
                   message="the old walsender to go")
        t_old_gone = time.monotonic() - t_stall
        time.sleep(1.0)  # commits after the reconnect too
        ids = writer.finish()
        seen = read_all(kafka, topic, ids, 90)
        missing = set(ids) - seen
        assert not missing, "%d of %d committed events missing, e.g. %s; log:\n%s" % (
            len(missing), len(ids), sorted(missing)[:5], r.log_tail())
        assert r.running()
        for line in pg.log_text().splitlines():
            if any(w in line for w in ("FATAL", "ERROR", "terminat", "server process")):
                print("pg:", line[:200])
        print("stall %s: detected after %.1f s (%s), streaming again after %.1f s, old "
              "walsender gone after %.1f s, %d events delivered" % (
                  direction, t_detect, m.group(0), t_stream, t_old_gone, len(ids)))
        return r, t_detect, t_stream, t_old_gone
    finally:
        writer.finish()


@pytest.mark.parametrize("direction", ["both", "down"])
def test_pg_path_stalls_mid_stream(pg_factory, broker, kafka, relayer, tmp_path, direction):
    """Both directions (or only server -> relayer) of the replication
    connection stall mid-stream. The server keeps PostgreSQL's default
    wal_sender_timeout (60 s), so its walsender would hold the slot that
    long (forever, in fact, while the stall swallows its writes): the
    relayer must give the connection up after --wal-receiver-timeout, and
    take the slot back from its own dead walsender at once. Runs as the
    non-superuser outbox_relay role (it may terminate its own backends)."""
    pg = pg_factory(settings={"wal_sender_timeout": "60s"})
    proxy = harness.FaultProxy(pg.port, str(tmp_path))
    try:
        r, t_detect, t_stream, t_old_gone = stalled_pg_path(
            pg, broker, kafka, relayer, proxy, direction, 5, ["--wal-receiver-timeout", "5"],
            "outbox_relay", "stall")
        assert 4 <= t_detect <= 12, t_detect
        assert t_stream <= 20, "slot not taken back soon: %.1f s (wal_sender_timeout 60 s)" % t_stream
        if direction == "both":
            assert "terminated it to take the slot back" in r.log_text()
        assert r.terminate() == 0
    finally:
        proxy.cleanup()


def test_pg_path_stall_default_timeout(pg, broker, kafka, relayer, tmp_path):
    """The same with no tuning at all: the default --wal-receiver-timeout
    (60 s) ends the stall."""
    proxy = harness.FaultProxy(pg.port, str(tmp_path))
    try:
        r, t_detect, t_stream, _ = stalled_pg_path(pg, broker, kafka, relayer, proxy, "both", 60,
                                                   [], "postgres", "stalldef")
        assert 55 <= t_detect <= 75, t_detect
        assert r.terminate() == 0
    finally:
        proxy.cleanup()


def test_pg_path_stalls_upstream_only(pg, broker, kafka, relayer, tmp_path):
    """Only relayer -> server stalls: frames keep arriving, so the relayer
    sees nothing wrong, but its confirmations stop. The server ends the
    walsender after its wal_sender_timeout (10 s in the harness); that end
    reaches the relayer, which reconnects, and confirmations resume."""
    proxy = harness.FaultProxy(pg.port, str(tmp_path))
    try:
        r, t_detect, t_stream, _ = stalled_pg_path(pg, broker, kafka, relayer, proxy, "up", 10,
                                                   [], "postgres", "stallup")
        assert t_stream <= 40, t_stream
        assert r.terminate() == 0
    finally:
        proxy.cleanup()


def test_metrics_answer_while_maintenance_connection_stalls(pg, broker, relayer, tmp_path):
    """Only the maintenance thread's connection stalls (the replication
    connection keeps flowing): /metrics and /readyz answer within a few
    seconds throughout, slot polls resume on a new connection well before
    any TCP timeout would, and SIGTERM still ends the relayer promptly."""
    proxy = harness.FaultProxy(pg.port, str(tmp_path))
    try:
        port = harness.free_port()
        r = start_proxied(relayer, pg, broker, proxy, "--metrics-addr", "127.0.0.1:%d" % port)
        wait_until(lambda: metric(scrape(port), "outbox_relay_slot_lag_bytes", slot=SLOT)
                   is not None, 20, message="first slot poll")
        proxy.stall("both", str(maintenance_conn(pg, proxy)))
        t_stall = time.time()
        t0 = time.monotonic()
        worst = 0.0
        resumed = None
        while time.monotonic() - t0 < 40:
            for path in ("/metrics", "/readyz"):
                t = time.monotonic()
                status, body, _ = http_get(port, path, timeout=5)
                worst = max(worst, time.monotonic() - t)
                assert status in (200, 503), (path, status, body)
            polled = metric(scrape(port), "outbox_relay_slot_last_poll_timestamp_seconds",
                            slot=SLOT) or 0
            if polled > t_stall + 1:
                resumed = time.monotonic() - t0
                break
            time.sleep(0.5)
        assert worst < 3, "an endpoint took %.1f s" % worst
        assert resumed is not None, "slot polls did not resume within 40 s of the stall; " \
            "log:\n%s" % r.log_tail()
        t = time.monotonic()
        assert r.terminate(timeout=30) == 0
        t_term = time.monotonic() - t
        print("maintenance stall: endpoints answered within %.2f s, polls resumed after %.1f s, "
              "SIGTERM took %.1f s" % (worst, resumed, t_term))
        assert t_term < 8, t_term
    finally:
        proxy.cleanup()


def maintenance_conn(pg, proxy):
    rows = wait_until(lambda: pg.query(
        "SELECT client_port FROM pg_stat_activity "
        "WHERE application_name = 'outbox-relay maintenance'"), 10,
        message="the maintenance connection")
    return wait_until(lambda: proxy.conn_for_port(rows[0][0]), 5, message="its proxy conn")


def test_maintenance_stall_under_a_reaper_statement(pg, broker, relayer, tmp_path):
    """The maintenance connection stalls while the reaper waits for the
    slot (Kafka is down, so the expired rows are not confirmed and the
    reaper polls confirmed_flush_lsn with blocking statements): a watchdog
    closes the connection after 60 s without an answer and the thread
    reconnects; slot polls resume. (--reap-interval 1 only so that the
    reaper is running when the stall comes.)"""
    proxy = harness.FaultProxy(pg.port, str(tmp_path))
    try:
        port = harness.free_port()
        r = start_proxied(relayer, pg, broker, proxy, "--metrics-addr", "127.0.0.1:%d" % port,
                          "--reap-interval", "1")
        broker.cmd("down")
        insert(pg, 20, age="8 days")  # relayed, so never confirmed while Kafka is down
        # The reaper is in its confirm wait: it reads the slot's position
        # every 100 ms (since the reaper keeps up by marks it holds no
        # transaction open meanwhile, so the last statement tells).
        wait_until(lambda: pg.query(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = "
            "'outbox-relay maintenance' AND query LIKE "
            "'SELECT confirmed_flush_lsn::text FROM pg_replication_slots%'"), 30,
            message="the reaper to wait for the slot")
        proxy.stall("both", str(maintenance_conn(pg, proxy)))
        t_stall = time.time()
        t0 = time.monotonic()
        wait_until(lambda: (metric(scrape(port), "outbox_relay_slot_last_poll_timestamp_seconds",
                                   slot=SLOT) or 0) > t_stall + 1, 100, interval=1,
                   message="slot polls to resume")
        took = time.monotonic() - t0
        assert "a reaper statement got no answer" in r.log_text()
        print("maintenance stall under the reaper: polls resumed after %.1f s" % took)
        broker.cmd("up")
        assert r.terminate() == 0
    finally:
        proxy.cleanup()


@pytest.mark.parametrize("direction", ["both", "down"])
def test_broker_path_stalls_mid_stream(pg, relayer, tmp_path, direction):
    """Every open connection to the broker stalls mid-stream (new ones
    pass), with the relayer's defaults: message.timeout.ms=0 means a
    delivery never fails, so the relayer relies on librdkafka giving up a
    request after socket.timeout.ms (60 s) and, with socket.max.fails=1,
    dropping the connection and retrying on a new one (idempotence keeps
    a produce the broker got but whose answer was lost from being written
    twice). Deliveries must resume and nothing may be lost; the
    replication connection stays up meanwhile."""
    b = harness.ProxiedBroker(str(tmp_path))
    try:
        kafka = harness
        r = relayer("--dsn", pg.dsn(), "--brokers", b.bootstrap)
        wait_until(lambda: active_pid(pg) is not None, 30, message="relayer to stream")
        writer = Writer(pg, "kstall.ev", period=0.1)
        try:
            wait_until(lambda: len(writer.ids) >= 20, 20, message="writer warm-up")
            got = harness.read_messages(b.proxies[0].address, "kstall", expected=20, timeout=60)
            assert len(got) >= 20
            walsender = active_pid(pg)
            t_stall = time.monotonic()
            b.stall(direction)
            time.sleep(3)
            stalled_at = len(writer.ids)
            # Read back directly from the broker (not through the stalled proxy).
            real = "127.0.0.1:%d" % b.proxies[0].target_port

            def delivered():
                msgs = harness.read_messages(real, "kstall", expected=stalled_at + 1, timeout=5)
                return {int(m.headers["event_id"]) for m in msgs} >= set(writer.ids[:stalled_at])

            wait_until(delivered, 150, interval=1, message="deliveries to resume")
            t_resume = time.monotonic() - t_stall
            ids = writer.finish()
            msgs = harness.read_messages(real, "kstall", expected=len(ids), timeout=90)
            seen = {int(m.headers["event_id"]) for m in msgs}
            missing = set(ids) - seen
            assert not missing, "%d of %d missing; log:\n%s" % (len(missing), len(ids),
                                                               r.log_tail())
            assert r.running()
            assert active_pid(pg) == walsender, "the replication connection was dropped"
            print("broker stall %s: deliveries resumed after %.1f s, %d events, %d messages"
                  % (direction, t_resume, len(ids), len(msgs)))
            assert r.terminate() == 0
        finally:
            writer.finish()
    finally:
        b.cleanup()
