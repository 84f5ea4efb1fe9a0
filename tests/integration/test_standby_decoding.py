"""test_standby_decoding.py — logical decoding on a hot standby (issue 28).

`--dsn` points at a physical standby (hot_standby_feedback on, a physical
slot on the primary): the relayer creates its slot there and streams from
it, taking the decoding load off the primary. What needs the primary goes
through `--primary-dsn`: pg_log_standby_snapshot() while the slot is
created (without it, creation waits for the primary's own running-xacts
record), the heartbeat, and the reaper, which deletes on the primary only
what the standby's slot confirmed (kept while Kafka is down). When the
standby is promoted mid-stream, the relayer goes on from its slot.

PostgreSQL 16+ decodes on a standby; the suite runs 17 and 18.
"""

import json
import os
import re
import subprocess
import threading
import time

import psycopg2
import pytest

from harness import wait_until
from pg_cluster import PgStandby, multi_host_dsn

pytestmark = [pytest.mark.usefixtures("pg_major"), pytest.mark.pg_majors(17, 18)]

SLOT = "outbox_relay"


@pytest.fixture
def standby(pg):
    s = PgStandby(pg, sync_slots=False)
    yield s
    s.cleanup()


def insert(cluster, n, thread=0, start=1):
    rows = cluster.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
                         "SELECT '00000000-0000-0000-0000-00000000000%s'::uuid, 'order.placed', "
                         "jsonb_build_object('thread', %s, 'seq', g) "
                         "FROM generate_series(%s, %s) g RETURNING id",
                         (thread, thread, start, start + n - 1))
    return [str(r[0]) for r in rows]


def start_on_standby(relayer, pg, standby, broker, *extra):
    p = relayer("--dsn", standby.dsn(), "--primary-dsn", pg.dsn(), "--brokers",
                broker.bootstrap, "--status-interval", "0.5", "--reconnect-max", "2", *extra)
    p.wait_for_log(r"streaming public\.events_outbox", timeout=90)
    return p


def test_events_arrive_through_the_standbys_slot(pg, standby, broker, kafka, relayer,
                                                 relayer_binary):
    p = start_on_standby(relayer, pg, standby, broker, "--heartbeat-interval", "1")
    assert standby.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s "
                          "AND slot_type = 'logical'", (SLOT,)) == 1
    assert not pg.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                         (SLOT,)), "the slot must live on the standby, not the primary"
    ids = insert(pg, 200)
    msgs = kafka.read("order", expected=200, timeout=60)
    got = [m.headers.get("event_id") for m in msgs]
    assert set(ids) <= set(got)
    seqs = [json.loads(m.value)["seq"] for m in msgs]
    assert seqs == sorted(seqs), "per-aggregate order"
    p.wait_for_log(r"--dsn is a standby \(decoding on a standby\): the reaper deletes",
                   timeout=30)
    assert "cannot record the new slot" not in p.log_text()
    # Recorded on the primary through --primary-dsn, read back by the standby.
    assert pg.scalar("SELECT count(*) FROM public.outbox_relay_slots WHERE slot_name = %s",
                     (SLOT,)) == 1

    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    out = subprocess.run([relayer_binary, "check", "--dsn", standby.dsn()], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=120).stdout
    assert re.search(r"PASS\s+failover\s+slot outbox_relay is this standby's own", out), out
    status = subprocess.run([relayer_binary, "status", "--dsn", standby.dsn()], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=120).stdout
    assert "lag_bytes" in status and "the slot is this standby's own" in status, status

    # An idle primary does not hold the standby's slot back: the heartbeat
    # through --primary-dsn gives the slot WAL of its database to move on.
    target = standby.scalar("SELECT pg_last_wal_replay_lsn()")
    wait_until(lambda: standby.scalar(
        "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
        (target, SLOT)), 30, message="the standby's slot to confirm past the idle point")
    assert p.terminate() == 0


