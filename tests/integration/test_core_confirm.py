"""test_core_confirm.py — confirmed_flush_lsn follows delivery: held back
while Kafka cannot take events, exact at SIGTERM, nothing lost at SIGKILL.

Like every test_core_*.py (end-to-end tests of the core relay: the real
build/outbox-relay between a throwaway PostgreSQL and the mock Kafka
cluster, once with each output plugin, conftest.py's `plugin`), each test
states the guarantee it checks and is built so that it fails when that
guarantee breaks: absence is only asserted after a later marker event has
arrived, LSN checks use the exact end of the commit record (found with
pg_walinspect), and waits are bounded. Shared helpers: core_helpers.py.
"""

import signal
import threading
import time
import uuid

import pytest

import harness
from core_helpers import (MOCK_NO_PIPELINING, STATUS, Outbox, by_event_id, read_ids, start_relay,
                          wait_confirmed)

# per plugin and major, on the shared real Kafka (conftest.py)
pytestmark = [pytest.mark.usefixtures("plugin", "pg_major"), pytest.mark.real_kafka]


# --------------------------------------------------------------------------
# confirmed_flush_lsn follows delivery
# --------------------------------------------------------------------------

def _busy_writer(pg, stop, period=0.1):
    """Commits unrelated rows until stop is set, so the server always has
    newer WAL (and keepalive positions) past any undelivered commit."""
    pg.query("CREATE TABLE IF NOT EXISTS public.busy (id bigserial PRIMARY KEY, v text)")
    conn = pg.connect()
    cur = conn.cursor()
    while not stop.is_set():
        cur.execute("INSERT INTO public.busy (v) VALUES (repeat('x', 200))")
        stop.wait(period)


@pytest.mark.mock_kafka(
    "the whole cluster down, and every produce refused: faults of the mock's;"
    " two of three real brokers down is test_real_kafka.py's"
)
@pytest.mark.parametrize("outage", ["broker_down", "produce_errors"])
def test_confirmed_lsn_waits_for_delivery(pg, broker, kafka, relayer, outage):
    """While Kafka cannot take the events, confirmed_flush_lsn stays before
    their commit (even as other tables keep writing WAL); once it can, the
    events arrive and confirmed_flush_lsn passes their commit."""
    extra = MOCK_NO_PIPELINING if outage == "produce_errors" else []
    r = start_relay(relayer, pg, broker, *extra)
    ob = Outbox(pg)
    warm = ob.one("cf.warmup")
    assert len(kafka.read("cf", expected=1, timeout=60)) == 1
    wait_confirmed(pg, warm.commit_end)

    stop = threading.Event()
    writer = threading.Thread(target=_busy_writer, args=(pg, stop), daemon=True)
    if outage == "broker_down":
        broker.cmd("down")
    else:
        # every produce request fails retriably until cleared
        broker.cmd("error 0 NOT_ENOUGH_REPLICAS 1000000")
    try:
        writer.start()
        held = ob.tx([(uuid.uuid4(), "cf.held", '{"n": %d}' % i) for i in range(20)])
        deadline = time.monotonic() + 8 * float(STATUS) + 1
        while time.monotonic() < deadline:
            c = pg.confirmed_flush_lsn()
            assert c < held.commit_end, (
                "confirmed_flush_lsn %s passed the commit %s of undelivered events; log:\n%s"
                % (harness.int_to_lsn(c), harness.int_to_lsn(held.commit_end), r.log_tail()))
            time.sleep(0.1)
        assert pg.current_wal_lsn() > held.commit_end + 1000, "busy writer wrote no WAL"
        if outage == "produce_errors":
            got = kafka.read("cf", timeout=3)
            assert [m.headers["event_type"] for m in got] == ["cf.warmup"], got
        assert r.running()
    finally:
        if outage == "broker_down":
            broker.cmd("up")
        else:
            broker.cmd("clear-errors 0")
    got = read_ids(kafka, "cf", held.ids, timeout=90)
    assert {int(m.headers["event_id"]) for m in got} >= set(held.ids), r.log_tail()
    wait_confirmed(pg, held.commit_end, timeout=30)
    stop.set()
    writer.join(10)
    assert r.terminate() == 0


