"""test_poison.py — events that no retry can deliver, and errors that a retry
cures, against the real build/outbox-relay, a throwaway PostgreSQL and the
mock Kafka cluster (whose Produce error injection stands in for a broker
that refuses a record).

For every case the event under test must end up in exactly one of three
places, never nowhere: its Kafka topic, the dead-letter topic (with
--on-poison dead-letter), or behind a halted relayer that did not confirm
it (confirmed_flush_lsn stays before the end of its commit record, and a
restart after fixing the cause delivers it).

  poison                          how it is made here
  ------------------------------  ------------------------------------------
  larger than message.max.bytes   -X message.max.bytes=100000, 200 KB payload
  invalid topic name              type "bad topic!" with the default {prefix}
  broker refuses the record       mock broker: error 0 <code> 1 on Produce
                                  (POLICY_VIOLATION = 44 and
                                  MSG_SIZE_TOO_LARGE = 10 reach the delivery
                                  report unchanged: librdkafka treats both as
                                  permanent and does not retry them)

An authorization refusal is not poison (an ACL may still be propagating):
test_kafka_errors.py shows a transient one waited out and a permanent one
stopping the relayer without dead-lettering.
  retriable broker error          error 0 NOT_LEADER_FOR_PARTITION|
                                  REQUEST_TIMED_OUT 3: retried, delivered
"""

import re
import time
import uuid

import pytest

import harness
from harness import wait_until

pytestmark = pytest.mark.usefixtures("plugin")  # once per output plugin (conftest.py)

SLOT = "outbox_relay"
DLQ = "outbox.dead-letter"
OPTS = ["--status-interval", "0.5", "--shutdown-timeout", "5"]
SMALL_MAX = "100000"                                   # -X message.max.bytes
BIG_PAYLOAD = '{"blob": "%s"}' % ("x" * 200000)         # ~200 KB > SMALL_MAX
LSN_RX = re.compile(r"lsn=([0-9A-F]+/[0-9A-F]+)")


# --------------------------------------------------------------------------
# helpers (shared with test_fatal.py)
# --------------------------------------------------------------------------

class Tx:
    def __init__(self, ids, aggs, start_lsn, commit_end):
        self.ids = ids
        self.aggs = aggs
        self.start_lsn = start_lsn
        self.commit_end = commit_end

    @property
    def id(self):
        return self.ids[0]


class Outbox:
    """Commits outbox events on its own connection and finds the end of
    each transaction's commit record (pg_walinspect), the position past
    which a confirmed slot no longer resends it."""

    def __init__(self, pg):
        self.pg = pg
        pg.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        self.conn = pg.connect(autocommit=False)

    def tx(self, events, commit=True):
        """events: [(type, payload_json_text)] or [(type, payload, aggregate)]."""
        cur = self.conn.cursor()
        cur.execute("SELECT pg_current_wal_insert_lsn(), pg_current_xact_id()::xid::text")
        start, xid = cur.fetchone()
        ids, aggs = [], []
        for ev in events:
            typ, payload = ev[0], ev[1]
            agg = str(ev[2]) if len(ev) > 2 else str(uuid.uuid4())
            cur.execute("INSERT INTO public.events_outbox (aggregate_id, type, payload) "
                        "VALUES (%s, %s, %s::jsonb) RETURNING id", (agg, typ, payload))
            ids.append(cur.fetchone()[0])
            aggs.append(agg)
        if not commit:
            self.conn.rollback()
            return Tx(ids, aggs, harness.lsn_to_int(start), None)
        self.conn.commit()
        end = self.pg.scalar(
            "SELECT max(end_lsn) FROM pg_get_wal_records_info(%s::pg_lsn, "
            "pg_current_wal_flush_lsn()) WHERE resource_manager = 'Transaction' "
            "AND record_type = 'COMMIT' AND xid = %s::xid", (start, xid))
        assert end is not None, "commit record of xid %s not found" % xid
        return Tx(ids, aggs, harness.lsn_to_int(start), harness.lsn_to_int(end))

    def one(self, typ, payload='{"n": 1}', agg=None):
        return self.tx([(typ, payload) if agg is None else (typ, payload, agg)])

    def payload(self, event_id):
        return self.pg.scalar("SELECT payload::text FROM public.events_outbox WHERE id = %s",
                              (event_id,))


