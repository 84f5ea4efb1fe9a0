"""test_real_kafka.py — the relayer's promise against a real Apache Kafka 4.x
(KRaft, from Maven Central: kafka_cluster.py), with the relayer's defaults
(only --dsn, --brokers and a --topic of the test's own).

  test_core_claim_on_a_real_cluster
      on the shared 3-broker cluster, producers commit (and roll back)
      outbox transactions: every committed event arrives once, nothing
      from a rolled-back transaction, per-aggregate order kept
  test_core_claim_on_a_single_broker
      the same on the shared single broker (replication factor 1)
  test_orders_through_a_consumer_group
      the orders example end to end: relayer, then outbox-consume in a
      consumer group (librdkafka 2.0.2's JoinGroup against Kafka 4.x),
      each order's points applied exactly once
  test_sigkill_of_the_busiest_partitions_leader
      fault 1 of the issue: SIGKILL of the broker leading the busiest
      partition while producers commit; 0 lost, order kept, the relayer
      never exits
  test_rolling_restart_of_every_broker
      fault 2: each broker in turn stopped (controlled shutdown) and
      started again while producers commit, as an upgrade does; records
      keep arriving while each one is down, 0 lost, order kept, the relayer
      never exits
  test_two_of_three_brokers_down
      fault 3: with min.insync.replicas=2 and acks=all, two brokers down
      means NOT_ENOUGH_REPLICAS; the slot confirms nothing past the first
      commit made during the outage until the brokers are back, then
      everything arrives

The producers, the marker and the read-back are test_chaos.py's: every
event carries a per-aggregate sequence number handed out by the database
(gapless, in commit order), so order is checked on the numbers, and what
was committed is what the table holds at the end.
"""

import json
import random
import threading
import time
import uuid

import harness
from harness import wait_until
from test_chaos import Producer, commit_marker, read_to_end
from consumer_fixtures import consume, consumer_args, consumer_binary, place_orders, shop, wait_points  # noqa: F401

SLOT = "outbox_relay"
PRODUCERS = 3
AGGREGATES = 12
# The default --status-interval is 10 s: a delivered event may wait that
# long before the slot says so.
CATCH_UP = 120
MIN_ISR = {"min.insync.replicas": 2}


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def prepare(pg):
    """The per-aggregate sequence table test_chaos.Producer writes through;
    returns the aggregates. Every event's type is real.changed, its topic
    the relayer's --topic."""
    aggs = [str(uuid.uuid4()) for _ in range(AGGREGATES)]
    pg.query("CREATE TABLE chaos_seq (agg uuid PRIMARY KEY, topic text NOT NULL, "
             "seq int NOT NULL DEFAULT 0)")
    for a in aggs:
        pg.query("INSERT INTO chaos_seq (agg, topic) VALUES (%s, 'real')", (a,))
    pg.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    return aggs


def start_relayer(relayer, pg, bootstrap, topic, *extra):
    """build/outbox-relay with its defaults, --topic and `extra`, once its
    slot is active."""
    r = relayer("--dsn", pg.dsn(), "--brokers", bootstrap, "--topic", topic, *extra)

    def streaming():
        if not r.running():
            raise AssertionError("relayer exited (rc=%s); log:\n%s" % (r.returncode, r.log_tail()))
        return bool((pg.slot_info(SLOT) or {}).get("active"))
    wait_until(streaming, 60, interval=0.2, message="the relayer to stream")
    return r


class Load:
    """PRODUCERS test_chaos.Producer threads; start() again after stop()
    starts new threads on the same aggregates (their sequences go on)."""

    def __init__(self, pg, aggs, seed):
        self.pg, self.aggs, self.rng = pg, aggs, random.Random(seed)
        self.all = []
        self.stop_flag = None

    def start(self):
        self.stop_flag = threading.Event()
        batch = [Producer(self.pg, len(self.all) + i, self.aggs,
                          random.Random(self.rng.random()), self.stop_flag)
                 for i in range(PRODUCERS)]
        self.all += batch
        for p in batch:
            p.start()

    def stop(self):
        self.stop_flag.set()
        for p in self.all:
            p.join(30)
            assert not p.is_alive(), "producer %s did not stop" % p.name


def keep_running(r, seconds):
    """Waits `seconds`, failing as soon as the relayer exits."""
    r.assert_running_for(seconds)


