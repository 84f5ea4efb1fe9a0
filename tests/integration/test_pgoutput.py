"""test_pgoutput.py — what only --plugin pgoutput has: the publication, and a
server without wal2json. (Every other suite runs with both plugins through
conftest.py's `plugin` fixture.)

  test_same_events_as_wal2json
      one relayer per plugin, each with its own slot and broker, on the same
      commits (escapes, unicode, a TOASTed payload, nesting, a logical
      message): the same records, byte for byte, on both brokers; the
      relayer created the publication it needs, with no flag but --plugin
  test_server_without_wal2json
      wal2json cannot be loaded: --plugin wal2json names the package to
      install, no --plugin makes the slot with pgoutput, --plugin pgoutput
      relays
  test_wrong_publication_is_refused
      an existing publication that does not publish inserts, does not cover
      the outbox, leaves a needed column out, or (partitioned outbox) names
      partitions by their leaves: the relayer stops before making a slot,
      naming the ALTER that fixes it; after the fix it relays
  test_row_filter_is_warned
      a row filter is the owner's choice: a warning, and the rows it keeps
  test_least_privilege_role_gets_the_sql
      outbox_relay (sql/003_relay_role.sql) may not create the publication:
      the relayer prints the exact statement; once the owner ran
      sql/008_publication.sql it relays
  test_publication_dropped_while_streaming
      DROP PUBLICATION under a running relayer: it stops (exit 1) at the
      first change it cannot decode, having confirmed nothing past it; a
      restart refuses the slot without its publication
  test_publication_created_concurrently
      another session creates the publication between the relayer's look
      and its CREATE (two replicas starting at once): the relayer takes the
      other's and streams
  test_publication_altered_while_streaming
      ALTER PUBLICATION … DROP TABLE under a running relayer: the server
      skips the rows written after it while the slot moves on; the
      maintenance poll fails readiness, sets outbox_relay_publication_ok 0
      and holds the reaper off, so those rows stay; the next start refuses,
      saying rows were skipped and how to republish them
  test_publication_guard
      sql/008's optional guard makes DDL that would break the publication
      fail
  test_partitioned_outbox_under_the_root
      a partitioned outbox: rows of every partition, also of one created
      and one attached while streaming, arrive; a detached partition's later
      rows do not
  test_switch_plugins_by_lsn
      docs/operations.md's switch of a running deployment, both ways, under
      a steady stream of producer transactions, with no tuning flag: every
      event arrives exactly once
      a partitioned outbox: rows of every partition, also of one created
      and one attached while streaming, arrive; a detached partition's later
      rows do not
"""

import json
import os
import re
import subprocess
import uuid

import psycopg2
import pytest

import harness
from harness import wait_until

pytestmark = pytest.mark.usefixtures("pg_major")  # once per PostgreSQL major (conftest.py)

SLOT = "outbox_relay"
PUB_SQL = os.path.join(harness.REPO_ROOT, "sql", "008_publication.sql")


def start(relayer, pg, broker, *extra, slot=SLOT, wait=True, dsn=None):
    r = relayer("--dsn", dsn or pg.dsn(), "--brokers", broker.bootstrap, "--slot", slot, *extra)
    if wait:
        r.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    return r


def insert(pg, rows, table="public.events_outbox"):
    """rows: [(aggregate_id, type, payload_text)] in one transaction; ids."""
    conn = pg.connect(autocommit=False)
    cur = conn.cursor()
    ids = []
    for agg, typ, payload in rows:
        cur.execute("INSERT INTO %s (aggregate_id, type, payload) VALUES (%%s, %%s, %%s::jsonb) "
                    "RETURNING id" % table, (str(agg), typ, payload))
        ids.append(cur.fetchone()[0])
    conn.commit()
    conn.close()
    return ids


def record(m):
    return (m.topic, m.key, m.value, tuple(sorted(m.headers.items())))


def exits_with(r, *words, timeout=30):
    rc = r.wait_exit(timeout)
    log = r.log_text()
    assert rc is not None and rc > 0, "rc=%s\n%s" % (rc, log)
    for w in words:
        assert w in log, "%r not in the log:\n%s" % (w, log)
    return log


