"""test_layouts.py — outbox tables of other layouts (issue 15): column
mapping, Debezium's table, payload and id types, {column} topics, the
startup check, and the backfill of such a table. Once per output plugin.

  test_debezium_layout_jsonb
      Debezium's outbox table (id uuid, aggregatetype, aggregateid, type,
      payload jsonb) with --layout debezium and nothing else: records on
      outbox.event.<aggregatetype>, key aggregateid, value the payload as
      PostgreSQL prints it, headers id and event_id the uuid, event_type
  test_debezium_layout_bytea_and_text[bytea|text]
      the same table with a bytea payload (raw bytes published unchanged:
      NUL, 0xff, not UTF-8) or a text payload (as is, not JSON)
  test_column_mapping
      a table of its own names mapped with --column-*: bigint id under
      another name, a text id, no key column, {column} in the topic
  test_reaper_on_a_mapped_timestamp
      `outbox-relay reap` on a table whose timestamp column has another
      name (--column-created-at): the delivered expired rows go, the young
      stay
  test_missing_column_is_refused_at_startup
      the default layout on a Debezium table: the relayer exits before
      making a slot, naming the column and the option; a {column} of
      --topic the table lacks is refused the same way
  test_backfill_debezium_table
      rows of a Debezium table committed before the slot existed are
      published by --backfill pending, like streamed ones
  test_partitioned_debezium_table
      a partitioned table of Debezium's layout: rows of every partition
      arrive (wal2json names the leaf: it is recognised by the mapped
      columns, not ours)
  test_publication_column_list_of_another_layout (pgoutput)
      a publication whose column list has exactly Debezium's columns is
      accepted; one that leaves out a mapped column is refused, naming it
  test_header_columns
      --header-column NAME[:HEADER], twice: each column a header, a NULL
      one none, also for a logical message's event (no columns: none)
  test_trace_context_columns
      traceparent and tracestate columns become the W3C headers with no
      flag at all (streamed and backfilled rows)
  test_cloudevents_read_back_by_outbox_consume
      --envelope cloudevents alone: the CloudEvents Kafka binding's binary
      mode (ce_specversion, ce_id, ce_source naming the database and table,
      ce_type, ce_time in RFC 3339, content-type), value unchanged, no
      event_id header; outbox-consume takes the id from ce_id (a redelivery
      is skipped as a duplicate) and applies each event once
"""

import os
import re
import subprocess
import time
import uuid

import pytest

import harness
from harness import wait_until

# per plugin and major (conftest.py)
pytestmark = [pytest.mark.usefixtures("plugin", "pg_major"), pytest.mark.real_kafka]

SLOT = "outbox_relay"

DEBEZIUM_TABLE = """
CREATE TABLE public.outbox (
    id uuid PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL,
    type varchar(255) NOT NULL,
    payload %s
)"""


def debezium_table(pg, payload_type="jsonb", extra=""):
    pg.query(DEBEZIUM_TABLE % (payload_type + extra))


def start(relayer, pg, broker, *extra):
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--slot", SLOT, *extra)
    r.wait_for_log(r"streaming public\.", timeout=30)
    return r


def insert_debezium(pg, rows):
    """rows: [(aggregatetype, aggregateid, type, payload)] in one
    transaction; returns the uuids."""
    ids = [str(uuid.uuid4()) for _ in rows]
    with pg.connect(autocommit=False) as conn:
        with conn.cursor() as cur:
            for i, (agt, agg, typ, pay) in zip(ids, rows):
                cur.execute("INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, "
                            "payload) VALUES (%s, %s, %s, %s, %s)", (i, agt, agg, typ, pay))
        conn.commit()
    conn.close()
    return ids


def by_id(msgs):
    return {m.headers["event_id"]: m for m in msgs}