def test_promotion_of_the_standby_mid_stream_loses_nothing(pg, standby, broker, kafka, relayer):
    p = start_on_standby(relayer, pg, standby, broker)
    stop = threading.Event()
    dsn = multi_host_dsn([pg, standby], target_session_attrs="read-write")
    retries = [0]

    def produce():
        seq, conn = 0, None
        while not stop.is_set():
            try:
                if conn is None:
                    conn = psycopg2.connect(dsn, connect_timeout=3)
                seq += 1
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO events_outbox (aggregate_id, type, payload) VALUES "
                                "('00000000-0000-0000-0000-000000000009', 'order.placed', %s)",
                                (json.dumps({"seq": seq}),))
                conn.commit()
                time.sleep(0.005)
            except psycopg2.Error:
                retries[0] += 1
                conn = None
                time.sleep(0.2)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    time.sleep(3)
    p.mark()
    pg.stop(mode="fast")
    standby.promote()
    time.sleep(4)
    stop.set()
    t.join(30)

    rows = standby.query("SELECT id, (payload->>'seq')::int FROM events_outbox")
    expected = {str(r[0]) for r in rows}
    seq_of = {str(r[0]): r[1] for r in rows}
    msgs = []

    def all_in():
        msgs[:] = kafka.read("order", expected=None, timeout=3)
        return expected <= {m.headers.get("event_id") for m in msgs}

    wait_until(all_in, 90, message="every event of the promoted standby in Kafka")
    ids = [m.headers.get("event_id") for m in msgs]
    first, seen = [], set()
    for i in ids:
        if i not in seen and i in seq_of:
            seen.add(i)
            first.append(seq_of[i])
    print("decoding on a standby, promoted mid-stream (PostgreSQL %d): %d events, %d in Kafka, "
          "%d lost, %d duplicates" % (pg.major, len(expected), len(ids),
                                      len(expected - set(ids)), len(ids) - len(set(ids))))
    assert first == sorted(first), "per-aggregate order"
    assert not expected - set(ids), "lost events across the promotion"
    p.wait_for_log(r"no longer a standby \(promoted\)", timeout=30)
    assert p.running()
    assert p.terminate() == 0


def insert_aged(cluster, n, age):
    rows = cluster.query("INSERT INTO events_outbox (aggregate_id, type, payload, created_at) "
                         "SELECT gen_random_uuid(), 'order.placed', jsonb_build_object('seq', g), "
                         "now() - %s::interval FROM generate_series(1, %s) g RETURNING id",
                         (age, n))
    return [r[0] for r in rows]


def test_reaper_deletes_on_the_primary_only_what_the_standbys_slot_confirmed(
        pg, standby, broker, kafka, relayer):
    p = start_on_standby(relayer, pg, standby, broker, "--retention", "1 minute",
                         "--reap-interval", "1", "--heartbeat-interval", "1")
    p.wait_for_log(r"the reaper deletes and the heartbeat writes on the primary", timeout=30)

    def left(ids):
        return pg.scalar("SELECT count(*) FROM events_outbox WHERE id = ANY(%s)", (ids,))

    delivered = insert_aged(pg, 50, "1 hour")
    kafka.read("order", expected=50, timeout=60)
    wait_until(lambda: left(delivered) == 0, 90,
               message="the reaper to delete the delivered rows on the primary")

    # Kafka down: the standby's slot confirms nothing past these rows, so
    # the reaper keeps them, however old.
    broker.cmd("down")
    try:
        held = insert_aged(pg, 30, "1 hour")
        time.sleep(10)
        assert left(held) == 30, "the reaper deleted rows the standby's slot had not confirmed"
    finally:
        broker.cmd("up")
    msgs = kafka.read("order", expected=80, timeout=90)
    assert {str(i) for i in held} <= {m.headers.get("event_id") for m in msgs}
    wait_until(lambda: left(held) == 0, 90, message="the reaper to delete them once delivered")
    assert p.running()
    assert p.terminate() == 0
