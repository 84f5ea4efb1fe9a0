"""test_consumer_rebalance.py — group rebalances: joins, leaves, and
revokes that meet a batch PostgreSQL does not apply.

  test_rebalance_between_two_consumers a join and a leave, eager and
                                       cooperative: nothing applied twice
Each runs twice: [tuned] with the FAST_GROUP -X settings and small
batches, [defaults] with no -X and no batch options at all. Defaults only:
  test_defaults_postgres_hangs_while_the_group_rebalances  reconnecting
                                       to a server that never answers does
                                       not keep the consumer from a rebalance
  test_revoke_is_bounded[lock|hung-server]  a revoke meets a batch
                                       PostgreSQL does not apply (rows locked
                                       elsewhere; the backend SIGSTOPped):
                                       the group goes on within the bound

outbox-consume against a real PostgreSQL, the mock broker and (end to end)
the real relayer, like every test_consumer_*.py; shared fixtures and
helpers: consumer_fixtures.py.
"""

import os
import re
import signal
import threading
import time

import pytest

import harness
from consumer_fixtures import (Orders, committed_offsets, consumer_args, event, high_watermarks,
                               keys_covering, rebalance_wait, wait_points)
from consumer_fixtures import consume, consumer_binary, shop, tuning  # noqa: F401 (fixtures)

pytestmark = pytest.mark.real_kafka  # on the shared real Kafka (conftest.py)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_rebalance_between_two_consumers(shop, broker, kafka, consume, strategy, tuning):
    """A second consumer joins the group while events flow, then the first
    one is stopped: every event is applied exactly once across the two."""
    pg = shop
    broker.create_topic("order", 4)
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
# Defaults only. Every test below runs outbox-consume with no -X and no
# batch options (tuning="defaults"), as users do.
# ---------------------------------------------------------------------------

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
    broker.create_topic("order", 4)
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
    broker.create_topic("order", 4)
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