def test_debezium_layout_jsonb(pg, broker, kafka, relayer):
    debezium_table(pg)
    r = start(relayer, pg, broker, "--table", "public.outbox", "--layout", "debezium")
    rows = [("order", "o-1", "OrderCreated", '{"id": 1, "lines": [1, 2]}'),
            ("order", "o-2", "OrderCreated", '{"id": 2}'),
            ("customer", "c-9", "CustomerMoved", '{"city": "Zürich \\"Nord\\""}')]
    ids = insert_debezium(pg, rows)
    orders = by_id(kafka.read("outbox.event.order", 2))
    customers = by_id(kafka.read("outbox.event.customer", 1))
    assert set(orders) == set(ids[:2]) and set(customers) == {ids[2]}
    got = {**orders, **customers}
    for i, (agt, agg, typ, pay) in zip(ids, rows):
        m = got[i]
        expect = pg.scalar("SELECT payload::text FROM public.outbox WHERE id = %s", (i,))
        assert m.key == agg
        assert m.raw_value == expect.encode("utf-8")
        assert m.headers["id"] == i
        assert m.headers["event_type"] == typ
        assert "created_at" not in m.headers  # Debezium's table has no timestamp
    assert r.running()


@pytest.mark.parametrize("payload_type", ["bytea", "text"])
def test_debezium_layout_bytea_and_text(pg, broker, kafka, relayer, payload_type):
    debezium_table(pg, payload_type)
    start(relayer, pg, broker, "--table", "public.outbox", "--layout", "debezium")
    if payload_type == "bytea":
        import psycopg2
        values = [b"\x00\x01\xff\xfe binary \x80", b"", bytes(range(256)) * 40]
        params = [psycopg2.Binary(v) for v in values]
    else:
        values = [b"not json {", "\tunicode \u00e9 \\ \"q\"\n".encode("utf-8"), b"x" * 9000]
        params = [v.decode("utf-8") for v in values]
    ids = insert_debezium(pg, [("blob", "k%d" % n, "Blob", p) for n, p in enumerate(params)])
    msgs = by_id(kafka.read("outbox.event.blob", len(values)))
    assert set(msgs) == set(ids)
    for n, (i, v) in enumerate(zip(ids, values)):
        assert msgs[i].raw_value == v, "payload %d changed on the way" % n
        assert msgs[i].key == "k%d" % n


def test_column_mapping(pg, broker, kafka, relayer):
    pg.query("CREATE TABLE public.my_events (event_no bigint GENERATED ALWAYS AS IDENTITY, "
             "kind text NOT NULL, region text, body json, occurred_at timestamptz NOT NULL "
             "DEFAULT now())")
    r = start(relayer, pg, broker, "--table", "public.my_events", "--column-id", "event_no",
          "--column-key", "none", "--column-type", "kind", "--column-payload", "body",
          "--column-created-at", "occurred_at", "--topic", "ev.{region}.{prefix}")
    pg.query("INSERT INTO public.my_events (kind, region, body) VALUES "
             "('order.placed', 'eu', '{\"a\":  1}'), ('order.paid', 'us', '[1,2]')")
    eu = kafka.read("ev.eu.order", 1)
    us = kafka.read("ev.us.order", 1)
    assert [m.value for m in eu] == ['{"a":  1}']  # json: as written
    assert [m.value for m in us] == ["[1,2]"]
    assert eu[0].key is None
    assert eu[0].headers["event_type"] == "order.placed"
    assert eu[0].headers["event_id"] == str(pg.scalar(
        "SELECT event_no FROM public.my_events WHERE region = 'eu'"))
    assert eu[0].headers["created_at"].startswith("20")

    # a NULL {column}: no topic for the event, a poison event (halts by default)
    pg.query("INSERT INTO public.my_events (kind, region, body) VALUES ('order.x', NULL, '1')")
    assert r.wait_exit(timeout=30) == 1
    assert "a {column} that is NULL gives none" in r.log_text()


