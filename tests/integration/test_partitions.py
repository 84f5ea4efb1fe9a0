"""test_partitions.py — partition membership of a partitioned outbox, and
outbox tables that write no WAL.

A partitioned outbox's rows arrive under the names of its leaf partitions,
as the catalogs were when the row was written (logical decoding reads a
historic catalog). The relayer has to decide, for each such name, whether
it was a partition of the outbox at that moment, while it can only ask the
catalog as it is now. These tests change the partition layout (DETACH,
ATTACH, RENAME, CREATE … PARTITION OF) around undelivered rows and check
that every outbox row arrives, that no row of a table that was not part of
the outbox is relayed, and that where the relayer cannot tell, it stops
loudly instead of skipping (docs/failure-modes.md, "Partitioned outbox").

UNLOGGED (or temporary) tables write no WAL, so logical decoding never sees
their rows: the relayer must refuse such an outbox at start, and notice a
switch while it runs before the reaper can delete rows that were never
relayed.

All run with default flags (no -X tuning).
"""

import glob
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

import harness
from harness import wait_until

pytestmark = pytest.mark.usefixtures("plugin", "pg_major")  # per plugin and major (conftest.py)

SLOT = "outbox_relay"
TOPIC = "order"
GUARD_SQL = "007_partition_guard.sql"


@pytest.fixture(params=["guard-loaded", "guard-absent"])
def pg(request, pg_factory):
    """Each test on a database where sql/007 (the optional partition guard)
    was loaded and on one where it never was: the relayer must work either
    way. Tests that install the guard take only "guard-loaded"; "only-001"
    (asked for by name) loads nothing of sql/ but the outbox table."""
    if request.param == "only-001":
        others = [os.path.basename(f) for f in
                  glob.glob(os.path.join(harness.REPO_ROOT, "sql", "*.sql"))]
        return pg_factory(without_sql=[f for f in others if f != "001_outbox.sql"])
    return pg_factory(without_sql=(GUARD_SQL,) if request.param == "guard-absent" else ())


only_with_guard = pytest.mark.parametrize("pg", ["guard-loaded"], indirect=True)


def load_partitioned_layout(pg):
    """Replaces the plain outbox of 001 by the partitioned layout of 004."""
    pg.query("DROP TABLE events_outbox CASCADE")
    with open(os.path.join(harness.REPO_ROOT, "sql", "004_outbox_partitioned.sql")) as f:
        pg.query(f.read())


def current_partition(pg):
    """The name of the partition that holds rows created now."""
    name = pg.scalar("SELECT 'events_outbox_' || to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM')")
    assert pg.scalar("SELECT to_regclass(%s) IS NOT NULL", ("public." + name,))
    return "public." + name


def insert(pg, n, table="events_outbox", tag="x", created_at=None):
    """Inserts n rows in one transaction; returns their ids."""
    expr = "%s::timestamptz" if created_at else "now()"
    params = [tag] + ([created_at] if created_at else []) + [n]
    rows = pg.query("INSERT INTO %s (aggregate_id, type, payload, created_at) "
                    "SELECT gen_random_uuid(), 'order.placed', jsonb_build_object('tag', %%s, 'i', g), %s "
                    "FROM generate_series(1, %%s) g RETURNING id" % (table, expr), params)
    return [r[0] for r in rows]


def event_ids(msgs):
    return [int(m.headers["event_id"]) for m in msgs]


def read_ids(kafka, expected, timeout=30):
    """Event ids of the topic, once at least `expected` records are there.
    A reconnect (e.g. a slow machine hitting wal_sender_timeout) resends
    some events, and duplicates count towards `expected`: when the distinct
    ids fall short, everything the topic has after a further wait is
    returned."""
    ids = event_ids(kafka.read(TOPIC, expected=expected, timeout=timeout))
    if len(set(ids)) < expected:
        ids = event_ids(kafka.read(TOPIC, timeout=10))
    return ids


