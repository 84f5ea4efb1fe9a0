"""test_exactly_once.py — --delivery exactly-once (issue 27) against a real
Apache Kafka 4.x cluster (kafka_cluster.py): librdkafka's mock cluster does
not model transactions, so only a real transaction coordinator proves it.

  test_exactly_once_under_repeated_sigkill
      producers commit (and roll back) outbox transactions while the
      relayer, with --delivery exactly-once, is SIGKILLed at random points
      several times and started again: a read_committed consumer sees
      every committed event exactly once, per-aggregate order kept, none
      from a rolled-back transaction; the progress topic is compacted and
      its last record for the slot is at or after the final marker
  test_at_least_once_duplicates_under_the_same_kills
      the same kills with the default --delivery at-least-once: nothing is
      lost, and events arrive twice, so the guarantee above is measured
      against the duplicates it removes, not assumed
  test_exactly_once_across_a_postgresql_crash
      the relayer SIGKILLed and PostgreSQL stopped in immediate mode (a
      crash: the slot's confirmed position falls back to what was last
      written to disk, behind what Kafka committed), both started again:
      the relayer reads its progress, starts replication from there, and
      the read_committed consumer still sees every event exactly once; the
      same with at-least-once would send everything after the slot's
      on-disk position again
  test_takeover_fences_the_stalled_replica
      two replicas of the slot, the standby with --takeover-after: the
      active one is SIGSTOPped mid-stream (an open Kafka transaction, its
      socket silent), the standby takes the slot over and initialises its
      producer, which fences the old one and aborts its transaction; on
      SIGCONT the old replica's writes are refused, it logs that it was
      fenced and stands by (no exit, no crash loop); the read_committed
      consumer sees every event exactly once
  test_exactly_once_when_the_busiest_partitions_leader_is_killed
      on a private 3-broker cluster, SIGKILL of the broker leading the
      busiest partition while producers commit, then its return: the
      relayer never exits, and the read_committed consumer sees every
      event exactly once
  test_progress_read_after_compaction
      one Kafka transaction per PostgreSQL transaction
      (--transaction-max-events 1) on a progress topic the log cleaner
      compacts within seconds: hundreds of commits, compacted to a few
      records; the relayer SIGKILLed and started again reads the slot's
      last progress (at or after the last commit it made) and sends nothing
      twice
  test_dead_letter_in_the_same_transaction
      --on-poison dead-letter: an event over the producer's
      message.max.bytes between small events of the same and later
      PostgreSQL transactions: its dead letter and its neighbours are
      committed together, each once, the small ones in order
  test_slow_commits_keep_the_replication_connection
      a commit per PostgreSQL transaction, each 300 ms (test hook
      delay-commit), over a backlog: no reconnect, every event once
  test_kill_between_the_kafka_commit_and_the_slot_confirmation
      SIGKILL at the test hook pause-after-commit, right after a Kafka
      commit and before the slot is confirmed: every event once
  test_kafka_has_it_the_slot_does_not[exactly-once|at-least-once]
      the path to PostgreSQL stalled from the relayer's side, so no
      confirmation arrives; SIGKILL once Kafka has every event: none twice
      with exactly-once, all of them twice with at-least-once
  test_progress_of_another_cluster_is_not_read
      another PostgreSQL cluster's progress records for the same slot and
      database names are passed over; an older record that cannot say
      whose it is is refused with the way out (a tombstone)
  test_stalled_leader_during_a_transaction
      on a private cluster, the only partition's leader SIGSTOPped (a
      silent path) mid-stream: the commit waits and says so every 10 s,
      then everything arrives once
  test_check_exactly_once_on_a_real_cluster
      `outbox-relay check --delivery exactly-once`: the coordinator answers
      (PASS), transaction.timeout.ms within the brokers' maximum (PASS)
      and above it (FAIL), the progress topic missing (PASS: created
      compacted), compacted (PASS), cleanup.policy=delete (FAIL)
  test_progress_topic_not_compacted_is_refused
      a --progress-topic that exists with cleanup.policy=delete: exit 1,
      naming the policy and the fix

The producers, the marker and the per-aggregate sequence numbers are
test_chaos.py's and test_real_kafka.py's.
"""

import json
import os
import re
import signal
import random
import time

import pytest

import harness
from harness import wait_until
from test_chaos import commit_marker
from test_real_kafka import MIN_ISR, SLOT, Load, high_watermarks, prepare, wait_confirmed
from test_real_kafka import start_relayer

KILLS = 6
EOS = ("--delivery", "exactly-once")
# OUTBOX_TEST_EOS_DEBUG=eos,broker,msg,protocol: every relayer of these
# tests logs at debug level with librdkafka's debug contexts (-X debug=...).
DEBUG = (("--log-level", "debug", "-X", "debug=" + os.environ["OUTBOX_TEST_EOS_DEBUG"])
         if os.environ.get("OUTBOX_TEST_EOS_DEBUG") else ())