def start_relay(relayer, pg, broker, *extra, wait=True, tuning="tuned"):
    """The relayer with OPTS (tuning "tuned") or none of them ("defaults")
    and `extra`; with wait, once its slot is active."""
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap,
                *(harness.tuned(tuning, *OPTS) + list(extra)))
    if wait:
        wait_streaming(pg, r)
    return r


def wait_streaming(pg, r, timeout=60):
    def ok():
        if not r.running():
            raise AssertionError("relayer exited (rc=%s) before streaming; log:\n%s"
                                 % (r.returncode, r.log_tail()))
        info = pg.slot_info(SLOT)
        return bool(info and info["active"])
    wait_until(ok, timeout, message="relayer to stream from slot %s" % SLOT)


def wait_confirmed(pg, lsn, timeout=30):
    def ok():
        c = pg.confirmed_flush_lsn(SLOT)
        return c if c is not None and c >= lsn else None
    try:
        return wait_until(ok, timeout, message="confirmed_flush_lsn >= %s" % harness.int_to_lsn(lsn))
    except AssertionError:
        c = pg.confirmed_flush_lsn(SLOT)
        raise AssertionError("confirmed_flush_lsn is %s, expected >= %s within %ss"
                             % (c and harness.int_to_lsn(c), harness.int_to_lsn(lsn), timeout))


def read_ids(kafka, topic, ids, timeout=60):
    """Reads `topic` until every event id in `ids` arrived (redeliveries
    allowed) or the timeout passed; returns {event_id: [Message]}."""
    want = set(ids)
    deadline = time.monotonic() + timeout
    expected = len(want)
    while True:
        got = by_event_id(kafka.read(topic, expected=expected,
                                     timeout=max(1, deadline - time.monotonic())))
        if want <= set(got) or time.monotonic() >= deadline:
            return got
        expected = sum(len(v) for v in got.values()) + len(want - set(got))


def by_event_id(messages):
    out = {}
    for m in messages:
        out.setdefault(int(m.headers["event_id"]), []).append(m)
    return out


def log_lines(r, level):
    """Log lines of the given level ('error', 'warn'), text format."""
    return [l for l in r.log_text().splitlines() if re.search(r"\s%s\s" % level, l)]


def halt_line(r, event_id):
    """The error line that names event_id=<id>, or fails with the log."""
    for line in log_lines(r, "error"):
        if re.search(r"event_id=%d\b" % event_id, line):
            return line
    raise AssertionError("no error line naming event_id=%d; log tail:\n%s" % (event_id, r.log_tail()))


def assert_names_lsn(line, tx):
    """The line carries an LSN inside the event's transaction."""
    m = LSN_RX.search(line)
    assert m, "no lsn=X/Y in %r" % line
    lsn = harness.lsn_to_int(m.group(1))
    assert tx.start_lsn <= lsn <= tx.commit_end, (
        "lsn %s in %r is outside the event's transaction [%s, %s]"
        % (m.group(1), line, harness.int_to_lsn(tx.start_lsn), harness.int_to_lsn(tx.commit_end)))


def assert_not_confirmed(pg, tx, r):
    c = pg.confirmed_flush_lsn(SLOT)
    assert c is not None and c < tx.commit_end, (
        "the relayer halted on event %d but confirmed_flush_lsn %s passed its commit %s: "
        "it would never be sent again; log tail:\n%s"
        % (tx.id, c and harness.int_to_lsn(c), harness.int_to_lsn(tx.commit_end), r.log_tail()))


