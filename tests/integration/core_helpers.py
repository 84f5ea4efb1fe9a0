"""core_helpers.py — what the core-relay suites (test_core_*.py) share:
an outbox writer that knows where each commit record ends (Outbox, Tx),
the relayer started and waited for (start_relay, wait_streaming,
wait_confirmed), and read-back checks of what arrived.
"""

import re
import time
import uuid
from datetime import datetime

import harness
from harness import wait_until

STATUS = "0.5"          # --status-interval for tests that watch confirmed_flush_lsn
SLOT = "outbox_relay"

TS_TEXT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})?[+-]\d\d(:\d\d){0,2}$")


class Tx:
    def __init__(self, ids, xid, start_lsn, commit_end):
        self.ids = ids
        self.xid = xid
        self.start_lsn = start_lsn
        self.commit_end = commit_end


class Outbox:
    """Writes outbox events (and business rows) on its own connection and
    knows where each transaction's commit record ends."""

    def __init__(self, pg, table="public.events_outbox"):
        self.pg = pg
        self.table = table
        pg.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        self.conn = pg.connect(autocommit=False)

    def tx(self, events, before=(), after=(), commit=True):
        """Runs `before` statements, inserts events [(aggregate_id, type,
        payload_json_text)], runs `after`, then commits or rolls back."""
        cur = self.conn.cursor()
        cur.execute("SELECT pg_current_wal_insert_lsn(), pg_current_xact_id()::xid::text")
        start, xid = cur.fetchone()
        for stmt in before:
            cur.execute(stmt)
        ids = []
        for agg, typ, payload in events:
            cur.execute("INSERT INTO %s (aggregate_id, type, payload) VALUES (%%s, %%s, %%s::jsonb) "
                        "RETURNING id" % self.table, (str(agg), typ, payload))
            ids.append(cur.fetchone()[0])
        for stmt in after:
            cur.execute(stmt)
        if commit:
            self.conn.commit()
            end = self.pg.commit_end_lsn(xid, harness.lsn_to_int(start))
            assert end is not None, "commit record of xid %s not found" % xid
        else:
            self.conn.rollback()
            end = None
        return Tx(ids, xid, harness.lsn_to_int(start), end)

    def one(self, typ, payload='{"marker": true}', agg=None):
        return self.tx([(agg or uuid.uuid4(), typ, payload)])

    def rows(self, ids):
        """{id: (aggregate_id_text, type, payload_text, created_at)} as PostgreSQL returns them."""
        out = {}
        for r in self.pg.query("SELECT id, aggregate_id::text, type, payload::text, created_at "
                               "FROM public.events_outbox WHERE id = ANY(%s)", (list(ids),)):
            out[r[0]] = r[1:]
        return out


def start_relay(relayer, pg, broker, *extra, env=None, wait=True, status=STATUS, dsn=None,
                tuning="tuned"):
    """The relayer with --status-interval `status` (None: none), or with no
    tuning flag at all for tuning "defaults"; with wait, once it streams."""
    args = ["--dsn", dsn or pg.dsn(), "--brokers", broker.bootstrap]
    if status is not None and tuning == "tuned":
        args += ["--status-interval", status]
    r = relayer(*(args + list(extra)), env=env)
    if wait:
        wait_streaming(pg, r)
    return r


def wait_streaming(pg, r, slot=SLOT, timeout=30):
    """Until the relayer has the slot active (START_REPLICATION done)."""
    def ok():
        if not r.running():
            raise AssertionError("relayer exited (rc=%s) before streaming; log:\n%s"
                                 % (r.returncode, r.log_tail()))
        info = pg.slot_info(slot)
        return bool(info and info["active"])
    wait_until(ok, timeout, message="relayer to stream from slot %s" % slot)


def wait_confirmed(pg, lsn, timeout=30, slot=SLOT):
    """Until confirmed_flush_lsn >= lsn; returns it."""
    def ok():
        c = pg.confirmed_flush_lsn(slot)
        return c if c is not None and c >= lsn else None
    try:
        return wait_until(ok, timeout, message="confirmed_flush_lsn >= %s" % harness.int_to_lsn(lsn))
    except AssertionError:
        c = pg.confirmed_flush_lsn(slot)
        raise AssertionError("confirmed_flush_lsn is %s, expected >= %s within %ss"
                             % (c and harness.int_to_lsn(c), harness.int_to_lsn(lsn), timeout))


def assert_message_matches(m, event_id, row, topic):
    agg, typ, payload, created_at = row
    assert m.topic == topic, (event_id, m)
    assert m.key == agg, (event_id, m)
    assert m.value == payload, "event %d value differs:\n kafka %r\n pg    %r" % (
        event_id, m.value[:300], payload[:300])
    assert m.headers.get("event_id") == str(event_id), m
    assert m.headers.get("event_type") == typ, m
    ts = m.headers.get("created_at")
    assert ts is not None and TS_TEXT.match(ts), "created_at header %r is not PostgreSQL text" % ts
    assert datetime.fromisoformat(ts) == created_at, (ts, created_at)


def read_ids(kafka, topic, want_ids, timeout=60):
    """Reads `topic` until every id in want_ids has arrived at least once
    (redeliveries allowed) or the timeout passes; returns all messages."""
    want = set(want_ids)
    deadline = time.monotonic() + timeout
    expected = len(want)
    while True:
        msgs = kafka.read(topic, expected=expected, timeout=max(1, deadline - time.monotonic()))
        have = set(by_event_id(msgs))
        if want <= have or time.monotonic() >= deadline:
            return msgs
        expected = len(msgs) + len(want - have)


def by_event_id(messages):
    out = {}
    for m in messages:
        out.setdefault(int(m.headers["event_id"]), []).append(m)
    return out


def error_line(text, *words):
    """The first log line at warn/error level containing every word
    (case-insensitive), or None."""
    for line in text.splitlines():
        low = line.lower()
        if re.search(r"\b(warn|warning|error|fatal)\b", low) and all(w.lower() in low for w in words):
            return line
    return None


def user_topics(kafka):
    return [t for t in kafka.topics() if not t.startswith("__")]


# librdkafka 2.0.2's mock cluster checks idempotent-producer sequence numbers
# only for transactional producers. When one of several pipelined produce
# requests fails with a retriable error and a later one succeeds, a real
# broker rejects the later one (OUT_OF_ORDER_SEQUENCE_NUMBER) and the client
# resends both in order; the mock accepts it, and librdkafka then "implicitly
# acks" the failed batch, which was never written (seen in debug logs as
# IMPLICITACK). So per-request errors under pipelining make events vanish in
# the mock that a real cluster would keep. Tests that inject them either
# assert order only for the events produced during the injection, or pass
# -X max.in.flight.requests.per.connection=1 so nothing is pipelined.
MOCK_NO_PIPELINING = ["-X", "max.in.flight.requests.per.connection=1"]
