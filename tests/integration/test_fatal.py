"""test_fatal.py — states the relayer must not ride out: it stops with exit 1
and an error that says what happened and what to do, and never papers over
them (no silent slot re-creation, nothing confirmed past an undelivered
event). And the opposite: SIGKILL at a bad moment loses nothing.

  slot dropped while in use    its walsender terminated and the slot dropped
                               before the relayer reconnects
  slot invalidated             max_slot_wal_keep_size = 1MB, WAL switched and
                               checkpointed until wal_status = 'lost', with
                               the relayer stopped and with it streaming
                               behind a broker outage
  lost producer sequence       the mock broker answers a Produce request with
                               OUT_OF_ORDER_SEQUENCE_NUMBER for a partition
                               that already has a message from this producer:
                               librdkafka raises ERR__FATAL (sequence
                               desynchronization), and the relayer replaces
                               the producer instead of exiting
  SIGKILL during an outage     events committed while the broker is down,
                               relayer SIGKILLed, broker up, restart
"""

import re
import signal
import time
import uuid

import psycopg2
import pytest

import harness
from harness import wait_until
from test_poison import (DLQ, SLOT, Outbox, assert_not_confirmed, by_event_id, log_lines,
                         read_ids, start_relay, wait_confirmed, wait_streaming)

pytestmark = pytest.mark.usefixtures("plugin")  # once per output plugin (conftest.py)


def fatal_line(r, *words):
    """The first error line containing every word (case-insensitive)."""
    for line in log_lines(r, "error"):
        if all(w.lower() in line.lower() for w in words):
            return line
    raise AssertionError("no error line with %s; log tail:\n%s" % (words, r.log_tail()))


def wal_status(pg):
    return pg.scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (SLOT,))


def burn_wal_until_lost(pg, timeout=90):
    """Writes WAL, switches segments and checkpoints until the slot is
    invalidated (wal_status = 'lost'); returns the rounds it took."""
    pg.query("CREATE TABLE IF NOT EXISTS public.filler (id bigserial PRIMARY KEY, v text)")
    deadline = time.monotonic() + timeout
    rounds = 0
    while wal_status(pg) != "lost":
        assert time.monotonic() < deadline, "slot not invalidated within %ds (wal_status %s)" % (
            timeout, wal_status(pg))
        pg.query("INSERT INTO public.filler (v) SELECT repeat('x', 1000) FROM generate_series(1, 3000)")
        pg.query("SELECT pg_switch_wal()")
        pg.query("CHECKPOINT")
        rounds += 1
    return rounds


def drop_slot_under(pg, timeout=30):
    """Drops the slot while a relayer streams from it: terminates its
    walsender (waiting for it to exit) and drops the slot, again until the
    drop wins the race against the relayer's reconnect. Returns attempts."""
    conn = pg.connect()
    cur = conn.cursor()
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        assert time.monotonic() < deadline, "could not drop the slot within %d s" % timeout
        cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (SLOT,))
        row = cur.fetchone()
        assert row is not None, "the slot vanished by itself"
        attempts += 1
        if row[0] is not None:
            cur.execute("SELECT pg_terminate_backend(%s, 5000)", (row[0],))
        try:
            cur.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
            return attempts
        except psycopg2.Error:   # active again: the relayer reconnected first
            continue


# --------------------------------------------------------------------------
# the slot
# --------------------------------------------------------------------------

def test_slot_dropped_while_in_use_is_fatal(pg, broker, kafka, relayer):
    """The slot is dropped while the relayer streams from it (its walsender
    terminated first, as DROP needs an inactive slot): the relayer stops
    with exit 1, says the slot was dropped and that it will not recreate
    it, and indeed does not."""
    r = start_relay(relayer, pg, broker)
    ob = Outbox(pg)
    a = ob.one("drop.before")
    assert a.id in read_ids(kafka, "drop", a.ids)

    attempts = drop_slot_under(pg)
    rc = r.wait_exit(60)
    assert rc == 1, "expected exit 1 after the slot was dropped, got %s; log:\n%s" % (rc, r.log_tail())
    line = fatal_line(r, SLOT, "dropped")
    assert re.search(r"not recreat", line, re.I), "the error does not say it will not recreate " \
                                                  "the slot: %r" % line
    assert "created replication slot" not in r.log_text().split("streaming", 1)[1].lower(), r.log_tail()
    time.sleep(1)
    assert pg.slot_info(SLOT) is None, "the slot was recreated: %s" % pg.slot_info(SLOT)
    print("slot dropped after %d attempt(s): %s" % (attempts, line))


