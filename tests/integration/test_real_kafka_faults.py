"""test_real_kafka_faults.py — the broker-side faults of the issue "Real Kafka"
that the mock cluster can only imitate, against a real Apache Kafka 4.x
(kafka_cluster.py): what the broker really answers, and what the relayer
does with it, is the subject.

  test_missing_topic_is_waited_for_then_delivered
      fault 4: brokers with auto.create.topics.enable=false, the relayer's
      --topic missing while producers commit: the relayer keeps running,
      alerts (log, outbox_relay_delivery_waiting{reason="topic_missing"} 1),
      confirms nothing past the first event; once the topic is created
      every committed event arrives, per-aggregate order kept, nothing
      from a rolled-back transaction, and the gauge clears
  test_record_over_the_topics_limit_halts
      fault 5, --on-poison halt (default): a topic whose max.message.bytes
      is below one event (but the producer's limit is not, so only the
      broker's answer can tell): exit 1 naming the event, the slot not
      past it; with the topic's limit raised a restart delivers it and
      what followed, the last copies in order
  test_record_over_the_topics_limit_dead_lettered
      fault 5, --on-poison dead-letter: the event becomes a dead letter,
      the events after it (also of its aggregate) arrive in order, the
      slot moves on, the relayer keeps running
  test_first_request_of_a_new_producer_refused
      fault 5 at a new producer's first record to its partition, the
      aggregate's next events in requests of their own behind it: with
      halt none of them reaches the topic (the partition gate), with
      dead-letter they arrive in order
  test_keys_land_where_the_chosen_partitioner_puts_them
      the sink's partitioner (the gate's) keeps librdkafka's placement:
      CRC-32 by default, Java's murmur2 with -X partitioner=murmur2_random
  test_dead_letter_takes_only_the_oversized_event_of_a_batch
      the same with the oversized event in one produce request with 40
      small ones: the broker refuses the whole batch; the relayer produces
      them again one at a time, so only the oversized one is dead-lettered
      and the 40 others arrive in order
  test_backfill_dead_letters_only_the_oversized_row_of_a_batch
      the same for rows published by --backfill pending: the run is
      resumed one row at a time up to its last produced row
  test_check_on_a_misconfigured_real_cluster
      `outbox-relay check` reading the real broker's and topics' configs
      (DescribeConfigs, which the mock cluster lacks): a missing topic
      with auto.create.topics.enable=false FAILs, the topic's
      max.message.bytes below the largest payload FAILs, a topic that
      fits PASSes; on one broker, replication WARNs
  test_check_replication_on_a_real_cluster
      check's replication verdict: RF 3 with min.insync.replicas 2
      PASSes, min.insync.replicas 1 or RF 2 WARN, min.insync.replicas
      above the RF FAILs
  test_check_missing_topic_with_auto_creation_on
      the same missing topic where the brokers create topics (Kafka's
      default): PASS, saying why

Events of the load tests carry per-aggregate sequence numbers handed out by
the database (test_chaos.Producer), checked by test_real_kafka.verify().
"""

import re
import time
import uuid

import pytest

import harness
from harness import wait_until
from test_chaos import commit_marker, read_to_end
from test_check import HEALTHY, expect, insert_event, run_check
from test_kafka_errors import metric
from test_poison import Outbox, assert_halted_on
from test_real_kafka import MIN_ISR, SLOT, Load, finish, prepare, wait_confirmed
from test_real_kafka import start_relayer as start

LIMIT = 10000                                  # the topic's max.message.bytes
BIG_PAYLOAD = '{"blob": "%s"}' % ("x" * 20000)  # over LIMIT, far under the producer's 1000000
WAITING = 'outbox_relay_delivery_waiting{reason="topic_missing"}'


def topic_exists(bootstrap, topic):
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=10)
    tm = md.topics.get(topic)
    return tm is not None and tm.error is None


def ids_in(bootstrap, topic):
    """{event_id: [offsets]} of every record in `topic` (one partition
    or many: offsets are per partition, compare within one only)."""
    out = {}
    for _, _, off, _, headers, _ in read_to_end(bootstrap, [topic]):
        out.setdefault(int(headers["event_id"]), []).append(off)
    return out


