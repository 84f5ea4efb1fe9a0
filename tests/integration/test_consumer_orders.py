"""test_consumer_orders.py — the orders example end to end, with
SIGKILLs.

  test_orders_end_to_end_with_kills    the seed's example: producers, the
                                       relayer and the consumer, both
                                       SIGKILLed several times; points are
                                       exact, each event processed once
Each runs twice: [tuned] with the FAST_GROUP -X settings and small
batches, [defaults] with no -X and no batch options at all.

outbox-consume against a real PostgreSQL, the mock broker and (end to end)
the real relayer, like every test_consumer_*.py; shared fixtures and
helpers: consumer_fixtures.py.
"""

import random
import signal
import threading
import time
import uuid

import psycopg2
import pytest

import harness
from consumer_fixtures import consumer_args, wait_points
from consumer_fixtures import consume, consumer_binary, shop, tuning  # noqa: F401 (fixtures)
from test_chaos import read_to_end

pytestmark = pytest.mark.real_kafka  # on the shared real Kafka (conftest.py)


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
    broker.create_topic("order", 4)
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
    # (topic, part, offset, key, headers, value)
    published = read_to_end(kafka.bootstrap, [harness.topic("order")])
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
