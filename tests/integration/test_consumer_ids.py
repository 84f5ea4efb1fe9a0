"""test_consumer_ids.py — outbox-consume with processed_events as users
have it: the seed article's table (event_id BIGINT) and ours
(sql/002_processed_events.sql, event_id TEXT).

  test_processed_events_column_types[bigint|text]
      numeric ids (and a redelivery) are applied once with either column
      type, batch pipelined and message by message; with the bigint column
      a non-numeric id (a uuid, as the Debezium layout's) is refused naming
      the event, the column type and the ALTER TABLE that fixes it, as
      --on-error says (halt: exit 1, the offset stays at it; failed: a
      failed_events row, the events after it applied); with the text column
      the same id is simply applied
  test_processed_events_of_a_type_that_cannot_work
      a uuid event_id column can never hold the relayer's ids: exit 2 at
      start with the exact ALTER TABLE; after running it the consumer works
"""

import uuid

import pytest

import harness
from consumer_fixtures import (committed_offsets, consume, consumer_args,  # noqa: F401 (fixtures)
                               consumer_binary, event, points, shop, wait_points)

pytestmark = pytest.mark.real_kafka  # on the shared real Kafka (conftest.py)

ARTICLE_DDL = ("CREATE TABLE processed_events (consumer TEXT, event_id BIGINT, "
               "processed_at TIMESTAMPTZ DEFAULT now(), PRIMARY KEY (consumer, event_id))")
FIX = "ALTER TABLE public.processed_events ALTER COLUMN event_id TYPE text USING event_id::text"


def processed_table(pg, column_type):
    """processed_events as the article creates it (bigint) or as sql/002
    does (text, already loaded by the harness)."""
    if column_type == "bigint":
        pg.query("DROP TABLE processed_events")
        pg.query(ARTICLE_DDL)
    assert pg.scalar("SELECT data_type FROM information_schema.columns WHERE table_name = "
                     "'processed_events' AND column_name = 'event_id'") == column_type


@pytest.mark.parametrize("column_type", ["bigint", "text"])
def test_processed_events_column_types(shop, broker, kafka, consume, column_type):
    pg = shop
    processed_table(pg, column_type)
    broker.create_topic("order", 1)
    a = str(uuid.uuid4())
    # "2" twice in the batch: the pipelined batch falls back to its two-step form
    assert kafka.produce("order", [event(a, 1, "1"), event(a, 2, "2"), event(a, 2, "2"),
                                   event(a, 4, "3")]) == []
    p = consume(*consumer_args(pg, broker, tuning="defaults"))
    wait_points(pg, {a: 7}, 40, p)
    # a redelivery: skipped
    assert kafka.produce("order", [event(a, 1, "1"), event(a, 8, "4")]) == []
    wait_points(pg, {a: 15}, 30, p)
    assert sorted(str(r[0]) for r in pg.query(
        "SELECT event_id FROM processed_events WHERE consumer = 'loyalty'")) == \
        ["1", "2", "3", "4"]

    # A non-numeric id, then a numeric one after it (offsets 6 and 7).
    odd = str(uuid.uuid4())
    assert kafka.produce("order", [event(a, 16, odd), event(a, 32, "5")]) == []
    if column_type == "text":
        wait_points(pg, {a: 63}, 30, p)
        assert p.terminate(20) == 0
        return

    # bigint, --on-error halt (the default): stops at it, naming it.
    assert p.wait_exit(40) == 1, p.log_tail()
    lines = [l for l in p.log_text().splitlines()
             if "event_id=%s topic=%s partition=0 offset=6" % (odd, harness.topic("order")) in l]
    assert len(lines) == 1, p.log_text()
    assert "processed_events.event_id is bigint" in lines[0], lines[0]
    assert FIX in lines[0] and "--on-error halt" in lines[0], lines[0]
    assert points(pg) == {a: 15}
    assert committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: 6}

    # --on-error failed: recorded in failed_events, the events after it applied.
    p = consume(*consumer_args(pg, broker, tuning="defaults", extra=["--on-error", "failed"]))
    wait_points(pg, {a: 47}, 40, p)
    harness.wait_until(lambda: pg.scalar("SELECT count(*) FROM failed_events") == 1, 10,
                       message="1 failed event")
    eid, error, state = pg.query("SELECT event_id, error, sqlstate FROM failed_events")[0]
    assert eid == odd and state == "22P02", (eid, error, state)
    assert "bigint" in error and FIX in error, error
    assert "recorded in failed_events" in p.log_text()
    assert sorted(r[0] for r in pg.query("SELECT event_id FROM processed_events")) == \
        [1, 2, 3, 4, 5]
    harness.wait_until(
        lambda: committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: 8}, 20,
        interval=0.5, message="offset 8 committed")
    assert p.terminate(20) == 0


def test_processed_events_of_a_type_that_cannot_work(shop, broker, kafka, consume):
    pg = shop
    pg.query("DROP TABLE processed_events")
    pg.query("CREATE TABLE processed_events (consumer TEXT, event_id UUID, "
             "processed_at TIMESTAMPTZ DEFAULT now(), PRIMARY KEY (consumer, event_id))")
    broker.create_topic("order", 1)
    a = str(uuid.uuid4())
    assert kafka.produce("order", [event(a, 1, "1"), event(a, 2, "m-0/16B3F28")]) == []
    p = consume(*consumer_args(pg, broker, tuning="defaults"))
    assert p.wait_exit(30) == 2, p.log_tail()
    log = p.log_text()
    assert "processed_events.event_id is uuid" in log, log
    assert FIX in log, log
    assert points(pg) == {}

    pg.query(FIX)
    p = consume(*consumer_args(pg, broker, tuning="defaults"))
    wait_points(pg, {a: 3}, 40, p)
    assert p.terminate(20) == 0