def wait_confirmed(pg, r, lsn, timeout=CATCH_UP):
    def ok():
        if not r.running():
            raise AssertionError("relayer exited (rc=%s); log:\n%s" % (r.returncode, r.log_tail()))
        c = pg.confirmed_flush_lsn(SLOT)
        return c is not None and c >= lsn
    try:
        wait_until(ok, timeout, interval=0.2,
                   message="the slot to confirm %s" % harness.int_to_lsn(lsn))
    except AssertionError as e:
        if not str(e).startswith("timed out"):
            raise  # the relayer exited: ok() said so, with its log
        # the tail when it timed out, not when the wait began
        raise AssertionError("%s; relayer log tail:\n%s" % (e, r.log_tail())) from None


def verify(pg, bootstrap, topic, load, markers):
    """Reads `topic` to its end and checks it against the table: every
    committed event (and marker) arrived with its key and payload, nothing
    else did, and per aggregate the first copies carry sequence numbers
    1..N in order. Returns (events committed, records, duplicates)."""
    rows = {}
    for id_, agg, payload in pg.query(
            "SELECT id, aggregate_id::text, payload::text FROM public.events_outbox "
            "WHERE type = 'real.changed'"):
        rows[id_] = (agg, payload)
    committed = set(rows)
    claimed = {i for p in load.all for i in p.committed}
    rolled = {i for p in load.all for i in p.rolled_back}
    uncertain = {i for p in load.all for i in p.uncertain}
    assert claimed <= committed, "COMMIT returned but rows are missing"
    assert not (rolled & committed), "rolled-back rows in the table"
    assert committed <= claimed | uncertain, "rows nobody committed"
    rolled |= uncertain - committed
    assert rolled, "no transaction was rolled back: the test proves less than it says"

    records = read_to_end(bootstrap, [topic])
    first, copies, foreign, leaked, mismatched = {}, {}, [], [], []
    seen_markers = set()
    for rec in records:
        _, part, off, key, headers, value = rec
        eid = int(headers["event_id"])
        if eid in markers:
            seen_markers.add(eid)
            continue
        if eid not in committed:
            (leaked if eid in rolled else foreign).append(rec)
            continue
        copies[eid] = copies.get(eid, 0) + 1
        if eid not in first:
            first[eid] = rec
            if (key, value) != rows[eid]:
                mismatched.append((eid, key, value[:80], rows[eid]))

    order_errors, seqs = [], {}
    for eid, (_, part, off, key, headers, value) in sorted(first.items(),
                                                           key=lambda kv: (kv[1][1], kv[1][2])):
        seqs.setdefault(key, []).append(json.loads(value)["seq"])
    for key, nums in seqs.items():
        if nums != list(range(1, len(nums) + 1)):
            order_errors.append("%s: %s" % (key, nums[:40]))

    missing = committed - set(first)
    duplicates = sum(n - 1 for n in copies.values())
    print("real kafka: %d events committed, %d rolled back; %d records, %d duplicates, "
          "%d missing, %d leaked, %d foreign, %d aggregates out of order"
          % (len(committed), len(rolled), len(records), duplicates, len(missing), len(leaked),
             len(foreign), len(order_errors)))
    assert not missing, "%d committed events never arrived, e.g. %s" % (len(missing), sorted(missing)[:10])
    assert not leaked, "%d rolled-back events published, e.g. %s" % (len(leaked), leaked[:3])
    assert not foreign, "records that are no committed row: %s" % foreign[:3]
    assert not mismatched, "records differ from their rows: %s" % mismatched[:3]
    assert not order_errors, "per-aggregate order broken:\n%s" % "\n".join(order_errors[:10])
    assert seen_markers == set(markers), "markers missing: %s" % (set(markers) - seen_markers)
    return len(committed), len(records), duplicates


def finish(pg, r, bootstrap, topic, load, markers=()):
    """A final marker after everything, the slot confirming it, SIGTERM
    (exit 0), then verify()."""
    marker_id, marker_end = commit_marker(pg, "real")
    wait_confirmed(pg, r, marker_end)
    rc = r.terminate(30)
    assert rc == 0, "the relayer exited %s on SIGTERM; log tail:\n%s" % (rc, r.log_tail())
    return verify(pg, bootstrap, topic, load, set(markers) | {marker_id})