def test_reaper_on_a_mapped_timestamp(pg, broker, kafka, relayer, relayer_binary):
    pg.query("CREATE TABLE public.my_events (event_no bigint GENERATED ALWAYS AS IDENTITY, "
             "kind text NOT NULL, body jsonb, occurred_at timestamptz NOT NULL DEFAULT now())")
    layout = ["--table", "public.my_events", "--column-id", "event_no", "--column-key", "none",
              "--column-type", "kind", "--column-payload", "body",
              "--column-created-at", "occurred_at"]
    start(relayer, pg, broker, *layout, "--retention", "0", "--status-interval", "0.5")
    pg.query("INSERT INTO public.my_events (kind, body, occurred_at) "
             "SELECT 'order.old', '{}', now() - interval '8 days' FROM generate_series(1, 5)")
    pg.query("INSERT INTO public.my_events (kind, body) "
             "SELECT 'order.new', '{}' FROM generate_series(1, 2)")
    assert len(kafka.read("order", 7)) == 7
    lsn = pg.current_wal_lsn()
    wait_until(lambda: (pg.confirmed_flush_lsn(SLOT) or 0) >= lsn, 30,
               message="the slot to confirm the rows")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    r = subprocess.run([relayer_binary, "reap", "--dsn", pg.dsn(), *layout],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert "deleted 5 rows" in r.stderr, r.stderr
    assert [k for (k,) in pg.query("SELECT kind FROM public.my_events")] == ["order.new"] * 2


def test_text_ids(pg, broker, kafka, relayer):
    pg.query("CREATE TABLE public.text_outbox (id text PRIMARY KEY, aggregate_id text, "
             "type text NOT NULL, payload jsonb, created_at timestamptz DEFAULT now())")
    start(relayer, pg, broker, "--table", "public.text_outbox")
    pg.query("INSERT INTO public.text_outbox (id, aggregate_id, type, payload) VALUES "
             "('evt_2026_0001', 'a', 'order.placed', '{}'), ('ÄÖ-ü', 'b', 'order.placed', '1')")
    msgs = kafka.read("order", 2)
    assert sorted(m.headers["event_id"] for m in msgs) == sorted(["evt_2026_0001", "ÄÖ-ü"])


def test_missing_column_is_refused_at_startup(pg, broker, relayer):
    debezium_table(pg)
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--table", "public.outbox")
    assert r.wait_exit(timeout=30) == 1
    log = r.log_text()
    assert 'no column "aggregate_id" (--column-key)' in log, log
    assert "--layout" in log
    assert pg.scalar("SELECT count(*) FROM pg_replication_slots") == 0

    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--table", "public.outbox",
                "--layout", "debezium", "--topic", "x.{tenant}")
    assert r.wait_exit(timeout=30) == 1
    assert 'no column "tenant" (named by a {column} of --topic)' in r.log_text()
    assert pg.scalar("SELECT count(*) FROM pg_replication_slots") == 0


def test_backfill_debezium_table(pg, broker, kafka, relayer):
    debezium_table(pg, "bytea")
    pg.query("INSERT INTO public.outbox SELECT gen_random_uuid(), 'order', 'agg' || (g % 7), "
             "'OrderCreated', convert_to('row ' || g, 'UTF8') || '\\x00ff'::bytea "
             "FROM generate_series(1, 300) g")
    before = {str(i): bytes(p) for i, p in pg.query("SELECT id, payload FROM public.outbox")}
    r = start(relayer, pg, broker, "--table", "public.outbox", "--layout", "debezium",
              "--backfill", "pending")
    ids = insert_debezium(pg, [("order", "agg1", "OrderCreated", b"streamed\x00")])
    msgs = kafka.read("outbox.event.order", 301)
    got = {}
    for m in msgs:
        got.setdefault(m.headers["event_id"], m)
    assert set(got) == set(before) | set(ids)
    for i, v in before.items():
        assert got[i].raw_value == v
        assert got[i].headers["id"] == i
    assert got[ids[0]].raw_value == b"streamed\x00"
    assert r.running()


