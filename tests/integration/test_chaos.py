"""test_chaos.py — the relayer's promise under faults, in one bounded run.

For CHAOS_SECONDS (default 50) several producer threads commit outbox events
at a fixed rate (1-3 per transaction, about 15 % of transactions rolled
back) while the test, acting as a supervisor:

  - SIGKILLs the relayer CHAOS_KILLS times (default 4) and starts a new one
    after a short random delay, as systemd or Kubernetes would;
  - restarts PostgreSQL once: the relayer must not exit, it reconnects;
  - takes every broker down for longer than wal_sender_timeout (10 s in
    the harness) and brings them back: again the relayer must not exit,
    and with a small in-flight window (--max-inflight 100) it stops reading
    and keeps the replication connection alive meanwhile (no reconnect).
    The outage lasts CHAOS_OUTAGE seconds (default 12). Once every broker
    is back (in full ISR on the real cluster) the producers pause until the
    slot confirms what was committed by then, within 90 s plus the time the
    brokers took to return (the backlog grows with it), so that the next
    fault meets a healed Kafka side;
  - stalls the relayer's PostgreSQL path: a fault proxy (tests/tools/
    fault_proxy.py) between the relayer and the server stops forwarding on
    every open connection (replication and maintenance) and keeps them
    open, new connections pass. The relayer must give the replication
    connection up after --wal-receiver-timeout (4 s here; the default is
    proved in test_stall.py), take its slot back from its own dead
    walsender and stream again, without exiting;
  - stalls every broker path the same way (mock-broker advertises the
    proxies, so every Kafka connection goes through them) for
    CHAOS_BROKER_STALL seconds (default 8): deliveries wait, the window
    fills, the relayer stops reading WAL and must keep its replication
    connection (no reconnect) and resume when the path does.

It runs on three mock brokers behind fault proxies (test_chaos), and on a
real three-broker Apache Kafka cluster of its own
(test_chaos_on_a_real_cluster, ClusterFaults: replication factor 3,
min.insync.replicas 2), where the outage SIGKILLs every broker's JVM and
starts them again on their logs, and the stall SIGSTOPs them (connections
open, nothing answered) until SIGCONT.

Every event carries a per-aggregate sequence number handed out by the
database itself: each transaction increments the aggregate's row in
chaos_seq (row locks taken in aggregate order, so no deadlocks), so the
numbers of an aggregate are gapless (a rollback gives its numbers back)
and increase in commit order. The committed events are whatever the outbox
table holds at the end; the producers' own bookkeeping (ids of committed
and rolled-back transactions, and of transactions whose COMMIT outcome was
lost with the connection) is checked against it.

After the faults the test waits (bounded) until the slot has confirmed a
final marker transaction, stops the relayer with SIGTERM, reads both topics
up to their high watermarks and asserts:

  - every committed event arrived: event_id header, key and payload match
    the row;
  - nothing from a rolled-back transaction arrived, nor anything that is
    not a committed row;
  - per (topic, aggregate), the first occurrences of the events are in
    commit order: sequence numbers 1, 2, ..., N;
  - the relayer never exited except by our SIGKILLs and the final SIGTERM
    (librdkafka issue 4438's fatal OUT_OF_ORDER_SEQUENCE_NUMBER, which the
    restarted cluster provokes, is met by a new producer, not an exit).

It prints the seed (CHAOS_SEED reproduces the schedule), the counts and the
timings; CHAOS_RELAY_ARGS adds relayer arguments (e.g. "-X
debug=broker,eos,msg,topic,metadata --log-level debug"). Run time on a
busy 2-core machine: about 60-100 s on the mock, 2-5 min on the real
cluster (its brokers' restart is most of it).
"""

import json
import os
import random
import re
import shlex
import signal
import threading
import time
import uuid

import psycopg2
import pytest

import harness
from harness import wait_until
from kafka_cluster import start_slot

# per plugin and major, one plugin on each newer major, on the shared real
# Kafka (conftest.py)
pytestmark = [pytest.mark.usefixtures("plugin", "pg_major"), pytest.mark.plugin_per_major,
              pytest.mark.real_kafka]