def test_idle_outbox_confirmed_lsn_advances(pg, broker, relayer):
    """With no outbox traffic but a busy other table, the slot keeps
    confirming (it does not pin WAL): confirmed_flush_lsn follows
    pg_current_wal_lsn."""
    r = start_relay(relayer, pg, broker)
    stop = threading.Event()
    writer = threading.Thread(target=_busy_writer, args=(pg, stop, 0.05), daemon=True)
    writer.start()
    try:
        for _ in range(3):
            time.sleep(2)
            target = pg.current_wal_lsn()
            wait_confirmed(pg, target, timeout=15)
    finally:
        stop.set()
        writer.join(10)
    time.sleep(1)
    end = pg.current_wal_lsn()
    c = wait_confirmed(pg, end - 4096, timeout=15)
    print("idle outbox: confirmed %s, current %s" % (harness.int_to_lsn(c), harness.int_to_lsn(end)))
    assert r.terminate() == 0


def open_every_partition(ob, kafka, topic):
    """Warms the relayer up with one event to each partition of the topic
    (librdkafka's default partitioner: CRC-32 of the key), and waits for
    them: a new producer sends one record at a time to a partition until
    one was delivered there (partition_gate.h), so with 3 s round trips
    the events after the warm-up would otherwise still be waiting to be
    produced, not in flight, when the test stops the relayer. Returns the
    warm-up transactions."""
    import zlib
    first = ob.one(topic + ".warmup")
    assert len(kafka.read(topic, expected=1, timeout=60)) == 1
    parts = kafka.partitions(topic)
    keys = {}
    while len(keys) < len(parts):
        k = str(uuid.uuid4())
        keys.setdefault(zlib.crc32(k.encode()) % len(parts), k)
    warm = ob.tx([(keys[p], topic + ".warmup", '{"partition": %d}' % p) for p in sorted(keys)])
    read_ids(kafka, topic, warm.ids, timeout=60)
    return [first, warm]


def _commit_then_sigterm_in_flight(pg, broker, kafka, relayer, topic, tag):
    """Starts a relayer, makes the broker slow (3 s round trips) so that
    events are still in flight, SIGTERMs it, and returns (exit code, txs,
    relayer). The status interval is longer than the test, so only the
    confirmation sent on the way out can move the slot."""
    r = start_relay(relayer, pg, broker, status="60")
    ob = Outbox(pg)
    warm = open_every_partition(ob, kafka, topic)
    broker.cmd("rtt -1 3000")
    txs = [ob.tx([(uuid.uuid4(), topic + ".ev", '{"%s": %d, "j": %d}' % (tag, i, j)) for j in range(5)])
           for i in range(10)]
    time.sleep(1.0)  # read from the WAL and produced, not yet acknowledged
    rc = r.terminate(timeout=60)
    broker.cmd("rtt -1 0")
    return rc, warm + txs, r


def _assert_confirmed_matches_delivery(pg, kafka, topic, txs):
    """confirmed_flush_lsn covers every fully delivered transaction and no
    transaction with an undelivered event."""
    got = kafka.read(topic, expected=sum(len(t.ids) for t in txs), timeout=10)
    delivered = set(by_event_id(got))
    c = pg.confirmed_flush_lsn()
    for t in txs:
        if set(t.ids) <= delivered:
            assert c >= t.commit_end, "delivered transaction %s..%s not confirmed: %s < %s" % (
                t.ids[0], t.ids[-1], harness.int_to_lsn(c), harness.int_to_lsn(t.commit_end))
        else:
            assert c < t.commit_end, "undelivered transaction confirmed"
    return delivered


@pytest.mark.mock_kafka("3 s round trips keep deliveries in flight at the SIGTERM: the mock's rtt")
def test_sigterm_exits_0_and_confirms_delivered(pg, broker, kafka, relayer):
    """SIGTERM with deliveries in flight: exit 0, and afterwards
    confirmed_flush_lsn covers exactly the delivered events."""
    rc, txs, r = _commit_then_sigterm_in_flight(pg, broker, kafka, relayer, "term", "i")
    assert rc == 0, r.log_tail()
    delivered = _assert_confirmed_matches_delivery(pg, kafka, "term", txs)
    print("sigterm: %d of %d events delivered during shutdown"
          % (len(delivered) - 1, sum(len(t.ids) for t in txs[1:])))
    assert not pg.slot_info()["active"]