# --------------------------------------------------------------------------
# fault 4: the topic does not exist and the brokers do not create it
# --------------------------------------------------------------------------

def test_missing_topic_is_waited_for_then_delivered(kafka_no_autocreate, pg, relayer,
                                                    unique_topic):
    cluster = kafka_no_autocreate
    topic = unique_topic()
    port = harness.free_port()
    aggs = prepare(pg)
    t0 = time.monotonic()
    r = start(relayer, pg, cluster.bootstrap, topic, "--metrics-addr", "127.0.0.1:%d" % port)
    first_id, first_end = commit_marker(pg, "real")
    load = Load(pg, aggs, seed=hash(topic))
    load.start()

    # librdkafka fails a message to an unknown topic only after
    # topic.metadata.propagation.max.ms (30 s by default).
    def waiting():
        assert r.running(), "relayer exited (rc=%s) on a missing topic; log:\n%s" % (
            r.returncode, r.log_tail())
        return metric(port, WAITING) == 1
    wait_until(waiting, 75, interval=0.5, message="%s 1; log tail:\n%s" % (WAITING, r.log_tail()))
    t_alert = time.monotonic()
    r.assert_running_for(3)
    c = pg.confirmed_flush_lsn(SLOT)
    assert c < first_end, ("the slot confirmed %s, past the first event (commit ends %s) whose "
                           "topic does not exist" % (harness.int_to_lsn(c),
                                                     harness.int_to_lsn(first_end)))
    assert not topic_exists(cluster.bootstrap, topic), "the brokers created the topic after all"
    warns = [l for l in r.log_text().splitlines() if " warn " in l and "topic_missing" in l]
    assert warns, "no warn line saying topic_missing; log tail:\n%s" % r.log_tail()
    errors = [l for l in r.log_text().splitlines() if " error " in l]
    assert not errors, errors

    cluster.create_topic(topic, partitions=3, rf=1)   # the operator's fix
    t_created = time.monotonic()
    wait_confirmed(pg, r, first_end)
    t_resumed = time.monotonic()
    r.assert_running_for(3)
    load.stop()
    wait_until(lambda: metric(port, WAITING) == 0, 30, interval=0.5,
               message="the waiting gauge to clear")
    committed, records, duplicates = finish(pg, r, cluster.bootstrap, topic, load,
                                            markers=(first_id,))
    print("real kafka: %s 1 after %.1f s; first event confirmed %.1f s after the topic was "
          "created; %d events, %d duplicates; %.1f s in all"
          % (WAITING, t_alert - t0, t_resumed - t_created, committed, duplicates,
             time.monotonic() - t0))
    assert committed > 50, "too few events to mean anything: %d" % committed


# --------------------------------------------------------------------------
# fault 5: a record larger than the topic's max.message.bytes
# --------------------------------------------------------------------------

def small_topic(cluster, name):
    """One partition (so offsets give the order), RF 3, min ISR 2, and
    max.message.bytes = LIMIT."""
    return cluster.create_topic(name, partitions=1, rf=3,
                                configs=dict(MIN_ISR, **{"max.message.bytes": LIMIT}))