SLOT = "outbox_relay"
TOPICS = ("chaosa", "chaosb")
PRODUCERS = 4
TX_PER_SECOND = 6            # per producer thread
AGGREGATES = 16
ROLLBACK_RATE = 0.15
WAL_RECEIVER_TIMEOUT = 4     # s, --wal-receiver-timeout: the PostgreSQL path stall
OUTAGE_RECOVERY = 90         # s, the bound on deliveries resuming once every broker is back


def _env_int(name, default):
    return int(os.environ.get(name) or default)


class Producer(threading.Thread):
    """Commits transactions of 1-3 events at a fixed rate until stopped,
    riding out connection loss (PostgreSQL restarts under it). The one
    transaction loop of test_chaos.py, test_chaos_partitioned.py and
    tests/soak/soak.py: they change what a transaction writes (_insert), how
    its aggregates are chosen (_pick) and the schedule (period, lag)."""

    lag = 1                   # periods the schedule may fall behind and catch up
    rollback_rate = ROLLBACK_RATE

    def __init__(self, pg, n, aggs, rng, stop):
        super().__init__(daemon=True, name="producer-%d" % n)
        self.pg, self.n, self.aggs, self.rng, self.stop = pg, n, aggs, rng, stop
        self.period = 1.0 / TX_PER_SECOND
        self.committed = []       # event ids whose COMMIT returned
        self.rolled_back = []     # event ids whose transaction was rolled back
        self.uncertain = []       # event ids whose transaction's outcome was lost
        self.tx_committed = self.tx_rolled_back = self.errors = 0
        self.events_committed = 0
        self.conn = None
        # While set, no transaction starts (the heal after the broker
        # outage, see chaos()); the schedule does not catch up afterwards
        # beyond `lag`.
        self.paused = threading.Event()

    def _connect(self):
        try:
            self.conn = psycopg2.connect(self.pg.dsn(), connect_timeout=3)
        except psycopg2.Error:
            self.conn = None

    def _pick(self):
        """The next transaction's aggregates, sorted: row locks are taken
        in aggregate order, so producers never deadlock."""
        return sorted(self.rng.choice(self.aggs) for _ in range(self.rng.randint(1, 3)))

    def _created_at(self):
        """The next event's created_at (None: now())."""
        return None

    def _insert(self, cur, aggs, tx, ids):
        """Writes transaction `tx`'s events for `aggs`, appending each new
        row's id to `ids` as soon as it exists."""
        for agg in aggs:
            at = self._created_at()
            cur.execute("UPDATE chaos_seq SET seq = seq + 1 WHERE agg = %s "
                        "RETURNING seq, topic", (agg,))
            seq, topic = cur.fetchone()
            payload = json.dumps({"agg": agg, "seq": seq, "producer": self.n, "tx": tx,
                                  "nonce": uuid.uuid4().hex})
            cur.execute("INSERT INTO public.events_outbox (aggregate_id, type, payload, "
                        "created_at) VALUES (%s, %s, %s::jsonb, "
                        "coalesce(%s::timestamptz, now())) RETURNING id",
                        (agg, topic + ".changed", payload, at))
            ids.append(cur.fetchone()[0])

    def _one_tx(self, tx):
        """One transaction, committed or (rollback_rate) rolled back, with
        its bookkeeping; a connection error drops the connection."""
        aggs = self._pick()
        rollback = self.rng.random() < self.rollback_rate
        ids, committing = [], False
        try:
            self._insert(self.conn.cursor(), aggs, tx, ids)
            if rollback:
                self.conn.rollback()
                self.rolled_back += ids
                self.tx_rolled_back += 1
            else:
                committing = True
                self.conn.commit()
                self.committed += ids
                self.tx_committed += 1
                self.events_committed += len(ids)
        except psycopg2.Error:
            self.errors += 1
            # Before COMMIT the transaction is certainly gone; during it
            # the outcome is unknown until we look at the table.
            (self.uncertain if committing else self.rolled_back).extend(ids)
            try:
                self.conn.close()
            except psycopg2.Error:
                pass
            self.conn = None

    def run(self):
        next_at = time.monotonic() + self.rng.random() * self.period
        i = 0
        while not self.stop.is_set():
            delay = next_at - time.monotonic()
            if delay > 0 and self.stop.wait(delay):
                break
            next_at = max(next_at + self.period, time.monotonic() - self.lag * self.period)
            if self.paused.is_set():
                continue
            if self.conn is None:
                self._connect()
                if self.conn is None:
                    self.errors += 1
                    continue
            i += 1
            self._one_tx(i)
        if self.conn is not None:
            self.conn.close()