def start(relayer, pg, bootstrap, topic, *extra, env=None):
    """test_real_kafka.start_relayer, with DEBUG; env: extra environment
    (OUTBOX_RELAY_TEST_EOS, the test hooks of src/relay/relay_eos.c)."""
    if env is None:
        return start_relayer(relayer, pg, bootstrap, topic, *extra, *DEBUG)
    return start_relayer(lambda *a: relayer(*a, env=env), pg, bootstrap, topic, *extra, *DEBUG)


def insert_transactions(pg, n, type_="eo.small"):
    """n transactions of one event each, committed back to back; their ids."""
    conn = pg.connect(autocommit=False)
    ids = []
    try:
        cur = conn.cursor()
        for i in range(n):
            cur.execute("INSERT INTO events_outbox (aggregate_id, type, payload) VALUES "
                        "('00000000-0000-0000-0000-000000000027', %s, %s) RETURNING id",
                        (type_, '{"n": %d}' % i))
            ids.append(cur.fetchone()[0])
            conn.commit()
    finally:
        conn.close()
    return ids


def system_identifier(pg):
    return str(pg.query("SELECT system_identifier FROM pg_control_system()")[0][0])


def event_ids(bootstrap, topic):
    return [int(h["event_id"]) for _, _, _, _, h, _ in read_committed(bootstrap, [topic])]


def read_committed(bootstrap, topics, timeout=120):
    """Every record of `topics` a read_committed consumer sees, read until
    each partition's end: [(topic, partition, offset, key, headers, value)]."""
    import uuid
    from confluent_kafka import Consumer, KafkaError, TopicPartition, OFFSET_BEGINNING
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-" + uuid.uuid4().hex[:8],
                  "enable.auto.commit": False, "log_level": 3, "fetch.wait.max.ms": 100,
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "auto.offset.reset": "earliest"})  # as kafka_io._consumer_conf says
    out = []
    deadline = time.monotonic() + timeout
    try:
        md = c.list_topics(timeout=10)
        assign = []
        for t in topics:
            tm = md.topics.get(t)
            assert tm is not None and tm.error is None, "topic %s: %s" % (t, tm and tm.error)
            assign += [TopicPartition(t, p, OFFSET_BEGINNING) for p in sorted(tm.partitions)]
        c.assign(assign)
        left_parts = {(tp.topic, tp.partition) for tp in assign}
        while left_parts:
            left = deadline - time.monotonic()
            assert left > 0, "reading timed out; partitions not at their end: %s" % left_parts
            for m in c.consume(num_messages=10000, timeout=min(left, 0.5)):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        left_parts.discard((m.topic(), m.partition()))
                        continue
                    raise RuntimeError("consume error: %s" % m.error())
                headers = {n: v.decode() for n, v in (m.headers() or [])}
                out.append((m.topic(), m.partition(), m.offset(),
                            m.key().decode() if m.key() else None, headers,
                            m.value().decode() if m.value() else None))
    finally:
        c.close()
    out.sort(key=lambda x: (x[0], x[1], x[2]))
    return out


def check(pg, records, load, markers):
    """Like test_real_kafka.verify on read_committed records: every
    committed event arrived, nothing rolled back did, per-aggregate order of
    first copies kept. Returns (committed, records, duplicates)."""
    rows = {}
    for id_, agg, payload in pg.query(
            "SELECT id, aggregate_id::text, payload::text FROM public.events_outbox "
            "WHERE type = 'real.changed'"):
        rows[id_] = (agg, payload)
    committed = set(rows)
    rolled = {i for p in load.all for i in p.rolled_back}
    rolled |= {i for p in load.all for i in p.uncertain} - committed
    assert rolled, "no transaction was rolled back: the test proves less than it says"
    first, copies, leaked, foreign, seen_markers = {}, {}, [], [], set()
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
            assert (key, value) == rows[eid], "record %s differs from its row" % eid
    seqs = {}
    for eid, rec in sorted(first.items(), key=lambda kv: (kv[1][1], kv[1][2])):
        seqs.setdefault(rec[3], []).append(json.loads(rec[5])["seq"])
    order_errors = ["%s: %s" % (k, n[:40]) for k, n in seqs.items()
                    if n != list(range(1, len(n) + 1))]
    missing = committed - set(first)
    duplicates = sum(n - 1 for n in copies.values())
    print("exactly-once test: %d events committed, %d rolled back; %d records, %d duplicates, "
          "%d missing, %d leaked, %d foreign, %d aggregates out of order"
          % (len(committed), len(rolled), len(records), duplicates, len(missing), len(leaked),
             len(foreign), len(order_errors)))
    assert not missing, "%d committed events never arrived, e.g. %s" % (len(missing), sorted(missing)[:10])
    assert not leaked, "%d rolled-back events published, e.g. %s" % (len(leaked), leaked[:3])
    assert not foreign, "records that are no committed row: %s" % foreign[:3]
    assert not order_errors, "per-aggregate order broken:\n%s" % "\n".join(order_errors[:10])
    assert seen_markers == set(markers), "markers missing: %s" % (set(markers) - seen_markers)
    return len(committed), len(records), duplicates