def start(relayer, pg, broker, *extra, tuning="tuned", wait=True):
    """The relayer (with --status-interval 0.5 as tuned, with no tuning flag
    for "defaults"); with wait, once it logs that it streams."""
    p = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap,
                *(harness.tuned(tuning, "--status-interval", "0.5") + list(extra)))
    if not wait:
        return p
    p.wait_for_log("streaming", timeout=30)
    return p


def wait_confirmed_now(pg, timeout=30):
    lsn = pg.current_wal_lsn()
    wait_until(lambda: (pg.confirmed_flush_lsn(SLOT) or 0) >= lsn, timeout,
               message="slot to confirm %s" % harness.int_to_lsn(lsn))


def warm_then_stop(relayer, pg, broker, kafka, tuning="tuned"):
    """A relayer streams one warm-up row, the slot confirms it, and the
    relayer stops (SIGTERM, exit 0): the starting point of a layout change
    made while no relayer runs."""
    p = start(relayer, pg, broker, tuning=tuning)
    insert(pg, 1, tag="warm")
    read_ids(kafka, 1)
    wait_confirmed_now(pg, harness.confirm_timeout(tuning, 30))
    assert p.terminate() == 0


def cli(binary, *args, timeout=60):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    return subprocess.run([binary] + [str(a) for a in args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout, env=env)


def http_get(port, path, timeout=5):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


# --------------------------------------------------------------------------
# membership as of the commit
# --------------------------------------------------------------------------

@pytest.mark.parametrize("pg", ["guard-loaded", "guard-absent", "only-001"], indirect=True)
def test_own_partitioned_outbox_with_defaults(pg, broker, kafka, relayer):
    """A partitioned outbox of the user's own (not sql/004's), two
    partitions, the relayer on it with its defaults, one INSERT: the row
    arrives, whether or not sql/007 was ever loaded. The catalog lookup of
    the partition's membership used to pass a parameter its query only has
    with the guard's log, and said no more than an empty reason."""
    pg.query("CREATE TABLE public.pout (id bigserial, aggregate_id text, type text NOT NULL, "
             "payload jsonb, created_at timestamptz NOT NULL DEFAULT now(), "
             "PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at)")
    pg.query("CREATE TABLE public.pout_old PARTITION OF public.pout "
             "FOR VALUES FROM ('2000-01-01 00:00+00') TO ('2020-01-01 00:00+00')")
    pg.query("CREATE TABLE public.pout_now PARTITION OF public.pout "
             "FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2100-01-01 00:00+00')")
    p = start(relayer, pg, broker, "--table", "public.pout", tuning="defaults")
    rows = insert(pg, 1, table="public.pout", tag="one")
    got = read_ids(kafka, 1)
    assert got == rows, p.log_tail()
    assert p.running(), p.log_tail()
    assert "cannot tell whether" not in p.log_text(), p.log_tail()


def test_catalog_lookup_failure_says_why(pg, broker, kafka, relayer):
    """When a membership lookup itself fails, the relayer stops with the
    server's reason, not an empty one. Made to fail by a relayer role that
    may not call pg_visible_in_snapshot(), which the lookup asks first (so
    it runs on wal2json, the plugin that asks)."""
    if harness.plugin() != "wal2json":
        pytest.skip("pgoutput decides membership on the server: no lookup")
    load_partitioned_layout(pg)
    pg.create_role("relay_nocat")
    pg.query("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_visible_in_snapshot(xid8, pg_snapshot) "
             "FROM PUBLIC")
    p = relayer("--dsn", pg.dsn(user="relay_nocat"), "--brokers", broker.bootstrap)
    p.wait_for_log("streaming", timeout=30)
    insert(pg, 1, tag="one")
    assert p.wait_exit(60) == 1, p.log_tail()
    m = re.search(r"cannot tell whether table \S+ belongs to the outbox: (.*)", p.log_text())
    assert m, p.log_tail()
    assert "permission denied" in m.group(1), p.log_tail()
    # Nor any other failure on the way (the role lacks sql/003's grants):
    # no reason is empty.
    empty = [line for line in p.log_text().splitlines()
             if re.search(r"(:|\(\))\s*$|\(\);", line)]
    assert not empty, "\n".join(empty)

@pytest.mark.parametrize("tuning", harness.TUNINGS)
def test_detach_while_stopped_never_skips(pg, broker, kafka, relayer, tuning):
    """500 rows committed into a partition that is detached before the
    relayer decodes them: today's catalog says "not a partition". The
    relayer must not skip them: it stops with exit 1, naming the table, and
    the slot stays before them (so nothing is lost and a recovery can
    still relay them). With pgoutput they simply arrive."""
    load_partitioned_layout(pg)
    part = current_partition(pg)
    p = start(relayer, pg, broker, tuning=tuning)
    warm = insert(pg, 2, tag="warm")
    assert set(read_ids(kafka, 2)) == set(warm)
    wait_confirmed_now(pg, harness.confirm_timeout(tuning, 30))
    assert p.terminate() == 0
    before = pg.confirmed_flush_lsn(SLOT)

    rows = insert(pg, 500, tag="detached")
    pg.query("ALTER TABLE events_outbox DETACH PARTITION %s" % part)
    marker = insert(pg, 1, table="events_outbox_default", tag="after",
                    created_at="2999-01-01 00:00+00")

    p = start(relayer, pg, broker, tuning=tuning, wait=False)
    if harness.plugin() == "pgoutput":
        # The server decides membership as of each change: the 500 rows
        # were the outbox's when written, so they arrive, and so does the
        # marker; nothing stops.
        got = set(read_ids(kafka, 2 + 500 + 1, timeout=60))
        assert set(rows) | set(marker) <= got, p.log_tail()
        assert p.running() and p.terminate() == 0
        return
    rc = p.wait_exit(60)
    log = p.log_text()
    got = set(event_ids(kafka.read(TOPIC, timeout=5)))
    if rc == 0 or set(rows) <= got:
        # The other correct outcome: every detached row arrived.
        assert set(rows) <= got, log
    else:
        assert rc == 1, log
        print(p.log_tail(3))
        assert re.search(r"cannot tell whether .*%s" % re.escape(part.split(".")[-1]), log), log
        assert "--recreate-slot --backfill pending" in log, log
        # Nothing of them was skipped past: the slot did not move over them.
        assert pg.confirmed_flush_lsn(SLOT) == before
        assert not set(marker) & got, "the relayer went on past the undecidable rows"


@only_with_guard
@pytest.mark.parametrize("tuning", harness.TUNINGS)
def test_guard_refuses_detach_until_delivered(pg, broker, kafka, relayer, tuning):
    """With sql/007's guard installed, DETACH of a partition whose rows the
    relayer has not confirmed is refused with a clear message (and rolled
    back); once the relayer has caught up it goes through, every row
    arrived, and rows written into the detached table afterwards are not
    relayed."""
    load_partitioned_layout(pg)
    part = current_partition(pg)
    pg.query("SELECT public.outbox_relay_install_partition_guard('public.events_outbox', "
             "'outbox_relay', 2)")
    warm_then_stop(relayer, pg, broker, kafka, tuning)
    rows = insert(pg, 500, tag="held")

    with pytest.raises(Exception) as e:
        pg.query("ALTER TABLE events_outbox DETACH PARTITION %s" % part)
    assert "partition guard" in str(e.value) and "not confirmed yet" in str(e.value), e.value
    assert pg.scalar("SELECT count(*) FROM pg_inherits WHERE inhrelid = %s::regclass", (part,)) == 1

    p = start(relayer, pg, broker, tuning=tuning)
    got = read_ids(kafka, 501, timeout=60)
    assert set(rows) <= set(got)
    pg.query("ALTER TABLE events_outbox DETACH PARTITION %s" % part.replace("public.", ""))
    outside = insert(pg, 3, table=part, tag="outside")
    marker = insert(pg, 1, table="events_outbox_default", tag="m", created_at="2999-01-01 00:00+00")
    got = read_ids(kafka, 502, timeout=30)
    assert set(marker) <= set(got) and not set(outside) & set(got)
    assert p.running(), p.log_tail()


@only_with_guard
def test_attach_while_stopped(pg, broker, kafka, relayer):
    """A table written standalone and attached while the relayer is stopped:
    without the guard the relayer cannot tell the rows written before the
    ATTACH from those after it and stops (nothing skipped, nothing relayed
    that was not an outbox row); with the guard the ATTACH waits for the
    relayer instead. With pgoutput the attached rows arrive, the standalone
    ones do not, and the relayer goes on."""
    load_partitioned_layout(pg)
    pg.query("CREATE TABLE public.staging (LIKE events_outbox INCLUDING ALL)")
    warm_then_stop(relayer, pg, broker, kafka)
    before = pg.confirmed_flush_lsn(SLOT)
    standalone = insert(pg, 4, table="staging", tag="standalone", created_at="2030-03-01 00:00+00")
    pg.query("ALTER TABLE events_outbox ATTACH PARTITION staging "
             "FOR VALUES FROM ('2030-01-01 00:00+00') TO ('2031-01-01 00:00+00')")
    attached = insert(pg, 6, tag="attached", created_at="2030-06-01 00:00+00")
    p = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--status-interval", "0.5")
    if harness.plugin() == "pgoutput":
        # As of each change: the standalone rows were no outbox rows, the
        # attached ones were; the relayer tells them apart and goes on
        # (so the guard below is wal2json's need).
        marker = insert(pg, 1, tag="marker")
        got = set(read_ids(kafka, 1 + 6 + 1, timeout=60))
        assert set(attached) | set(marker) <= got and not set(standalone) & got, p.log_tail()
        assert p.running() and p.terminate() == 0
        return
    assert p.wait_exit(60) == 1, p.log_tail()
    assert re.search(r"cannot tell whether table public\.staging", p.log_text()), p.log_tail()
    assert pg.confirmed_flush_lsn(SLOT) == before
    assert not set(standalone) & set(event_ids(kafka.read(TOPIC, timeout=5)))

    # The same with the guard: the ATTACH is refused until the relayer has
    # confirmed the standalone rows (as non-outbox rows).
    pg.query("ALTER TABLE events_outbox DETACH PARTITION staging")
    pg.drop_slot(SLOT)
    pg.query("SELECT public.outbox_relay_install_partition_guard('public.events_outbox', "
             "'outbox_relay', 2)")
    p = start(relayer, pg, broker, "--recreate-slot")
    wait_confirmed_now(pg)
    assert p.terminate() == 0
    more = insert(pg, 4, table="staging", tag="standalone2", created_at="2030-03-02 00:00+00")
    with pytest.raises(Exception) as e:
        pg.query("ALTER TABLE events_outbox ATTACH PARTITION staging "
                 "FOR VALUES FROM ('2030-01-01 00:00+00') TO ('2031-01-01 00:00+00')")
    assert "partition guard" in str(e.value), e.value
    p = start(relayer, pg, broker)
    wait_confirmed_now(pg)
    pg.query("ALTER TABLE events_outbox ATTACH PARTITION staging "
             "FOR VALUES FROM ('2030-01-01 00:00+00') TO ('2031-01-01 00:00+00')")
    later = insert(pg, 6, tag="attached2", created_at="2030-06-02 00:00+00")
    got = set(read_ids(kafka, 1 + 6, timeout=30))
    assert set(later) <= got and not set(more + standalone) & got
    assert p.running(), p.log_tail()


def test_other_alter_while_stopped_is_relayed(pg, broker, kafka, relayer):
    """Ordinary ALTER TABLEs on a partition and on the outbox while the
    relayer is stopped change the partitions' catalog rows after the rows
    were written, but not their membership: a partition linked to the
    outbox since its creation (PARTITION OF) is decided without the catalog's
    history, and every row arrives. (On 17 and 18 with pgoutput this once
    failed with "could not convert row type": the relayer's catalog SQL on
    the walsender it then streamed from; stream.c now starts replication
    on a fresh one.)"""
    load_partitioned_layout(pg)
    part = current_partition(pg)
    warm_then_stop(relayer, pg, broker, kafka)
    rows = insert(pg, 40, tag="behind")
    pg.query("ALTER TABLE %s SET (fillfactor = 90)" % part)
    pg.query("ALTER TABLE events_outbox ADD COLUMN note text")
    later = insert(pg, 5, tag="later")
    p = start(relayer, pg, broker)
    got = read_ids(kafka, 1 + 40 + 5, timeout=60)
    assert set(rows + later) <= set(got)
    assert p.running()


def test_standalone_table_attached_later(pg, broker, kafka, relayer):
    """A table first seen standalone (CREATE TABLE … (LIKE outbox)) is not
    the outbox: its rows are not relayed. Once attached, every row written
    through the parent is (a "not a partition" answer must not stick)."""
    load_partitioned_layout(pg)
    p = start(relayer, pg, broker)
    pg.query("CREATE TABLE public.staging (LIKE events_outbox INCLUDING ALL)")
    standalone = insert(pg, 5, table="staging", tag="standalone", created_at="2030-03-01 00:00+00")
    marker1 = insert(pg, 1, tag="m1")
    assert set(read_ids(kafka, 1)) == set(marker1)
    pg.query("ALTER TABLE events_outbox ATTACH PARTITION staging "
             "FOR VALUES FROM ('2030-01-01 00:00+00') TO ('2031-01-01 00:00+00')")
    later = []
    for i in range(30):  # 300 rows, in 30 transactions
        later += insert(pg, 10, tag="attached", created_at="2030-06-01 00:00+00")
    marker2 = insert(pg, 1, tag="m2")
    got = read_ids(kafka, 1 + 300 + 1, timeout=60)
    assert set(later) <= set(got), "%d of 300 later rows missing" % len(set(later) - set(got))
    assert not set(standalone) & set(got), "rows of the standalone table were relayed"
    assert set(marker2) <= set(got)
    assert p.running()


def test_rename_while_stopped_never_skips(pg, broker, kafka, relayer):
    """Rows written into a partition that is renamed before the relayer
    decodes them arrive under the old name, which today's catalog does not
    know: the relayer stops loudly rather than skipping them; a recovery
    with --recreate-slot --backfill pending then relays every one. With
    pgoutput they arrive under the root."""
    load_partitioned_layout(pg)
    part = current_partition(pg)
    warm_then_stop(relayer, pg, broker, kafka)
    before = pg.confirmed_flush_lsn(SLOT)
    rows = insert(pg, 50, tag="renamed")
    pg.query("ALTER TABLE %s RENAME TO events_outbox_renamed" % part)

    p = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--status-interval", "0.5")
    if harness.plugin() == "pgoutput":
        # Rows arrive under the root whatever the leaf is called now.
        got = set(read_ids(kafka, 1 + 50, timeout=60))
        assert set(rows) <= got, p.log_tail()
        assert p.running() and p.terminate() == 0
        return
    assert p.wait_exit(60) == 1, p.log_text()
    log = p.log_text()
    assert re.search(r"cannot tell whether .*%s" % re.escape(part.split(".")[-1]), log), log
    assert pg.confirmed_flush_lsn(SLOT) == before
    got = set(event_ids(kafka.read(TOPIC, timeout=5)))
    assert not set(rows) & got

    # The recovery the message names.
    pg.drop_slot(SLOT)
    p = start(relayer, pg, broker, "--recreate-slot", "--backfill", "pending")
    got = set(read_ids(kafka, 1 + 1 + 50, timeout=60))
    assert set(rows) <= got


def test_rename_while_streaming(pg, broker, kafka, relayer):
    """A partition renamed while the relayer streams: rows before and after
    the rename arrive."""
    load_partitioned_layout(pg)
    part = current_partition(pg)
    p = start(relayer, pg, broker)
    a = insert(pg, 10, tag="before")
    assert set(read_ids(kafka, 10)) == set(a)
    pg.query("ALTER TABLE %s RENAME TO events_outbox_now" % part)
    b = insert(pg, 10, tag="after")
    got = read_ids(kafka, 20)
    assert set(a + b) == set(got)
    assert p.running()


def test_partition_created_while_streaming(pg, broker, kafka, relayer):
    """CREATE TABLE … PARTITION OF while streaming: its rows arrive, also in
    the transaction that created it."""
    load_partitioned_layout(pg)
    p = start(relayer, pg, broker)
    a = insert(pg, 3, tag="a")
    read_ids(kafka, 3)
    pg.query("CREATE TABLE public.events_outbox_2032 PARTITION OF events_outbox "
             "FOR VALUES FROM ('2032-01-01 00:00+00') TO ('2033-01-01 00:00+00')")
    b = insert(pg, 20, tag="b", created_at="2032-05-01 00:00+00")
    conn = pg.connect(autocommit=False)
    cur = conn.cursor()
    cur.execute("CREATE TABLE public.events_outbox_2033 PARTITION OF events_outbox "
                "FOR VALUES FROM ('2033-01-01 00:00+00') TO ('2034-01-01 00:00+00')")
    cur.execute("INSERT INTO events_outbox (aggregate_id, type, payload, created_at) "
                "SELECT gen_random_uuid(), 'order.placed', '{}', '2033-02-01' "
                "FROM generate_series(1, 7) RETURNING id")
    c = [r[0] for r in cur.fetchall()]
    conn.commit()
    got = read_ids(kafka, 3 + 20 + 7)
    assert set(a + b + c) == set(got), p.log_tail()
    assert p.running()


def test_partition_created_in_a_commit_not_yet_visible(pg, broker, kafka, relayer):
    """The walsender decodes a commit once its WAL is flushed, which can be
    before the committing backend makes it visible to other sessions: a
    lookup in between would find no such table (seen under load). Made
    deterministic with synchronous replication to a standby that is not
    there: the commit record is flushed and decoded, the transaction stays
    invisible until the standby requirement is lifted. The relayer waits
    for it and relays the rows; it neither stops nor skips them."""
    load_partitioned_layout(pg)
    p = start(relayer, pg, broker)
    a = insert(pg, 2, tag="a")
    read_ids(kafka, 2)
    admin = pg.connect(autocommit=True)
    admin.cursor().execute("ALTER SYSTEM SET synchronous_standby_names = 'absent_standby'")
    admin.cursor().execute("SELECT pg_reload_conf()")
    conn = pg.connect(autocommit=False)
    cur = conn.cursor()
    cur.execute("CREATE TABLE public.events_outbox_2034 PARTITION OF events_outbox "
                "FOR VALUES FROM ('2034-01-01 00:00+00') TO ('2035-01-01 00:00+00')")
    cur.execute("INSERT INTO events_outbox (aggregate_id, type, payload, created_at) "
                "SELECT gen_random_uuid(), 'order.placed', '{}', '2034-02-01' "
                "FROM generate_series(1, 5) RETURNING id")
    c = [r[0] for r in cur.fetchall()]
    done = threading.Event()
    committer = threading.Thread(target=lambda: (conn.commit(), done.set()), daemon=True)
    committer.start()
    try:
        # The commit waits for the absent standby; its record is decoded.
        harness.wait_until(lambda: pg.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == 1,
            timeout=30, message="the commit waiting for the synchronous standby")
        time.sleep(3)  # the relayer has the decoded rows and is asking the catalog
        assert not done.is_set()
        assert p.running(), p.log_tail()
    finally:
        # Always: a commit left waiting would hang the cluster's teardown.
        admin.cursor().execute("ALTER SYSTEM RESET synchronous_standby_names")
        admin.cursor().execute("SELECT pg_reload_conf()")
    committer.join(30)
    assert done.is_set()
    got = read_ids(kafka, 2 + 5)
    assert set(a + c) == set(got), p.log_tail()
    assert p.running(), p.log_tail()
    assert "cannot tell whether" not in p.log_text(), p.log_tail()


# --------------------------------------------------------------------------
# tables that write no WAL
# --------------------------------------------------------------------------

def test_unlogged_outbox_refused_at_start(pg, broker, relayer):
    pg.query("ALTER TABLE events_outbox SET UNLOGGED")
    p = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap)
    assert p.wait_exit(30) == 1, p.log_text()
    log = p.log_text()
    assert "UNLOGGED" in log and "ALTER TABLE public.events_outbox SET LOGGED" in log, log
    assert "streaming" not in log