class Supervisor:
    """Runs the relayer like a service manager: starts it, SIGKILLs it on
    request and starts a new one; remembers every process and any exit we
    did not cause."""

    def __init__(self, relayer, args):
        self.relayer, self.args = relayer, args
        self.procs = []
        self.kills = 0
        self.unexpected = []      # (pid, rc, log tail)
        self.current = None

    def start(self):
        self.current = self.relayer(*self.args)
        self.procs.append(self.current)
        return self.current

    def check(self):
        """Records an exit we did not cause and starts a replacement."""
        r = self.current
        if r is not None and not r.running():
            self.unexpected.append((r.pid, r.returncode, r.log_tail(30)))
            self.start()

    def kill(self, rng):
        self.check()
        rc = self.current.kill()
        assert rc == -signal.SIGKILL, rc
        self.kills += 1
        time.sleep(rng.uniform(0.1, 1.0))
        self.start()

    def log_count(self, pattern):
        rx = re.compile(pattern, re.IGNORECASE)
        return sum(len(rx.findall(p.log_text())) for p in self.procs)


def finish_at_marker(pg, sup, marker_end, check=None):
    """Waits (bounded) until the slot has confirmed marker_end, calling
    sup.check() and then check(sup) if given on every look; then SIGTERMs
    the current relayer, which must exit 0. Returns when it caught up
    (monotonic seconds)."""
    def caught_up():
        sup.check()
        if check is not None:
            check(sup)
        c = pg.confirmed_flush_lsn(SLOT)
        return c is not None and c >= marker_end
    wait_until(caught_up, 120, interval=0.2,
               message="the slot to confirm the marker at %s; log tail:\n%s"
               % (harness.int_to_lsn(marker_end), sup.current.log_tail()))
    t_caught_up = time.monotonic()
    last = sup.current
    rc = last.terminate(30)
    assert rc == 0, "the last relayer exited %s on SIGTERM; log tail:\n%s" % (rc, last.log_tail())
    return t_caught_up


def commit_marker(pg, topic):
    """Commits one `<topic>.marker` event after everything else; returns
    (its id, the end of its commit record). Once the slot has confirmed
    that position, every earlier transaction was delivered."""
    conn = psycopg2.connect(pg.dsn(), connect_timeout=10)
    try:
        cur = conn.cursor()
        cur.execute("SELECT pg_current_wal_insert_lsn(), pg_current_xact_id()::xid::text")
        start_lsn, xid = cur.fetchone()
        cur.execute("INSERT INTO public.events_outbox (aggregate_id, type, payload) "
                    "VALUES (%s, %s, '{}') RETURNING id", (str(uuid.uuid4()), topic + ".marker"))
        marker_id = cur.fetchone()[0]
        conn.commit()
        cur.execute("SELECT max(end_lsn) FROM pg_get_wal_records_info(%s::pg_lsn, "
                    "pg_current_wal_flush_lsn()) WHERE resource_manager = 'Transaction' "
                    "AND record_type = 'COMMIT' AND xid = %s::xid", (start_lsn, xid))
        return marker_id, harness.lsn_to_int(cur.fetchone()[0])
    finally:
        conn.close()