def test_record_over_the_topics_limit_halts(kafka_cluster, pg, relayer, unique_topic):
    from confluent_kafka.admin import ConfigResource
    from kafka_cluster import _admin
    t0 = time.monotonic()
    topic = small_topic(kafka_cluster, unique_topic())
    ob = Outbox(pg)
    r = start(relayer, pg, kafka_cluster.bootstrap, topic)
    agg = str(uuid.uuid4())
    a = ob.one("big.before", agg=agg)
    wait_confirmed(pg, r, a.commit_end, timeout=60)

    b = ob.one("big.huge", BIG_PAYLOAD, agg=agg)
    c = ob.one("big.after", '{"after": 1}', agg=agg)
    line = assert_halted_on(r, pg, b, "big.huge", "too large")
    print("real kafka: halted with: %s" % line)
    got = ids_in(kafka_cluster.bootstrap, topic)
    assert a.id in got, "the event before the poison one is missing: %s" % got
    assert b.id not in got, "the oversized event was appended: %s" % got
    # The event after it may have been produced while the refused one was
    # in flight, in a request of its own: the producer stops at the
    # refused batch (the gapless guarantee), so the broker took nothing
    # behind it, and the restart sends it after the refused one.
    assert c.id not in got, ("event %d, after the refused one in the same aggregate, reached "
                             "the topic before it: %s" % (c.id, got))

    # The fix: the topic takes records of up to 1 MB; the restart sends the
    # event and the one after it, in order.
    res = ConfigResource("topic", topic, set_config={"max.message.bytes": "1000000",
                                                     "min.insync.replicas": "2"})
    admin = _admin(kafka_cluster.bootstrap)
    admin.alter_configs([res])[res].result(30)
    r2 = start(relayer, pg, kafka_cluster.bootstrap, topic)
    wait_confirmed(pg, r2, c.commit_end, timeout=60)
    assert r2.terminate(30) == 0, r2.log_tail()
    got = ids_in(kafka_cluster.bootstrap, topic)
    assert b.id in got and c.id in got, got
    assert got[a.id][0] < got[b.id][0] < got[c.id][0], "aggregate out of order: %s" % got
    print("real kafka: halt, fix and redelivery in %.1f s" % (time.monotonic() - t0))


@pytest.mark.parametrize("policy", ["halt", "dead-letter"])
def test_first_request_of_a_new_producer_refused(kafka_cluster, pg, relayer, unique_topic,
                                                policy):
    """The oversized event is the first record a new producer (a new
    process) sends to its partition, and the events after it, of the same
    aggregate, follow in requests of their own (batch.num.messages=1) while
    it is in flight. Kafka accepts any first sequence number from a
    producer id it has not seen on a partition, so the broker refusing the
    first request does not make it refuse the ones behind: unless the
    relayer holds a partition's second request until its first is
    acknowledged, a later event of the aggregate is appended ahead of the
    refused one (halt: the restart then sends the refused one after it;
    dead-letter: the later copies are out of the first-delivered order)."""
    topic = small_topic(kafka_cluster, unique_topic())
    dlq = kafka_cluster.create_topic(unique_topic("dlq"), partitions=1, rf=3, configs=MIN_ISR)
    poison = ("--on-poison", policy) + (("--dead-letter-topic", dlq) if policy != "halt" else ())
    ob = Outbox(pg)
    agg = str(uuid.uuid4())
    r = start(relayer, pg, kafka_cluster.bootstrap, topic)  # creates the slot
    a = ob.one("big.before", agg=agg)
    wait_confirmed(pg, r, a.commit_end, timeout=60)
    assert r.terminate(30) == 0, r.log_tail()

    b = ob.one("big.huge", BIG_PAYLOAD, agg=agg)
    after = [ob.one("big.after", '{"after": %d}' % i, agg=agg) for i in range(8)]
    # Not start(): with halt the relayer may stop before the slot is seen active.
    r = relayer("--dsn", pg.dsn(), "--brokers", kafka_cluster.bootstrap, "--topic", topic,
                "-X", "batch.num.messages=1", *poison)
    if policy == "halt":
        assert_halted_on(r, pg, b, "big.huge", "too large")
    else:
        wait_confirmed(pg, r, after[-1].commit_end, timeout=60)
        r.assert_running_for(1)
    got = ids_in(kafka_cluster.bootstrap, topic)
    assert b.id not in got, "the oversized event was appended: %s" % got
    if policy == "halt":
        ahead = [t.id for t in after if t.id in got]
        assert not ahead, ("events %s, after the refused one in its aggregate, reached the "
                           "topic before it" % ahead)
    else:
        assert list(ids_in(kafka_cluster.bootstrap, dlq)) == [b.id]
        missing = [t.id for t in after if t.id not in got]
        assert not missing, "events after the dead letter never arrived: %s" % missing
        first = [min(got[t.id]) for t in [a] + after]
        assert first == sorted(first), "aggregate out of order (first copies): %s" % got