def test_partitioned_debezium_table(pg, broker, kafka, relayer):
    pg.query("CREATE TABLE public.outbox (id uuid NOT NULL, aggregatetype varchar(255) NOT NULL, "
             "aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb, "
             "PRIMARY KEY (id, aggregatetype)) PARTITION BY LIST (aggregatetype)")
    pg.query("CREATE TABLE public.outbox_order PARTITION OF public.outbox FOR VALUES IN ('order')")
    pg.query("CREATE TABLE public.outbox_rest PARTITION OF public.outbox DEFAULT")
    start(relayer, pg, broker, "--table", "public.outbox", "--layout", "debezium")
    ids = insert_debezium(pg, [("order", "o-1", "OrderCreated", '{"n": 1}'),
                               ("customer", "c-1", "CustomerMoved", '{"n": 2}')])
    assert [m.headers["id"] for m in kafka.read("outbox.event.order", 1)] == ids[:1]
    assert [m.headers["id"] for m in kafka.read("outbox.event.customer", 1)] == ids[1:]


@pytest.mark.plugins("pgoutput")
def test_publication_column_list_of_another_layout(pg, broker, kafka, relayer):
    debezium_table(pg)
    pg.query("CREATE PUBLICATION outbox_relay FOR TABLE public.outbox "
             "(id, aggregatetype, aggregateid, type, payload)")
    start(relayer, pg, broker, "--table", "public.outbox", "--layout", "debezium")
    ids = insert_debezium(pg, [("order", "o-1", "OrderCreated", "{}")])
    assert [m.headers["id"] for m in kafka.read("outbox.event.order", 1)] == ids
    pg.query("ALTER PUBLICATION outbox_relay SET TABLE public.outbox (id, aggregateid, type, "
             "payload)")
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--slot", "other",
                "--table", "public.outbox", "--layout", "debezium")
    assert r.wait_exit(timeout=30) == 1
    assert 'leaves out "aggregatetype"' in r.log_text()


def test_header_columns(pg, broker, kafka, relayer):
    pg.query("ALTER TABLE events_outbox ADD COLUMN tenant_id text, ADD COLUMN schema_version int")
    start(relayer, pg, broker, "--header-column", "tenant_id:x-tenant",
          "--header-column", "schema_version")
    a, b, c = (str(uuid.uuid4()) for _ in range(3))
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload, tenant_id, schema_version) "
             "VALUES (%s, 'order.placed', '{}', 'acme', 3), (%s, 'order.placed', '{}', NULL, NULL)",
             (a, b))
    pg.query("SELECT outbox_emit_message(%s, 'order.paid', '{}')", (c,))
    msgs = {m.key: m for m in kafka.read("order", 3)}
    assert set(msgs) == {a, b, c}
    assert msgs[a].headers["x-tenant"] == "acme"
    assert msgs[a].headers["schema_version"] == "3"
    assert "tenant_id" not in msgs[a].headers
    assert "x-tenant" not in msgs[b].headers and "schema_version" not in msgs[b].headers
    assert msgs[c].headers["event_type"] == "order.paid"
    assert "x-tenant" not in msgs[c].headers


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_trace_context_columns(pg, broker, kafka, relayer):
    pg.query("ALTER TABLE events_outbox ADD COLUMN traceparent text, ADD COLUMN tracestate text")
    a, b, c = (str(uuid.uuid4()) for _ in range(3))
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload, traceparent) "
             "VALUES (%s, 'order.placed', '{}', %s)", (a, TRACEPARENT))
    start(relayer, pg, broker, "--backfill", "pending")
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload, traceparent, tracestate) "
             "VALUES (%s, 'order.placed', '{}', %s, 'vendor=t61rcWkgMzE'), "
             "(%s, 'order.placed', '{}', NULL, NULL)", (b, TRACEPARENT, c))
    msgs = {m.key: m for m in kafka.read("order", 3)}
    assert set(msgs) == {a, b, c}
    assert msgs[a].headers["traceparent"] == TRACEPARENT  # backfilled
    assert "tracestate" not in msgs[a].headers
    assert msgs[b].headers["traceparent"] == TRACEPARENT  # streamed
    assert msgs[b].headers["tracestate"] == "vendor=t61rcWkgMzE"
    assert "traceparent" not in msgs[c].headers and "tracestate" not in msgs[c].headers


@pytest.fixture
def consume(build_dir, tmp_path):
    start = harness.ProcessFactory(os.path.join(build_dir, "outbox-consume"), str(tmp_path),
                                   "consumer")
    yield start
    start.cleanup()


