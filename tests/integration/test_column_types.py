"""test_column_types.py — the same Kafka records from both output plugins
for every type a key, header or id column can have (docs/producing.md,
"Column types").

pgoutput sends each value as PostgreSQL's text output; wal2json sends JSON
numbers, booleans and strings. The relayer turns both into PostgreSQL's text
output, so a consumer cannot tell which plugin ran. Each case runs one
relayer per plugin, each with its own slot and broker, on the same commits
of one table, and compares the records (topic, key, headers, value) byte for
byte; it also checks the key and headers against what psql prints for the
row (each type's output function, through concat(): a boolean's ::text cast
says "true", its output "t").

  test_same_records_whatever_the_plugin[<id type>-<key column>]
      the key is a bigint, numeric, boolean, uuid, text or timestamptz
      column, or the id column (one column in two roles), or the type or
      created-at column (again two roles); every typed column is a header
      too; rows with NULL in each of them; ids of type bigint, numeric, uuid
      and text. A third relayer then backfills the same rows (--backfill
      pending on a new slot): the same records once more
"""

import pytest

import harness

TOPIC = "order"

# id type -> its column definition
ID_TYPES = {
    "bigint": "id bigserial PRIMARY KEY",
    "numeric": "id numeric PRIMARY KEY DEFAULT nextval('ev2_seq')",
    "uuid": "id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
    "text": "id text PRIMARY KEY DEFAULT 'ev-' || nextval('ev2_seq')",
}

# Columns sent as headers (every typed column but the payload).
HEADERS = ("customer", "amount", "flag", "ref", "note", "ts")

# (customer bigint, amount numeric, flag boolean, ref uuid, kind text,
#  note text, ts timestamptz): every column NULL in some row.
ROWS = [
    (100, "12.50", True, "6f1c1a4e-6a5b-4d57-9b0e-6b1d3c2a9e01", "order.placed", "plain",
     "2026-03-01 10:00:00+00"),
    (-7, "-0.001", False, "00000000-0000-0000-0000-000000000000", "order.paid", 'q"uo\\te',
     "2026-03-01 10:00:00.123456+00"),
    (9223372036854775807, "100000000000000000000", True, None, "order.shipped", "zoë ✓",
     "1999-12-31 23:59:59.5+00"),
    (None, None, None, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "order.x", None, None),
    (0, "0", None, None, "order.y", "", "2030-06-15 12:34:56+05:30"),
]

CASES = [("bigint", k) for k in ("customer", "amount", "flag", "ref", "note", "ts", "kind",
                                 "id")] + [(t, "id") for t in ("numeric", "uuid", "text")]


def make_table(pg, id_type):
    pg.query("CREATE SEQUENCE ev2_seq")
    pg.query("CREATE TABLE public.ev2 (%s, customer bigint, amount numeric, flag boolean, "
             "ref uuid, kind text NOT NULL, note text, body jsonb, ts timestamptz)"
             % ID_TYPES[id_type])


def insert(pg):
    conn = pg.connect(autocommit=False)
    cur = conn.cursor()
    for i, (customer, amount, flag, ref, kind, note, ts) in enumerate(ROWS):
        cur.execute("INSERT INTO public.ev2 (customer, amount, flag, ref, kind, note, body, ts) "
                    "VALUES (%s, %s::numeric, %s, %s::uuid, %s, %s, jsonb_build_object('i', %s), "
                    "%s::timestamptz)", (customer, amount, flag, ref, kind, note, i, ts))
    conn.commit()
    conn.close()


def record(m):
    return (m.topic, m.key, m.value, tuple(sorted(m.headers.items())))


@pytest.mark.parametrize("id_type,key", CASES, ids=["%s-%s" % c for c in CASES])
def test_same_records_whatever_the_plugin(pg, broker_factory, relayer, id_type, key):
    make_table(pg, id_type)
    flags = ["--table", "public.ev2", "--column-key", key, "--column-type", "kind",
             "--column-payload", "body", "--column-created-at", "ts",
             "--header-column", ",".join(HEADERS), "--on-poison", "halt"]
    brokers, relayers = {}, {}
    for plugin in harness.PLUGINS:
        brokers[plugin] = broker_factory()
        r = relayer("--dsn", pg.dsn(), "--brokers", brokers[plugin].bootstrap, "--slot",
                    "s_" + plugin, "--plugin", plugin, *flags)
        r.wait_for_log(r"streaming public\.ev2", timeout=30)
        relayers[plugin] = r
    insert(pg)
    got = {}
    for plugin in harness.PLUGINS:
        msgs = harness.read_messages(brokers[plugin].bootstrap, TOPIC, expected=len(ROWS),
                                     timeout=30)
        assert len(msgs) == len(ROWS), (plugin, relayers[plugin].log_tail())
        got[plugin] = sorted((record(m) for m in msgs), key=repr)
    assert got["wal2json"] == got["pgoutput"]

    # PostgreSQL's text output (psql's: concat() calls the output function),
    # as the walsenders print it: the key, the headers and the event id.
    # NULL: no key, no header.
    conn = pg.connect(autocommit=True)
    cur = conn.cursor()
    cols = ["id", key] + list(HEADERS)
    cur.execute("SELECT %s FROM public.ev2" % ", ".join(
        "CASE WHEN %s IS NOT NULL THEN concat(%s) END" % (c, c) for c in cols))
    want = {}
    for row in cur.fetchall():
        text = dict(zip(cols, row))
        headers = {h: text[h] for h in HEADERS if text[h] is not None}
        want[text["id"]] = (text[key], headers)
    for (_, k, _, headers) in got["pgoutput"]:
        h = dict(headers)
        assert h["event_id"] in want, (h, want)
        want_key, want_headers = want[h["event_id"]]
        assert k == want_key
        assert {n: v for n, v in h.items() if n in HEADERS} == want_headers

    # The backfill reads the rows with a query, not from the WAL: the same
    # records once more.
    b = broker_factory()
    r = relayer("--dsn", pg.dsn(), "--brokers", b.bootstrap, "--slot", "s_backfill",
                "--plugin", "pgoutput", "--backfill", "pending", *flags)
    msgs = harness.read_messages(b.bootstrap, TOPIC, expected=len(ROWS), timeout=30)
    assert len(msgs) == len(ROWS), r.log_tail()
    assert sorted((record(m) for m in msgs), key=repr) == got["pgoutput"]
    relayers["backfill"] = r
    for r in relayers.values():
        assert r.terminate() == 0, r.log_tail()