def restart(relayer, pg, bootstrap, topic, extra):
    """Waits for the killed relayer's walsender to go, then starts again."""
    wait_until(lambda: not (pg.slot_info(SLOT) or {}).get("active"), 60, interval=0.1,
               message="the killed relayer's walsender to end")
    return start(relayer, pg, bootstrap, topic, *extra)


def run_with_kills(cluster, pg, relayer, topic, extra, seed):
    """Producers commit while the relayer is SIGKILLed KILLS times at random
    points (0.3 to 3 s apart); then a marker, its confirmation, SIGTERM.
    Returns (committed, records, duplicates) of a read_committed read."""
    cluster.create_topic(topic, partitions=3, rf=3, configs=MIN_ISR)
    aggs = prepare(pg)
    rng = random.Random(seed)
    r = start(relayer, pg, cluster.bootstrap, topic, *extra)
    load = Load(pg, aggs, seed=seed)
    load.start()
    time.sleep(1)
    for i in range(KILLS):
        time.sleep(rng.uniform(0.3, 3.0))
        rc = r.kill()
        assert rc is not None, "the relayer did not die on SIGKILL"
        r = restart(relayer, pg, cluster.bootstrap, topic, extra)
    time.sleep(2)
    load.stop()
    marker_id, marker_end = commit_marker(pg, "real")
    wait_confirmed(pg, r, marker_end)
    log = r.log_tail(400)
    rc = r.terminate(30)
    assert rc == 0, "the relayer exited %s on SIGTERM; log tail:\n%s" % (rc, r.log_tail())
    return check(pg, read_committed(cluster.bootstrap, [topic]), load, {marker_id}), marker_end, log


def progress_records(bootstrap, topic):
    return [(k, json.loads(v)) for _, _, _, k, _, v in read_committed(bootstrap, [topic])]


def test_exactly_once_under_repeated_sigkill(kafka_cluster, pg, relayer, unique_topic):
    topic, progress = unique_topic(), unique_topic("progress")
    extra = EOS + ("--progress-topic", progress)
    t0 = time.monotonic()
    (committed, records, duplicates), marker_end, _ = run_with_kills(
        kafka_cluster, pg, relayer, topic, extra, seed=27)
    print("exactly-once: %d kills, %d events, %d duplicates, %.1f s"
          % (KILLS, committed, duplicates, time.monotonic() - t0))
    assert committed > 200, "too few events to mean anything: %d" % committed
    assert duplicates == 0, "%d duplicates with --delivery exactly-once" % duplicates

    # The progress topic: made compacted by the relayer, its slot's last
    # committed record at or after the marker, every record ours.
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap, "log_level": 0})
    res = ConfigResource(ConfigResource.Type.TOPIC, progress)
    conf = list(admin.describe_configs([res]).values())[0].result(timeout=30)
    assert conf["cleanup.policy"].value == "compact"
    recs = progress_records(kafka_cluster.bootstrap, progress)
    sysid = system_identifier(pg)
    assert recs and all(k == "%s.%s" % (sysid, SLOT) for k, _ in recs), recs[:3]
    assert all(v["format"] == "outbox-relay-progress" and v["version"] == 1 and
               v["system_identifier"] == sysid and v["slot"] == SLOT for _, v in recs)
    last = harness.lsn_to_int(recs[-1][1]["lsn"])
    assert last >= marker_end, "last progress %s before the marker's commit %s" % (
        recs[-1][1]["lsn"], harness.int_to_lsn(marker_end))
    lsns = [harness.lsn_to_int(v["lsn"]) for _, v in recs]
    assert lsns == sorted(lsns), "progress went backwards: %s" % [v["lsn"] for _, v in recs]
    print("exactly-once: %d progress records (commits) read back" % len(recs))


def test_at_least_once_duplicates_under_the_same_kills(kafka_cluster, pg, relayer, unique_topic):
    (committed, records, duplicates), _, _ = run_with_kills(
        kafka_cluster, pg, relayer, unique_topic(), (), seed=27)
    print("at-least-once: %d kills, %d events, %d duplicates" % (KILLS, committed, duplicates))
    assert duplicates > 0, "no duplicates at all: the kills proved nothing"


def test_progress_topic_not_compacted_is_refused(kafka_cluster, pg, relayer, unique_topic):
    topic = kafka_cluster.create_topic(unique_topic(), partitions=1, rf=3)
    progress = kafka_cluster.create_topic(unique_topic("progress"), partitions=1, rf=3,
                                          configs={"cleanup.policy": "delete"})
    r = relayer("--dsn", pg.dsn(), "--brokers", kafka_cluster.bootstrap, "--topic", topic,
                *EOS, "--progress-topic", progress)
    rc = r.wait_exit(60)
    assert rc == 1, "expected exit 1, got %s; log:\n%s" % (rc, r.log_tail())
    log = r.log_tail(50)
    assert "cleanup.policy=delete" in log and "cleanup.policy=compact" in log, log


