"""test_reaper.py — the reaper while the slot lags (docs/operations.md, "The
rule: marks"), against a real PostgreSQL 15 (wal2json) and the mock Kafka
cluster.

While Kafka is down or the relayer is stopped, the slot stays behind the
head of the WAL. The reaper must still delete the rows the slot HAS
confirmed (those a confirmed mark covers) and must keep every row it has not:
each test checks the exact ids, and for the rows that go, that their
transaction's commit record is at or before the slot's confirmed position
(pg_walinspect). Default flags throughout (--retention 7 days): the rows
made to be expired are 8 days old.

The daemon takes a mark every MARK_INTERVAL seconds; the tests wait for a
mark the slot has confirmed rather than for a fixed time.
"""

import os
import time

import psycopg2
import pytest

import harness
from harness import wait_until
from test_operations import SLOT, TOPIC, CONFIRM_WAIT, cli, outbox_ids, start_with_metrics, \
    metric, wait_metric, scrape, load_partitioned_layout, partitions

MARK_INTERVAL = 10       # MAINT_MARK_INTERVAL in include/outbox_relay/ops/maint.h
EXPIRED = "8 days"       # past the default --retention of 7 days


def insert_tx(pg, n, age=None, conn=None):
    """Inserts n rows in one transaction (on conn if given, else its own);
    returns (ids, xid as an int)."""
    expr = "now() - %s::interval" if age else "now()"
    params = ([age] if age else []) + [n]
    sql = ("INSERT INTO events_outbox (aggregate_id, type, payload, created_at) "
           "SELECT gen_random_uuid(), 'order.created', jsonb_build_object('i', g), " + expr +
           " FROM generate_series(1, %s) g RETURNING id, pg_current_xact_id()::text")
    if conn is None:
        rows = pg.query(sql, params)
    else:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
    return [r[0] for r in rows], int(rows[0][1])


def wait_confirmed_mark(pg, covering_xid, timeout=MARK_INTERVAL * 3 + 30):
    """Waits until the marks table holds a mark of the slot whose snapshot
    xmin is above covering_xid and whose insert_lsn the slot has confirmed:
    from then on the rows of that transaction are provably delivered."""
    def ok():
        return pg.scalar(
            "SELECT count(*) FROM public.outbox_relay_reaper_marks m JOIN pg_replication_slots s "
            "ON s.slot_name = m.slot_name WHERE m.slot_name = %s "
            "AND m.snapshot_xmin > %s::text::xid8 AND m.insert_lsn <= s.confirmed_flush_lsn",
            (SLOT, str(covering_xid))) > 0
    wait_until(ok, timeout, message="a confirmed mark covering xid %d" % covering_xid)


def committed_at_or_before(pg, xid, since, lsn):
    end = pg.commit_end_lsn(xid, since)
    assert end is not None, "no commit record for xid %d" % xid
    return end <= lsn


def event_ids(msgs):
    return sorted(int(m.headers["event_id"]) for m in msgs)


# --------------------------------------------------------------------------
# `outbox-relay reap` (cron) while the slot lags
# --------------------------------------------------------------------------

