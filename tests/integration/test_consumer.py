"""test_consumer.py — outbox-consume against a real PostgreSQL, the mock
broker and (end to end) the real relayer.

  test_applies_each_event_once         direct produce with duplicates and a
                                       message without event_id; SIGTERM
                                       commits what was applied
  test_on_error_failed_records_and_goes_on
  test_on_error_halt_stops_at_the_bad_event
  test_bad_usage_and_bad_apply_sql     exit 2 with a message
  test_survives_postgres_restart       the batch in flight is applied after
                                       reconnecting, nothing skipped
  test_survives_broker_outage          brokers down past the session timeout
  test_rebalance_between_two_consumers a join and a leave, eager and
                                       cooperative: nothing applied twice
  test_orders_end_to_end_with_kills    the seed's example: producers, the
                                       relayer and the consumer, both
                                       SIGKILLed several times; points are
                                       exact, each event processed once
Each of those runs twice: [tuned] with the FAST_GROUP -X settings and small
batches, [defaults] with no -X and no batch options at all. Defaults only:
  test_defaults_started_before_the_topic_exists[order|^ord.*]
  test_defaults_topic_created_while_running  a subscribed topic appears
                                       after the consumer joined
  test_defaults_restart_after_events_exist   a new group, then a SIGKILL
                                       and a restart of a known group
  test_defaults_postgres_hangs_while_the_group_rebalances  reconnecting
                                       to a server that never answers does
                                       not keep the consumer from a rebalance
  test_revoke_is_bounded[lock|hung-server]  a revoke meets a batch
                                       PostgreSQL does not apply (rows locked
                                       elsewhere; the backend SIGSTOPped):
                                       the group goes on within the bound
  test_defaults_batch_mixes_processed_new_and_failing_events  the pipelined
                                       batch: an already-processed event, new
                                       ones, an in-batch duplicate, a failing
                                       one (applied again one by one)
"""

import os
import random
import re
import signal
import threading
import time
import uuid
import zlib

import psycopg2
import pytest

import harness
from test_chaos import read_to_end

REPO = harness.REPO_ROOT
APPLY_POINTS = ("INSERT INTO loyalty_points(customer_id, points) "
                "VALUES (($4->>'customer_id')::uuid, ($4->>'points')::int) "
                "ON CONFLICT (customer_id) DO UPDATE "
                "SET points = loyalty_points.points + EXCLUDED.points")

# The mock cluster's group coordinator waits 3 s for a first join and
# session.timeout.ms - 1 s for a dead member of the group (a SIGKILLed
# consumer); below ~3.5 s a joining member times out while it waits.
FAST_GROUP = ["-X", "session.timeout.ms=4000", "-X", "heartbeat.interval.ms=500",
              "-X", "fetch.wait.max.ms=50", "-X", "topic.metadata.refresh.interval.ms=1000",
              "-X", "reconnect.backoff.max.ms=1000"]


@pytest.fixture
def consumer_binary(build_dir):
    path = os.path.join(build_dir, "outbox-consume")
    if not os.access(path, os.X_OK):
        pytest.fail("%s does not exist: cmake --build build first" % path)
    return path


@pytest.fixture
def consume(consumer_binary, tmp_path):
    """Factory: consume(*args, env=None) starts build/outbox-consume; log in
    <tmp>/consumer-N.log; SIGKILLed at teardown if still running."""
    start = harness.ProcessFactory(consumer_binary, str(tmp_path), "consumer")
    yield start
    start.cleanup()


@pytest.fixture
def shop(pg):
    """pg with the orders example loaded."""
    with open(os.path.join(REPO, "sql", "examples", "orders.sql")) as f:
        pg.query(f.read())
    return pg


def consumer_args(pg, broker, topics="order", group="loyalty", name="loyalty",
                  apply=APPLY_POINTS, extra=(), dsn=None, tuning="tuned"):
    """outbox-consume's arguments. tuning "tuned": small batches and the
    FAST_GROUP -X settings; "defaults": what a user runs, no -X and no batch
    options at all."""
    args = ["--brokers", broker.bootstrap, "--group", group, "--topics", topics,
            "--dsn", dsn or pg.dsn(), "--consumer", name, "--apply", apply]
    if tuning == "tuned":
        args += ["--batch", "20", "--batch-ms", "50"] + FAST_GROUP
    else:
        assert tuning == "defaults", tuning
    return args + list(extra)