def test_exactly_once_across_a_postgresql_crash(kafka_cluster, pg, relayer, unique_topic):
    topic, progress = unique_topic(), unique_topic("progress")
    extra = EOS + ("--progress-topic", progress)
    kafka_cluster.create_topic(topic, partitions=3, rf=3, configs=MIN_ISR)
    aggs = prepare(pg)
    r = start(relayer, pg, kafka_cluster.bootstrap, topic, *extra)
    load = Load(pg, aggs, seed=28)
    load.start()
    time.sleep(4)
    load.stop()
    m1, m1_end = commit_marker(pg, "real")
    wait_confirmed(pg, r, m1_end)
    r.kill()
    pg.stop(mode="immediate")
    pg.start()
    behind = pg.confirmed_flush_lsn(SLOT)
    print("after the crash the slot is at %s, Kafka committed up to at least %s"
          % (harness.int_to_lsn(behind), harness.int_to_lsn(m1_end)))
    r = start(relayer, pg, kafka_cluster.bootstrap, topic, *extra)
    if behind < m1_end:
        r.wait_for_log("starting replication again from there", timeout=60)
    load.start()
    time.sleep(3)
    load.stop()
    m2, m2_end = commit_marker(pg, "real")
    wait_confirmed(pg, r, m2_end)
    rc = r.terminate(30)
    assert rc == 0, "the relayer exited %s on SIGTERM; log tail:\n%s" % (rc, r.log_tail())
    committed, records, duplicates = check(pg, read_committed(kafka_cluster.bootstrap, [topic]),
                                           load, {m1, m2})
    print("exactly-once across a PostgreSQL crash: %d events, %d duplicates, slot was %d bytes "
          "behind Kafka" % (committed, duplicates, max(0, m1_end - behind)))
    assert duplicates == 0, "%d duplicates with --delivery exactly-once" % duplicates


def test_takeover_fences_the_stalled_replica(kafka_cluster, pg, relayer, unique_topic):
    topic, progress = unique_topic(), unique_topic("progress")
    kafka_cluster.create_topic(topic, partitions=3, rf=3, configs=MIN_ISR)
    aggs = prepare(pg)
    from test_kafka_errors import metric
    from test_operations import http_get
    base = ("--status-interval", "0.5") + EOS + ("--progress-topic", progress)
    port = harness.free_port()
    old = start(relayer, pg, kafka_cluster.bootstrap, topic, *base,
                "--metrics-addr", "127.0.0.1:%d" % port)
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 30, message="/readyz 200")
    load = Load(pg, aggs, seed=29)
    load.start()
    time.sleep(2)
    new = relayer("--dsn", pg.dsn(), "--brokers", kafka_cluster.bootstrap, "--topic", topic,
                  *base, "--takeover-after", "3")
    new.wait_for_log(r"waiting as a standby", timeout=30)
    time.sleep(1)
    old.signal(signal.SIGSTOP)
    try:
        new.wait_for_log(r"terminated it to take over", timeout=60)
        new.wait_for_log(r"Kafka has everything committed up to|no progress record", timeout=60)
        time.sleep(3)  # the new replica produces and commits meanwhile
    finally:
        old.signal(signal.SIGCONT)
    old.wait_for_log(r"stops producing and stands by", timeout=60)
    old.assert_running_for(3)
    fenced = 'outbox_relay_delivery_waiting{reason="fenced"}'
    assert metric(port, fenced) == 1, "the fenced gauge is not 1"
    assert http_get(port, "/readyz")[0] == 503, "a fenced standby must not be ready"
    time.sleep(1)
    load.stop()
    marker_id, marker_end = commit_marker(pg, "real")
    wait_confirmed(pg, new, marker_end)
    assert old.running(), "the fenced replica exited; log:\n%s" % old.log_tail()
    assert "FENCED" in old.log_text() or "fenced" in old.log_text()
    for r in (old, new):
        rc = r.terminate(30)
        assert rc == 0, "exit %s on SIGTERM; log tail:\n%s" % (rc, r.log_tail())
    committed, records, duplicates = check(pg, read_committed(kafka_cluster.bootstrap, [topic]),
                                           load, {marker_id})
    print("takeover with the old replica stalled: %d events, %d duplicates" % (committed, duplicates))
    assert duplicates == 0, "%d duplicates across a takeover" % duplicates


