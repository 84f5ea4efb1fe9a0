"""test_tableless.py — table-less mode: events emitted as transactional
logical messages (outbox_emit_message, sql/005_producer.sql) and relayed by
outbox-relay from the same slot as table events.

  test_committed_messages_arrive_like_table_events
      committed messages arrive with the topic, key and headers of a table
      event and event_id "m-<LSN>"; rolled-back ones, non-transactional ones
      and other prefixes never do
  test_undecodable_envelope_is_poison
      a message with our prefix that is not an envelope: halt, or dead-letter
  test_message_prefix_option
      --message-prefix picks the prefix; "" turns messages off
  test_event_id_is_stable_across_redelivery
      broker down, relayer SIGKILLed before confirming, broker up, restart:
      the events arrive with the ids their LSNs give
  test_duplicate_delivery_has_the_same_event_id
      a delivery the relayer never heard back about is sent again after a
      SIGKILL: both copies carry the same event_id
  test_table_and_message_events_interleave_per_aggregate
      alternating modes (and both in one transaction) on the same aggregate:
      Kafka order == commit order
"""

import json
import signal
import threading
import time
import uuid

import psycopg2
import pytest

import harness

pytestmark = pytest.mark.usefixtures("plugin")  # once per output plugin (conftest.py)

ENV_AGG = "7d0c6a52-0000-4000-8000-0000000000%02d"


def m_id(lsn_text):
    """The event_id the relayer gives a message at this LSN."""
    return "m-%016X" % harness.lsn_to_int(lsn_text)


def start_relayer(relayer, relay_args, *extra, tuning="tuned"):
    r = relayer(*(relay_args + harness.tuned(tuning, "--status-interval", "0.5") + list(extra)))
    r.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    return r


def emit_message(cur, agg, typ, payload, prefix=None):
    if prefix is None:
        cur.execute("SELECT outbox_emit_message(%s, %s, %s)", (agg, typ, json.dumps(payload)))
    else:
        cur.execute("SELECT outbox_emit_message(%s, %s, %s, %s)",
                    (agg, typ, json.dumps(payload), prefix))
    return cur.fetchone()[0]


def emit_row(cur, agg, typ, payload):
    cur.execute("SELECT outbox_emit(%s, %s, %s)", (agg, typ, json.dumps(payload)))
    return str(cur.fetchone()[0])