def test_same_events_as_wal2json(pg, broker_factory, relayer):
    b1, b2 = broker_factory(), broker_factory()
    r1 = start(relayer, pg, b1, "--plugin", "wal2json", slot="w2j")
    r2 = start(relayer, pg, b2, "--plugin", "pgoutput", slot="pgo")
    pub = pg.query("SELECT pubinsert, pubupdate, pubdelete, pubviaroot FROM pg_publication "
                   "WHERE pubname = 'outbox_relay'")
    assert pub == [(True, False, False, True)], pub
    assert "created publication outbox_relay" in r2.log_text()
    agg = uuid.uuid4()
    nested = {"a": 1}
    for _ in range(40):
        nested = {"n": nested}
    payloads = [
        json.dumps({"quote": "a\"b", "backslash": "c\\d", "nl": "x\ny\tz", "ctl": "\u0001"}),
        json.dumps({"unicode": "zoë ✓ 𝄞 日本"}, ensure_ascii=False),
        json.dumps({"big": "x" * 200000, "i": 1}),   # TOASTed
        json.dumps(nested),
        json.dumps([1, 2.5, None, True, "s"]),
    ]
    ids = insert(pg, [(agg, "order.placed", p) for p in payloads])
    ids += insert(pg, [(uuid.uuid4(), "payment.done", '{"n": %d}' % i) for i in range(10)])
    pg.query("SELECT outbox_emit_message(%s, 'order.shipped', '{\"via\": \"message\"}')",
             (str(agg),))
    total = len(ids) + 1
    got = {}
    for name, b in (("w2j", b1), ("pgo", b2)):
        msgs = harness.read_messages(b.bootstrap, "order", expected=len(payloads) + 1,
                                     timeout=60)
        msgs += harness.read_messages(b.bootstrap, "payment", expected=10, timeout=60)
        got[name] = sorted(record(m) for m in msgs)
        assert len(got[name]) == total, (name, len(got[name]))
    assert got["w2j"] == got["pgo"]
    rows = dict(pg.query("SELECT id, payload::text FROM events_outbox WHERE id = ANY(%s)",
                         (ids,)))
    by_id = {dict(h)["event_id"]: v for (_, _, v, h) in got["pgo"]}
    for i in ids:
        assert by_id[str(i)] == rows[i]
    assert r1.terminate() == 0 and r2.terminate() == 0


def test_server_without_wal2json(pg_factory, broker, kafka, relayer, libdir_without):
    pg = pg_factory(settings={"dynamic_library_path": libdir_without("wal2json")},
                    name="nowal2json")
    r = start(relayer, pg, broker, "--plugin", "wal2json", wait=False)
    package = "postgresql-%d-wal2json" % pg.major
    wait_until(lambda: "install " + package in r.log_text() or not r.running(), 30,
               message="the missing wal2json to be named")
    assert package in r.log_text(), r.log_text()
    r.kill()
    assert pg.slot_info() is None
    # Without --plugin the relayer sees that wal2json is missing and makes
    # the slot with pgoutput, saying so.
    r = start(relayer, pg, broker)
    assert "wal2json is not installed on the server, so the new slot uses PostgreSQL's " \
        "built-in pgoutput" in r.log_text(), r.log_text()
    assert r.terminate() == 0
    assert pg.slot_info()["plugin"] == "pgoutput"
    r = start(relayer, pg, broker, "--plugin", "pgoutput")
    ids = insert(pg, [(uuid.uuid4(), "order.placed", '{"ok": true}')])
    got = kafka.read("order", expected=1, timeout=60)
    assert [int(m.headers["event_id"]) for m in got] == ids
    assert pg.slot_info()["plugin"] == "pgoutput"
    assert r.terminate() == 0


def load_partitioned_layout(pg):
    pg.query("DROP TABLE events_outbox CASCADE")
    with open(os.path.join(harness.REPO_ROOT, "sql", "004_outbox_partitioned.sql")) as f:
        pg.query(f.read())