def test_supervisor_restart_after_slot_drop_loses_nothing(pg, broker, kafka, relayer):
    """The relayer refuses to recreate a slot dropped under it, but a
    supervisor restarts it after exit 1 (docker/outbox-relay.service:
    Restart=on-failure). The fresh process must not take the missing slot
    for a first start and create a new one at the current WAL position,
    skipping the events committed since: it either refuses again (exit
    non-zero, no slot) or publishes those events. (This failed until the
    relayer started to remember its slots in public.outbox_relay_slots.)"""
    r = start_relay(relayer, pg, broker)
    ob = Outbox(pg)
    a = ob.one("sup.before")
    assert a.id in read_ids(kafka, "sup", a.ids)
    wait_confirmed(pg, a.commit_end)
    drop_slot_under(pg)
    assert r.wait_exit(60) == 1, r.log_tail()   # the refusal tested above

    gap = ob.one("sup.gap")      # committed before the supervisor's restart
    r2 = start_relay(relayer, pg, broker, wait=False)   # the supervisor's restart
    deadline = time.monotonic() + 30
    while r2.running() and pg.slot_info(SLOT) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if not r2.running():
        assert r2.returncode not in (0, None), r2.log_tail()
        assert pg.slot_info(SLOT) is None, "exited but left a new slot behind"
        print("restart refused: %s" % fatal_line(r2, SLOT))
        return
    marker = ob.one("sup.after")
    got = read_ids(kafka, "sup", gap.ids + marker.ids, timeout=30)
    assert marker.id in got, r2.log_tail()
    assert gap.id in got, (
        "BUG: after the slot was dropped, a plain restart created a new slot and silently "
        "skipped event %d committed in between (src/pg/stream.c stream_start creates a missing "
        "slot whenever create_slot is set, which relay.c:213 sets for every fresh process); "
        "log:\n%s"
        % (gap.id, r2.log_tail()))
    assert r2.terminate() == 0