@pytest.mark.parametrize("tuning", harness.TUNINGS)
def test_committed_messages_arrive_like_table_events(pg, broker, kafka, relayer, relay_args,
                                                     tuning):
    rel = start_relayer(relayer, relay_args, tuning=tuning)
    conn = pg.connect(autocommit=False)
    cur = conn.cursor()
    a1, a2 = ENV_AGG % 1, ENV_AGG % 2

    # Committed: one message alone, then two messages and a row together.
    l1 = emit_message(cur, a1, "shipment.sent", {"n": 1, "s": "é\"\\\n", "nested": [1, {"x": None}]})
    conn.commit()
    l2 = emit_message(cur, a2, "shipment.sent", {"n": 2})
    row = emit_row(cur, a2, "shipment.sent", {"n": 3})
    l3 = emit_message(cur, a2, "shipment.sent", {"n": 4})
    conn.commit()
    # Rolled back: never published.
    emit_message(cur, a1, "shipment.sent", {"n": "rolled-back-1"})
    emit_row(cur, a1, "shipment.sent", {"n": "rolled-back-2"})
    conn.rollback()
    # Rolled back to a savepoint inside a committed transaction: only what
    # survived the savepoint is published (here: a message without key).
    cur.execute("SAVEPOINT s")
    emit_message(cur, a1, "shipment.sent", {"n": "rolled-back-3"})
    emit_row(cur, a1, "shipment.sent", {"n": "rolled-back-4"})
    cur.execute("ROLLBACK TO SAVEPOINT s")
    l6 = emit_message(cur, None, "shipment.sent", {"n": 6})
    conn.commit()
    # Non-transactional (outside any transaction's fate) and foreign
    # prefixes: ignored.
    conn.autocommit = True
    cur.execute("SELECT pg_logical_emit_message(false, 'outbox', %s)",
                (json.dumps({"aggregate_id": a1, "type": "shipment.sent",
                             "payload": {"n": "non-transactional"}}),))
    emit_message(cur, a1, "shipment.sent", {"n": "other-prefix"}, prefix="other")
    emit_message(cur, a1, "shipment.sent", {"n": "prefix-with-suffix"}, prefix="outbox2")
    conn.autocommit = False
    # A sentinel committed after all of them: once it is there, anything
    # that was going to be published is.
    l5 = emit_message(cur, a1, "shipment.sent", {"n": 5})
    conn.commit()

    got = kafka.read("shipment", expected=6, timeout=30)
    time.sleep(1.0)
    got = kafka.read("shipment", timeout=3)
    values = [json.loads(m.value) for m in got]
    assert sorted(v["n"] for v in values) == [1, 2, 3, 4, 5, 6], values

    by_n = {json.loads(m.value)["n"]: m for m in got}
    assert by_n[1].headers["event_id"] == m_id(l1)
    assert by_n[2].headers["event_id"] == m_id(l2)
    assert by_n[3].headers["event_id"] == row
    assert by_n[4].headers["event_id"] == m_id(l3)
    assert by_n[5].headers["event_id"] == m_id(l5)
    assert by_n[6].headers["event_id"] == m_id(l6)
    assert by_n[6].key is None  # aggregate_id null: no key
    del by_n[6]
    assert json.loads(by_n[1].value) == {"n": 1, "s": "é\"\\\n", "nested": [1, {"x": None}]}
    for n, m in by_n.items():
        assert m.topic == "shipment"
        assert m.key == (a1 if n in (1, 5) else a2)
        assert m.headers["event_type"] == "shipment.sent"
        assert m.headers.get("created_at"), m  # commit time for messages, the column for rows
    # Messages and the row of one transaction: one partition, written order.
    same_tx = sorted((by_n[n] for n in (2, 3, 4)), key=lambda m: m.offset)
    assert [json.loads(m.value)["n"] for m in same_tx] == [2, 3, 4]
    assert len({m.partition for m in same_tx}) == 1

    # Nothing was written to the outbox table by the messages.
    assert pg.scalar("SELECT count(*) FROM events_outbox") == 1
    assert len(got) == 6
    # And the slot moves past them.
    end = pg.current_wal_lsn()
    harness.wait_until(lambda: pg.confirmed_flush_lsn() >= harness.lsn_to_int(l5),
                       harness.confirm_timeout(tuning, 15),
                       message="the slot to confirm the messages")
    assert end > 0
    assert rel.terminate(30) == 0


def test_undecodable_envelope_is_poison(pg, broker, kafka, relayer, relay_args):
    """A transactional message with our prefix whose content is not an
    envelope cannot be routed: the relayer halts, naming its LSN, and
    confirms nothing past it; with --on-poison dead-letter it goes to the
    dead-letter topic and the stream goes on."""
    rel = start_relayer(relayer, relay_args)
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("SELECT pg_logical_emit_message(true, 'outbox', 'not an envelope')")
    bad = cur.fetchone()[0]
    assert rel.wait_exit(30) == 1
    assert "undecodable outbox change" in rel.log_text()
    assert harness.int_to_lsn(harness.lsn_to_int(bad)) in rel.log_text()
    assert pg.confirmed_flush_lsn() <= harness.lsn_to_int(bad)

    rel = start_relayer(relayer, relay_args, "--on-poison", "dead-letter")
    good = emit_message(cur, ENV_AGG % 6, "label.printed", {"n": 1})
    got = kafka.read("label", expected=1, timeout=30)
    assert [m.headers["event_id"] for m in got] == [m_id(good)]
    dead = kafka.read("outbox.dead-letter", expected=1, timeout=30)
    # The dead letter carries the undecodable change as wal2json gives it
    # (pgoutput: its frame in the same shape, decoder_describe()).
    assert len(dead) == 1 and json.loads(dead[0].value)["content"] == "not an envelope"
    assert "envelope" in dead[0].headers.get("error", "")
    assert rel.terminate(30) == 0