WRONG = {
    # name: (setup statements, words of the message, the fix)
    "no_inserts": (["CREATE PUBLICATION outbox_relay FOR TABLE events_outbox "
                    "WITH (publish = 'update, delete')"],
                   ["does not publish inserts", "ALTER PUBLICATION \"outbox_relay\" SET "
                    "(publish = 'insert')"],
                   "ALTER PUBLICATION outbox_relay SET (publish = 'insert')"),
    "other_table": (["CREATE TABLE other (id int)",
                     "CREATE PUBLICATION outbox_relay FOR TABLE other"],
                    ["does not publish the outbox table public.events_outbox",
                     "ADD TABLE \"public\".\"events_outbox\""],
                    "ALTER PUBLICATION outbox_relay ADD TABLE events_outbox"),
    "column_list": (["CREATE PUBLICATION outbox_relay FOR TABLE events_outbox "
                     "(id, aggregate_id, type, created_at)"],
                    ["leaves out \"payload\"", "without a column list"],
                    "ALTER PUBLICATION outbox_relay SET TABLE events_outbox"),
    "leaf_names": (["PARTITIONED",
                    "CREATE PUBLICATION outbox_relay FOR TABLE events_outbox"],
                   ["under their own names", "publish_via_partition_root = true"],
                   "ALTER PUBLICATION outbox_relay SET (publish_via_partition_root = true)"),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_wrong_publication_is_refused(pg, broker, kafka, relayer, case):
    setup, words, fix = WRONG[case]
    for stmt in setup:
        if stmt == "PARTITIONED":
            load_partitioned_layout(pg)
        else:
            pg.query(stmt)
    r = start(relayer, pg, broker, "--plugin", "pgoutput", wait=False)
    exits_with(r, *words)
    assert pg.slot_info() is None, "a slot was made for a publication that cannot serve it"
    pg.query(fix)
    r = start(relayer, pg, broker, "--plugin", "pgoutput")
    ids = pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) VALUES "
                   "(gen_random_uuid(), 'order.placed', '{}') RETURNING id")
    got = kafka.read("order", expected=1, timeout=60)
    assert [int(m.headers["event_id"]) for m in got] == [ids[0][0]]
    assert r.terminate() == 0


def test_row_filter_is_warned(pg, broker, kafka, relayer):
    pg.query("CREATE PUBLICATION outbox_relay FOR TABLE events_outbox WHERE (type <> 'debug.x') "
             "WITH (publish = 'insert')")
    r = start(relayer, pg, broker, "--plugin", "pgoutput")
    assert re.search(r"warn .*row filter.*type <> 'debug\.x'", r.log_text()), r.log_text()
    ids = insert(pg, [(uuid.uuid4(), "debug.x", "{}"), (uuid.uuid4(), "order.placed", "{}")])
    got = kafka.read("order", expected=1, timeout=60)
    assert [int(m.headers["event_id"]) for m in got] == ids[1:]
    assert r.terminate() == 0


def test_least_privilege_role_gets_the_sql(pg, broker, kafka, relayer):
    # sql/003 made the role; as the suite's harness does not: no publication
    assert not pg.scalar("SELECT count(*) FROM pg_publication")
    dsn = pg.dsn(user="outbox_relay")
    r = start(relayer, pg, broker, "--plugin", "pgoutput", dsn=dsn, wait=False)
    log = exits_with(r, "may not create it", "sql/008_publication.sql",
                     "CREATE PUBLICATION \"outbox_relay\" FOR TABLE \"public\".\"events_outbox\" "
                     "WITH (publish = 'insert', publish_via_partition_root = true)")
    assert "permission denied" in log or "must be owner" in log, log
    pg.load_sql(PUB_SQL)
    r = start(relayer, pg, broker, "--plugin", "pgoutput", dsn=dsn)
    ids = insert(pg, [(uuid.uuid4(), "order.placed", '{"role": "least"}')])
    got = kafka.read("order", expected=1, timeout=60)
    assert [int(m.headers["event_id"]) for m in got] == ids
    assert r.terminate() == 0


def test_publication_dropped_while_streaming(pg, broker, kafka, relayer):
    # Since 18 pgoutput does not end the stream there: it warns "skipped
    # loading publication" and skips the rows; the relayer stops at that
    # warning as it stops at the error of earlier majors.
    r = start(relayer, pg, broker, "--plugin", "pgoutput", "--status-interval", "0.5")
    first = insert(pg, [(uuid.uuid4(), "order.placed", "{}")])
    kafka.read("order", expected=1, timeout=60)
    lsn = pg.current_wal_lsn()
    wait_until(lambda: (pg.confirmed_flush_lsn(SLOT) or 0) >= lsn, 30, message="confirmed")
    pg.query("DROP PUBLICATION outbox_relay")
    after = pg.current_wal_lsn()
    insert(pg, [(uuid.uuid4(), "order.placed", "{}")])
    exits_with(r, "found no publication outbox_relay", "--recreate-slot --backfill pending",
               timeout=60)
    assert pg.confirmed_flush_lsn(SLOT) <= after
    got = kafka.read("order", timeout=3)
    assert [int(m.headers["event_id"]) for m in got] == first
    r = start(relayer, pg, broker, "--plugin", "pgoutput", wait=False)
    exits_with(r, "exists but its publication outbox_relay does not")


