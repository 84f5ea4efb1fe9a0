"""test_check_agrees.py — `outbox-relay check` judges what the relayer
does on the same configuration: each test runs the relayer and `check`
with the same arguments on the same table and asserts that they agree.

  test_bytea_payload_size[wal2json|pgoutput]
      a bytea payload is measured in bytes, as the relayer sends it (not as
      its hex text, twice the size): 600,000 bytes PASS message_size and
      the relayer delivers them; 1,100,000 bytes FAIL it and the relayer
      takes its --on-poison path (a dead letter)
  test_mapped_columns_are_measured[wal2json|pgoutput]
      --column-type/--column-payload name the columns check measures: a
      mapped table whose unmapped "type" and "payload" columns hold other
      things (a topic nobody relays to, 1.1 MB of text) is judged on its
      mapped ones, as the relayer relays them; the index the reaper needs
      is looked for on the mapped timestamp column
"""

import pytest

import harness
from test_check import HEALTHY, apply_fix, expect, run_check

pytestmark = pytest.mark.real_kafka  # on the shared real Kafka (conftest.py)

DLQ = "outbox.dead-letter"
BIG = 600000      # bytes: fits the default message.max.bytes (1000000), its hex text does not
TOO_BIG = 1100000


def start(relayer, pg, args):
    r = relayer(*args)
    harness.wait_until(lambda: (pg.slot_info("outbox_relay") or {}).get("active"), 60,
                       message="the relayer to stream")
    assert r.running(), r.log_tail()
    return r


def dead_letter_ids(kafka, n):
    return [m.headers.get("event_id") for m in kafka.read(DLQ, expected=n, timeout=60)]


@pytest.mark.usefixtures("plugin")
def test_bytea_payload_size(relayer, relayer_binary, pg_factory, broker, kafka):
    pg = pg_factory(settings=HEALTHY)
    pg.query("ALTER TABLE events_outbox ALTER COLUMN payload TYPE bytea "
             "USING convert_to(payload::text, 'UTF8')")
    broker.create_topic("blob")
    broker.create_topic(DLQ)
    args = ["--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--on-poison", "dead-letter"]
    r = start(relayer, pg, args)

    big = bytes(range(256)) * (BIG // 256) + b"\x00" * (BIG % 256)
    import psycopg2
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) VALUES "
             "(gen_random_uuid(), 'blob.big', %s)", (psycopg2.Binary(big),))
    c = run_check(relayer_binary, *args)
    expect(c, "message_size", "PASS", detail="the largest payload (%d bytes" % BIG)
    got = kafka.read("blob", expected=1, timeout=60)
    assert [m.raw_value for m in got] == [big], r.log_tail()

    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) VALUES "
             "(gen_random_uuid(), 'blob.huge', decode(repeat('ab', %s), 'hex'))", (TOO_BIG,))
    huge = str(pg.scalar("SELECT id FROM events_outbox WHERE type = 'blob.huge'"))
    c = run_check(relayer_binary, *args)
    expect(c, "message_size", "FAIL", detail="the largest payload (%d bytes" % TOO_BIG)
    assert dead_letter_ids(kafka, 1) == [huge], r.log_tail()
    assert r.running()
    assert r.terminate() == 0


@pytest.mark.usefixtures("plugin")
def test_mapped_columns_are_measured(relayer, relayer_binary, pg_factory, broker, kafka):
    pg = pg_factory(settings=HEALTHY)
    pg.query("CREATE TABLE public.my_events (event_no bigint GENERATED ALWAYS AS IDENTITY "
             "PRIMARY KEY, kind text NOT NULL, body bytea, occurred_at timestamptz NOT NULL "
             "DEFAULT now(), type text, payload text)")
    pg.query("CREATE INDEX ON public.my_events (occurred_at)")
    broker.create_topic("blob")
    broker.create_topic(DLQ)
    args = ["--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--on-poison", "dead-letter",
            "--table", "public.my_events", "--column-id", "event_no", "--column-key", "none",
            "--column-type", "kind", "--column-payload", "body",
            "--column-created-at", "occurred_at"]
    r = start(relayer, pg, args)

    # What the relayer relays: kind and body. The columns named type and
    # payload are not the event's: a type whose topic does not exist, 1.1 MB.
    pg.query("INSERT INTO public.my_events (kind, body, type, payload) VALUES "
             "('blob.one', decode(repeat('cd', %s), 'hex'), 'decoy.one', repeat('x', %s))",
             (BIG, TOO_BIG))
    c = run_check(relayer_binary, *args)
    expect(c, "columns", "PASS")
    expect(c, "message_size", "PASS", detail="the largest payload (%d bytes" % BIG)
    expect(c, "topics", "PASS")
    assert "decoy" not in c.items["topics"]["detail"], c
    got = kafka.read("blob", expected=1, timeout=60)
    assert [len(m.raw_value) for m in got] == [BIG], r.log_tail()

    pg.query("INSERT INTO public.my_events (kind, body, type, payload) VALUES "
             "('blob.two', decode(repeat('cd', %s), 'hex'), 'decoy.two', 'small')", (TOO_BIG,))
    two = str(pg.scalar("SELECT event_no FROM public.my_events WHERE kind = 'blob.two'"))
    c = run_check(relayer_binary, *args)
    expect(c, "message_size", "FAIL", detail="the largest payload (%d bytes" % TOO_BIG)
    assert dead_letter_ids(kafka, 1) == [two], r.log_tail()
    assert r.running()
    assert r.terminate() == 0

    # the reaper's index is looked for on the mapped timestamp column
    expect(c, "indexes", "PASS")
    pg.query("DROP INDEX my_events_occurred_at_idx")
    c = run_check(relayer_binary, *args)
    item = expect(c, "indexes", "WARN", detail="no index leads with occurred_at",
                  fix='CREATE INDEX CONCURRENTLY ON "public"."my_events" ("occurred_at");')
    apply_fix(pg, item)
    expect(run_check(relayer_binary, *args), "indexes", "PASS")