def murmur2(data):
    """Kafka's Java producer's murmur2 (Utils.murmur2), as librdkafka's
    murmur2 partitioners compute it."""
    m, h = 0x5bd1e995, (0x9747b28c ^ len(data)) & 0xffffffff
    n4 = len(data) // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xffffffff
        k ^= k >> 24
        k = (k * m) & 0xffffffff
        h = ((h * m) & 0xffffffff) ^ k
    rest = data[4 * n4:]
    if len(rest) == 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if len(rest) >= 1:
        h ^= rest[0]
        h = (h * m) & 0xffffffff
    h ^= h >> 13
    h = (h * m) & 0xffffffff
    h ^= h >> 15
    return h


@pytest.mark.parametrize("partitioner", [None, "murmur2_random"])
def test_keys_land_where_the_chosen_partitioner_puts_them(kafka_cluster, pg, relayer,
                                                          unique_topic, partitioner):
    """The sink's own partitioner (it asks the partition gate, then calls
    the one chosen) keeps every key where librdkafka would put it: by
    default CRC-32 of the key modulo the partition count (consistent_random),
    with -X partitioner=murmur2_random where Java's producer puts it."""
    import zlib
    parts = 6
    topic = kafka_cluster.create_topic(unique_topic(), partitions=parts, rf=3, configs=MIN_ISR)
    extra = ("-X", "partitioner=" + partitioner) if partitioner else ()
    r = start(relayer, pg, kafka_cluster.bootstrap, topic, *extra)
    aggs = [str(uuid.uuid4()) for _ in range(30)]
    tx = Outbox(pg).tx([("keys.spread", '{"i": %d}' % i, aggs[i % 30]) for i in range(90)])
    wait_confirmed(pg, r, tx.commit_end, timeout=60)
    records = read_to_end(kafka_cluster.bootstrap, [topic])
    assert len(records) >= 90, len(records)

    def expected(key):
        if partitioner == "murmur2_random":
            return (murmur2(key.encode()) & 0x7fffffff) % parts
        return zlib.crc32(key.encode()) % parts
    wrong = [(k, p, expected(k)) for _, p, _, k, _, _ in records if p != expected(k)]
    assert not wrong, "keys in another partition than the partitioner's: %s" % wrong[:5]
    assert len({p for _, p, _, _, _, _ in records}) > 1, "every key in one partition"
    assert r.terminate(30) == 0, r.log_tail()


def dead_letter_relayer(cluster, pg, relayer, unique_topic, *args):
    topic = small_topic(cluster, unique_topic())
    dlq = cluster.create_topic(unique_topic("dlq"), partitions=1, rf=3, configs=MIN_ISR)
    r = start(relayer, pg, cluster.bootstrap, topic, "--on-poison", "dead-letter",
              "--dead-letter-topic", dlq, *args)
    return r, topic, dlq


def past_an_oversized_event(cluster, pg, relayer, unique_topic, n, *args):
    """One transaction of one aggregate: n small events, one over the
    topic's max.message.bytes, n small ones, relayed with --on-poison
    dead-letter (and args); returns (relayer, topic, dead-letter topic,
    the transaction, the oversized event's id) once the slot confirmed the
    transaction."""
    r, topic, dlq = dead_letter_relayer(cluster, pg, relayer, unique_topic, *args)
    # The partition opened first: a new producer's second record to a
    # partition waits for its first one's delivery (partition_gate.h), which
    # would split the transaction's first requests from the rest.
    warm = Outbox(pg).one("small.warm", agg=str(uuid.uuid4()))
    wait_confirmed(pg, r, warm.commit_end, timeout=60)
    agg = str(uuid.uuid4())
    tx = Outbox(pg).tx([("small.a", '{"i": %d}' % i, agg) for i in range(n)]
                       + [("big.huge", BIG_PAYLOAD, agg)]
                       + [("small.b", '{"i": %d}' % i, agg) for i in range(n)])
    wait_confirmed(pg, r, tx.commit_end, timeout=90)
    assert r.running(), r.log_tail()
    return r, topic, dlq, tx, tx.ids[n]


# Requests of at most this many records: the events behind a refused batch
# are then in requests of their own, queued or in flight behind it (up to
# 5 per connection), which is what a busy relayer has at every refusal.
SMALL_BATCHES = ("-X", "batch.num.messages=4")