def test_publication_created_concurrently(pg, broker, kafka, relayer):
    other = pg.connect(autocommit=False)
    cur = other.cursor()
    cur.execute("CREATE PUBLICATION outbox_relay FOR TABLE events_outbox "
                "WITH (publish = 'insert', publish_via_partition_root = true)")
    r = start(relayer, pg, broker, "--plugin", "pgoutput", wait=False)
    # The relayer's CREATE waits on the uncommitted one's catalog row.
    wait_until(lambda: pg.scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type "
                                 "= 'Lock' AND query LIKE 'CREATE PUBLICATION%%'"), 30,
               message="the relayer's CREATE PUBLICATION to wait")
    other.commit()
    r.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    ids = insert(pg, [(uuid.uuid4(), "order.placed", "{}")])
    got = kafka.read("order", expected=1, timeout=60)
    assert [int(m.headers["event_id"]) for m in got] == ids
    assert "created publication" not in r.log_text()
    assert r.terminate() == 0
    other.close()


def http_get(port, path):
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_publication_altered_while_streaming(pg, broker, kafka, relayer):
    port = harness.free_port()
    r = start(relayer, pg, broker, "--plugin", "pgoutput", "--metrics-addr",
              "127.0.0.1:%d" % port, "--retention", "1 second", "--reap-interval", "1")
    first = insert(pg, [(uuid.uuid4(), "order.placed", "{}") for _ in range(3)])
    kafka.read("order", expected=3, timeout=60)
    wait_until(lambda: "outbox_relay_publication_ok 1" in http_get(port, "/metrics")[1], 15,
               message="the publication gauge")
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 30, message="/readyz 200")
    pg.query("ALTER PUBLICATION outbox_relay DROP TABLE events_outbox")
    skipped = insert(pg, [(uuid.uuid4(), "order.placed", "{}") for _ in range(5)])
    wait_until(lambda: http_get(port, "/readyz")[0] == 503, 15, message="/readyz 503")
    assert "does not publish the outbox table" in http_get(port, "/readyz")[1]
    assert "outbox_relay_publication_ok 0" in http_get(port, "/metrics")[1]
    lsn = pg.current_wal_lsn()
    wait_until(lambda: (pg.confirmed_flush_lsn(SLOT) or 0) >= lsn, 60,
               message="the slot to move past the skipped rows")
    wait_until(lambda: "reaper: skipped: the publication" in r.log_text(), 15,
               message="the reaper to hold off")
    left = {row[0] for row in pg.query("SELECT id FROM events_outbox")}
    assert set(skipped) <= left  # (the delivered first rows may be reaped)
    got = kafka.read("order", timeout=3)
    assert not {int(m.headers["event_id"]) for m in got} & set(skipped)
    st = subprocess.run([os.path.join(harness.build_dir(), "outbox-relay"), "status", "--dsn",
                         pg.dsn(), "--plugin", "pgoutput"], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, timeout=60, text=True)
    assert st.returncode == 1 and "UNHEALTHY: publication outbox_relay does not publish the " \
        "outbox table" in st.stdout, st.stdout
    assert r.terminate() == 0
    r = start(relayer, pg, broker, "--plugin", "pgoutput", wait=False)
    exits_with(r, "does not publish the outbox table", "skipped by the server",
               "--recreate-slot --backfill pending")


def test_publication_guard(pg):
    pg.load_sql(PUB_SQL)
    pg.query("SELECT public.outbox_relay_install_publication_guard()")
    for stmt in ("DROP PUBLICATION outbox_relay",
                 "ALTER PUBLICATION outbox_relay DROP TABLE events_outbox",
                 "ALTER PUBLICATION outbox_relay SET (publish = 'update')",
                 "ALTER PUBLICATION outbox_relay SET TABLE events_outbox (id, type)"):
        with pytest.raises(psycopg2.Error, match="never reach Kafka"):
            pg.query(stmt)
    pg.query("ALTER PUBLICATION outbox_relay SET (publish = 'insert, update')")  # harmless
    assert pg.scalar("SELECT count(*) FROM pg_publication_tables "
                     "WHERE pubname = 'outbox_relay' AND tablename = 'events_outbox'") == 1
    pg.query("DELETE FROM public.outbox_relay_publication_guard")
    pg.query("DROP PUBLICATION outbox_relay")