@pytest.mark.parametrize("outage", ["broker_down", "relayer_stopped"])
def test_reap_keeps_up_while_the_slot_lags(pg, broker, kafka, relayer, relay_args, relayer_binary,
                                           outage):
    """A daemon with its own reaper off (the cron deployment of
    docs/operations.md) streams; rows A are delivered and a mark covering
    them is confirmed; then the outage: Kafka down, or the relayer stopped,
    while producers keep committing rows B. `outbox-relay reap` with
    default flags deletes exactly A and keeps B (and the young rows). Once
    delivery resumes, B goes too."""
    start = pg.current_wal_lsn()
    p = relayer(*relay_args, "--retention", "0")
    p.wait_for_log("streaming", timeout=30)
    a1, xa1 = insert_tx(pg, 7, age=EXPIRED)
    a2, xa2 = insert_tx(pg, 5, age=EXPIRED)
    young, _ = insert_tx(pg, 3)
    assert event_ids(kafka.read(TOPIC, expected=15, timeout=30)) == sorted(a1 + a2 + young)
    wait_confirmed_mark(pg, xa2)

    if outage == "broker_down":
        broker.cmd("down")
    else:
        assert p.terminate() == 0
    b1, xb1 = insert_tx(pg, 4, age=EXPIRED)
    b2, xb2 = insert_tx(pg, 6, age=EXPIRED)
    young2, _ = insert_tx(pg, 2)

    before_reap = pg.current_wal_lsn()
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn())
    confirmed = pg.confirmed_flush_lsn(SLOT)
    assert r.returncode == 0, r.stderr
    assert "deleted 12 rows" in r.stderr, r.stderr
    if outage == "relayer_stopped":
        # No daemon takes marks now: `reap` stored its own, for later runs.
        assert pg.scalar("SELECT count(*) FROM public.outbox_relay_reaper_marks "
                         "WHERE insert_lsn >= %s::pg_lsn",
                         (harness.int_to_lsn(before_reap),)) == 1
    assert "kept expired rows" in r.stderr, r.stderr
    assert outbox_ids(pg) == set(b1 + b2 + young + young2)
    # What went was confirmed by the slot; what stayed was not.
    assert committed_at_or_before(pg, xa1, start, confirmed)
    assert committed_at_or_before(pg, xa2, start, confirmed)
    assert not committed_at_or_before(pg, xb1, start, confirmed)
    assert not committed_at_or_before(pg, xb2, start, confirmed)

    # Delivery resumes: B is delivered, then reaped.
    if outage == "broker_down":
        broker.cmd("up")
    else:
        p = relayer(*relay_args, "--retention", "0")
        p.wait_for_log("streaming", timeout=30)
    wait_until(lambda: set(b1 + b2 + young2) <= set(event_ids(kafka.read(TOPIC, timeout=5))),
               60, message="B delivered")
    marker, _ = insert_tx(pg, 1)
    wait_until(lambda: set(marker) <= set(event_ids(kafka.read(TOPIC, timeout=5))),
               30, message="the marker delivered")
    wait_until(lambda: pg.confirmed_flush_lsn(SLOT) >= pg.current_wal_lsn(), 30,
               message="the slot to catch up")
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn())
    assert r.returncode == 0 and "deleted 10 rows" in r.stderr, r.stderr
    assert outbox_ids(pg) == set(young + young2 + marker)


# --------------------------------------------------------------------------
# the daemon's reaper, default flags
# --------------------------------------------------------------------------

def test_daemon_reaper_keeps_up_while_the_broker_is_down(pg, broker, kafka, relayer, relay_args):
    """`outbox-relay run` with the reaper's defaults (first run one
    --reap-interval, 60 s, after start): the broker goes down before that
    run; the run still deletes the rows delivered before the outage, and
    only those."""
    start = pg.current_wal_lsn()
    p, port = start_with_metrics(relayer, relay_args)
    p.wait_for_log("streaming", timeout=30)
    t_start = time.monotonic()
    a, xa = insert_tx(pg, 9, age=EXPIRED)
    kafka.read(TOPIC, expected=9, timeout=30)
    wait_confirmed_mark(pg, xa)
    broker.cmd("down")
    assert time.monotonic() - t_start < 50, "too slow: the first reaper run may have come"
    b, xb = insert_tx(pg, 4, age=EXPIRED)

    s = wait_metric(port, lambda s: metric(s, "outbox_relay_reaper_runs_total") == 1,
                    60 + CONFIRM_WAIT + 30, "the daemon's first reaper run")
    confirmed = pg.confirmed_flush_lsn(SLOT)
    assert metric(s, "outbox_relay_reaper_rows_deleted_total") == 9
    assert outbox_ids(pg) == set(b)
    assert "kept expired rows" in p.log_text(), p.log_tail()
    assert committed_at_or_before(pg, xa, start, confirmed)
    assert not committed_at_or_before(pg, xb, start, confirmed)


# --------------------------------------------------------------------------
# a transaction in progress at the mark
# --------------------------------------------------------------------------