def test_record_over_the_topics_limit_dead_lettered(kafka_cluster, pg, relayer, unique_topic):
    """The oversized event alone in its produce request (the events before
    it confirmed first, the ones after it committed once it was dead-
    lettered): see the next test for it sharing a request."""
    t0 = time.monotonic()
    r, topic, dlq = dead_letter_relayer(kafka_cluster, pg, relayer, unique_topic)
    ob = Outbox(pg)
    agg, other = str(uuid.uuid4()), str(uuid.uuid4())
    a = ob.one("big.before", agg=agg)
    wait_confirmed(pg, r, a.commit_end, timeout=60)
    b = ob.one("big.huge", BIG_PAYLOAD, agg=agg)
    wait_confirmed(pg, r, b.commit_end, timeout=60)
    after = [ob.one("big.after", '{"after": %d}' % i, agg=agg if i % 2 == 0 else other)
             for i in range(6)]
    wait_confirmed(pg, r, after[-1].commit_end, timeout=60)
    r.assert_running_for(2)

    got = ids_in(kafka_cluster.bootstrap, topic)
    dead = ids_in(kafka_cluster.bootstrap, dlq)
    missing = [t.id for t in [a] + after if t.id not in got]
    assert not missing, "events around the poison one never arrived: %s" % missing
    assert b.id not in got, "the oversized event was appended to its topic"
    assert list(dead) == [b.id], "expected one dead letter for %d, got %s" % (b.id, dead)
    mine = [t.id for t in [a] + after if t.aggs[0] == agg]
    offsets = [got[i][0] for i in mine]
    assert offsets == sorted(offsets), "aggregate %s out of order: %s" % (agg, offsets)
    assert any("event_id=%d" % b.id in l and dlq in l
               for l in r.log_text().splitlines() if " warn " in l), r.log_tail()
    assert r.terminate(30) == 0, r.log_tail()
    print("real kafka: dead-lettered %d, %d after it delivered, in %.1f s"
          % (b.id, len(after), time.monotonic() - t0))


def test_dead_letter_takes_only_the_oversized_event_of_a_batch(kafka_cluster, pg, relayer,
                                                               unique_topic):
    """One transaction: 20 small events, the oversized one, 20 small ones,
    all of one aggregate: produced back to back, they share a request.
    Only the oversized one may be dead-lettered; the 40 others arrive in
    order."""
    # linger.ms makes the shared request certain: produced back to back,
    # the records still went out in several requests when the broker
    # thread woke between them (CI).
    r, topic, dlq, tx, big = past_an_oversized_event(kafka_cluster, pg, relayer, unique_topic, 20,
                                                     "-X", "linger.ms=500")
    # The batch's refusal was taken for what it is before anyone was judged.
    r.wait_for_log(r"with other events in the same request: a broker refuses the whole batch "
                   r"for one record's size, so this event may be innocent", timeout=1)
    got = ids_in(kafka_cluster.bootstrap, topic)
    dead = ids_in(kafka_cluster.bootstrap, dlq)
    innocent = sorted(set(dead) - {big})
    assert not innocent, ("%d events that fit the topic were dead-lettered with the oversized "
                          "event %d: %s" % (len(innocent), big, innocent))
    assert list(dead) == [big], dead
    small = [i for i in tx.ids if i != big]
    assert [i for i in small if i not in got] == [], got
    assert [got[i][0] for i in small] == sorted(got[i][0] for i in small)
    assert r.terminate(30) == 0, r.log_tail()


def test_nothing_behind_a_refused_batch_overtakes_it(kafka_cluster, pg, relayer, unique_topic):
    """One transaction of one aggregate: 40 small events, the oversized
    one, 40 small ones, produced four to a request (SMALL_BATCHES), so that
    the requests behind the refused one are in flight when it is refused.
    librdkafka, left to itself, goes on with them under a new producer
    epoch, and they land before the refused request's three innocent events
    are produced again. The producer must stop at the refused batch
    instead: every first copy in order, only the oversized event
    dead-lettered."""
    r, topic, dlq, tx, big = past_an_oversized_event(kafka_cluster, pg, relayer, unique_topic, 40,
                                                     *SMALL_BATCHES)
    got = ids_in(kafka_cluster.bootstrap, topic)
    assert list(ids_in(kafka_cluster.bootstrap, dlq)) == [big]
    small = [i for i in tx.ids if i != big]
    assert [i for i in small if i not in got] == [], got
    first = [got[i][0] for i in small]
    overtaken = [i for k, i in enumerate(small) if first[k] != sorted(first)[k]]
    assert not overtaken, ("first copies out of order: %d events landed out of place (ids %s); "
                           "offsets in commit order: %s" % (len(overtaken), overtaken, first))
    r.wait_for_log(r"the producer stopped at a refused batch( or a lost sequence)? is replaced", timeout=1)
    assert r.terminate(30) == 0, r.log_tail()