def test_unlogged_partition_refused_at_start(pg, broker, relayer):
    load_partitioned_layout(pg)
    part = current_partition(pg)
    pg.query("ALTER TABLE %s SET UNLOGGED" % part)
    p = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap)
    assert p.wait_exit(30) == 1, p.log_text()
    log = p.log_text()
    assert "ALTER TABLE %s SET LOGGED" % part in log, log


@pytest.mark.parametrize("layout", ["plain", "partition"])
def test_switch_to_unlogged_while_running(pg, broker, kafka, relayer, relayer_binary, layout):
    """ALTER TABLE … SET UNLOGGED while the relayer runs: its rows stop
    reaching the WAL. /readyz turns 503, `status` exits 1, a metric says so,
    and the daemon's reaper deletes nothing (the keepalives move the slot
    past rows that were never relayed, so the reaper's own rule would let it
    delete them). With pgoutput PostgreSQL refuses to make the published
    plain table unlogged; a partition still can be, and is caught."""
    if layout == "partition":
        load_partitioned_layout(pg)
        target = current_partition(pg)
    else:
        target = "public.events_outbox"
    port = harness.free_port()
    p = start(relayer, pg, broker, "--metrics-addr", "127.0.0.1:%d" % port,
              "--retention", "1 second", "--reap-interval", "1")
    insert(pg, 3, tag="logged")
    read_ids(kafka, 3)
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 30, message="/readyz 200")

    if harness.plugin() == "pgoutput" and layout == "plain":
        # PostgreSQL itself refuses to make a published table unlogged.
        with pytest.raises(Exception, match="part of a publication"):
            pg.query("ALTER TABLE %s SET UNLOGGED" % target)
        assert p.running() and p.terminate() == 0
        return
    pg.query("ALTER TABLE %s SET UNLOGGED" % target)
    lost = insert(pg, 20, tag="unlogged")
    wait_until(lambda: http_get(port, "/readyz")[0] == 503, 15, message="/readyz 503")
    status, body = http_get(port, "/readyz")
    assert "UNLOGGED" in body and "SET LOGGED" in body, body
    wait_until(lambda: "outbox_relay_outbox_unlogged_tables 1" in http_get(port, "/metrics")[1],
               10, message="the unlogged metric")
    r = cli(relayer_binary, "status", "--dsn", pg.dsn())
    assert r.returncode == 1 and "UNLOGGED" in r.stdout, r.stdout + r.stderr
    # Several reaper intervals later, with the slot confirming past them,
    # every unrelayed row is still there.
    wait_confirmed_now(pg)
    time.sleep(4)
    left = {r[0] for r in pg.query("SELECT id FROM events_outbox")}
    assert set(lost) <= left