def rebalance_wait(tuning):
    """Seconds to allow for a member's join or leave to reach an
    assignment. The mock cluster's coordinator (librdkafka 2.0.2) does not
    finish a rebalance when every member has rejoined: it waits
    session.timeout.ms - 1 s each round (9 s with outbox-consume's default
    10 s, 3 s with FAST_GROUP's 4 s), and a cooperative join takes two
    rounds. The client costs more: an offset commit that a JoinGroup held
    back on the coordinator connection is answered ILLEGAL_GENERATION, and
    librdkafka 2.0.2 (Debian 12's) then resets the generation it has just
    joined with (src/rdkafka_cgrp.c, OffsetCommit handler), so the
    leader's SyncGroup fails, the assignment is "lost" and the group starts
    over (librdkafka #4059, fixed in 2.10.0). A consumer that commits after
    every batch has a commit in flight at nearly every join while events
    flow: a cooperative join took 5 to 9 rounds here (18 to 54 s with the
    defaults, 2026-12-03), and more than 57 s once in CI beside the
    parallel suite. Ten rounds, plus a loaded machine."""
    per = 9 if tuning == "defaults" else 3
    return 10 * per + 30


@pytest.fixture(params=["tuned", "defaults"])
def tuning(request):
    """Runs a test twice: with the tests' tuned settings and with none
    (defaults are what users run)."""
    return request.param


def committed_offsets(bootstrap, group, topic, partitions):
    """The group's committed offsets {partition: offset} (-1001 = none)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "log_level": 3})
    try:
        got = c.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def high_watermarks(bootstrap, topic, partitions):
    """{partition: high watermark} of a topic."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "log_level": 3})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}
    finally:
        c.close()


def keys_covering(nparts, per_partition):
    """Random UUID keys, per_partition of them for each of nparts partitions
    under librdkafka's default partitioner (CRC-32 of the key)."""
    got = {p: [] for p in range(nparts)}
    while any(len(v) < per_partition for v in got.values()):
        k = str(uuid.uuid4())
        part = got[zlib.crc32(k.encode()) % nparts]
        if len(part) < per_partition:
            part.append(k)
    return [k for v in got.values() for k in v]


def event(customer, points, event_id, typ="order.placed", payload=None):
    """(key, value, headers) as the relayer would produce for an order."""
    value = payload if payload is not None else \
        '{"customer_id": "%s", "points": %d}' % (customer, points)
    headers = [("event_type", typ.encode())]
    if event_id is not None:
        headers.insert(0, ("event_id", event_id.encode()))
    return (customer.encode(), value.encode(), headers)


class Orders:
    """Publishes order events straight to Kafka (no relayer): event n gives
    customer n % len(customers) n points; .expected = {customer: points}
    (with zero, every customer from the start)."""

    def __init__(self, kafka, customers, id_format="e%d", zero=False):
        self.kafka, self.customers, self.id_format = kafka, customers, id_format
        self.expected = {c: 0 for c in customers} if zero else {}
        self.n = 0

    def send(self, count):
        msgs = []
        for _ in range(count):
            self.n += 1
            c = self.customers[self.n % len(self.customers)]
            self.expected[c] = self.expected.get(c, 0) + self.n
            msgs.append(event(c, self.n, self.id_format % self.n))
        assert self.kafka.produce("order", msgs) == []


def points(pg):
    return {str(c): int(p) for c, p in pg.query("SELECT customer_id, points FROM loyalty_points")}


def wait_points(pg, expected, timeout, proc=None):
    def ok():
        if proc is not None and not proc.running():
            raise AssertionError("consumer exited (rc=%s):\n%s" % (proc.returncode,
                                                                    proc.log_tail()))
        return points(pg) == expected
    try:
        harness.wait_until(ok, timeout, interval=0.2, message="loyalty points %r" % expected)
    except AssertionError:
        raise AssertionError("points %r != expected %r; consumer log:\n%s"
                             % (points(pg), expected, proc.log_tail() if proc else ""))


def test_applies_each_event_once(shop, broker, kafka, consume, tuning):
    pg = shop
    broker.cmd("topic order 2")
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    msgs = [event(a, 10, "1"), event(b, 5, "2"), event(a, 10, "1"),  # "1" redelivered
            event(a, 1, "3"), event(b, 2, None),                        # no event_id header
            (b.encode(), ('{"customer_id": "%s", "points": 100}' % b).encode(),
             [("event_id", b"\xff\xfe not utf-8"), ("event_type", b"order.placed")])]
    assert kafka.produce("order", msgs) == []
    p = consume(*consumer_args(pg, broker, tuning=tuning))
    wait_points(pg, {a: 11, b: 107}, 30, p)

    # The same events again (a relayer redelivering after a crash): skipped.
    assert kafka.produce("order", msgs[:2]) == []
    p.wait_for_log(r"assigned", timeout=20)
    time.sleep(1.5)
    assert points(pg) == {a: 11, b: 107}
    ids = sorted(r[0] for r in pg.query(
        "SELECT event_id FROM processed_events WHERE consumer = 'loyalty'"))
    assert len(ids) == 5
    assert ids[:3] == ["1", "2", "3"]
    for fallback in ids[3:]:  # no header, and a header that is not text
        assert fallback.startswith("kafka-order-") and len(fallback.split("-")) == 4

    assert p.terminate(20) == 0
    log = p.log_text()
    assert "events applied" in log and "PostgreSQL reconnects" in log
    # SIGTERM committed the offsets of everything applied: 8 messages in all.
    offs = committed_offsets(broker.bootstrap, "loyalty", "order", [0, 1])
    assert sum(o for o in offs.values() if o >= 0) == 8, offs

    # A restart reads nothing again (offsets) and applies nothing twice.
    p2 = consume(*consumer_args(pg, broker, tuning=tuning))
    p2.wait_for_log(r"assigned", timeout=20)
    time.sleep(1.5)
    assert points(pg) == {a: 11, b: 107}
    assert p2.terminate(20) == 0
    assert "0 events applied, 0 duplicates" in p2.log_text()