def test_exactly_once_when_the_busiest_partitions_leader_is_killed(own_kafka_cluster, pg, relayer,
                                                                   unique_topic):
    cluster = own_kafka_cluster
    topic, progress = unique_topic(), unique_topic("progress")
    cluster.create_topic(topic, partitions=3, rf=3, configs=MIN_ISR)
    aggs = prepare(pg)
    r = start(relayer, pg, cluster.bootstrap, topic, *EOS, "--progress-topic", progress)
    load = Load(pg, aggs, seed=30)
    load.start()
    r.assert_running_for(5)
    hw = high_watermarks(cluster.bootstrap, topic)
    busiest = max(hw, key=hw.get)
    victim = cluster.leader_of(topic, busiest)
    cluster.kill(victim)
    print("exactly-once: SIGKILLed broker %d, leader of %s[%d]" % (victim, topic, busiest))

    def new_leaders():
        assert r.running(), "relayer exited (rc=%s); log:\n%s" % (r.returncode, r.log_tail())
        try:
            leaders = [cluster.leader_of(topic, p) for p in range(3)]
        except Exception:
            return None
        return all(x not in (victim, -1) for x in leaders) and leaders
    wait_until(new_leaders, 60, interval=0.2, message="new leaders for every partition")
    r.assert_running_for(5)
    cluster.start(victim)
    for p in range(3):
        cluster.wait_isr(topic, p, 3, timeout=90)
    r.assert_running_for(3)
    load.stop()
    marker_id, marker_end = commit_marker(pg, "real")
    wait_confirmed(pg, r, marker_end, timeout=180)
    rc = r.terminate(30)
    assert rc == 0, "the relayer exited %s on SIGTERM; log tail:\n%s" % (rc, r.log_tail())
    committed, records, duplicates = check(pg, read_committed(cluster.bootstrap, [topic]), load,
                                           {marker_id})
    print("exactly-once with a leader killed: %d events, %d duplicates" % (committed, duplicates))
    assert duplicates == 0, "%d duplicates with --delivery exactly-once" % duplicates


def test_check_exactly_once_on_a_real_cluster(kafka_cluster, pg, relayer_binary, unique_topic):
    from test_check import expect, run_check
    base = ("--dsn", pg.dsn(), "--brokers", kafka_cluster.bootstrap) + EOS
    missing = unique_topic("progress")
    rep = run_check(relayer_binary, *base, "--progress-topic", missing)
    expect(rep, "transactions", "PASS", "init_transactions")
    expect(rep, "transaction_timeout", "PASS", "transaction.max.timeout.ms 900000")
    expect(rep, "progress_topic", "PASS", "does not exist yet")

    compacted = kafka_cluster.create_topic(unique_topic("compacted"), partitions=1, rf=3,
                                           configs={"cleanup.policy": "compact"})
    rep = run_check(relayer_binary, *base, "--progress-topic", compacted)
    expect(rep, "progress_topic", "PASS", "cleanup.policy=compact")

    deleting = kafka_cluster.create_topic(unique_topic("deleting"), partitions=1, rf=3,
                                          configs={"cleanup.policy": "delete"})
    rep = run_check(relayer_binary, *base, "--progress-topic", deleting,
                    "-X", "transaction.timeout.ms=1000000")
    expect(rep, "progress_topic", "FAIL", "cleanup.policy=delete", "cleanup.policy=compact")
    expect(rep, "transaction_timeout", "FAIL", "above the brokers'")
    # the at-least-once default checks none of it
    rep = run_check(relayer_binary, "--dsn", pg.dsn(), "--brokers", kafka_cluster.bootstrap)
    assert "transactions" not in rep.items and "progress_topic" not in rep.items


def test_progress_read_after_compaction(kafka_cluster, pg, relayer, unique_topic):
    topic = kafka_cluster.create_topic(unique_topic(), partitions=3, rf=3, configs=MIN_ISR)
    progress = kafka_cluster.create_topic(
        unique_topic("progress"), partitions=1, rf=3,
        configs={"cleanup.policy": "compact", "segment.ms": "200",
                 "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "100",
                 "min.compaction.lag.ms": "0"})
    extra = EOS + ("--progress-topic", progress, "--transaction-max-events", "1")
    aggs = prepare(pg)
    r = start(relayer, pg, kafka_cluster.bootstrap, topic, *extra)
    load = Load(pg, aggs, seed=31)
    load.start()
    # Enough PostgreSQL transactions for some 80 Kafka commits, then the
    # relayer catches up. Counted where they are committed, not in Kafka:
    # on a loaded machine each commit takes hundreds of ms, the relayer
    # falls behind the producers, and waiting for Kafka's count kept the
    # producers going and the backlog growing past what CATCH_UP drains.
    # A loaded machine also commits fewer transactions per second: bounded.
    deadline = time.monotonic() + 60
    while (sum(p.tx_committed for p in load.all) < 80 and time.monotonic() < deadline):
        time.sleep(0.5)
    load.stop()
    m1, m1_end = commit_marker(pg, "real")
    wait_confirmed(pg, r, m1_end)
    # Commits counted by the partition's high watermark, which compaction
    # does not lower: each Kafka commit wrote one progress record and one
    # commit marker into it. (Counting the records read back counted what
    # the cleaner had left, a few dozen.)
    commits = high_watermarks(kafka_cluster.bootstrap, progress)[0] // 2
    assert commits > 50, "too few commits to compact: %d" % commits

    # a few more commits roll the segments the cleaner may then compact
    def compacted():
        commit_marker(pg, "real")
        n = len(progress_records(kafka_cluster.bootstrap, progress))
        return n < commits // 4 and n
    left = wait_until(compacted, 120, interval=3, message="the progress topic to be compacted")
    print("progress topic: %d commits compacted to %d records" % (commits, left))
    m2, m2_end = commit_marker(pg, "real")
    wait_confirmed(pg, r, m2_end)
    last = progress_records(kafka_cluster.bootstrap, progress)[-1][1]
    assert harness.lsn_to_int(last["lsn"]) >= m2_end
    r.kill()
    r = restart(relayer, pg, kafka_cluster.bootstrap, topic, extra)
    r.wait_for_log(r"Kafka has everything committed up to %s" % last["lsn"], timeout=60)
    m3, m3_end = commit_marker(pg, "real")
    wait_confirmed(pg, r, m3_end)
    assert r.terminate(30) == 0
    markers = {m1, m2, m3}
    records = read_committed(kafka_cluster.bootstrap, [topic])
    markers |= {int(h["event_id"]) for _, _, _, _, h, v in records
                if h.get("event_type") == "real.marker"}
    committed, _, duplicates = check(pg, records, load, markers)
    assert duplicates == 0, "%d duplicates after reading a compacted progress topic" % duplicates


