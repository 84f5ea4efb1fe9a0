"""test_backfill_mapped.py — a backfill of a table whose id column is not
named id (--column-id), interrupted and resumed. Once per output plugin.

  test_resumed_backfill_counts_by_the_mapped_id
      a relayer is killed while it backfills public.my_events (id column
      event_no) after it recorded some progress; the next start resumes
      and its progress total is exactly the rows the marker says are left
      (backfill_done_id < event_no <= backfill_max_id), counted by the
      mapped column: the resume's count once named o.id and failed on the
      server ('total unknown'), as the first run's did (test_layouts.py's
      test_backfill_progress_total_on_a_mapped_id covers that one). Every
      row reaches Kafka.

The broker's response delay (rtt) slows the backfill down so that the kill
lands inside it.
"""

import pytest

import harness

# per plugin and major (conftest.py)
pytestmark = [pytest.mark.usefixtures("plugin", "pg_major"), pytest.mark.real_kafka]

ROWS = 60000

ARGS = ["--table", "public.my_events", "--column-id", "event_no", "--column-key", "none",
        "--column-type", "kind", "--column-payload", "body", "--column-created-at",
        "occurred_at", "--backfill", "pending"]


def marker(pg, slot="outbox_relay"):
    rows = pg.query("SELECT to_jsonb(s) FROM public.outbox_relay_slots s WHERE slot_name = %s",
                    (slot,))
    return rows[0][0] if rows else None


def in_topic(bootstrap, topic, partitions):
    """How many records the topic holds: the sum of its partitions' high
    watermarks (every row was acknowledged before the run finished)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "log_level": 3})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(harness.topic(topic), p), timeout=10)[1]
                   for p in partitions)
    finally:
        c.close()


@pytest.mark.mock_kafka(
    "a backfill slowed by the mock's round trips (rtt) so that the kill lands"
    " inside it"
)
def test_resumed_backfill_counts_by_the_mapped_id(pg, broker, kafka, relayer):
    pg.query("CREATE TABLE public.my_events (event_no bigint GENERATED ALWAYS AS IDENTITY "
             "PRIMARY KEY, kind text NOT NULL, body jsonb, "
             "occurred_at timestamptz NOT NULL DEFAULT now())")
    pg.query("INSERT INTO public.my_events (kind, body) "
             "SELECT 'order.old', jsonb_build_object('i', g) FROM generate_series(1, %d) g"
             % ROWS)
    pg.query("ANALYZE public.my_events")
    args = ["--dsn", pg.dsn(), "--brokers", broker.bootstrap] + ARGS

    broker.cmd("rtt -1 500")
    p = relayer(*args)
    harness.wait_until(lambda: (marker(pg) or {}).get("backfill_done_id") is not None,
                       timeout=120, message="the backfill recording its progress")
    p.kill()
    broker.cmd("rtt -1 0")
    m = marker(pg)
    assert m["backfill_state"] == "running", m
    left = pg.scalar("SELECT count(*) FROM public.my_events WHERE event_no > %s "
                     "AND event_no <= %s", (int(m["backfill_done_id"]), int(m["backfill_max_id"])))
    assert 0 < left < ROWS, m

    p = relayer(*args)
    p.wait_for_log(r"backfill: finished", timeout=120)
    text = p.log_text()
    assert "backfill: resuming" in text, text
    assert "backfill: 0 of {:,} rows".format(left) in text, text
    assert "total unknown" not in text, text
    assert "column o.id does not exist" not in pg.log_text()
    assert marker(pg)["backfill_state"] == "done"

    ids = set()
    kafka.scan("order", lambda msg: ids.add(dict(msg.headers() or [])["event_id"].decode()),
               expected=in_topic(broker.bootstrap, "order", kafka.partitions("order")),
               timeout=120)
    assert ids == {str(i) for i in range(1, ROWS + 1)}, "%d of %d rows in Kafka" % (len(ids), ROWS)
    assert p.terminate() == 0