def test_long_transaction_with_savepoint_is_not_reaped_early(pg, broker, kafka, relayer,
                                                            relay_args, relayer_binary):
    """T begins and inserts rows — one at top level, one after a SAVEPOINT
    (a subtransaction id, which a snapshot's list of running transactions
    does not hold) — before rows D that commit while T is open; a mark is
    taken and confirmed with T still open; then the broker goes down and T
    commits, so T's rows are not delivered. The reaper deletes the rows
    committed before T began, never T's (whose ids are lower than D's: an
    id watermark would delete them)."""
    start = pg.current_wal_lsn()
    p = relayer(*relay_args, "--retention", "0")
    p.wait_for_log("streaming", timeout=30)
    e, xe = insert_tx(pg, 3, age=EXPIRED)
    kafka.read(TOPIC, expected=3, timeout=30)

    t = pg.connect(autocommit=False)
    t_top, xt = insert_tx(pg, 1, age=EXPIRED, conn=t)
    with t.cursor() as cur:
        cur.execute("SAVEPOINT s1")
    t_sub, _ = insert_tx(pg, 1, age=EXPIRED, conn=t)
    with t.cursor() as cur:
        cur.execute("RELEASE SAVEPOINT s1")
    assert pg.scalar("SELECT count(*) FROM events_outbox WHERE id = ANY(%s)",
                     (t_top + t_sub,)) == 0   # not committed yet

    d, xd = insert_tx(pg, 4, age=EXPIRED)
    after_d = pg.current_wal_lsn()
    assert min(d) > max(t_top + t_sub)
    kafka.read(TOPIC, expected=7, timeout=30)
    # A mark taken after D committed, with T still running, and confirmed.
    wait_until(lambda: pg.scalar(
        "SELECT count(*) FROM public.outbox_relay_reaper_marks m JOIN pg_replication_slots s "
        "ON s.slot_name = m.slot_name WHERE m.insert_lsn > %s::pg_lsn "
        "AND m.insert_lsn <= s.confirmed_flush_lsn", (harness.int_to_lsn(after_d),)) > 0,
        MARK_INTERVAL * 3 + 30, message="a confirmed mark taken while T is open")

    broker.cmd("down")
    t.commit()
    t.close()
    assert outbox_ids(pg) >= set(t_top + t_sub)

    r = cli(relayer_binary, "reap", "--dsn", pg.dsn())
    confirmed = pg.confirmed_flush_lsn(SLOT)
    assert r.returncode == 0, r.stderr
    left = outbox_ids(pg)
    assert set(t_top + t_sub) <= left, "rows of T were reaped before delivery: " + r.stderr
    assert not set(e) & left, r.stderr
    assert not committed_at_or_before(pg, xt, start, confirmed)
    # Whatever went was delivered and confirmed.
    for ids, xid in ((e, xe), (d, xd)):
        if not set(ids) & left:
            assert committed_at_or_before(pg, xid, start, confirmed)
    assert "kept expired rows" in r.stderr, r.stderr


# --------------------------------------------------------------------------
# unlogged tables
# --------------------------------------------------------------------------

class SlotFollower:
    """Advances the slot to the flushed end of WAL every 0.1 s, as a
    relayer confirming keepalives does (an UNLOGGED table's rows are not
    in the WAL, so nothing is pending for it)."""

    def __init__(self, pg):
        import threading
        self.pg, self.stop = pg, threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        conn = psycopg2.connect(self.pg.dsn(), connect_timeout=10)
        conn.autocommit = True
        while not self.stop.is_set():
            with conn.cursor() as cur:
                cur.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_flush_lsn())",
                            (SLOT,))
            time.sleep(0.1)
        conn.close()

    def close(self):
        self.stop.set()
        self.t.join(10)


@pytest.mark.parametrize("layout", ["plain", "partition"])
def test_reaper_refuses_an_unlogged_table(pg, relayer_binary, layout):
    """An UNLOGGED outbox (or partition) writes no WAL: its rows never reach
    the slot while confirmed_flush_lsn moves past them. The reaper refuses,
    names the ALTER TABLE to run, and deletes nothing."""
    if layout == "plain":
        pg.query("ALTER TABLE events_outbox SET UNLOGGED")
        target = "public.events_outbox"
    else:
        load_partitioned_layout(pg)
        pg.query("CREATE UNLOGGED TABLE events_outbox_2020_01 PARTITION OF events_outbox "
                 "FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-02-01 00:00+00')")
        target = "public.events_outbox_2020_01"
    pg.create_slot(SLOT)
    if layout == "plain":
        ids, _ = insert_tx(pg, 5, age=EXPIRED)
    else:
        ids = [r[0] for r in pg.query(
            "INSERT INTO events_outbox (aggregate_id, type, payload, created_at) "
            "SELECT gen_random_uuid(), 'order.created', '{}', '2020-01-15 12:00+00' "
            "FROM generate_series(1, 5) RETURNING id")]
    before = partitions(pg) if layout == "partition" else None
    follower = SlotFollower(pg)
    try:
        time.sleep(0.5)
        r = cli(relayer_binary, "reap", "--dsn", pg.dsn())
    finally:
        follower.close()
    assert r.returncode == 1, r.stderr
    assert "ALTER TABLE %s SET LOGGED" % target in r.stderr, r.stderr
    assert outbox_ids(pg) == set(ids)
    if before is not None:
        assert partitions(pg) == before