def test_on_error_failed_records_and_goes_on(shop, broker, kafka, consume, tuning):
    pg = shop
    broker.cmd("topic order 1")
    a = str(uuid.uuid4())
    msgs = [event(a, 3, "10"),
            event(a, 0, "11", payload='{"customer_id": "not-a-uuid", "points": 1}'),
            event(a, 0, "12", payload="this is not json"),
            event(a, 4, "13")]
    assert kafka.produce("order", msgs) == []
    p = consume(*consumer_args(pg, broker, tuning=tuning, extra=["--on-error", "failed"]))
    wait_points(pg, {a: 7}, 30, p)
    harness.wait_until(lambda: pg.scalar("SELECT count(*) FROM failed_events") == 2, 10,
                       message="2 failed events")
    rows = pg.query("SELECT event_id, topic, \"partition\", \"offset\", key, event_type, payload, "
                    "error, sqlstate FROM failed_events WHERE consumer = 'loyalty' "
                    "ORDER BY event_id")
    assert [r[0] for r in rows] == ["11", "12"]
    eid, topic, part, off, key, typ, payload, error, state = rows[0]
    assert (topic, part, off, key, typ) == ("order", 0, 1, a, "order.placed")
    assert payload == '{"customer_id": "not-a-uuid", "points": 1}'
    assert "invalid input syntax for type uuid" in error and state == "22P02"
    assert rows[1][3] == 2 and rows[1][6] == "this is not json"
    assert "json" in rows[1][7] and rows[1][8] == "22P02"
    # Failed events count as processed: never retried.
    assert pg.scalar("SELECT count(*) FROM processed_events WHERE consumer = 'loyalty'") == 4
    assert p.running()
    log = p.log_text()
    assert "event_id=11 topic=order partition=0 offset=1" in log
    assert "recorded in failed_events" in log

    # Later events keep flowing and the offsets move past the failed ones.
    assert kafka.produce("order", [event(a, 5, "14")]) == []
    wait_points(pg, {a: 12}, 20, p)
    assert p.terminate(20) == 0
    assert committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: 5}


def test_on_error_halt_stops_at_the_bad_event(shop, broker, kafka, consume, tuning):
    pg = shop
    broker.cmd("topic order 1")
    a = str(uuid.uuid4())
    msgs = [event(a, 3, "20"), event(a, 4, "21"),
            event(a, 0, "22", payload='{"customer_id": "%s", "points": "lots"}' % a),
            event(a, 5, "23")]
    assert kafka.produce("order", msgs) == []
    p = consume(*consumer_args(pg, broker, tuning=tuning, extra=["--on-error", "halt"]))
    assert p.wait_exit(40) == 1
    log = p.log_text()
    assert ("event_id=22 topic=order partition=0 offset=2 type=order.placed: apply failed: "
            "ERROR:  invalid input syntax for type integer: \"lots\" (SQLSTATE 22P02)") in log, \
        log
    assert "--on-error halt" in log
    # The two events before it are applied and committed; nothing past it.
    assert points(pg) == {a: 7}
    assert pg.scalar("SELECT count(*) FROM failed_events") == 0
    assert sorted(r[0] for r in pg.query("SELECT event_id FROM processed_events")) == ["20", "21"]
    assert committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: 2}

    # A restart halts on it again rather than skipping it.
    p2 = consume(*consumer_args(pg, broker, tuning=tuning, extra=["--on-error", "halt"]))
    assert p2.wait_exit(40) == 1
    assert "event_id=22" in p2.log_text()
    assert points(pg) == {a: 7}