def _assert_invalidated_exit(r, pg):
    rc = r.wait_exit(90)
    assert rc == 1, "expected exit 1 on an invalidated slot, got %s; log:\n%s" % (rc, r.log_tail())
    line = fatal_line(r, SLOT, "invalidated")
    for w in ("lost", "drop", "max_slot_wal_keep_size"):
        assert w.lower() in line.lower(), "the error does not say %r: %r" % (w, line)
    info = pg.query("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (SLOT,))
    assert info == [("lost",)], "the relayer must leave the invalidated slot alone: %s" % info
    return line


def test_invalidated_slot_is_fatal_on_start(pg_factory, broker, kafka, relayer):
    """With the relayer stopped, the server removes WAL the slot still
    needs (max_slot_wal_keep_size): the next start refuses the slot with
    exit 1, says events may be lost and what to do, and leaves it alone."""
    pg = pg_factory(settings={"max_slot_wal_keep_size": "1MB"}, name="keep1mb")
    r = start_relay(relayer, pg, broker)
    ob = Outbox(pg)
    a = ob.one("inv.before")
    assert a.id in read_ids(kafka, "inv", a.ids)
    wait_confirmed(pg, a.commit_end)
    assert r.terminate() == 0

    ob.one("inv.lost")           # committed after the confirmed position
    rounds = burn_wal_until_lost(pg)
    r2 = start_relay(relayer, pg, broker, wait=False)
    line = _assert_invalidated_exit(r2, pg)
    print("invalidated after %d WAL switch(es): %s" % (rounds, line))


def test_slot_invalidated_while_streaming_is_fatal(pg_factory, broker, kafka, relayer):
    """The relayer streams, Kafka is down so nothing is confirmed, and the
    server invalidates the slot under it (terminating its walsender): the
    relayer does not reconnect forever nor recreate the slot; it stops with
    exit 1 and the same advice."""
    pg = pg_factory(settings={"max_slot_wal_keep_size": "1MB"}, name="keep1mb")
    r = start_relay(relayer, pg, broker, "--shutdown-timeout", "2")
    ob = Outbox(pg)
    a = ob.one("inv.before")
    assert a.id in read_ids(kafka, "inv", a.ids)

    broker.cmd("down")
    try:
        held = ob.one("inv.held")
        rounds = burn_wal_until_lost(pg)
        line = _assert_invalidated_exit(r, pg)
        c = pg.confirmed_flush_lsn(SLOT)
        assert c is None or c < held.commit_end, "confirmed past the undelivered event"
    finally:
        broker.cmd("up")
    print("invalidated while streaming after %d WAL switch(es): %s" % (rounds, line))


# --------------------------------------------------------------------------
# librdkafka fatal errors
# --------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["halt", "dead-letter"])
def test_lost_producer_sequence_is_replaced_not_fatal(pg, broker, kafka, relayer, policy):
    """OUT_OF_ORDER_SEQUENCE_NUMBER for the second message of a partition
    is a fatal idempotent-producer error in librdkafka ("sequence
    desynchronization"; on a real cluster it follows NOT_ENOUGH_REPLICAS
    while a restarted cluster refills its ISRs, librdkafka issue 4438). The
    relayer does what a restart would, without exiting: it warns naming the
    error, replaces the producer, and sends again what was not confirmed.
    The event is never confirmed before it is delivered, never
    dead-lettered (it is not its fault, whatever --on-poison says), and the
    aggregate's order holds."""
    r = start_relay(relayer, pg, broker, "--on-poison", policy)
    ob = Outbox(pg)
    agg = uuid.uuid4()           # same key, same partition: base sequence 1 next
    a = ob.one("idem.first", agg=agg)
    assert a.id in read_ids(kafka, "idem", a.ids)
    wait_confirmed(pg, a.commit_end)

    broker.cmd("error 0 OUT_OF_ORDER_SEQUENCE_NUMBER 1")
    b = ob.one("idem.second", '{"second": true}', agg=agg)
    r.wait_for_log(r"warn\s+kafka: fatal idempotent producer error OUT_OF_ORDER_SEQUENCE_NUMBER: "
                   r".*replaced by a new one", timeout=60)
    r.wait_for_log(r"replaced by a new one \(1 so far\)", timeout=60)
    c = ob.one("idem.third", '{"third": true}', agg=agg)
    got = read_ids(kafka, "idem", b.ids + c.ids, timeout=60)
    assert b.id in got and c.id in got, r.log_tail()
    wait_confirmed(pg, c.commit_end)
    assert r.running(), "the relayer exited: %s" % r.log_tail()
    msgs = [m for m in kafka.read("idem", timeout=5) if m.key == str(agg)]
    first = []
    for m in msgs:
        if int(m.headers["event_id"]) not in first:
            first.append(int(m.headers["event_id"]))
    assert first == [a.id, b.id, c.id], "order of first copies: %s" % first
    assert kafka.read(DLQ, timeout=1, wait_topic=False) == [], "a producer error was dead-lettered"
    errors = [l for l in r.log_text().splitlines() if re.match(r"\S+\s+error\s", l)]
    assert not errors, "error lines: %s" % errors
    assert r.terminate() == 0


# --------------------------------------------------------------------------
# SIGKILL
# --------------------------------------------------------------------------

def test_sigkill_during_broker_outage_loses_nothing(pg, broker, kafka, relayer):
    """Events committed while Kafka is down sit in librdkafka's queue when
    the relayer is SIGKILLed; nothing was confirmed, so after the broker
    returns a new relayer sends every one of them (and none that was rolled
    back)."""
    r = start_relay(relayer, pg, broker)
    ob = Outbox(pg)
    a = ob.one("kill.before")
    assert a.id in read_ids(kafka, "kill", a.ids)
    wait_confirmed(pg, a.commit_end)

    broker.cmd("down")
    committed, rolled = [], []
    try:
        for i in range(10):
            committed += ob.tx([("kill.ev", '{"i": %d, "j": %d}' % (i, j)) for j in range(5)]).ids
            rolled += ob.tx([("kill.ev", '{"rolled": %d}' % i)], commit=False).ids
        last = ob.one("kill.last")
        committed += last.ids
        # the relayer has read them (received position past the last commit)
        time.sleep(2)
        assert_not_confirmed(pg, last, r)
        assert r.kill() == -signal.SIGKILL
    finally:
        broker.cmd("up")
    after = ob.tx([("kill.ev", '{"after": %d}' % j) for j in range(5)])
    committed += after.ids

    r2 = start_relay(relayer, pg, broker)
    got = read_ids(kafka, "kill", committed, timeout=90)
    missing = set(committed) - set(got)
    assert not missing, "%d committed events lost: %s" % (len(missing), sorted(missing)[:10])
    leaked = set(rolled) & set(got)
    assert not leaked, "rolled-back events published: %s" % sorted(leaked)
    wait_confirmed(pg, after.commit_end)
    assert r2.terminate() == 0
    print("sigkill during outage: %d events, %d rolled back, %d copies read"
          % (len(committed), len(rolled), sum(len(v) for v in got.values())))