def assert_halted_on(r, pg, tx, typ, *words):
    """Exit status 1, an error line naming the event's id, type and LSN
    (and `words`), and the slot not confirmed past it."""
    rc = r.wait_exit(60)
    assert rc == 1, "expected exit 1 on a poison event, got %s; log tail:\n%s" % (rc, r.log_tail())
    line = halt_line(r, tx.id)
    assert typ in line, "the error line does not name the type %r: %r" % (typ, line)
    assert_names_lsn(line, tx)
    for w in words:
        assert w.lower() in line.lower(), "the error line does not say %r: %r" % (w, line)
    assert_not_confirmed(pg, tx, r)
    return line


def assert_dead_letter(msg, tx, typ, original_topic, error_words, payload):
    """One dead-letter record: key = aggregate, headers event_id, event_type,
    aggregate_id, lsn, original_topic, error; value = payload or empty."""
    h = msg.headers
    assert h.get("event_id") == str(tx.id), msg
    assert h.get("event_type") == typ, msg
    assert h.get("aggregate_id") == tx.aggs[0], msg
    assert msg.key == tx.aggs[0], msg
    for w in error_words:
        assert w.lower() in (h.get("error") or "").lower(), "error header %r lacks %r" % (h.get("error"), w)
    if payload is None:
        assert msg.raw_value in (None, b""), "payload should be omitted: %r" % msg
    else:
        assert msg.value == payload, msg
    assert "lsn" in h, msg
    m = re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", h["lsn"] or "")
    assert m, "lsn header %r is not an LSN" % h["lsn"]
    lsn = harness.lsn_to_int(h["lsn"])
    # Checked last so that the rest of the record is verified first; both
    # problems are reported together.
    assert "original_topic" in h, msg
    bugs = []
    if not tx.start_lsn <= lsn <= tx.commit_end:
        bugs.append("lsn header %s is outside the event's transaction [%s, %s] (0/0 = the "
                    "position of a still-open transaction was used)"
                    % (h["lsn"], harness.int_to_lsn(tx.start_lsn), harness.int_to_lsn(tx.commit_end)))
    if h["original_topic"] != original_topic:
        bugs.append("original_topic header is %r, expected %r" % (h["original_topic"], original_topic))
    assert not bugs, "BUG: dead letter of event %d: %s" % (tx.id, "; ".join(bugs))


def dead_letters(kafka, expected, timeout=60):
    return kafka.read(DLQ, expected=expected, timeout=timeout)


# --------------------------------------------------------------------------
# larger than message.max.bytes
# --------------------------------------------------------------------------

@pytest.mark.parametrize("tuning", harness.TUNINGS)
def test_oversized_event_halts_and_is_resent_after_fix(pg, broker, kafka, relayer, tuning):
    """--on-poison halt (default): a 200 KB event with message.max.bytes =
    100000 stops the relayer with exit 1 and an error naming event id,
    type, LSN and the limit; the slot stays before it; a restart with a
    larger limit delivers it (and what followed). Also with the relayer's
    default --status-interval and --shutdown-timeout."""
    r = start_relay(relayer, pg, broker, "-X", "message.max.bytes=" + SMALL_MAX, tuning=tuning)
    ob = Outbox(pg)
    a = ob.one("big.before")
    assert len(read_ids(kafka, "big", a.ids)) == 1
    wait_confirmed(pg, a.commit_end)

    b = ob.one("big.huge", BIG_PAYLOAD)
    c = ob.one("big.after")
    assert_halted_on(r, pg, b, "big.huge", "message.max.bytes")
    got = by_event_id(kafka.read("big", timeout=2))
    assert b.id not in got and c.id not in got, "events after the halt were published: %s" % got

    r2 = start_relay(relayer, pg, broker, tuning=tuning)   # the fix: the default limit (1000000)
    got = read_ids(kafka, "big", b.ids + c.ids, timeout=60)
    assert b.id in got and c.id in got, r2.log_tail()
    assert got[b.id][0].value == ob.payload(b.id)
    wait_confirmed(pg, c.commit_end)
    assert r2.terminate() == 0