def test_message_prefix_option(pg, broker, kafka, relayer, relay_args):
    rel = start_relayer(relayer, relay_args, "--message-prefix", "billing")
    conn = pg.connect()
    cur = conn.cursor()
    emit_message(cur, ENV_AGG % 3, "invoice.issued", {"n": 1})                    # "outbox"
    lb = emit_message(cur, ENV_AGG % 3, "invoice.issued", {"n": 2}, prefix="billing")
    got = kafka.read("invoice", expected=1, timeout=30)
    time.sleep(1.0)
    got = kafka.read("invoice", timeout=3)
    assert [json.loads(m.value)["n"] for m in got] == [2]
    assert got[0].headers["event_id"] == m_id(lb)
    assert rel.terminate(30) == 0

    # "" turns table-less mode off: only table events.
    rel = start_relayer(relayer, relay_args, "--message-prefix", "")
    emit_message(cur, ENV_AGG % 3, "invoice.issued", {"n": 3})
    emit_message(cur, ENV_AGG % 3, "invoice.issued", {"n": 4}, prefix="billing")
    row = emit_row(cur, ENV_AGG % 3, "invoice.issued", {"n": 5})
    got = kafka.read("invoice", expected=2, timeout=30)
    time.sleep(1.0)
    got = kafka.read("invoice", timeout=3)
    assert [json.loads(m.value)["n"] for m in got] == [2, 5]
    assert got[1].headers["event_id"] == row
    assert rel.terminate(30) == 0


def test_event_id_is_stable_across_redelivery(pg, broker, kafka, relayer, relay_args):
    """Broker down: the relayer reads the events but nothing is delivered or
    confirmed; SIGKILL; broker up; restart: the events arrive, with the
    ids their WAL positions give (the same a first delivery would have)."""
    rel = start_relayer(relayer, relay_args)
    broker.create_topic("parcel", 4)
    conn = pg.connect(autocommit=False)
    cur = conn.cursor()
    # One delivered before the outage, so the topic and connections exist.
    l0 = emit_message(cur, ENV_AGG % 4, "parcel.moved", {"n": 0})
    conn.commit()
    assert [m.headers["event_id"] for m in kafka.read("parcel", expected=1, timeout=30)] == [m_id(l0)]
    harness.wait_until(lambda: pg.confirmed_flush_lsn() > harness.lsn_to_int(l0), 15,
                       message="the first event to be confirmed")

    broker.cmd("down")
    lsns = []
    for n in range(1, 6):
        lsns.append(emit_message(cur, ENV_AGG % 4, "parcel.moved", {"n": n}))
        if n % 2 == 0:
            emit_row(cur, ENV_AGG % 4, "parcel.moved", {"n": 100 + n})
        conn.commit()
    last = harness.lsn_to_int(lsns[-1])
    # The relayer has read them (the walsender sent past the last one)...
    harness.wait_until(lambda: harness.lsn_to_int(pg.scalar(
        "SELECT sent_lsn FROM pg_stat_replication WHERE application_name <> 'walreceiver' "
        "ORDER BY sent_lsn DESC LIMIT 1")) > last, 15, message="the relayer to read the events")
    time.sleep(0.5)
    # ...but confirmed none of them.
    confirmed = pg.confirmed_flush_lsn()
    assert confirmed < harness.lsn_to_int(lsns[0])
    assert rel.kill() == -signal.SIGKILL
    broker.cmd("up")

    rel = start_relayer(relayer, relay_args)
    got = kafka.read("parcel", expected=8, timeout=30)
    msgs = {json.loads(m.value)["n"]: m.headers["event_id"] for m in got}
    for n, lsn in zip(range(1, 6), lsns):
        assert msgs[n] == m_id(lsn), (n, msgs)
    assert sorted(msgs) == [0, 1, 2, 3, 4, 5, 102, 104]
    harness.wait_until(lambda: pg.confirmed_flush_lsn() > last, 15,
                       message="the redelivered events to be confirmed")
    assert rel.terminate(30) == 0