def test_dead_letter_in_the_same_transaction(kafka_cluster, pg, relayer, unique_topic):
    topic = kafka_cluster.create_topic(unique_topic(), partitions=1, rf=3, configs=MIN_ISR)
    dlt = kafka_cluster.create_topic(unique_topic("dl"), partitions=1, rf=3, configs=MIN_ISR)
    r = start(relayer, pg, kafka_cluster.bootstrap, topic, *EOS,
              "--progress-topic", unique_topic("progress"), "--on-poison", "dead-letter",
              "--dead-letter-topic", dlt, "-X", "message.max.bytes=100000")
    pg.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")  # commit_marker's
    agg = "00000000-0000-0000-0000-000000000027"
    conn = pg.connect(autocommit=False)
    cur = conn.cursor()
    ids = []
    for t in range(3):
        for i in range(5):
            payload = '{"n": %d}' % (t * 10 + i) if (t, i) != (1, 2) else \
                '{"blob": "%s"}' % ("x" * 200000)
            cur.execute("INSERT INTO events_outbox (aggregate_id, type, payload) VALUES "
                        "(%s, 'eo.small', %s) RETURNING id", (agg, payload))
            ids.append(cur.fetchone()[0])
        conn.commit()
    conn.close()
    big = ids[7]
    marker_id, marker_end = commit_marker(pg, "eo")
    wait_confirmed(pg, r, marker_end)
    assert r.terminate(30) == 0
    got = [int(h["event_id"]) for _, _, _, _, h, _ in read_committed(kafka_cluster.bootstrap, [topic])]
    assert got == [i for i in ids if i != big] + [marker_id], got
    dead = read_committed(kafka_cluster.bootstrap, [dlt])
    assert [h.get("event_id") for _, _, _, _, h, _ in dead] == [str(big)], dead


def test_slow_commits_keep_the_replication_connection(kafka_cluster, pg, relayer, unique_topic):
    """A Kafka transaction per PostgreSQL transaction (--transaction-max-events
    1) whose commits each take 300 ms (the test hook delay-commit: a loaded
    cluster, CI), over a backlog of 120 transactions: the relayer sends its
    status updates between commits, so wal_sender_timeout (10 s in the
    tests) never ends the replication connection, and every event arrives
    once. Before, the loop looked at the status only every 256 frames,
    which took some 25 s of commits, and the server closed the connection
    again and again (test_progress_read_after_compaction under load)."""
    topic = kafka_cluster.create_topic(unique_topic(), partitions=1, rf=3, configs=MIN_ISR)
    pg.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")  # commit_marker's
    r = start(relayer, pg, kafka_cluster.bootstrap, topic, *EOS,
              "--progress-topic", unique_topic("progress"), "--transaction-max-events", "1",
              env={"OUTBOX_RELAY_TEST_EOS": "delay-commit=300"})
    r.wait_for_log(r"no progress record", timeout=60)
    ids = insert_transactions(pg, 120)
    marker_id, marker_end = commit_marker(pg, "eo")
    wait_confirmed(pg, r, marker_end, timeout=180)
    log = r.log_text()
    assert "lost the replication connection" not in log, r.log_tail(60)
    assert r.terminate(30) == 0
    assert event_ids(kafka_cluster.bootstrap, topic) == ids + [marker_id]


def copies_of(ids, got):
    """{id: copies} for ids, from the event ids read (got)."""
    n = {i: 0 for i in ids}
    for g in got:
        if g in n:
            n[g] += 1
    return n