@pytest.mark.parametrize("tuning", harness.TUNINGS)
def test_oversized_event_dead_lettered(pg, broker, kafka, relayer, tuning):
    """--on-poison dead-letter: the oversized event becomes a headers-only
    dead letter (its payload does not fit), the events after it still
    flow, and the slot moves past it. Also with the relayer's default
    --status-interval and --shutdown-timeout."""
    r = start_relay(relayer, pg, broker, "-X", "message.max.bytes=" + SMALL_MAX,
                    "--on-poison", "dead-letter", tuning=tuning)
    ob = Outbox(pg)
    a = ob.one("big.before")
    b = ob.one("big.huge", BIG_PAYLOAD)
    c = ob.one("big.after")
    got = read_ids(kafka, "big", a.ids + c.ids)
    assert a.id in got and c.id in got, r.log_tail()
    assert b.id not in got
    dl = dead_letters(kafka, 1)
    assert len(dl) == 1, "expected one dead letter, got %s; log:\n%s" % (dl, r.log_tail())
    wait_confirmed(pg, c.commit_end)
    assert r.running()
    assert any("event_id=%d" % b.id in l and DLQ in l for l in log_lines(r, "warn")), r.log_tail()
    assert_dead_letter(dl[0], b, "big.huge", "big", ["message.max.bytes"], None)
    assert r.terminate() == 0


# --------------------------------------------------------------------------
# a type that gives no valid topic name
# --------------------------------------------------------------------------

def test_invalid_topic_halts_and_is_resent_after_fix(pg, broker, kafka, relayer):
    """type "bad topic!" with the default {prefix} template is no Kafka
    topic name: exit 1 naming the event, the slot stays before it; a
    restart with a template that gives a valid name delivers it."""
    r = start_relay(relayer, pg, broker)
    ob = Outbox(pg)
    a = ob.one("fine.before")
    assert len(read_ids(kafka, "fine", a.ids)) == 1
    wait_confirmed(pg, a.commit_end)

    b = ob.one("bad topic!", '{"bad": 1}')
    assert_halted_on(r, pg, b, "bad topic!", "topic")
    assert "bad topic!" not in kafka.topics()

    r2 = start_relay(relayer, pg, broker, "--topic", "recovered")
    got = read_ids(kafka, "recovered", b.ids, timeout=60)
    assert b.id in got, r2.log_tail()
    assert got[b.id][0].value == '{"bad": 1}'
    wait_confirmed(pg, b.commit_end)
    assert r2.terminate() == 0


def test_invalid_topic_dead_lettered(pg, broker, kafka, relayer):
    """--on-poison dead-letter: a dead letter with the payload (it fits) and
    the headers; later events flow; the slot moves on."""
    r = start_relay(relayer, pg, broker, "--on-poison", "dead-letter")
    ob = Outbox(pg)
    b = ob.one("bad topic!", '{"bad": 1}')
    c = ob.one("fine.after")
    got = read_ids(kafka, "fine", c.ids)
    assert c.id in got, r.log_tail()
    dl = dead_letters(kafka, 1)
    assert len(dl) == 1, "expected one dead letter, got %s; log:\n%s" % (dl, r.log_tail())
    wait_confirmed(pg, c.commit_end)
    assert r.running()
    assert_dead_letter(dl[0], b, "bad topic!", "bad topic!", ["topic"], '{"bad": 1}')
    assert r.terminate() == 0