def backfill_past_an_oversized_row(cluster, pg, relayer, unique_topic, *args):
    """20 small rows, one over the topic's max.message.bytes and 20 small
    ones, all of one aggregate, pending before the slot exists, published
    by --backfill pending with --on-poison dead-letter; returns (relayer,
    row ids, the oversized row's id, topic, dead-letter topic) once the
    backfill is done."""
    from test_backfill import marker
    topic = small_topic(cluster, unique_topic())
    dlq = cluster.create_topic(unique_topic("dlq"), partitions=1, rf=3, configs=MIN_ISR)
    agg = str(uuid.uuid4())
    rows = [("small.a", '{"i": %d}' % i) for i in range(20)] + [("big.huge", BIG_PAYLOAD)] \
        + [("small.b", '{"i": %d}' % i) for i in range(20)]
    ids = [pg.scalar("INSERT INTO events_outbox (aggregate_id, type, payload) "
                     "VALUES (%s, %s, %s) RETURNING id", (agg, typ, payload))
           for typ, payload in rows]
    r = start(relayer, pg, cluster.bootstrap, topic, "--on-poison", "dead-letter",
              "--dead-letter-topic", dlq, "--backfill", "pending", *args)
    wait_until(lambda: (marker(pg) or {}).get("backfill_state") == "done", 120, interval=0.3,
               message="the backfill to finish; log:\n%s" % r.log_tail())
    return r, ids, ids[20], topic, dlq


def test_backfill_dead_letters_only_the_oversized_row_of_a_batch(kafka_cluster, pg, relayer,
                                                                  unique_topic):
    """The same for the backfill, whose rows go out in batches too
    (backfill_past_an_oversized_row). The run stops at the shared refusal
    and is resumed producing one row at a time up to the last row it had
    produced; only the oversized row is dead-lettered, the 40 others
    arrive and the backfill finishes."""
    r, ids, big, topic, dlq = backfill_past_an_oversized_row(kafka_cluster, pg, relayer,
                                                             unique_topic)
    assert r.running(), r.log_tail()
    r.wait_for_log(r"backfill: .*with other rows in the same request", timeout=1)
    got = ids_in(kafka_cluster.bootstrap, topic)
    dead = ids_in(kafka_cluster.bootstrap, dlq)
    innocent = sorted(set(dead) - {big})
    assert not innocent, ("%d rows that fit the topic were dead-lettered with the oversized "
                          "row %d: %s" % (len(innocent), big, innocent))
    assert list(dead) == [big], dead
    small = [i for i in ids if i != big]
    assert [i for i in small if i not in got] == [], got
    assert [got[i][0] for i in small] == sorted(got[i][0] for i in small)
    assert r.terminate(30) == 0, r.log_tail()


def test_backfill_isolation_keeps_the_aggregates_order(kafka_cluster, pg, relayer, unique_topic):
    """The rows of one aggregate, the oversized one among them, keep their
    id order in the topic (first copies) through the isolation, with the
    rows behind the refused request in requests of their own
    (SMALL_BATCHES)."""
    r, ids, big, topic, _ = backfill_past_an_oversized_row(kafka_cluster, pg, relayer,
                                                           unique_topic, *SMALL_BATCHES)
    got = ids_in(kafka_cluster.bootstrap, topic)
    small = [i for i in ids if i != big]
    assert [got[i][0] for i in small] == sorted(got[i][0] for i in small)
    assert r.terminate(30) == 0, r.log_tail()


# --------------------------------------------------------------------------
# check against the real broker's configs
# --------------------------------------------------------------------------