def test_sigint_exits_0(pg, broker, kafka, relayer):
    r = start_relay(relayer, pg, broker)
    ob = Outbox(pg)
    tx = ob.one("int.ev")
    assert len(kafka.read("int", expected=1, timeout=60)) == 1
    r.signal(signal.SIGINT)
    assert r.wait_exit(30) == 0, r.log_tail()
    assert pg.confirmed_flush_lsn() >= tx.commit_end


@pytest.mark.mock_kafka("3 s round trips keep deliveries in flight at the SIGTERM: the mock's rtt")
def test_restart_after_sigterm_does_not_resend(pg, broker, kafka, relayer):
    """Events confirmed at a clean stop (some delivered during the stop
    itself) are not produced again by the next run: with nothing lost on
    the way, each event_id appears exactly once."""
    rc, first, r1 = _commit_then_sigterm_in_flight(pg, broker, kafka, relayer, "rs", "run1")
    assert rc == 0, r1.log_tail()
    _assert_confirmed_matches_delivery(pg, kafka, "rs", first)

    r2 = start_relay(relayer, pg, broker)
    ob = Outbox(pg)
    second = [ob.tx([(uuid.uuid4(), "rs.ev", '{"run": 2, "i": %d}' % i) for i in range(5)])
              for _ in range(10)]
    marker = ob.one("rs.marker")
    all_ids = [i for t in first + second + [marker] for i in t.ids]
    got = read_ids(kafka, "rs", all_ids, timeout=60)
    assert marker.ids[0] in by_event_id(got), r2.log_tail()
    got = kafka.read("rs", timeout=2)
    counts = {k: len(v) for k, v in by_event_id(got).items()}
    assert sorted(counts) == sorted(all_ids)
    resent = {k: n for k, n in counts.items() if n != 1}
    assert not resent, "event ids delivered more than once: %s" % resent
    assert r2.terminate() == 0


@pytest.mark.parametrize("tuning", harness.TUNINGS)
def test_sigkill_mid_stream_loses_nothing(pg, broker, kafka, relayer, tuning):
    """SIGKILL while events stream: after a restart every committed event
    is delivered (at least once) and nothing rolled back appears."""
    r1 = start_relay(relayer, pg, broker, tuning=tuning)
    ob = Outbox(pg)
    ob.one("kill.warmup")
    assert len(kafka.read("kill", expected=1, timeout=60)) == 1
    # Keep deliveries in flight when the kill lands: 300 ms round trips on
    # the mock; a real cluster's own (acks=all to three replicas, while the
    # relayer drains 1,000 events) are what they are.
    slow = isinstance(broker, harness.MockBroker)
    if slow:
        broker.cmd("rtt -1 300")
    committed = []
    for i in range(20):
        committed += ob.tx([(uuid.uuid4(), "kill.ev", '{"i": %d, "j": %d}' % (i, j))
                            for j in range(50)]).ids
    rolled = ob.tx([(uuid.uuid4(), "kill.ev", '{"rolled": true}')], commit=False).ids
    time.sleep(0.5)  # read from the WAL and produced; deliveries take 300 ms round trips
    assert r1.kill() == -signal.SIGKILL
    if slow:
        broker.cmd("rtt -1 0")
    for i in range(10):
        committed += ob.tx([(uuid.uuid4(), "kill.ev", '{"after": %d}' % i)]).ids
    r2 = start_relay(relayer, pg, broker, tuning=tuning)
    got = read_ids(kafka, "kill", committed, timeout=90)
    ids = by_event_id(got)
    missing = set(committed) - set(ids)
    assert not missing, "%d committed events lost, e.g. %s" % (len(missing), sorted(missing)[:5])
    assert not set(rolled) & set(ids)
    print("sigkill: %d events, %d redelivered" % (len(committed), len(got) - len(ids)))
    assert r2.terminate() == 0