def high_watermarks(bootstrap, topic, timeout=30):
    """{partition: high watermark}; asked again while a partition has no
    leader the client knows of (an election, stale metadata)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    def ask():
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-" + uuid.uuid4().hex[:8],
                      "log_level": 0})
        try:
            parts = c.list_topics(topic, timeout=10).topics[topic].partitions
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in sorted(parts)}
        except KafkaException:
            return None
        finally:
            c.close()
    return wait_until(ask, timeout, interval=0.5, message="the high watermarks of %s" % topic)


def wait_grown(cluster, topic, r, above, message, timeout=60):
    """Waits until the topic holds more than `above` records in all,
    failing as soon as the relayer exits."""
    def grown():
        assert r.running(), "relayer exited (rc=%s); log:\n%s" % (r.returncode, r.log_tail())
        return sum(high_watermarks(cluster.bootstrap, topic).values()) > above
    wait_until(grown, timeout, interval=0.5, message=message)


# --------------------------------------------------------------------------
# the core claim
# --------------------------------------------------------------------------

def core_claim(cluster, pg, relayer, topic, rf, seconds=8):
    t0 = time.monotonic()
    cluster.create_topic(topic, partitions=3, rf=rf, configs=MIN_ISR if rf == 3 else None)
    aggs = prepare(pg)
    r = start_relayer(relayer, pg, cluster.bootstrap, topic)
    load = Load(pg, aggs, seed=hash(topic))
    load.start()
    keep_running(r, seconds)
    load.stop()
    t1 = time.monotonic()
    committed, records, duplicates = finish(pg, r, cluster.bootstrap, topic, load)
    print("real kafka: setup %.1f s, producing %.1f s, catch-up and checks %.1f s"
          % (t1 - seconds - t0, seconds, time.monotonic() - t1))
    # Nothing went wrong, so the idempotent producer sent nothing twice.
    assert duplicates == 0, "%d duplicates without any fault" % duplicates
    assert committed > 50, "too few events to mean anything: %d" % committed


def test_core_claim_on_a_real_cluster(kafka_cluster, pg, relayer, unique_topic):
    core_claim(kafka_cluster, pg, relayer, unique_topic(), rf=3)


def test_core_claim_on_a_single_broker(kafka_single, pg, relayer, unique_topic):
    core_claim(kafka_single, pg, relayer, unique_topic(), rf=1, seconds=5)


def test_orders_through_a_consumer_group(kafka_cluster, shop, relayer, consume, unique_topic):
    pg = shop
    topic = kafka_cluster.create_topic(unique_topic(), partitions=3, rf=3, configs=MIN_ISR)
    r = start_relayer(relayer, pg, kafka_cluster.bootstrap, topic)
    con = consume(*consumer_args(pg, kafka_cluster, topics=topic, group=unique_topic("group"),
                                 tuning="defaults"))
    customers = [str(uuid.uuid4()) for _ in range(6)]
    expected = {}
    place_orders(pg, customers, 30, expected)
    t0 = time.monotonic()
    wait_points(pg, expected, 90, con)
    print("real kafka: 30 orders applied by the consumer group %.1f s after the last commit"
          % (time.monotonic() - t0))
    assert pg.scalar("SELECT count(*) FROM processed_events") == 30
    assert r.running() and con.running()


# --------------------------------------------------------------------------
# faults
# --------------------------------------------------------------------------

def test_sigkill_of_the_busiest_partitions_leader(own_kafka_cluster, pg, relayer, unique_topic):
    cluster = own_kafka_cluster
    topic = cluster.create_topic(unique_topic(), partitions=3, rf=3, configs=MIN_ISR)
    aggs = prepare(pg)
    r = start_relayer(relayer, pg, cluster.bootstrap, topic)
    load = Load(pg, aggs, seed=hash(topic))
    load.start()
    keep_running(r, 5)

    hw = high_watermarks(cluster.bootstrap, topic)
    busiest = max(hw, key=hw.get)
    victim = cluster.leader_of(topic, busiest)
    assert hw[busiest] > 0, "nothing arrived before the kill: %s" % hw
    t_kill = time.monotonic()
    cluster.kill(victim)
    print("real kafka: SIGKILLed broker %d, leader of %s[%d] (%d records there, %s)"
          % (victim, topic, busiest, hw[busiest], hw))

    def new_leaders():
        assert r.running(), "relayer exited (rc=%s); log:\n%s" % (r.returncode, r.log_tail())
        try:
            leaders = [cluster.leader_of(topic, p) for p in range(3)]
        except Exception:  # metadata briefly unavailable: ask again
            return None
        return all(x not in (victim, -1) for x in leaders) and leaders
    leaders = wait_until(new_leaders, 60, interval=0.2,
                         message="leaders other than broker %d for every partition" % victim)
    leader = leaders[busiest]
    t_elected = time.monotonic()
    at_election = sum(high_watermarks(cluster.bootstrap, topic).values())
    keep_running(r, 5)

    wait_grown(cluster, topic, r, at_election, "records after the new leaders took over")

    # The broker comes back (as a service manager would) while the
    # producers go on, and rejoins the ISR.
    cluster.start(victim)
    for p in range(3):
        cluster.wait_isr(topic, p, 3, timeout=90)
    keep_running(r, 3)
    load.stop()
    committed, records, duplicates = finish(pg, r, cluster.bootstrap, topic, load)
    print("real kafka: new leader %d after %.1f s; %d duplicates"
          % (leader, t_elected - t_kill, duplicates))


def test_two_of_three_brokers_down(own_kafka_cluster, pg, relayer, unique_topic):
    from confluent_kafka import KafkaError, Producer as KProducer
    cluster = own_kafka_cluster
    topic = cluster.create_topic(unique_topic(), partitions=3, rf=3, configs=MIN_ISR)
    probe_topic = cluster.create_topic(unique_topic("probe"), partitions=1, rf=3, configs=MIN_ISR)
    aggs = prepare(pg)
    r = start_relayer(relayer, pg, cluster.bootstrap, topic)
    load = Load(pg, aggs, seed=hash(topic))
    load.start()
    keep_running(r, 4)
    # Everything before the outage delivered and confirmed: the first
    # commit of the outage is then the first undelivered one.
    load.stop()
    before_id, before_end = commit_marker(pg, "real")
    wait_confirmed(pg, r, before_end)

    hw_before = high_watermarks(cluster.bootstrap, topic)
    survivor, down = 1, (2, 3)
    for b in down:
        cluster.stop(b)
    for p in range(3):
        assert cluster.wait_isr(topic, p, 1, timeout=60) == [survivor]
    # The fault is the one the issue means: an acks=all write is refused
    # with NOT_ENOUGH_REPLICAS (a producer without retries shows it).
    errors = []
    probe = KProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0,
                       "enable.idempotence": False, "log_level": 0})
    probe.produce(probe_topic, b"probe", on_delivery=lambda err, msg: errors.append(err))
    assert probe.flush(30) == 0
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errors

    first_id, first_end = commit_marker(pg, "real")
    load.start()
    t_down = time.monotonic()
    # Two status intervals (10 s by default) and more: a wrong confirm
    # would have gone out by then.
    highest = pg.confirmed_flush_lsn(SLOT)
    while time.monotonic() - t_down < 25:
        assert r.running(), "relayer exited (rc=%s); log:\n%s" % (r.returncode, r.log_tail())
        c = pg.confirmed_flush_lsn(SLOT)
        highest = max(highest, c)
        assert c < first_end, ("the slot confirmed %s, past the commit at %s that Kafka has "
                               "not acknowledged" % (harness.int_to_lsn(c),
                                                     harness.int_to_lsn(first_end)))
        time.sleep(0.5)
    hw = high_watermarks(cluster.bootstrap, topic)
    assert hw == hw_before, "records appended with one in-sync replica: %s -> %s" % (hw_before, hw)
    t_up = time.monotonic()
    for b in down:
        cluster.start(b)
    wait_confirmed(pg, r, first_end)
    t_confirmed = time.monotonic()
    keep_running(r, 3)
    load.stop()
    committed, records, duplicates = finish(pg, r, cluster.bootstrap, topic, load,
                                            markers=(before_id, first_id))
    print("real kafka: brokers %s down for %.1f s, confirmed stayed at %s (< %s); high watermarks "
          "%s throughout; first undelivered commit confirmed %.1f s after the restart began"
          % (down, t_up - t_down, harness.int_to_lsn(highest), harness.int_to_lsn(first_end),
             hw, t_confirmed - t_up))


def test_rolling_restart_of_every_broker(own_kafka_cluster, pg, relayer, unique_topic):
    cluster = own_kafka_cluster
    topic = cluster.create_topic(unique_topic(), partitions=3, rf=3, configs=MIN_ISR)
    aggs = prepare(pg)
    r = start_relayer(relayer, pg, cluster.bootstrap, topic)
    load = Load(pg, aggs, seed=hash(topic))
    load.start()
    keep_running(r, 3)
    downtimes = []
    for b in sorted(cluster.brokers_by_id):
        at_stop = sum(high_watermarks(cluster.bootstrap, topic).values())
        t0 = time.monotonic()
        cluster.stop(b)

        # With min.insync.replicas=2 of 3 one broker down takes nothing
        # away: records go on arriving while it is down.
        wait_grown(cluster, topic, r, at_stop, "records while broker %d is down" % b)
        cluster.start(b)
        for p in range(3):
            cluster.wait_isr(topic, p, 3, timeout=90)
        downtimes.append(time.monotonic() - t0)
        keep_running(r, 1)
    load.stop()
    committed, records, duplicates = finish(pg, r, cluster.bootstrap, topic, load)
    print("real kafka: rolling restart of brokers %s (%s s each, until back in every ISR); "
          "%d events, %d duplicates" % (sorted(cluster.brokers_by_id),
                                        ", ".join("%.1f" % d for d in downtimes),
                                        committed, duplicates))