def test_dead_letter_of_a_row_without_topic(pg, broker, kafka, relayer):
    """--topic with a {column} that is NULL or too long for a topic name:
    the dead letter's original_topic is the template with that column left
    in braces (outbox.event.{region}), which no real topic can be named, not
    the truncated expansion (outbox.event.), which one can."""
    pg.query("ALTER TABLE public.events_outbox ADD COLUMN region text")
    r = start_relay(relayer, pg, broker, "--on-poison", "dead-letter", "--topic",
                    "outbox.event.{region}")
    conn = pg.connect(autocommit=True)
    cur = conn.cursor()
    ids, aggs = {}, {}
    for name, region in (("null", None), ("long", "r" * 300), ("fine", "eu")):
        aggs[name] = str(uuid.uuid4())
        cur.execute("INSERT INTO public.events_outbox (aggregate_id, type, payload, region) "
                    "VALUES (%s, 'order.placed', '{}', %s) RETURNING id", (aggs[name], region))
        ids[name] = cur.fetchone()[0]
    got = read_ids(kafka, "outbox.event.eu", [ids["fine"]])
    assert ids["fine"] in got, r.log_tail()
    dl = {int(m.headers["event_id"]): m for m in dead_letters(kafka, 2)}
    assert set(dl) == {ids["null"], ids["long"]}, (dl, r.log_tail())
    for name in ("null", "long"):
        h = dl[ids[name]].headers
        assert h["original_topic"] == "outbox.event.{region}", (name, h)
        assert h["aggregate_id"] == aggs[name] and dl[ids[name]].key == aggs[name], h
    assert r.running() and r.terminate() == 0


def test_dead_letter_of_a_row_with_null_type(pg, broker, kafka, relayer):
    """A row whose type is NULL cannot be routed and goes to the dead-letter
    topic: with its own id as event_id and its key as key and aggregate_id
    header, so that it can be traced to the row (not event_id=lsn-…)."""
    pg.query("ALTER TABLE public.events_outbox ALTER COLUMN type DROP NOT NULL")
    r = start_relay(relayer, pg, broker, "--on-poison", "dead-letter")
    conn = pg.connect(autocommit=True)
    cur = conn.cursor()
    agg = str(uuid.uuid4())
    cur.execute("INSERT INTO public.events_outbox (aggregate_id, type, payload) "
                "VALUES (%s, NULL, '{\"n\": 1}') RETURNING id", (agg,))
    bad = cur.fetchone()[0]
    ob = Outbox(pg)
    c = ob.one("fine.after")
    got = read_ids(kafka, "fine", c.ids)
    assert c.id in got, r.log_tail()
    dl = dead_letters(kafka, 1)
    assert len(dl) == 1, (dl, r.log_tail())
    h = dl[0].headers
    assert h["event_id"] == str(bad), h
    assert h["aggregate_id"] == agg and dl[0].key == agg, (h, dl[0].key)
    assert "type" in h["error"] and "NULL" in h["error"], h
    wait_confirmed(pg, c.commit_end)
    assert r.running() and r.terminate() == 0


# --------------------------------------------------------------------------
# the broker refuses the record
# --------------------------------------------------------------------------

PERMANENT = [("POLICY_VIOLATION", "policy"),
             ("MSG_SIZE_TOO_LARGE", "too large")]


@pytest.mark.parametrize("code,words", PERMANENT, ids=[p[0] for p in PERMANENT])
def test_permanent_broker_error_halts(pg, broker, kafka, relayer, code, words):
    """A Produce request answered with a permanent error: exit 1 with the
    event id, type, LSN and the broker's error; the slot stays before the
    event; a restart (the broker has recovered) delivers it."""
    r = start_relay(relayer, pg, broker)
    ob = Outbox(pg)
    a = ob.one("perm.before")
    assert len(read_ids(kafka, "perm", a.ids)) == 1
    wait_confirmed(pg, a.commit_end)

    broker.cmd("error 0 %s 1" % code)
    b = ob.one("perm.refused", '{"refused": 1}')
    assert_halted_on(r, pg, b, "perm.refused", words)
    assert b.id not in by_event_id(kafka.read("perm", timeout=2))

    r2 = start_relay(relayer, pg, broker)
    got = read_ids(kafka, "perm", b.ids, timeout=60)
    assert b.id in got, r2.log_tail()
    wait_confirmed(pg, b.commit_end)
    assert r2.terminate() == 0