def test_duplicate_delivery_has_the_same_event_id(pg, broker, kafka, relayer, relay_args):
    """The broker stores the events but its answers are late; the relayer is
    SIGKILLed before it hears back, so it confirms nothing and sends them
    again after a restart: Kafka holds two copies with one event_id."""
    rel = start_relayer(relayer, relay_args)
    broker.create_topic("crate", 1)
    conn = pg.connect()
    cur = conn.cursor()
    l0 = emit_message(cur, ENV_AGG % 5, "crate.packed", {"n": 0})
    kafka.read("crate", expected=1, timeout=30)
    harness.wait_until(lambda: pg.confirmed_flush_lsn() > harness.lsn_to_int(l0), 15,
                       message="the first event to be confirmed")

    broker.cmd("rtt -1 4000")
    lsns = [emit_message(cur, ENV_AGG % 5, "crate.packed", {"n": n}) for n in (1, 2, 3)]
    time.sleep(2.0)  # produced and stored; the acks are still on their way
    confirmed = pg.confirmed_flush_lsn()
    assert rel.kill() == -signal.SIGKILL
    broker.cmd("rtt -1 0")
    assert confirmed < harness.lsn_to_int(lsns[0]), "confirmed before the acks arrived"

    rel = start_relayer(relayer, relay_args)
    harness.wait_until(lambda: pg.confirmed_flush_lsn() > harness.lsn_to_int(lsns[-1]), 30,
                       message="the events to be confirmed after the restart")
    got = kafka.read("crate", timeout=4)
    ids = {}
    for m in got:
        ids.setdefault(json.loads(m.value)["n"], []).append(m.headers["event_id"])
    for n, lsn in zip((1, 2, 3), lsns):
        assert set(ids[n]) == {m_id(lsn)}, ids
    assert any(len(v) > 1 for v in ids.values()), \
        "expected a redelivered copy (the broker stored the first one): %r" % ids
    assert rel.terminate(30) == 0


def test_table_and_message_events_interleave_per_aggregate(pg, broker, kafka, relayer,
                                                           relay_args):
    """Three writers, one aggregate each, alternating table and message
    events (and some transactions with both): per aggregate, the order in
    Kafka is the commit order."""
    rel = start_relayer(relayer, relay_args)
    broker.create_topic("acct", 4)
    per_writer = 40
    expected = {}
    errors = []

    def writer(w):
        agg = str(uuid.UUID(int=w + 1))
        seq = []
        conn = psycopg2.connect(pg.dsn(), connect_timeout=10)
        try:
            cur = conn.cursor()
            n = 0
            for i in range(per_writer):
                mode = i % 4
                if mode == 0:
                    emit_row(cur, agg, "acct.changed", {"w": w, "n": n}); seq.append(n); n += 1
                elif mode == 1:
                    emit_message(cur, agg, "acct.changed", {"w": w, "n": n}); seq.append(n); n += 1
                elif mode == 2:  # both in one transaction: row, message, row
                    emit_row(cur, agg, "acct.changed", {"w": w, "n": n}); seq.append(n); n += 1
                    emit_message(cur, agg, "acct.changed", {"w": w, "n": n}); seq.append(n); n += 1
                    emit_row(cur, agg, "acct.changed", {"w": w, "n": n}); seq.append(n); n += 1
                else:            # rolled back, both kinds: must leave no trace
                    emit_message(cur, agg, "acct.changed", {"w": w, "n": -1})
                    emit_row(cur, agg, "acct.changed", {"w": w, "n": -1})
                    conn.rollback()
                    continue
                conn.commit()
            expected[agg] = seq
        except Exception as e:
            errors.append(e)
        finally:
            conn.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    total = sum(len(s) for s in expected.values())
    got = kafka.read("acct", expected=total, timeout=30)
    assert len(got) == total
    by_key = {}
    for m in sorted(got, key=lambda m: (m.partition, m.offset)):
        by_key.setdefault(m.key, []).append(m)
    assert set(by_key) == set(expected)
    for agg, msgs in by_key.items():
        assert len({m.partition for m in msgs}) == 1, "one aggregate, one partition"
        assert [json.loads(m.value)["n"] for m in msgs] == expected[agg]
        kinds = ["m" if m.headers["event_id"].startswith("m-") else "t" for m in msgs]
        assert kinds[:5] == ["t", "m", "t", "m", "t"], kinds
        assert len(set(m.headers["event_id"] for m in msgs)) == len(msgs)
    assert rel.terminate(30) == 0