def test_partitioned_outbox_under_the_root(pg, broker, kafka, relayer):
    load_partitioned_layout(pg)
    r = start(relayer, pg, broker, "--plugin", "pgoutput")
    ids = insert(pg, [(uuid.uuid4(), "order.placed", '{"p": "current"}')])
    pg.query("CREATE TABLE events_outbox_2099_01 PARTITION OF events_outbox "
             "FOR VALUES FROM ('2099-01-01') TO ('2099-02-01')")
    pg.query("CREATE TABLE standalone (LIKE events_outbox INCLUDING DEFAULTS)")
    pg.query("ALTER TABLE events_outbox ATTACH PARTITION standalone "
             "FOR VALUES FROM ('2099-02-01') TO ('2099-03-01')")
    for at in ("2099-01-15", "2099-02-15"):
        ids += [r_[0] for r_ in pg.query(
            "INSERT INTO events_outbox (aggregate_id, type, payload, created_at) VALUES "
            "(gen_random_uuid(), 'order.placed', '{}', %s) RETURNING id", (at,))]
    pg.query("ALTER TABLE events_outbox DETACH PARTITION events_outbox_2099_01")
    pg.query("INSERT INTO events_outbox_2099_01 (aggregate_id, type, payload, created_at) "
             "VALUES (gen_random_uuid(), 'order.placed', '{\"detached\": 1}', '2099-01-20')")
    ids += insert(pg, [(uuid.uuid4(), "order.placed", '{"p": "marker"}')])
    got = kafka.read("order", expected=len(ids), timeout=60)
    assert sorted(int(m.headers["event_id"]) for m in got) == sorted(ids)
    assert all("detached" not in m.value for m in kafka.read("order", timeout=2))
    assert not re.search(r"^\S+ error ", r.log_text(), re.M), r.log_text()
    assert r.terminate() == 0


def switch(pg, relayer, broker, old, old_slot, new_plugin, new_slot):
    """docs/operations.md, "Switching a running deployment": returns the
    new relayer, streaming from the new slot."""
    c = harness.lsn_to_int(pg.scalar(
        "SELECT lsn FROM pg_create_logical_replication_slot(%s, %s)", (new_slot, new_plugin)))
    wait_until(lambda: (pg.confirmed_flush_lsn(old_slot) or 0) >= c, 60,
               message="the old slot to confirm past the new one's start")
    assert old.terminate() == 0
    p = pg.confirmed_flush_lsn(old_slot)
    pg.query("SELECT pg_replication_slot_advance(%s, %s)", (new_slot, harness.int_to_lsn(p)))
    new = start(relayer, pg, broker, "--plugin", new_plugin, slot=new_slot)
    pg.drop_slot(old_slot)
    return new


def test_switch_plugins_by_lsn(pg, broker, kafka, relayer):
    pg.load_sql(PUB_SQL)  # step 1: the publication before the pgoutput slot
    r = start(relayer, pg, broker, "--plugin", "wal2json", slot="old_w2j")
    producers = harness.Producers(pg, threads=2, rate=50).start()
    wait_until(lambda: len(producers.committed) >= 50, 30, message="producers")
    r = switch(pg, relayer, broker, r, "old_w2j", "pgoutput", "new_pgo")
    wait_until(lambda: len(producers.committed) >= 300, 60, message="more commits")
    r = switch(pg, relayer, broker, r, "new_pgo", "wal2json", "back_w2j")
    wait_until(lambda: len(producers.committed) >= 550, 60, message="more commits")
    committed = producers.stop()
    ids = harness.read_messages(broker.bootstrap, "order", expected=len(committed), timeout=90)
    got = [m.headers["event_id"] for m in ids]
    assert sorted(set(got)) == sorted(committed), "missing: %s" % sorted(set(committed) - set(got))[:10]
    dup = sorted({i for i in got if got.count(i) > 1})
    assert not dup, "sent twice: %s" % dup[:10]
    assert [s_[0] for s_ in pg.query("SELECT slot_name FROM pg_replication_slots")] == ["back_w2j"]
    assert r.terminate() == 0