APPLY_POINTS = ("INSERT INTO loyalty_points(customer_id, points) "
                "VALUES (($4->>'customer_id')::uuid, ($4->>'points')::int) "
                "ON CONFLICT (customer_id) DO UPDATE "
                "SET points = loyalty_points.points + EXCLUDED.points")


def test_cloudevents_read_back_by_outbox_consume(pg, broker, kafka, relayer, consume):
    with open(os.path.join(harness.REPO_ROOT, "sql", "examples", "orders.sql")) as f:
        pg.query(f.read())
    start(relayer, pg, broker, "--envelope", "cloudevents")
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    for cust, pts in ((a, 10), (b, 5), (a, 1)):
        pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) VALUES "
                 "(%s, 'order.placed', json_build_object('customer_id', %s::text, "
                 "'points', %s)::jsonb)", (cust, cust, pts))
    rows = {str(i): (str(c), p) for i, c, p in pg.query(
        "SELECT id, created_at, payload::text FROM events_outbox")}
    msgs = kafka.read("order", 3)
    assert len(msgs) == 3
    for m in msgs:
        h = m.headers
        assert h["ce_specversion"] == "1.0"
        assert h["ce_id"] in rows
        assert h["ce_source"] == "/postgresql/postgres/public.events_outbox"
        assert h["ce_type"] == "order.placed"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z", h["ce_time"]), h
        assert h["content-type"] == "application/json"
        assert "event_id" not in h and "event_type" not in h
        assert m.value == rows[h["ce_id"]][1]  # value unchanged
    created = pg.scalar("SELECT to_char(created_at AT TIME ZONE 'UTC', "
                        "'YYYY-MM-DD\"T\"HH24:MI:SS') FROM events_outbox WHERE id = %s",
                        (int(msgs[0].headers["ce_id"]),))
    assert msgs[0].headers["ce_time"].startswith(created)

    # A redelivery of the first record, with its CloudEvents headers only.
    first = msgs[0]
    dup = [(first.key.encode(), first.raw_value,
            [(k, v.encode()) for k, v in first.headers.items()])]
    assert kafka.produce("order", dup) == []
    p = consume("--brokers", broker.bootstrap, "--group", "loyalty", "--topics", "order",
                "--dsn", pg.dsn(), "--consumer", "loyalty", "--apply", APPLY_POINTS)
    wait_until(lambda: pg.scalar("SELECT count(*) FROM processed_events") == 3, 60,
               message="3 events processed")
    time.sleep(1)
    got = {str(c): int(n) for c, n in pg.query("SELECT customer_id, points FROM loyalty_points")}
    assert got == {a: 11, b: 5}
    ids = sorted(r[0] for r in pg.query("SELECT event_id FROM processed_events"))
    assert ids == sorted(rows)
    assert p.terminate(20) == 0
    assert "1 duplicates" in p.log_text() or "1 duplicate" in p.log_text(), p.log_tail()


def test_backfill_progress_total_on_a_mapped_id(pg, broker, kafka, relayer):
    """The backfill's progress total counts rows by the mapped --column-id
    (it once named o.id, and the total silently went missing)."""
    pg.query("CREATE TABLE public.my_events (event_no bigint GENERATED ALWAYS AS IDENTITY, "
             "kind text NOT NULL, body jsonb, occurred_at timestamptz NOT NULL DEFAULT now())")
    pg.query("INSERT INTO public.my_events (kind, body) "
             "SELECT 'order.old', jsonb_build_object('i', g) FROM generate_series(1, 50) g")
    r = start(relayer, pg, broker, "--table", "public.my_events", "--column-id", "event_no",
              "--column-key", "none", "--column-type", "kind", "--column-payload", "body",
              "--column-created-at", "occurred_at", "--backfill", "pending")
    assert len(kafka.read("order", 50)) == 50
    r.wait_for_log(r"backfill: finished: 50 rows", timeout=30)
    assert "backfill: 0 of 50 rows" in r.log_text(), r.log_text()
    assert "total unknown" not in r.log_text()
    assert 'column o.id does not exist' not in pg.log_text()