# --------------------------------------------------------------------------
# partitions while the slot lags
# --------------------------------------------------------------------------

def test_partitions_dropped_while_the_broker_is_down_only_when_all_rows_are_confirmed(
        pg, broker, kafka, relayer, relay_args, relayer_binary):
    """On the layout of sql/004: an expired partition whose rows were all
    delivered before the outage is dropped during it; one that got a row
    during the outage is kept; so are the DEFAULT partition's undelivered
    rows, while its delivered ones go."""
    load_partitioned_layout(pg)
    for name, lo, hi in (("events_outbox_2020_01", "2020-01-01", "2020-02-01"),
                         ("events_outbox_2020_02", "2020-02-01", "2020-03-01")):
        pg.query("CREATE TABLE %s PARTITION OF events_outbox FOR VALUES FROM ('%s 00:00+00') "
                 "TO ('%s 00:00+00')" % (name, lo, hi))
    before = partitions(pg)

    def put(created_at, n):
        rows = pg.query("INSERT INTO events_outbox (aggregate_id, type, payload, created_at) "
                        "SELECT gen_random_uuid(), 'order.created', '{}', %s::timestamptz "
                        "FROM generate_series(1, %s) RETURNING id, pg_current_xact_id()::text",
                        (created_at, n))
        return [r[0] for r in rows], int(rows[0][1])

    p = relayer(*relay_args, "--retention", "0")
    p.wait_for_log("streaming", timeout=30)
    jan, _ = put("2020-01-15 12:00+00", 4)
    feb, _ = put("2020-02-15 12:00+00", 3)
    dflt, xd = put("2018-03-01 00:00+00", 2)
    assert sorted(jan + feb + dflt) == event_ids(kafka.read(TOPIC, expected=9, timeout=30))
    wait_confirmed_mark(pg, xd)

    broker.cmd("down")
    feb_late, _ = put("2020-02-20 12:00+00", 1)
    dflt_late, _ = put("2018-04-01 00:00+00", 2)

    r = cli(relayer_binary, "reap", "--dsn", pg.dsn())
    assert r.returncode == 0, r.stderr
    assert "dropped expired partition public.events_outbox_2020_01" in r.stderr, r.stderr
    assert "kept expired rows" in r.stderr, r.stderr
    assert partitions(pg) == before - {"events_outbox_2020_01"}
    assert outbox_ids(pg) == set(feb + feb_late + dflt_late)


def test_without_the_marks_table_reaping_still_works_when_the_slot_is_current(
        pg, broker, kafka, relayer, relay_args, relayer_binary):
    """An older schema without public.outbox_relay_reaper_marks: the daemon
    and `reap` say once what is missing, and `reap` still deletes delivered
    rows by its fresh mark when the slot keeps up."""
    pg.query("DROP TABLE public.outbox_relay_reaper_marks")
    p = relayer(*relay_args, "--retention", "0")
    p.wait_for_log("streaming", timeout=30)
    p.wait_for_log("outbox_relay_reaper_marks", timeout=30)
    old, _ = insert_tx(pg, 3, age=EXPIRED)
    young, _ = insert_tx(pg, 2)
    kafka.read(TOPIC, expected=5, timeout=30)
    wait_until(lambda: pg.confirmed_flush_lsn(SLOT) >= pg.current_wal_lsn(), 30,
               message="the slot to catch up")
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn())
    assert r.returncode == 0, r.stderr
    assert "deleted 3 rows" in r.stderr, r.stderr
    assert "outbox_relay_reaper_marks" in r.stderr and "sql/003_relay_role.sql" in r.stderr, \
        r.stderr
    assert outbox_ids(pg) == set(young)
    time.sleep(MARK_INTERVAL + 1)   # the daemon's next mark fails the same way, silently
    assert sum("outbox_relay_reaper_marks" in line
               for line in p.log_text().splitlines()) == 1, p.log_tail()