@pytest.mark.parametrize("code,words", PERMANENT, ids=[p[0] for p in PERMANENT])
def test_permanent_broker_error_dead_lettered(pg, broker, kafka, relayer, code, words):
    r = start_relay(relayer, pg, broker, "--on-poison", "dead-letter")
    ob = Outbox(pg)
    a = ob.one("perm.before")
    assert len(read_ids(kafka, "perm", a.ids)) == 1

    broker.cmd("error 0 %s 1" % code)
    b = ob.one("perm.refused", '{"refused": 1}')
    dl = dead_letters(kafka, 1)
    assert len(dl) == 1, "expected one dead letter, got %s; log:\n%s" % (dl, r.log_tail())
    c = ob.one("perm.after")
    got = read_ids(kafka, "perm", c.ids)
    assert c.id in got and b.id not in got, r.log_tail()
    wait_confirmed(pg, c.commit_end)
    assert r.running()
    assert_dead_letter(dl[0], b, "perm.refused", "perm", [words], '{"refused": 1}')
    assert r.terminate() == 0


def test_non_poison_delivery_failure_halts_even_with_dead_letter(pg, broker, kafka, relayer):
    """A permanent failure that is not the record's fault (the broker
    fences the producer epoch: INVALID_PRODUCER_EPOCH) must not be
    dead-lettered: the relayer halts without confirming the event, and a
    restart delivers it."""
    r = start_relay(relayer, pg, broker, "--on-poison", "dead-letter")
    ob = Outbox(pg)
    a = ob.one("fence.before")
    assert len(read_ids(kafka, "fence", a.ids)) == 1
    wait_confirmed(pg, a.commit_end)

    broker.cmd("error 0 INVALID_PRODUCER_EPOCH 1")
    b = ob.one("fence.ev")
    rc = r.wait_exit(60)
    assert rc == 1, "rc=%s; log tail:\n%s" % (rc, r.log_tail())
    assert_not_confirmed(pg, b, r)
    assert kafka.read(DLQ, timeout=2, wait_topic=False) == [], "a non-poison failure was dead-lettered"

    r2 = start_relay(relayer, pg, broker)
    assert b.id in read_ids(kafka, "fence", b.ids, timeout=60), r2.log_tail()
    assert r2.terminate() == 0


# --------------------------------------------------------------------------
# retriable broker errors
# --------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["halt", "dead-letter"])
@pytest.mark.parametrize("code,text", [("NOT_LEADER_FOR_PARTITION", "Not leader for partition"),
                                       ("REQUEST_TIMED_OUT", "Request timed out")])
def test_retriable_broker_error_is_retried(pg, broker, kafka, relayer, code, text, policy):
    """Three Produce requests in a row fail retriably: librdkafka retries
    (the debug log shows each failure), the event is delivered once the
    errors are used up, nothing is dead-lettered and the relayer keeps
    running."""
    r = start_relay(relayer, pg, broker, "--on-poison", policy,
                    "--log-level", "debug", "-X", "debug=msg")
    ob = Outbox(pg)
    a = ob.one("retry.before")
    assert len(read_ids(kafka, "retry", a.ids)) == 1

    broker.cmd("error 0 %s 3" % code)
    b = ob.one("retry.ev", '{"retried": true}')
    got = read_ids(kafka, "retry", b.ids, timeout=60)
    assert b.id in got, r.log_tail()
    assert got[b.id][0].value == '{"retried": true}'
    wait_confirmed(pg, b.commit_end)
    failures = [l for l in r.log_text().splitlines() if "encountered error" in l and text in l]
    assert len(failures) >= 3, "expected 3 failed attempts in the debug log, saw %d:\n%s" % (
        len(failures), r.log_tail())
    assert r.running()
    assert not log_lines(r, "error"), log_lines(r, "error")
    assert kafka.read(DLQ, timeout=1, wait_topic=False) == []
    assert r.terminate() == 0