def test_bad_usage_and_bad_apply_sql(shop, broker, consume):
    pg = shop
    p = consume("--brokers", broker.bootstrap, "--topics", "order")
    assert p.wait_exit(10) == 2
    assert "--group is required" in p.log_text()
    p = consume(*consumer_args(pg, broker, extra=["--on-error", "sometimes"]))
    assert p.wait_exit(10) == 2
    assert "--on-error expects failed or halt" in p.log_text()
    p = consume(*consumer_args(pg, broker, apply="INSERT INTO no_such_table VALUES ($4)"))
    assert p.wait_exit(20) == 2
    assert "--apply statement does not prepare" in p.log_text()
    assert "no_such_table" in p.log_text()

    # The DSN password never reaches the log.
    pg.query("CREATE ROLE consumer_pw LOGIN PASSWORD 'Sekr3t-pw'")
    p = consume(*consumer_args(pg, broker, dsn=pg.dsn(user="consumer_pw",
                                                      password="Sekr3t-pw", dbname="nodb")))
    p.wait_for_log(r"cannot connect to PostgreSQL", timeout=20)
    assert p.terminate(20) == 0
    assert "Sekr3t-pw" not in p.log_text()


def test_survives_postgres_restart(shop, broker, kafka, consume, tuning):
    """PostgreSQL goes away while events arrive: the consumer pauses,
    reconnects, and applies everything exactly once."""
    pg = shop
    broker.cmd("topic order 2")
    customers = [str(uuid.uuid4()) for _ in range(3)]
    orders = Orders(kafka, customers, id_format="%d", zero=True)
    send, expected = orders.send, orders.expected

    send(30)
    p = consume(*consumer_args(pg, broker, tuning=tuning))
    wait_points(pg, dict(expected), 30, p)
    pg.stop(mode="immediate")
    send(30)
    time.sleep(1)
    pg.start()
    p.wait_for_log(r"connected to PostgreSQL \(backend pid", timeout=40)
    send(30)
    wait_points(pg, dict(expected), 40, p)
    assert pg.scalar("SELECT count(*) FROM processed_events") == 90
    assert p.running()
    assert "connection" in p.log_text().lower()


def test_survives_broker_outage(shop, broker, kafka, consume, tuning):
    """All brokers down for longer than the session timeout: the consumer
    keeps polling, rejoins when they are back, and nothing is lost or applied
    twice."""
    pg = shop
    broker.cmd("topic order 2")
    c = str(uuid.uuid4())
    assert kafka.produce("order", [event(c, i, "a%d" % i) for i in range(1, 21)]) == []
    p = consume(*consumer_args(pg, broker, tuning=tuning))
    wait_points(pg, {c: 210}, 30, p)
    broker.cmd("down")
    time.sleep(6)
    assert p.running(), p.log_tail()
    broker.cmd("up")
    assert kafka.produce("order", [event(c, i, "a%d" % i) for i in range(15, 31)]) == []
    wait_points(pg, {c: sum(range(1, 31))}, 40, p)
    assert pg.scalar("SELECT count(*) FROM processed_events") == 30
    assert "brokers are down" in p.log_text() or "Disconnected" in p.log_text()
    assert p.terminate(30) == 0