def read_to_end(bootstrap, topics, timeout=90):
    """Every record of `topics` up to the high watermark each partition had
    when we started reading: [(topic, partition, offset, key, headers,
    value)] in offset order per partition."""
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-" + uuid.uuid4().hex[:8],
                  "enable.auto.commit": False, "log_level": 3, "fetch.wait.max.ms": 100,
                  "auto.offset.reset": "earliest"})  # as kafka_io._consumer_conf says
    out = []
    deadline = time.monotonic() + timeout
    try:
        md = c.list_topics(timeout=10)
        ends, assign = {}, []
        for t in topics:
            tm = md.topics.get(t)
            if tm is None or tm.error is not None:
                continue
            for p in sorted(tm.partitions):
                lo, hi = c.get_watermark_offsets(TopicPartition(t, p), timeout=10)
                if hi > lo:
                    ends[(t, p)] = hi
                    assign.append(TopicPartition(t, p, OFFSET_BEGINNING))
        c.assign(assign)
        pos = {k: -1 for k in ends}
        while any(pos[k] + 1 < ends[k] for k in ends):
            left = deadline - time.monotonic()
            assert left > 0, "reading the topics timed out: at %s of %s" % (pos, ends)
            for m in c.consume(num_messages=10000, timeout=min(left, 0.5)):
                if m.error() is not None:
                    raise RuntimeError("consume error: %s" % m.error())
                k = (m.topic(), m.partition())
                if m.offset() >= ends[k]:
                    continue
                pos[k] = m.offset()
                headers = {n: v.decode() for n, v in (m.headers() or [])}
                out.append((m.topic(), m.partition(), m.offset(), m.key().decode(), headers,
                            m.value().decode()))
    finally:
        c.close()
    out.sort(key=lambda x: (x[0], x[1], x[2]))
    return out


def wait_streaming(pg, sup, timeout):
    """Until the slot is active again; returns False if it did not happen
    (the caller decides whether that fails the test)."""
    def active():
        sup.check()
        try:
            return bool((pg.slot_info(SLOT) or {}).get("active"))
        except psycopg2.Error:
            return False
    try:
        wait_until(active, timeout, interval=0.2, message="the relayer to stream")
        return True
    except AssertionError:
        return False


@pytest.fixture
def proxied_broker(tmp_path):
    """Three mock brokers, each behind a fault proxy that they advertise."""
    b = harness.ProxiedBroker(str(tmp_path), brokers=3)
    yield b
    b.cleanup()


class ClusterFaults:
    """A real three-broker cluster of the test's own (own_kafka_cluster)
    with the chaos test's broker faults, the real way: the outage SIGKILLs
    every broker and starts them again on their logs (the whole Kafka side
    crashing), and the stall SIGSTOPs every broker's JVM for its duration,
    so that connections stay open and nothing answers, as through a stalled
    network path. Topics get replication factor 3 and min.insync.replicas 2."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap
        self.ids = sorted(cluster.brokers_by_id)
        self.topics = {}

    def create_topic(self, name, partitions):
        self.cluster.create_topic(name, partitions=partitions, rf=3,
                                  configs={"min.insync.replicas": 2})
        self.topics[name] = partitions

    def down(self):
        for n in self.ids:
            self.cluster.kill(n)

    def up(self, check=True):
        """Starts every broker that is down, all at once, and waits for them."""
        nodes = [self.cluster.brokers_by_id[n] for n in self.ids if not self.cluster.running(n)]
        with start_slot():
            for node in nodes:
                node.start()
            for node in nodes:
                node.wait_started(240)
        self.cluster.wait_brokers(self.ids, timeout=120)
        # Healed before the next fault: every partition back in full ISR
        # (on a loaded machine that takes a while after all three crashed,
        # and a PostgreSQL stall on top of a Kafka still recovering is two
        # faults at once, which the schedule keeps apart).
        for topic, partitions in self.topics.items():
            for p in range(partitions):
                self.cluster.wait_isr(topic, p, len(self.ids), timeout=120)

    def _signal(self, sig):
        for n in self.ids:
            node = self.cluster.brokers_by_id[n]
            if node.running():
                os.kill(node.proc.pid, sig)

    def stall(self, direction="both"):
        self._signal(signal.SIGSTOP)

    def resume(self, direction="both"):
        self._signal(signal.SIGCONT)




@pytest.fixture
def pg_proxy(pg, tmp_path):
    """A fault proxy in front of pg: the relayer's path to PostgreSQL."""
    p = harness.FaultProxy(pg.port, str(tmp_path))
    yield p
    p.cleanup()


def count_reconnects(r):
    return len(re.findall(r"reconnecting \(", r.log_text()))


def test_chaos(pg, proxied_broker, pg_proxy, relayer):
    chaos(pg, proxied_broker, pg_proxy, relayer)