# --------------------------------------------------------------------------
# the dead-letter path itself, and timeouts
# --------------------------------------------------------------------------

def test_poison_inside_a_transaction_dead_lettered(pg, broker, kafka, relayer):
    """A poison event between two good ones of the same transaction: the
    good ones arrive, the poison one is dead-lettered, and the transaction
    is confirmed only as a whole (all three accounted for)."""
    r = start_relay(relayer, pg, broker, "--on-poison", "dead-letter")
    ob = Outbox(pg)
    tx = ob.tx([("mix.one", '{"i": 1}'), ("bad topic!", '{"i": 2}'), ("mix.three", '{"i": 3}')])
    got = read_ids(kafka, "mix", [tx.ids[0], tx.ids[2]])
    assert tx.ids[0] in got and tx.ids[2] in got, r.log_tail()
    dl = dead_letters(kafka, 1)
    assert [m.headers.get("event_id") for m in dl] == [str(tx.ids[1])], dl
    wait_confirmed(pg, tx.commit_end)
    assert r.terminate() == 0


def test_undeliverable_dead_letter_halts(pg, broker, kafka, relayer):
    """The broker refuses the event and then its dead letter too (two
    Produce requests answered MSG_SIZE_TOO_LARGE): the event is
    neither published nor dead-lettered, so the relayer must halt without
    confirming it rather than count it as handled; a restart delivers it."""
    r = start_relay(relayer, pg, broker, "--on-poison", "dead-letter")
    ob = Outbox(pg)
    a = ob.one("dlq.before")
    assert a.id in read_ids(kafka, "dlq", a.ids)
    wait_confirmed(pg, a.commit_end)

    broker.cmd("error 0 MSG_SIZE_TOO_LARGE 2")
    b = ob.one("dlq.ev", '{"twice": "refused"}')
    rc = r.wait_exit(60)
    assert rc == 1, "rc=%s; log tail:\n%s" % (rc, r.log_tail())
    line = halt_line(r, b.id)
    assert DLQ in line, "the error does not say the dead letter failed: %r" % line
    assert_not_confirmed(pg, b, r)
    assert kafka.read(DLQ, timeout=2, wait_topic=False) == []

    r2 = start_relay(relayer, pg, broker, "--on-poison", "dead-letter")
    assert b.id in read_ids(kafka, "dlq", b.ids, timeout=60), r2.log_tail()
    wait_confirmed(pg, b.commit_end)
    assert r2.terminate() == 0


@pytest.mark.parametrize("policy", ["halt", "dead-letter"])
def test_message_timeout_never_skips(pg, broker, kafka, relayer, policy):
    """A user who sets message.timeout.ms would make an outage fail
    deliveries instead of making them wait. Since issue 11 the setting is
    refused outright (exit 2, naming it) under either policy, before a slot
    is created or anything is read, so a timeout can never skip or
    dead-letter an event. (Before, the relayer accepted it and had to halt
    or re-produce; the guard rail makes that path unreachable.)"""
    r = start_relay(relayer, pg, broker, "--on-poison", policy, "-X", "message.timeout.ms=2000",
                    wait=False)
    assert r.wait_exit(15) == 2, r.log_tail()
    assert re.search(r"message\.timeout\.ms=2000 is refused", r.log_text()), r.log_tail()
    assert pg.slot_info(SLOT) is None, "a slot was created by a refused configuration"
    # The safe value of the same property is accepted and events flow.
    r = start_relay(relayer, pg, broker, "--on-poison", policy, "-X", "message.timeout.ms=0")
    ob = Outbox(pg)
    a = ob.one("tmo.before")
    assert a.id in read_ids(kafka, "tmo", a.ids)
    wait_confirmed(pg, a.commit_end)
    assert kafka.read(DLQ, timeout=1, wait_topic=False) == [], "a timeout was dead-lettered"
    assert r.terminate() == 0