def test_check_on_a_misconfigured_real_cluster(kafka_no_autocreate, pg_factory, relayer_binary,
                                               unique_topic):
    cluster = kafka_no_autocreate
    pg = pg_factory(settings=HEALTHY)
    insert_event(pg)
    bootstrap = ("--dsn", pg.dsn(), "--brokers", cluster.bootstrap)

    missing = unique_topic("missing")
    rep = run_check(relayer_binary, *bootstrap, "--topic", missing)
    item = expect(rep, "topics", "FAIL", detail="auto.create.topics.enable = false",
                  fix="kafka-topics.sh --create")
    assert missing in item["detail"], item
    assert rep.rc == 1, rep
    assert not topic_exists(cluster.bootstrap, missing), "check created the topic"

    # The topic exists, but its limit is below a payload already in the outbox.
    insert_event(pg, payload=BIG_PAYLOAD)
    small = cluster.create_topic(unique_topic("small"), partitions=1, rf=1,
                                 configs={"max.message.bytes": LIMIT})
    rep = run_check(relayer_binary, *bootstrap, "--topic", small)
    expect(rep, "topics", "PASS", detail=small)
    item = expect(rep, "message_size", "FAIL", detail="max.message.bytes of a topic",
                  fix="max.message.bytes")
    assert "%d bytes" % LIMIT in item["detail"], item
    assert rep.rc == 1, rep
    # A single broker: nothing survives its loss.
    expect(rep, "replication", "WARN",
           detail="%s (replication factor 1, min.insync.replicas 1" % small,
           fix="min.insync.replicas=2")

    # A topic with Kafka's default limit takes that payload.
    roomy = cluster.create_topic(unique_topic("roomy"), partitions=1, rf=1)
    rep = run_check(relayer_binary, *bootstrap, "--topic", roomy)
    expect(rep, "topics", "PASS")
    expect(rep, "message_size", "PASS")
    assert not re.search(r"^FAIL (topics|message_size|kafka)", rep.stdout, re.M), rep


def test_check_replication_on_a_real_cluster(kafka_cluster, pg_factory, relayer_binary,
                                             unique_topic):
    """The replication verdict from the metadata (replicas per partition)
    and DescribeConfigs (min.insync.replicas) of three real brokers."""
    pg = pg_factory(settings=HEALTHY)
    insert_event(pg)
    # The shared cluster's brokers default min.insync.replicas to 2
    # (kafka_cluster.shared_settings): a topic without its own value gets
    # that, read back through DescribeConfigs as the topic's.
    cases = [(3, MIN_ISR, "PASS", "survives"),
             (3, None, "PASS", "survives"),
             (3, {"min.insync.replicas": 1}, "WARN", "may be on one broker only"),
             (2, MIN_ISR, "WARN", "one copy or none"),
             (1, {"min.insync.replicas": 2}, "FAIL", "every write is refused")]
    for rf, configs, status, words in cases:
        topic = kafka_cluster.create_topic(unique_topic("rf%d" % rf), partitions=3, rf=rf,
                                           configs=configs)
        rep = run_check(relayer_binary, "--dsn", pg.dsn(), "--brokers", kafka_cluster.bootstrap,
                        "--topic", topic)
        item = expect(rep, "replication", status, detail=words)
        assert "%s (replication factor %d, min.insync.replicas %d" % (
            topic, rf, (configs or {}).get("min.insync.replicas", 2)) in item["detail"], item
        expect(rep, "topics", "PASS")
        assert rep.rc == (1 if status == "FAIL" else 0), rep
        print("real kafka: %s %s" % (item["status"], item["detail"]))


def test_check_missing_topic_with_auto_creation_on(kafka_cluster, pg_factory, relayer_binary,
                                                   unique_topic):
    pg = pg_factory(settings=HEALTHY)
    insert_event(pg)
    missing = unique_topic("missing")
    rep = run_check(relayer_binary, "--dsn", pg.dsn(), "--brokers", kafka_cluster.bootstrap,
                    "--topic", missing)
    expect(rep, "kafka", "PASS")
    item = expect(rep, "topics", "PASS", detail="auto.create.topics.enable = true")
    assert missing in item["detail"], item
    assert not topic_exists(kafka_cluster.bootstrap, missing), "check created the topic"