def test_orders_end_to_end_with_kills(shop, broker, kafka, relayer, relay_args, consume, tuning):
    """The seed's example under fire: 4 producer threads place orders (orders
    row + order.placed event in one transaction, ~20 % rolled back); the
    relayer and outbox-consume are SIGKILLed and restarted several times;
    at the end every customer's points are exactly the sum over their
    committed orders and processed_events holds each committed event once.
    tuning "defaults": neither the relayer nor the consumer gets a tuning
    flag."""
    pg = shop
    t0 = time.monotonic()
    broker.cmd("topic order 4")
    relay_argv = relay_args + harness.tuned(tuning, "--status-interval", "0.5")
    cons_argv = consumer_args(pg, broker, tuning=tuning)
    rel = relayer(*relay_argv)
    rel.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    con = consume(*cons_argv)

    customers = [str(uuid.uuid4()) for _ in range(12)]
    committed, rolled_back = [], []
    lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def producer(seed):
        rnd = random.Random(seed)
        conn = psycopg2.connect(pg.dsn(), connect_timeout=10)
        try:
            while not stop.is_set():
                cust = rnd.choice(customers)
                cents = rnd.randrange(100, 10000)
                with conn.cursor() as cur:
                    cur.execute("SELECT place_order(%s, %s)", (cust, cents))
                    order_id = cur.fetchone()[0]
                if rnd.random() < 0.2:
                    conn.rollback()
                    with lock:
                        rolled_back.append(order_id)
                else:
                    conn.commit()
                    with lock:
                        committed.append((order_id, cust, cents // 100))
                time.sleep(rnd.uniform(0.005, 0.03))
        except Exception as e:  # reported by the test thread
            errors.append(e)
        finally:
            conn.close()

    threads = [threading.Thread(target=producer, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()

    # Chaos while the producers run, three rounds: once the consumer has its
    # partitions and has applied something, SIGKILL the relayer (restart
    # it), then SIGKILL the consumer mid-stream (restart it).
    kills = {"relayer": 0, "consumer": 0}
    rnd = random.Random(42)

    def processed():
        return pg.scalar("SELECT count(*) FROM processed_events")

    for _ in range(3):
        con.wait_for_log(r"assigned \d+ partition", timeout=30)
        before = processed()
        harness.wait_until(lambda: processed() > before, 20, interval=0.05,
                           message="the consumer to apply events")
        time.sleep(rnd.uniform(0.2, 0.8))
        assert not errors, errors
        assert rel.running(), rel.log_tail()
        assert rel.kill() == -signal.SIGKILL
        kills["relayer"] += 1
        time.sleep(rnd.uniform(0.1, 0.5))
        rel = relayer(*relay_argv)
        time.sleep(rnd.uniform(0.3, 0.8))
        assert con.running(), con.log_tail()
        assert con.kill() == -signal.SIGKILL
        kills["consumer"] += 1
        con = consume(*cons_argv)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors
    produced_at = time.monotonic() - t0

    expected = {}
    for _, cust, pts in committed:
        expected[cust] = expected.get(cust, 0) + pts
    expected = {c: p for c, p in expected.items()}
    wait_points(pg, expected, 40, con)
    converged_at = time.monotonic() - t0

    # Each committed event exactly once; nothing of the rolled-back orders.
    outbox_ids = sorted(str(r[0]) for r in pg.query(
        "SELECT id FROM events_outbox WHERE type = 'order.placed'"))
    assert len(outbox_ids) == len(committed)
    processed = sorted(r[0] for r in pg.query(
        "SELECT event_id FROM processed_events WHERE consumer = 'loyalty'"))
    assert processed == outbox_ids
    assert pg.scalar("SELECT count(*) FROM orders") == len(committed)
    assert pg.scalar("SELECT count(*) FROM failed_events") == 0
    # Up to each partition's high watermark: a read for a fixed 3 s
    # stopped early under load (thousands of records) and reported the
    # newest ids missing.
    published = read_to_end(kafka.bootstrap, ["order"])  # (topic, part, offset, key, headers, value)
    published_ids = {headers["event_id"] for (_, _, _, _, headers, _) in published}
    assert published_ids == set(outbox_ids)
    rb = {str(o) for o in rolled_back}
    assert not any(value and any(o in value for o in rb) for (*_, value) in published)

    assert rel.terminate(30) == 0
    assert con.terminate(30) == 0
    print("\n%d orders committed, %d rolled back, %d messages in Kafka (%d redelivered), "
          "kills %s; producers done at %.1f s, points converged at %.1f s, total %.1f s"
          % (len(committed), len(rolled_back), len(published), len(published) - len(outbox_ids),
             kills, produced_at, converged_at, time.monotonic() - t0))
    assert kills == {"relayer": 3, "consumer": 3}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_rebalance_between_two_consumers(shop, broker, kafka, consume, strategy, tuning):
    """A second consumer joins the group while events flow, then the first
    one is stopped: every event is applied exactly once across the two."""
    pg = shop
    broker.cmd("topic order 4")
    # Two customers per partition (librdkafka's default partitioner is CRC-32
    # of the key), so every partition has traffic and a takeover of each is
    # exercised; an empty partition would rightly have no committed offset.
    customers = keys_covering(4, per_partition=2)
    expected = {}
    stop = threading.Event()
    sent = []
    errors = []

    def produce():
        n = 0
        try:
            while not stop.is_set():
                batch = []
                for _ in range(10):
                    n += 1
                    c = customers[n % len(customers)]
                    expected[c] = expected.get(c, 0) + n
                    batch.append(event(c, n, "e%d" % n))
                errs = kafka.produce("order", batch)
                if errs:
                    errors.append(errs)
                    return
                sent.append(len(batch))
                time.sleep(0.1)
        except Exception as e:
            errors.append(e)

    extra = ["-X", "partition.assignment.strategy=" + strategy]
    a = consume(*consumer_args(pg, broker, tuning=tuning, extra=extra))
    a.wait_for_log(r"assigned 4 partition", timeout=30)
    t = threading.Thread(target=produce, daemon=True)
    t.start()
    time.sleep(1.0)
    b = consume(*consumer_args(pg, broker, tuning=tuning, extra=extra))
    b.wait_for_log(r"assigned [1-9] partition", timeout=rebalance_wait(tuning))
    a.wait_for_log(r"revoked", timeout=rebalance_wait(tuning))
    time.sleep(1.0)
    assert a.terminate(30) == 0
    b.wait_for_log(r"assigned", timeout=rebalance_wait(tuning))
    time.sleep(1.0)
    stop.set()
    t.join(30)
    assert not errors, errors
    total = sum(sent)
    wait_points(pg, dict(expected), 40, b)
    assert pg.scalar("SELECT count(*) FROM processed_events") == total
    # The effects are complete as soon as a applied them, but b may not have
    # fetched a partition it took over yet (its first batch there is all
    # duplicates): wait, bounded, until b has committed past every message.
    ends = high_watermarks(broker.bootstrap, "order", [0, 1, 2, 3])
    assert sum(ends.values()) == total and all(ends.values()), ends
    deadline = time.monotonic() + 30
    while True:
        offs = committed_offsets(broker.bootstrap, "loyalty", "order", [0, 1, 2, 3])
        if offs == ends or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert b.terminate(30) == 0
    offs = committed_offsets(broker.bootstrap, "loyalty", "order", [0, 1, 2, 3])
    assert offs == ends, (offs, ends)
    print("\n%s: %d events across a join and a leave" % (strategy, total))


# ---------------------------------------------------------------------------
# Defaults from any starting point. Every test below runs outbox-consume with
# no -X and no batch options (tuning="defaults"), as users do.
#
# The mock cluster of librdkafka 2.0.2 advertises Metadata up to v2, which
# has no AllowAutoTopicCreation flag, so any consumer's subscription creates
# the topic it names. "apiversion 3 0 4" makes the brokers advertise v4:
# consumers then send allow.auto.create.topics=false and only producers
# create topics, as on a real broker.
# ---------------------------------------------------------------------------

def place_orders(pg, customers, count, expected):
    """count orders spread over customers (1 point per order), committed
    one by one; expected {customer: points} is updated."""
    conn = psycopg2.connect(pg.dsn(), connect_timeout=10)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            for i in range(count):
                c = customers[i % len(customers)]
                cur.execute("SELECT place_order(%s, 100)", (c,))
                expected[c] = expected.get(c, 0) + 1
    finally:
        conn.close()


@pytest.mark.parametrize("topics", ["order", "^ord.*"])
def test_defaults_started_before_the_topic_exists(shop, broker, relayer, relay_args, consume,
                                                  topics):
    """The consumer subscribes before anything created the topic; the
    relayer creates it with the first event. For a topic name librdkafka
    retries a join that matches nothing every ~2 s (this passed before the
    defaults changed: a guard); a regex subscription finds the new topic
    only at the next metadata refresh, 5 minutes by librdkafka's default."""
    pg = shop
    broker.cmd("apiversion 3 0 4")
    con = consume(*consumer_args(pg, broker, group="g", topics=topics, tuning="defaults"))
    con.wait_for_log(r"Subscribed topic not available: " + re.escape(topics), timeout=20)
    rel = relayer(*relay_args)
    rel.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    customers = [str(uuid.uuid4()) for _ in range(6)]
    expected = {}
    place_orders(pg, customers, 20, expected)
    wait_points(pg, expected, 40, con)
    assert pg.scalar("SELECT count(*) FROM processed_events") == 20


def test_defaults_topic_created_while_running(shop, broker, kafka, consume):
    """A subscribed topic that appears after the consumer joined the group
    (the same metadata refresh finds partitions added to a topic, which the
    2.0.2 mock cannot do). librdkafka's default topic.metadata.refresh
    interval is 5 minutes: the consumer must find it within seconds."""
    pg = shop
    broker.cmd("apiversion 3 0 4")
    broker.cmd("topic order 2")
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    assert kafka.produce("order", [event(a, 1, "o%d" % i) for i in range(5)]) == []
    con = consume(*consumer_args(pg, broker, topics="order,refund", tuning="defaults"))
    wait_points(pg, {a: 5}, 40, con)
    t0 = time.monotonic()
    assert kafka.produce("refund", [event(b, 2, "r%d" % i) for i in range(5)]) == []
    assert kafka.partitions("refund") == [0, 1, 2, 3]
    wait_points(pg, {a: 5, b: 10}, 40, con)
    print("\nnew topic consumed %.1f s after its first event" % (time.monotonic() - t0))
    assert pg.scalar("SELECT count(*) FROM processed_events") == 10


def test_defaults_restart_after_events_exist(shop, broker, kafka, consume):
    """Started after the events exist, by a new group; then SIGKILLed and
    started again (the group is known, its dead member still in it) after
    more events: everything is applied, exactly once, within seconds."""
    pg = shop
    broker.cmd("topic order 4")
    customers = keys_covering(4, per_partition=2)
    orders = Orders(kafka, customers)
    send, expected = orders.send, orders.expected

    send(40)
    con = consume(*consumer_args(pg, broker, tuning="defaults"))
    t0 = time.monotonic()
    wait_points(pg, dict(expected), 30, con)
    first = time.monotonic() - t0
    assert con.kill() == -signal.SIGKILL
    send(40)
    con = consume(*consumer_args(pg, broker, tuning="defaults"))
    t0 = time.monotonic()
    wait_points(pg, dict(expected), 30, con)
    print("\nnew group: all applied %.1f s after start; after a SIGKILL: %.1f s"
          % (first, time.monotonic() - t0))
    assert pg.scalar("SELECT count(*) FROM processed_events") == 80
    assert con.terminate(30) == 0


@pytest.mark.parametrize("how", ["lock", "hung-server"])
def test_revoke_is_bounded(shop, broker, kafka, consume, how):
    """A revoke finds a batch that PostgreSQL does not apply: its rows are
    locked by another session ("lock"), or the consumer's backend stops
    answering (SIGSTOP: a hung server or a silent network, "hung-server").
    The consumer gives up on it after --revoke-timeout (default 5 s), rolls
    it back and commits no offset for it, so the group rebalances while
    PostgreSQL is still stuck; once it is not, every event is applied
    exactly once."""
    pg = shop
    broker.cmd("topic order 4")
    customers = keys_covering(4, per_partition=2)
    # Rows to lock (a table lock would also stop the --apply statement from
    # being prepared by a consumer that connects meanwhile).
    pg.query("INSERT INTO loyalty_points SELECT c::uuid, 0 FROM unnest(%s::text[]) c",
             (customers,))
    expected = {c: 0 for c in customers}
    msgs = []
    for i in range(1, 41):
        c = customers[i % len(customers)]
        expected[c] += i
        msgs.append(event(c, i, "e%d" % i))
    assert kafka.produce("order", msgs) == []
    # a collects for a minute before applying, so the revoke meets the batch
    # (it fetches the 40 events within a second of its assignment; b's join
    # takes longer than that to reach it).
    a = consume(*consumer_args(pg, broker, tuning="defaults", extra=["--batch-ms", "60000"]))
    a.wait_for_log(r"assigned 4 partition", timeout=60)
    backend = None
    if how == "hung-server":
        backend = pg.scalar("SELECT pid FROM pg_stat_activity "
                            "WHERE application_name = 'outbox-consume'")
        os.kill(backend, signal.SIGSTOP)
    # The rows are locked in both cases: for "lock" that is the fault; for
    # "hung-server" it keeps b, whose backend answers, from applying and
    # committing the events before revoke_then_assign has checked that a
    # applied and committed nothing (b taking them over is the point).
    locker = pg.connect(autocommit=False)
    with locker.cursor() as cur:
        cur.execute("SELECT * FROM loyalty_points FOR UPDATE")
    try:
        b = consume(*consumer_args(pg, broker, tuning="defaults"))
        took = revoke_then_assign(pg, broker, a, b)
    finally:
        locker.rollback()
        if backend is not None:
            os.kill(backend, signal.SIGCONT)
    assert a.terminate(30) == 0
    wait_points(pg, dict(expected), 40, b)
    assert pg.scalar("SELECT count(*) FROM processed_events") == 40
    print("\n%s: the second consumer was assigned %.1f s after it started, PostgreSQL "
          "still stuck" % (how, took))
    assert b.terminate(30) == 0


def revoke_then_assign(pg, broker, a, b):
    """a must give its batch up within the bound, b get partitions,
    nothing be applied or committed meanwhile; returns the seconds until
    b's assignment. The batch holds what a fetched before b's join revoked
    its partitions: usually all 40 events, fewer on a loaded machine (the
    revoke can come within a second of a's assignment)."""
    t0 = time.monotonic()
    m = a.wait_for_log(r"finishing the batch in progress \((\d+) messages\)", timeout=30)
    n = int(m.group(1))
    assert 1 <= n <= 40, a.log_tail()
    b.wait_for_log(r"assigned [1-9] partition", timeout=rebalance_wait("defaults"))
    took = time.monotonic() - t0
    assert a.running() and b.running()
    assert "gave up on the batch in progress (%d messages)" % n in a.log_text(), a.log_tail()
    assert pg.scalar("SELECT count(*) FROM processed_events") == 0
    assert all(o < 0 for o in committed_offsets(broker.bootstrap, "loyalty", "order",
                                                 [0, 1, 2, 3]).values())
    return took


class PgProxy:
    """A TCP proxy in front of PostgreSQL on 127.0.0.1: forwards until
    blackhole(), which closes the forwarded connections and from then on
    accepts new ones and never answers (a server or network that hangs);
    forward() heals it."""

    def __init__(self, target_port):
        import socket
        self.target = target_port
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.mode = "forward"
        self.pairs, self.held = [], []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def dsn(self):
        return "host=127.0.0.1 port=%d dbname=postgres user=postgres" % self.port

    def _accept(self):
        import select
        import socket
        while not self.stop.is_set():
            r, _, _ = select.select([self.lsock], [], [], 0.2)
            if not r:
                continue
            c, _ = self.lsock.accept()
            if self.mode != "forward":
                self.held.append(c)
                continue
            u = socket.create_connection(("127.0.0.1", self.target))
            self.pairs.append((c, u))
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()

    def _pump(self, c, u):
        import select
        try:
            while not self.stop.is_set():
                r, _, _ = select.select([c, u], [], [], 0.2)
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        raise EOFError
                    (u if s is c else c).sendall(data)
        except (OSError, EOFError, ValueError):
            pass
        for s in (c, u):
            try:
                s.close()
            except OSError:
                pass

    def blackhole(self):
        import socket
        self.mode = "blackhole"
        for c, u in self.pairs:
            for s in (c, u):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self.pairs = []

    def forward(self):
        self.mode = "forward"
        for c in self.held:
            c.close()
        self.held = []

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.blackhole()
        self.forward()
        self.lsock.close()


def test_defaults_postgres_hangs_while_the_group_rebalances(shop, broker, kafka, consume):
    """PostgreSQL goes away and then accepts connections without ever
    answering (a hung server, a half-dead network): the consumer's reconnect
    attempts must not keep it from serving a rebalance. A second consumer
    joins meanwhile and gets partitions; when PostgreSQL is back every event
    is applied exactly once."""
    pg = shop
    broker.cmd("topic order 4")
    customers = keys_covering(4, per_partition=2)
    orders = Orders(kafka, customers)
    send, expected = orders.send, orders.expected

    proxy = PgProxy(pg.port)
    try:
        a = consume(*consumer_args(pg, broker, dsn=proxy.dsn(), tuning="defaults"))
        send(20)
        wait_points(pg, dict(expected), 30, a)
        proxy.blackhole()
        send(20)  # a's next batch finds its connection gone, then hangs reconnecting
        a.wait_for_log(r"PostgreSQL connection lost", timeout=20)
        # b joins once a is inside a reconnect attempt that gets no answer.
        harness.wait_until(lambda: proxy.held, 20, message="a reconnect attempt")
        b = consume(*consumer_args(pg, broker, tuning="defaults"))
        t0 = time.monotonic()
        b.wait_for_log(r"assigned [1-9] partition", timeout=rebalance_wait("defaults"))
        took = time.monotonic() - t0
        # a took part in the rebalance (on a real broker the group would wait
        # for it up to max.poll.interval.ms; the mock drops it sooner).
        a.wait_for_log(r"revoked 4 partition", timeout=20)
        assert a.running(), a.log_tail()
        assert re.search(r"cannot connect to PostgreSQL: .*timeout expired", a.log_text()), \
            a.log_tail()
        proxy.forward()
        wait_points(pg, dict(expected), 60, b)
        assert pg.scalar("SELECT count(*) FROM processed_events") == 40
        assert a.terminate(30) == 0 and b.terminate(30) == 0
        print("\nthe second consumer was assigned %.1f s after it started" % took)
    finally:
        proxy.close()


def test_defaults_batch_mixes_processed_new_and_failing_events(shop, broker, kafka, consume):
    """The defaults apply a batch pipelined (one processed_events INSERT for
    the whole batch, then the --apply statements, no savepoints): in one
    batch an event already in processed_events, new ones, and a new one
    twice, only the new ones are applied, once. A failing event in a
    pipelined batch rolls it back and the batch is applied again message by
    message, so --on-error failed records just that event."""
    pg = shop
    broker.cmd("topic order 1")
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    pg.query("INSERT INTO processed_events (consumer, event_id) VALUES ('loyalty', 'old1')")
    odd = 'n"2\\,{x} NULL'  # quotes, a backslash, array syntax: all of it the id
    assert kafka.produce("order", [event(a, 10, "old1"), event(a, 1, "new1"), event(b, 2, odd),
                                   event(a, 1, "new1")]) == []
    p = consume(*consumer_args(pg, broker, tuning="defaults", extra=["--on-error", "failed"]))
    wait_points(pg, {a: 1, b: 2}, 40, p)

    bad = '{"customer_id": "%s", "points": "lots"}' % a
    assert kafka.produce("order", [event(a, 5, "n3"), event(a, 0, "bad", payload=bad),
                                   event(b, 7, "n4"), event(a, 1, "new1")]) == []
    wait_points(pg, {a: 6, b: 9}, 30, p)
    harness.wait_until(lambda: pg.scalar("SELECT count(*) FROM failed_events") == 1, 10,
                       message="1 failed event")
    assert pg.scalar("SELECT event_id FROM failed_events") == "bad"
    assert sorted(r[0] for r in pg.query(
        "SELECT event_id FROM processed_events WHERE consumer = 'loyalty'")) == \
        sorted(["bad", "n3", "n4", "new1", odd, "old1"])
    # Offsets are committed asynchronously while it runs, not only at a stop.
    harness.wait_until(
        lambda: committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: 8}, 20,
        interval=0.5, message="offset 8 committed while running")
    assert p.running()
    assert p.terminate(20) == 0
    m = re.search(r"4 events applied, 3 duplicates skipped, 1 failed, (\d+) batches "
                  r"\((\d+) pipelined, (\d+) applied again one by one", p.log_text())
    assert m, p.log_tail()
    batches, pipelined, one_by_one = (int(x) for x in m.groups())
    assert pipelined >= 1 and one_by_one >= 1, m.group(0)
    assert pipelined + one_by_one == batches, m.group(0)
    assert committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: 8}