def test_kill_between_the_kafka_commit_and_the_slot_confirmation(kafka_cluster, pg, relayer,
                                                                  unique_topic):
    """The test hook pause-after-commit stops the relayer right after a
    Kafka commit succeeded and before its events are acknowledged, so
    before the slot is confirmed; SIGKILL lands exactly there. Kafka holds
    events the slot does not confirm; started again, the relayer reads its
    progress, starts replication after it, and every event is in Kafka
    once."""
    topic = kafka_cluster.create_topic(unique_topic(), partitions=1, rf=3, configs=MIN_ISR)
    progress = unique_topic("progress")
    pg.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")  # commit_marker's
    extra = EOS + ("--progress-topic", progress)
    r = start(relayer, pg, kafka_cluster.bootstrap, topic, *extra,
              env={"OUTBOX_RELAY_TEST_EOS": "pause-after-commit=120000"})
    r.wait_for_log(r"no progress record", timeout=60)
    ids = insert_transactions(pg, 40)
    r.wait_for_log(r"test hook: Kafka committed", timeout=60)
    hook_lsn = harness.lsn_to_int(re.search(r"lsn=(\S+): test hook: Kafka committed",
                                            r.log_text()).group(1))
    confirmed = pg.confirmed_flush_lsn(SLOT)
    assert confirmed < hook_lsn, "the slot confirmed %s, past the paused commit at %s" % (
        harness.int_to_lsn(confirmed), harness.int_to_lsn(hook_lsn))
    r.kill()
    in_kafka = event_ids(kafka_cluster.bootstrap, topic)
    assert in_kafka, "the paused commit holds no event: the kill proved nothing"
    print("killed between the Kafka commit (%s, %d events in Kafka) and the slot's confirmation "
          "(%s)" % (harness.int_to_lsn(hook_lsn), len(in_kafka), harness.int_to_lsn(confirmed)))
    r = restart(relayer, pg, kafka_cluster.bootstrap, topic, extra)
    r.wait_for_log(r"Kafka has everything committed up to %s" % harness.int_to_lsn(hook_lsn),
                   timeout=60)
    marker_id, marker_end = commit_marker(pg, "eo")
    wait_confirmed(pg, r, marker_end)
    assert r.terminate(30) == 0
    got = event_ids(kafka_cluster.bootstrap, topic)
    dup = {i: n for i, n in copies_of(ids, got).items() if n != 1}
    assert not dup, "events not exactly once (id: copies): %s" % dup
    assert got == ids + [marker_id]


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_kafka_has_it_the_slot_does_not(kafka_cluster, pg, relayer, unique_topic, tmp_path,
                                        delivery):
    """The same point reached from outside, in both modes: the relayer's
    path to PostgreSQL is stalled from the relayer's side (fault_proxy),
    so its status updates never arrive; it goes on reading WAL and
    delivering, and once Kafka holds every event while the slot confirms
    none of them it is SIGKILLed and started again on a direct path.
    Exactly-once: every event once. At-least-once: the events come again
    (duplicates > 0), so the first result is measured, not assumed."""
    topic = kafka_cluster.create_topic(unique_topic(), partitions=1, rf=3, configs=MIN_ISR)
    pg.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")  # commit_marker's
    extra = ("--delivery", delivery)
    if delivery == "exactly-once":
        extra += ("--progress-topic", unique_topic("progress"))
    proxy = harness.FaultProxy(pg.port, str(tmp_path))
    try:
        dsn = pg.dsn().replace("port=%d" % pg.port, "port=%d" % proxy.port)
        r = relayer("--dsn", dsn, "--brokers", kafka_cluster.bootstrap, "--topic", topic, *extra,
                    *DEBUG)
        wait_until(lambda: (pg.slot_info(SLOT) or {}).get("active"), 60, interval=0.2,
                   message="the relayer to stream")
        if delivery == "exactly-once":
            r.wait_for_log(r"no progress record", timeout=60)
        first, first_end = commit_marker(pg, "eo")
        wait_confirmed(pg, r, first_end)
        proxy.stall("up", "existing")
        ids = insert_transactions(pg, 40)
        marker_id, marker_end = commit_marker(pg, "eo")
        wait_until(lambda: marker_id in event_ids(kafka_cluster.bootstrap, topic), 60,
                   interval=0.5, message="the marker in Kafka")
        confirmed = pg.confirmed_flush_lsn(SLOT)
        assert confirmed < marker_end
        r.kill()
    finally:
        proxy.cleanup()
    r = restart(relayer, pg, kafka_cluster.bootstrap, topic, extra)
    m2, m2_end = commit_marker(pg, "eo")
    wait_confirmed(pg, r, m2_end)
    assert r.terminate(30) == 0
    got = event_ids(kafka_cluster.bootstrap, topic)
    copies = copies_of(ids + [marker_id], got)
    lost = [i for i, n in copies.items() if not n]
    assert not lost, "lost: %s" % lost
    duplicates = sum(n - 1 for n in copies.values())
    print("%s, killed with %d events in Kafka the slot did not confirm: %d duplicates"
          % (delivery, len(copies), duplicates))
    if delivery == "exactly-once":
        assert duplicates == 0, "%d duplicates with --delivery exactly-once" % duplicates
    else:
        assert duplicates > 0, "no duplicates at all: the kill proved nothing"