# On 15 only (both plugins): four JVMs of its own per run, and the mock run
# covers every major.
@pytest.mark.pg_majors(15)
def test_chaos_on_a_real_cluster(pg, own_kafka_cluster, pg_proxy, relayer):
    chaos(pg, ClusterFaults(own_kafka_cluster), pg_proxy, relayer)


def chaos(pg, broker, pg_proxy, relayer):
    seed = _env_int("CHAOS_SEED", int(time.time() * 1000) % 1000000)
    duration = _env_int("CHAOS_SECONDS", 50)
    n_kills = _env_int("CHAOS_KILLS", 4)
    rng = random.Random(seed)
    print("\nchaos: seed %d (CHAOS_SEED=%d reproduces the schedule), %d s, %d kills"
          % (seed, seed, duration, n_kills))
    t_begin = time.monotonic()

    for t in TOPICS:
        broker.create_topic(t, 4)
    aggs = [str(uuid.uuid4()) for _ in range(AGGREGATES)]
    pg.query("CREATE TABLE chaos_seq (agg uuid PRIMARY KEY, topic text NOT NULL, "
             "seq int NOT NULL DEFAULT 0)")
    for i, a in enumerate(aggs):
        pg.query("INSERT INTO chaos_seq (agg, topic) VALUES (%s, %s)", (a, TOPICS[i % 2]))
    pg.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    pg.create_slot(SLOT)  # with the test's plugin (conftest.py)

    relay_dsn = "host=127.0.0.1 port=%d dbname=postgres user=postgres" % pg_proxy.port
    sup = Supervisor(relayer, ["--dsn", relay_dsn, "--brokers", broker.bootstrap,
                               "--status-interval", "0.5", "--reconnect-max", "2",
                               "--shutdown-timeout", "10", "--max-inflight", "100",
                               "--wal-receiver-timeout", str(WAL_RECEIVER_TIMEOUT)]
                     + shlex.split(os.environ.get("CHAOS_RELAY_ARGS", "")))
    sup.start()
    assert wait_streaming(pg, sup, 30), sup.current.log_tail()

    # The schedule: kills spread over the run, the PostgreSQL restart at
    # about a third, the broker outage at about a half, never overlapping,
    # so that the relayer living through those two is what is tested.
    d = float(duration)
    outage = float(_env_int("CHAOS_OUTAGE", 12))
    pg_at, outage_at = 0.3 * d, 0.42 * d
    after = outage_at + outage + 2
    assert after < 0.9 * d, "CHAOS_SECONDS too short for a %.0f s outage" % outage
    slots = [(0.04 * d, 0.16 * d), (0.17 * d, pg_at - 2), (after, (after + d) / 2),
             ((after + d) / 2 + 0.5, 0.95 * d)]
    slots += [(0.04 * d, 0.95 * d)] * max(0, n_kills - 4)
    plan = [(rng.uniform(a, b), "kill") for a, b in slots[:n_kills]]
    plan += [(pg_at, "pg_restart"), (outage_at, "broker_outage")]
    # The stalls come after the outage; a kill planned meanwhile waits for
    # the stall to be over (the plan runs one step at a time).
    plan += [(0.55 * d, "pg_stall"), (0.75 * d, "broker_stall")]
    broker_stall = float(_env_int("CHAOS_BROKER_STALL", 8))
    plan.sort()

    stop = threading.Event()
    producers = [Producer(pg, n, aggs, random.Random(seed * 31 + n), stop) for n in range(PRODUCERS)]
    t0 = time.monotonic()
    for p in producers:
        p.start()

    survived = {}
    stall_logs = {}  # what: the relayer's log when it did not live through it
    outage_reconnects = broker_stall_reconnects = None
    try:
        for at, what in plan:
            while time.monotonic() - t0 < at:
                sup.check()
                time.sleep(0.05)
            if what == "kill":
                sup.kill(rng)
                print("  %5.1f s  SIGKILL #%d, restarted as pid %d"
                      % (time.monotonic() - t0, sup.kills, sup.current.pid))
            elif what == "pg_restart":
                wait_streaming(pg, sup, 15)
                r = sup.current
                t = time.monotonic()
                pg.restart()
                t_up = time.monotonic()
                alive = r.running()
                back = wait_streaming(pg, sup, 60)
                survived["pg_restart"] = (r.pid, alive and r.running() and sup.current is r,
                                          r.returncode)
                print("  %5.1f s  PostgreSQL restarted in %.1f s; relayer pid %d %s, %s"
                      % (t - t0, t_up - t, r.pid,
                         "alive" if r.running() else "EXITED rc=%s" % r.returncode,
                         "streaming again %.1f s later" % (time.monotonic() - t_up) if back
                         else "NOT streaming again within 60 s"))
            elif what == "broker_outage":
                r = sup.current
                reconnects_before = count_reconnects(r)
                t = time.monotonic()
                broker.down()
                alive = True
                while time.monotonic() - t < outage:
                    alive = alive and r.running()
                    time.sleep(0.05)
                t_restart = time.monotonic()
                broker.up()
                time.sleep(1)
                # Healed before the next fault: deliveries flow again (the
                # slot confirms past what was committed when the brokers
                # were back), so that a PostgreSQL stall is not tested on
                # top of a Kafka side still recovering. What is to deliver
                # then is everything committed since the outage began, so
                # the bound grows with how long the brokers took to come
                # back (160 s at load ~50): OUTAGE_RECOVERY plus that time.
                # The producers pause meanwhile: with --max-inflight 100 the
                # catch-up runs at 100 events per produce round trip, 0.7 s
                # (median; p90 1.7 s) at load ~30, about twice what they
                # commit, and at load ~50 hardly faster than that, so that
                # the backlog would never drain within the bound.
                for p in producers:
                    p.paused.set()
                t_up, lsn_up = time.monotonic(), pg.current_wal_lsn()
                returned = t_up - t_restart
                backlog = lsn_up - (pg.confirmed_flush_lsn(SLOT) or 0)
                bound = OUTAGE_RECOVERY + returned
                first = []

                def delivering():
                    sup.check()
                    c = pg.confirmed_flush_lsn(SLOT) or 0
                    if not first and c > lsn_up - backlog:
                        first.append(time.monotonic() - t_up)
                    return c >= lsn_up

                try:
                    wait_until(delivering, bound, interval=0.2,
                               message="deliveries after the outage")
                    flowing = time.monotonic() - t_up
                except AssertionError:
                    flowing = None
                    stall_logs["broker_outage"] = "not caught up within %.0f s of the brokers' " \
                        "return (first confirmation after %s s); relayer log tail:\n%s" % (
                            bound, "%.1f" % first[0] if first else "-", r.log_tail())
                for p in producers:
                    p.paused.clear()
                survived["broker_outage"] = (r.pid, alive and r.running() and sup.current is r
                                             and flowing is not None, r.returncode)
                outage_reconnects = count_reconnects(r) - reconnects_before
                print("  %5.1f s  all brokers down for %.1f s, back in full ISR %.1f s after "
                      "their restart; relayer pid %d %s, %d replication reconnects meanwhile; "
                      "%.1f MB of WAL to deliver, first confirmation %s s after the brokers' "
                      "return, %s" % (
                          t - t0, outage, returned, r.pid,
                          "alive" if r.running() else "EXITED rc=%s" % r.returncode,
                          outage_reconnects, backlog / 1e6,
                          "%.1f" % first[0] if first else "-",
                          "caught up %.1f s after it" % flowing
                          if flowing is not None else "NOT caught up within %.0f s" % bound))
            elif what == "pg_stall":
                wait_streaming(pg, sup, 15)
                r = sup.current
                old_pid = (pg.slot_info(SLOT) or {}).get("active_pid")
                t = time.monotonic()
                pg_proxy.stall("both")

                def new_walsender():
                    sup.check()
                    info = pg.slot_info(SLOT) or {}
                    return info.get("active") and info.get("active_pid") != old_pid

                try:
                    wait_until(new_walsender, WAL_RECEIVER_TIMEOUT + 25, interval=0.2,
                               message="a new walsender")
                    back = time.monotonic() - t
                except AssertionError:
                    back = None
                survived["pg_stall"] = (r.pid, back is not None and r.running() and
                                        sup.current is r, r.returncode)
                if back is None:
                    stall_logs["pg_stall"] = "relayer log tail:\n%s\nslot: %s" % (
                        r.log_tail(), pg.slot_info(SLOT))
                print("  %5.1f s  PostgreSQL path stalled; relayer pid %d %s, %s"
                      % (t - t0, r.pid,
                         "alive" if r.running() else "EXITED rc=%s" % r.returncode,
                         "streaming again on a new connection %.1f s later" % back
                         if back is not None else "NOT streaming again"))
            elif what == "broker_stall":
                r = sup.current
                before = count_reconnects(r)
                t = time.monotonic()
                broker.stall("both")
                alive = True
                while time.monotonic() - t < broker_stall:
                    alive = alive and r.running()
                    time.sleep(0.05)
                broker.resume("both")
                time.sleep(1)
                survived["broker_stall"] = (r.pid, alive and r.running() and sup.current is r,
                                            r.returncode)
                broker_stall_reconnects = count_reconnects(r) - before
                print("  %5.1f s  every broker path stalled for %.1f s; relayer pid %d %s, %d "
                      "replication reconnects meanwhile" % (
                          t - t0, broker_stall, r.pid,
                          "alive" if r.running() else "EXITED rc=%s" % r.returncode,
                          broker_stall_reconnects))
        while time.monotonic() - t0 < d:
            sup.check()
            time.sleep(0.05)
    finally:
        stop.set()
        for p in producers:
            p.join(30)
        broker.resume("both")
        broker.up(check=False)
    t_produced = time.monotonic()

    # Catch up: a marker committed after everything else; once the slot has
    # confirmed its commit, every earlier transaction was delivered.
    marker_id, marker_end = commit_marker(pg, "chaosa")

    t_caught_up = finish_at_marker(pg, sup, marker_end)

    # What the database says was committed.
    rows = {}
    for id_, agg, typ, payload in pg.query(
            "SELECT id, aggregate_id::text, type, payload::text FROM public.events_outbox "
            "WHERE type LIKE 'chaos%%.changed'"):
        rows[id_] = (agg, typ.split(".")[0], payload)
    committed = set(rows)
    claimed = {i for p in producers for i in p.committed}
    rolled = {i for p in producers for i in p.rolled_back}
    uncertain = {i for p in producers for i in p.uncertain}
    assert claimed <= committed, "COMMIT returned but rows are missing: %s" % sorted(claimed - committed)[:10]
    assert not (rolled & committed), "rolled-back rows in the table: %s" % sorted(rolled & committed)[:10]
    assert committed <= claimed | uncertain, "rows nobody committed: %s" % sorted(committed - claimed - uncertain)[:10]
    rolled |= uncertain - committed

    # What Kafka has.
    records = read_to_end(broker.bootstrap, TOPICS)
    t_read = time.monotonic()
    first = {}            # event_id -> record of its first occurrence
    copies = {}
    foreign = []
    for rec in records:
        topic, part, off, key, headers, value = rec
        eid = int(headers["event_id"])
        if eid == marker_id:
            continue
        if eid not in committed:
            foreign.append(rec)
            continue
        copies[eid] = copies.get(eid, 0) + 1
        first.setdefault(eid, rec)

    missing = committed - set(first)
    leaked = [r for r in foreign if int(r[4]["event_id"]) in rolled]
    mismatched = []
    for eid, (topic, part, off, key, headers, value) in first.items():
        agg, want_topic, payload = rows[eid]
        if (topic, key, value) != (want_topic, agg, payload):
            mismatched.append((eid, (topic, key, value[:80]), (want_topic, agg, payload[:80])))

    # Per (topic, aggregate): first occurrences in Kafka order (one key is
    # one partition) must carry sequence numbers 1..N in order; the table
    # says N.
    want_seq = {}
    for eid, (agg, topic, payload) in rows.items():
        want_seq.setdefault((topic, agg), []).append(json.loads(payload)["seq"])
    for k, seqs in want_seq.items():
        assert sorted(seqs) == list(range(1, len(seqs) + 1)), "table sequence of %s has gaps" % (k,)
    seen, order_errors = set(), []
    got_seq = {}
    for topic, part, off, key, headers, value in records:
        eid = int(headers["event_id"])
        if eid not in committed or eid in seen:
            continue
        seen.add(eid)
        got_seq.setdefault((topic, key), []).append((json.loads(value)["seq"], part, off))
    for k, seqs in got_seq.items():
        nums = [s for s, _, _ in seqs]
        if nums != sorted(nums):
            bad = next(i for i in range(1, len(nums)) if nums[i] < nums[i - 1])
            order_errors.append("%s: seq %d at %s[%d]@%d after seq %d" % (
                k, nums[bad], k[0], seqs[bad][1], seqs[bad][2], nums[bad - 1]))

    duplicates = sum(n - 1 for n in copies.values())
    reconnects = sup.log_count(r"reconnecting \(")
    retries = sup.log_count(r"retrying in")
    t_end = time.monotonic()
    print("chaos: %d transactions committed, %d rolled back (%d with an unknown COMMIT outcome, "
          "%d of them committed), %d producer errors"
          % (sum(p.tx_committed for p in producers), sum(p.tx_rolled_back for p in producers),
             len({i for p in producers for i in p.uncertain}), len(uncertain & committed),
             sum(p.errors for p in producers)))
    print("chaos: %d events committed, %d rolled back; Kafka: %d records, %d duplicates, "
          "%d missing, %d leaked, %d foreign, %d out of order, %d mismatched"
          % (len(committed), len(rolled), len(records), duplicates, len(missing), len(leaked),
             len(foreign), len(order_errors), len(mismatched)))
    print("chaos: %d SIGKILLs, %d relayer processes, %d reconnects and %d connect retries in "
          "the logs, %d unexpected exits"
          % (sup.kills, len(sup.procs), reconnects, retries, len(sup.unexpected)))
    print("chaos: timings: setup %.1f s, faults+producing %.1f s, catch-up %.1f s, read %.1f s, "
          "checks %.1f s, total %.1f s"
          % (t0 - t_begin, t_produced - t0, t_caught_up - t_produced, t_read - t_caught_up,
             t_end - t_read, t_end - t_begin))

    # What was delivered is checked first, whatever else happened.
    assert not missing, "%d committed events never arrived, e.g. %s" % (len(missing), sorted(missing)[:10])
    assert not leaked, "%d rolled-back events published, e.g. %s" % (len(leaked), leaked[:3])
    assert not foreign, "%d records that are no committed row, e.g. %s" % (len(foreign), foreign[:3])
    assert not mismatched, "records differ from their rows: %s" % mismatched[:5]
    assert not order_errors, "per-aggregate order broken:\n%s" % "\n".join(order_errors[:10])
    # Then that the relayer lived through everything, librdkafka issue
    # 4438's lost producer sequence included (docs/failure-modes.md: the
    # producer is replaced; it exited 1 in two of ten runs before that).
    renewed = len(re.findall(r"lost its sequence state", "".join(p.log_text() for p in sup.procs)))
    if renewed:
        print("chaos: the producer lost its sequence %d time(s) (librdkafka issue 4438) and "
              "was replaced" % renewed)
    assert not sup.unexpected, "the relayer exited by itself:\n%s" % "\n\n".join(
        "pid %d rc %s:\n%s" % u for u in sup.unexpected)
    for what in ("pg_restart", "broker_outage", "pg_stall", "broker_stall"):
        pid, ok, rc = survived.get(what, (None, False, None))
        assert ok, "the relayer (pid %s) did not live through the %s (rc %s)\n%s" % (
            pid, what, rc, stall_logs.get(what, ""))
    assert outage_reconnects == 0, (
        "the replication connection was lost during the broker outage (wal_sender_timeout: "
        "status updates stopped while the window was full?)")
    assert broker_stall_reconnects == 0, (
        "the replication connection was dropped during the broker stall (the "
        "--wal-receiver-timeout must not count while the window is full)")
    assert sup.kills == n_kills
    assert reconnects >= 1, "no reconnect logged after the PostgreSQL restart"
    assert len(committed) > 100 * duration / 10, "too few events to mean anything: %d" % len(committed)
