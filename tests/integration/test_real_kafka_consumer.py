"""test_real_kafka_consumer.py — outbox-consume against Kafka 4.x's real
group coordinator (kafka_cluster.py), with its defaults.

  test_rebalances_while_brokers_restart[range|cooperative-sticky]
      the seed's loyalty example end to end: producers place orders
      through the relayer while three consumers of one group join one
      after the other, every broker is restarted in turn (the group
      coordinator and the offsets topic's leaders move), and one consumer
      leaves; every customer's points end exact and every event is
      processed once. The timings it prints (first assignment, each join's
      rebalance) are what docs/consumer.md quotes against the mock
      cluster's.
"""

import threading
import time
import uuid

import psycopg2
import pytest

from kafka_cluster import KafkaCluster, KafkaUnavailable
from kafka_fixtures import _unavailable
from consumer_fixtures import consume, consumer_args, consumer_binary, points, shop, wait_points  # noqa: F401
from test_real_kafka import MIN_ISR, keep_running, start_relayer

PARTITIONS = 6
CUSTOMERS = 12


@pytest.fixture(scope="module")
def group_cluster():
    """Three brokers and a controller of this module's own: the test
    restarts every broker, which the shared cluster's other users would
    not survive."""
    import os
    if os.environ.get("OUTBOX_TEST_KAFKA_UNAVAILABLE"):
        _unavailable(os.environ["OUTBOX_TEST_KAFKA_UNAVAILABLE"])
    try:
        cluster = KafkaCluster(nodes=3)
    except KafkaUnavailable as e:
        _unavailable(str(e))
    try:
        yield cluster
    finally:
        cluster.cleanup()


class Orders(threading.Thread):
    """Places an order (1 point) every few ms on its own connection until
    stopped; expected is {customer: points} of the committed ones."""

    def __init__(self, pg, customers):
        super().__init__(daemon=True)
        self.pg, self.customers = pg, customers
        self.expected, self.count, self.error = {}, 0, None
        self.stop_flag = threading.Event()

    def run(self):
        try:
            conn = psycopg2.connect(self.pg.dsn(), connect_timeout=10)
            conn.autocommit = True
            with conn.cursor() as cur:
                while not self.stop_flag.is_set():
                    c = self.customers[self.count % len(self.customers)]
                    cur.execute("SELECT place_order(%s, 100)", (c,))
                    self.expected[c] = self.expected.get(c, 0) + 1
                    self.count += 1
                    time.sleep(0.01)
            conn.close()
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self):
        self.stop_flag.set()
        self.join(30)
        assert self.error is None, self.error
        return dict(self.expected)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_rebalances_while_brokers_restart(group_cluster, shop, relayer, consume, strategy):
    cluster, pg = group_cluster, shop
    topic = cluster.create_topic("order-%s-%s" % (strategy, uuid.uuid4().hex[:8]),
                                 partitions=PARTITIONS, rf=3, configs=MIN_ISR)
    group = "loyalty-" + uuid.uuid4().hex[:8]
    r = start_relayer(relayer, pg, cluster.bootstrap, topic)
    orders = Orders(pg, [str(uuid.uuid4()) for _ in range(CUSTOMERS)])
    orders.start()
    extra = ["-X", "partition.assignment.strategy=" + strategy]
    args = consumer_args(pg, cluster, topics=topic, group=group, tuning="defaults", extra=extra)
    timings = {}
    members = []
    for name in ("a", "b", "c"):
        t0 = time.monotonic()
        proc = consume(*args)
        proc.wait_for_log(r"assigned [1-9]\d* partition", timeout=120)
        for other in members:
            # Every member went through the rebalance (a cooperative one
            # revokes only what moves; an eager one everything).
            other.wait_for_log(r"(assigned|revoked) .*partition", timeout=120, since_mark=True)
        timings["join " + name] = time.monotonic() - t0
        for m in members + [proc]:
            m.mark()
        members.append(proc)
        keep_running(r, 2)

    # Every broker restarted in turn under the group: the coordinator and
    # the leaders of __consumer_offsets move each time.
    for b in sorted(cluster.brokers_by_id):
        t0 = time.monotonic()
        cluster.stop(b)
        keep_running(r, 2)
        cluster.start(b)
        cluster.wait_isr(topic, 0, 3, timeout=90)
        timings["broker %d" % b] = time.monotonic() - t0
        for m in members:
            assert m.running(), "consumer exited (rc=%s):\n%s" % (m.returncode, m.log_tail())

    # One member leaves; the others take its partitions over.
    for m in members:
        m.mark()
    t0 = time.monotonic()
    assert members[1].terminate(60) == 0, members[1].log_tail()
    members[0].wait_for_log(r"assigned", timeout=120, since_mark=True)
    timings["leave b"] = time.monotonic() - t0
    keep_running(r, 2)
    expected = orders.stop()
    t0 = time.monotonic()
    wait_points(pg, expected, 180, members[0])
    timings["converged"] = time.monotonic() - t0
    assert pg.scalar("SELECT count(*) FROM processed_events") == orders.count, \
        "processed_events holds %s events for %d orders" % (
            pg.scalar("SELECT count(*) FROM processed_events"), orders.count)
    for m in (members[0], members[2]):
        assert m.terminate(60) == 0, m.log_tail()
    assert r.terminate(60) == 0, r.log_tail()
    print("\nreal coordinator, %s: %d orders, points exact; %s"
          % (strategy, orders.count, ", ".join("%s %.1f s" % kv for kv in timings.items())))