def produce_progress(bootstrap, topic, key, value):
    """One plain (non-transactional) record: a progress record as another
    relayer left it; value None is a tombstone."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    p.produce(topic, key=key.encode(), value=None if value is None else json.dumps(value).encode())
    assert p.flush(30) == 0


def test_progress_of_another_cluster_is_not_read(kafka_cluster, pg, relayer, unique_topic):
    """Two PostgreSQL clusters with the same slot and database names on one
    progress topic: records of the other (its system identifier in the key
    and the value; or, written before that, in its transactional.id) far
    ahead of ours are passed over, not taken (which would skip every event
    of this cluster). A record that cannot say which cluster wrote it (no
    system identifier anywhere) is refused with the way out, and after its
    tombstone the relayer starts."""
    topic = kafka_cluster.create_topic(unique_topic(), partitions=1, rf=3, configs=MIN_ISR)
    compact = {"cleanup.policy": "compact"}
    progress = kafka_cluster.create_topic(unique_topic("progress"), partitions=1, rf=3,
                                          configs=compact)
    pg.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")  # commit_marker's
    sysid = system_identifier(pg)
    other = "7000000000000000001" if sysid != "7000000000000000001" else "7000000000000000002"
    base = {"format": "outbox-relay-progress", "version": 1, "slot": SLOT,
            "database": "postgres", "lsn": "FF/0"}
    produce_progress(kafka_cluster.bootstrap, progress, "%s.%s" % (other, SLOT),
                     dict(base, system_identifier=other,
                          transactional_id="outbox-relay.%s.%s" % (other, SLOT)))
    produce_progress(kafka_cluster.bootstrap, progress, SLOT,
                     dict(base, transactional_id="outbox-relay.%s.%s" % (other, SLOT)))
    r = start(relayer, pg, kafka_cluster.bootstrap, topic, *EOS, "--progress-topic", progress)
    r.wait_for_log(r"no progress record", timeout=60)
    # the other's record under its own key is not even looked at; the older
    # one under the slot's name alone is, and passed over
    assert re.search(r"1 record\(s\) of slot %s from another PostgreSQL cluster" % SLOT,
                     r.log_text()), r.log_tail()
    ids = insert_transactions(pg, 5)
    marker_id, marker_end = commit_marker(pg, "eo")
    wait_confirmed(pg, r, marker_end)
    assert r.terminate(30) == 0
    assert event_ids(kafka_cluster.bootstrap, topic) == ids + [marker_id]

    unknown = kafka_cluster.create_topic(unique_topic("progress"), partitions=1, rf=3,
                                         configs=compact)
    produce_progress(kafka_cluster.bootstrap, unknown, SLOT,
                     dict(base, transactional_id="outbox-relay.%s" % SLOT))
    args = ("--dsn", pg.dsn(), "--brokers", kafka_cluster.bootstrap, "--topic", topic) + EOS + \
        ("--progress-topic", unknown)
    r = relayer(*args, *DEBUG)
    assert r.wait_exit(60) == 1, r.log_tail()
    log = r.log_tail(20)
    assert "without the PostgreSQL system identifier" in log and "tombstone" in log, log
    produce_progress(kafka_cluster.bootstrap, unknown, SLOT, None)
    wait_until(lambda: not (pg.slot_info(SLOT) or {}).get("active"), 60, interval=0.1,
               message="the walsender to end")
    r = start(relayer, pg, kafka_cluster.bootstrap, topic, *EOS, "--progress-topic", unknown)
    r.wait_for_log(r"no progress record", timeout=60)
    assert r.terminate(30) == 0


def test_stalled_leader_during_a_transaction(own_kafka_cluster, pg, relayer, unique_topic):
    """The path to the leader of the only partition goes silent mid-stream
    (its broker SIGSTOPped: sockets open, nothing answered, as a stalled
    middlebox) for 20 to 50 s while producers commit: the relayer's commit waits,
    and it says so every 10 s with what it waits for (a relayer that stops
    confirming without a word is a defect); once the broker answers again
    (SIGCONT) it goes on, never exits, and every event arrives once."""
    cluster = own_kafka_cluster
    topic, progress = unique_topic(), unique_topic("progress")
    cluster.create_topic(topic, partitions=1, rf=3, configs=MIN_ISR)
    aggs = prepare(pg)
    r = start(relayer, pg, cluster.bootstrap, topic, *EOS, "--progress-topic", progress)
    r.wait_for_log(r"no progress record", timeout=60)
    load = Load(pg, aggs, seed=32)
    load.start()
    r.assert_running_for(3)
    victim = cluster.leader_of(topic, 0)
    node = cluster._broker(victim)
    node.proc.send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        r.wait_for_log(r"the Kafka transaction's commit has been retried for \d+ s|"
                       r"the Kafka transaction has been open for \d+ s", timeout=40)
        time.sleep(10)
    finally:
        node.proc.send_signal(signal.SIGCONT)
    said = [x for x in r.log_text().splitlines() if "has been" in x]
    print("exactly-once: broker %d (leader) stalled %.0f s; the relayer said: %s"
          % (victim, time.monotonic() - t0, said[:2]))
    r.assert_running_for(5)
    load.stop()
    marker_id, marker_end = commit_marker(pg, "real")
    wait_confirmed(pg, r, marker_end, timeout=240)
    rc = r.terminate(30)
    assert rc == 0, "the relayer exited %s on SIGTERM; log tail:\n%s" % (rc, r.log_tail())
    committed, records, duplicates = check(pg, read_committed(cluster.bootstrap, [topic]), load,
                                           {marker_id})
    print("exactly-once with the leader stalled: %d events, %d duplicates" % (committed,
                                                                              duplicates))
    assert duplicates == 0, "%d duplicates with --delivery exactly-once" % duplicates
