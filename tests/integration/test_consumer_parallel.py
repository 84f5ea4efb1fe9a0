"""test_consumer_parallel.py — outbox-consume's parallel apply
(--apply-workers N: a batch split by key over N PostgreSQL connections).

  test_parallel_points_exact_with_rebalance_and_kill
      the loyalty example with 4 apply workers (split by the Kafka key, or
      by the payload's customer_id: --apply-key) while events flow: a second
      consumer joins the group and leaves it, then a consumer is SIGKILLed
      mid-stream and restarted; every customer's points end exact and
      every event is in processed_events once; the group's offsets end at
      the topic's ends
  test_parallel_keeps_each_keys_order
      per-aggregate order: the --apply statement records, per key, every
      event applied out of its sequence (a later event of the key
      committed before an earlier one) and which backends applied the key
      in one batch; with 4 workers none is out of order, and the 4
      connections were all used. Two connections applying one key's
      events concurrently would commit some of them out of order
  test_parallel_part_fails_with_halt
      one part of a batch fails with a data error while the other parts
      commit: --on-error halt stops at the failing event, the group's
      offset of its partition is exactly that event's, every event of the
      other parts is applied once

outbox-consume against a real PostgreSQL and the shared real Kafka, like
every test_consumer_*.py; shared fixtures and helpers: consumer_fixtures.py.
"""

import threading
import time

import pytest

from consumer_fixtures import (Orders, committed_offsets, consumer_args, event, high_watermarks,
                               keys_covering, rebalance_wait, wait_points)
from consumer_fixtures import consume, consumer_binary, shop  # noqa: F401 (fixtures)

pytestmark = pytest.mark.real_kafka  # on the shared real Kafka (conftest.py)

WORKERS = ["--apply-workers", "4"]


class Flow(threading.Thread):
    """Produces order events straight to Kafka, 20 every 50 ms, until
    stopped (Orders: event n gives its customer n points)."""

    def __init__(self, kafka, customers):
        super().__init__(daemon=True)
        self.orders = Orders(kafka, customers)
        self.stop_flag = threading.Event()
        self.error = None

    def run(self):
        try:
            while not self.stop_flag.is_set():
                self.orders.send(20)
                time.sleep(0.05)
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self):
        self.stop_flag.set()
        self.join(30)
        assert self.error is None, self.error
        return dict(self.orders.expected), self.orders.n


@pytest.mark.parametrize("split", ["key", "apply-key"])
def test_parallel_points_exact_with_rebalance_and_kill(shop, broker, kafka, consume, split):
    pg = shop
    broker.create_topic("order", 4)
    customers = keys_covering(4, per_partition=8)
    extra = WORKERS + (["--apply-key", "customer_id"] if split == "apply-key" else [])
    args = consumer_args(pg, broker, extra=extra)
    a = consume(*args)
    a.wait_for_log(r"assigned 4 partition", timeout=60)
    flow = Flow(kafka, customers)
    flow.start()
    time.sleep(1.5)
    # A second member joins, and leaves.
    b = consume(*args)
    b.wait_for_log(r"assigned [1-9] partition", timeout=rebalance_wait("tuned"))
    a.wait_for_log(r"revoked", timeout=rebalance_wait("tuned"))
    time.sleep(1.5)
    a.mark()
    assert b.terminate(30) == 0, b.log_tail()
    a.wait_for_log(r"assigned 4 partition", timeout=rebalance_wait("tuned"), since_mark=True)
    time.sleep(1.0)
    # SIGKILL mid-stream: whatever its connections had in flight is rolled
    # back or committed with its processed_events rows; a restart (after
    # the dead member's session) applies the rest once.
    a.kill()
    time.sleep(0.5)
    c = consume(*args)
    c.wait_for_log(r"assigned 4 partition", timeout=rebalance_wait("tuned"))
    time.sleep(1.0)
    expected, total = flow.stop()
    wait_points(pg, expected, 90, c)
    assert pg.scalar("SELECT count(*) FROM processed_events") == total
    assert pg.scalar("SELECT count(DISTINCT event_id) FROM processed_events") == total
    assert "apply worker 3 connected" in c.log_text(), c.log_tail()
    ends = high_watermarks(broker.bootstrap, "order", [0, 1, 2, 3])
    assert sum(ends.values()) == total, ends
    deadline = time.monotonic() + 30
    while committed_offsets(broker.bootstrap, "loyalty", "order", [0, 1, 2, 3]) != ends \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert c.terminate(30) == 0, c.log_tail()
    assert committed_offsets(broker.bootstrap, "loyalty", "order", [0, 1, 2, 3]) == ends
    print("\n%d events, 4 apply workers, a join, a leave and a SIGKILL: points exact" % total)