# --------------------------------------------------------------------------
# 32-bit xmin across a wraparound of the transaction counter
# --------------------------------------------------------------------------

def move_next_xid(pg, xid, epoch):
    """Stops pg, moves its next transaction id to (epoch, xid) with
    pg_resetwal and starts it again. Everything is frozen first (tuples
    newer than the new horizon would look as if from the future), and the
    pg_xact segment the new ids need is created zero-filled, as
    pg_resetwal's documentation says."""
    for db in ("postgres", "template1"):
        conn = psycopg2.connect(pg.dsn(dbname=db), connect_timeout=10)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("VACUUM FREEZE")
        conn.close()
    pg.stop()
    pg.run_tool("pg_resetwal", "-x", xid, "-e", epoch, "-D", pg.server_path(pg.datadir))
    seg = os.path.join(pg.datadir, "pg_xact", "%04X" % (xid // (8192 * 4) // 32))
    if not os.path.exists(seg):
        with open(seg, "wb") as f:
            f.write(b"\0" * 8192 * 32)
        pg.install.chown(seg)
    pg.start()


def test_reaper_across_xid_wraparound(pg, broker, kafka, relayer, relay_args, relayer_binary):
    """xmin has 32 bits; marks have 64. Rows A inserted just before the
    32-bit counter wraps and B just after are delivered and covered by a
    confirmed mark; rows C, inserted after the mark and during a broker
    outage, have a small 32-bit xmin too. The reaper deletes A and B and
    keeps C: comparing xmin's 32 bits with the mark's 64 would delete C,
    comparing 32 with 32 would keep A."""
    move_next_xid(pg, 2 ** 32 - 300, 1)
    p = relayer(*relay_args, "--retention", "0")
    p.wait_for_log("streaming", timeout=30)
    a, xa = insert_tx(pg, 3, age=EXPIRED)
    assert xa >> 32 == 1, xa
    conn = pg.connect()
    with conn.cursor() as cur:
        while True:   # one id per autocommit statement, until the low 32 bits wrap
            cur.execute("SELECT pg_current_xact_id()::text")
            if int(cur.fetchone()[0]) >> 32 == 2:
                break
    conn.close()
    b, xb = insert_tx(pg, 2, age=EXPIRED)
    assert xb >> 32 == 2, xb
    assert sorted(a + b) == event_ids(kafka.read(TOPIC, expected=5, timeout=30))
    wait_confirmed_mark(pg, xb)

    broker.cmd("down")
    c, xc = insert_tx(pg, 4, age=EXPIRED)
    assert xc & 0xffffffff < xa & 0xffffffff
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn())
    assert r.returncode == 0, r.stderr
    assert "deleted 5 rows" in r.stderr and "kept expired rows" in r.stderr, r.stderr
    assert outbox_ids(pg) == set(c)


# --------------------------------------------------------------------------
# an unfinished backfill
# --------------------------------------------------------------------------

def test_reaper_deletes_nothing_while_a_backfill_is_unfinished(pg, relayer_binary):
    """--backfill pending creates the slot past the rows it still has to
    publish, so the slot "confirms" them before Kafka has them. While the
    marker in public.outbox_relay_slots says the backfill is not done (a
    backfiller SIGKILLed mid-way leaves 'running'), the reaper deletes
    nothing, even with the slot current; once it says 'done' it reaps."""
    ids, _ = insert_tx(pg, 5, age=EXPIRED)
    start = pg.create_slot(SLOT)
    pg.query("INSERT INTO public.outbox_relay_slots (slot_name, created_lsn, backfill_state) "
             "VALUES (%s, %s::pg_lsn, 'running')", (SLOT, harness.int_to_lsn(start)))
    follower = SlotFollower(pg)
    try:
        time.sleep(0.5)
        r = cli(relayer_binary, "reap", "--dsn", pg.dsn())
        assert r.returncode == 0, r.stderr
        assert "backfill in progress" in r.stderr, r.stderr
        assert outbox_ids(pg) == set(ids), "rows of an unfinished backfill were reaped"

        pg.query("UPDATE public.outbox_relay_slots SET backfill_state = 'done' "
                 "WHERE slot_name = %s", (SLOT,))
        r = cli(relayer_binary, "reap", "--dsn", pg.dsn())
        assert r.returncode == 0, r.stderr
        assert outbox_ids(pg) == set(), r.stderr
    finally:
        follower.close()
