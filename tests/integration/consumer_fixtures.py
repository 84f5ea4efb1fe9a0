"""consumer_fixtures.py — what the outbox-consume suites
(test_consumer_*.py, test_real_kafka.py) share: the fixtures consumer_binary,
consume (a factory of outbox-consume processes), shop (pg with the orders
example) and tuning ([tuned] with the FAST_GROUP -X settings and small
batches, [defaults] with no -X and no batch options at all); the
consumer's arguments; events produced straight to Kafka (event, Orders);
the loyalty points read back; the group's offsets.

A suite that uses a fixture imports it, and every fixture it depends on
(consume needs consumer_binary).
"""

import os
import uuid
import zlib

import psycopg2
import pytest

import harness

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
    """The group's committed offsets {partition: offset} (-1001 = none);
    the test's names (harness.topic maps them on the shared cluster)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": harness.topic(group),
                  "enable.auto.commit": False, "log_level": 3})
    try:
        got = c.committed([TopicPartition(harness.topic(topic), p) for p in partitions],
                          timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def high_watermarks(bootstrap, topic, partitions):
    """{partition: high watermark} of a topic."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "log_level": 3})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(harness.topic(topic), p), timeout=10)[1]
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