# Per key: the last sequence number applied, how many events were applied
# below it (out of order), and the backends that applied the key.
ORDER_SQL = """
CREATE TABLE key_seq (key text PRIMARY KEY, last int NOT NULL, inversions int NOT NULL DEFAULT 0,
                      n int NOT NULL DEFAULT 0);
CREATE TABLE key_backend (key text, pid int, PRIMARY KEY (key, pid));
CREATE FUNCTION apply_seq(k text, seq int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO key_seq AS s (key, last, n) VALUES (k, seq, 1)
    ON CONFLICT (key) DO UPDATE
        SET last = greatest(s.last, EXCLUDED.last), n = s.n + 1,
            inversions = s.inversions + (EXCLUDED.last < s.last)::int;
    INSERT INTO key_backend VALUES (k, pg_backend_pid()) ON CONFLICT DO NOTHING;
    PERFORM pg_sleep(0.0005 * random());
END $$;
"""
APPLY_SEQ = "SELECT apply_seq($2, ($4->>'seq')::int)"


def test_parallel_keeps_each_keys_order(shop, broker, kafka, consume):
    pg = shop
    pg.query(ORDER_SQL)
    broker.create_topic("order", 2)
    keys = ["k%02d" % i for i in range(24)]
    per_key = 60
    msgs = []
    for seq in range(1, per_key + 1):
        for k in keys:
            msgs.append((k.encode(), ('{"seq": %d}' % seq).encode(),
                         [("event_id", ("%s-%d" % (k, seq)).encode())]))
    assert kafka.produce("order", msgs) == []
    con = consume(*consumer_args(pg, broker, apply=APPLY_SEQ, extra=WORKERS + ["--batch", "200"]))
    total = len(keys) * per_key
    deadline = time.monotonic() + 120
    while pg.scalar("SELECT count(*) FROM processed_events") < total:
        assert con.running(), con.log_tail()
        assert time.monotonic() < deadline, con.log_tail()
        time.sleep(0.2)
    rows = pg.query("SELECT key, last, inversions, n FROM key_seq ORDER BY key")
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [(k, per_key, 0, per_key) for k in keys]
    # The work was spread: four backends applied keys (the main connection
    # and three workers); a key met more than one backend only across
    # batches (a batch applied again on the main connection).
    assert pg.scalar("SELECT count(DISTINCT pid) FROM key_backend") >= 4
    assert con.terminate(30) == 0, con.log_tail()
    print("\n%d keys x %d events over 4 apply workers: every key in order" % (len(keys), per_key))


def test_parallel_part_fails_with_halt(shop, broker, kafka, consume):
    pg = shop
    broker.create_topic("order", 1)
    customers = keys_covering(1, per_partition=16)
    msgs = []
    expected = {}
    bad = 25
    for i in range(1, 41):
        c = customers[i % len(customers)]
        if i == bad:
            msgs.append(event(c, 0, "e%d" % i, payload='{"customer_id": "%s", "points": "lots"}' % c))
            continue
        msgs.append(event(c, i, "e%d" % i))
        if i < bad:
            expected[c] = expected.get(c, 0) + i
    assert kafka.produce("order", msgs) == []
    con = consume(*consumer_args(pg, broker, extra=WORKERS + ["--batch", "100", "--batch-ms",
                                                              "2000"]))
    assert con.wait_exit(60) == 1, con.log_tail()
    assert "event_id=e%d topic=" % bad in con.log_text(), con.log_tail()
    # Committed offset: exactly the failing event's.
    assert committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: bad - 1}
    # Everything before it applied once; events after it that another
    # worker committed are in processed_events (a restart skips them), the
    # failing one is not.
    done = {r[0] for r in pg.query("SELECT event_id FROM processed_events")}
    assert {"e%d" % i for i in range(1, bad)} <= done
    assert "e%d" % bad not in done
    got = {str(c): int(p) for c, p in pg.query("SELECT customer_id, points FROM loyalty_points")}
    after = {}
    for i in range(bad + 1, 41):
        if "e%d" % i in done:
            c = customers[i % len(customers)]
            after[c] = after.get(c, 0) + i
    want = dict(expected)
    for c, p in after.items():
        want[c] = want.get(c, 0) + p
    assert got == want
