"""test_consumer_apply.py — how events are applied: each once, the
--on-error modes, bad usage, a pipelined batch.

  test_applies_each_event_once         direct produce with duplicates and a
                                       message without event_id; SIGTERM
                                       commits what was applied
  test_on_error_failed_records_and_goes_on
  test_on_error_halt_stops_at_the_bad_event
  test_bad_usage_and_bad_apply_sql     exit 2 with a message
Each runs twice: [tuned] with the FAST_GROUP -X settings and small
batches, [defaults] with no -X and no batch options at all. Defaults only:
  test_defaults_batch_mixes_processed_new_and_failing_events  the pipelined
                                       batch: an already-processed event, new
                                       ones, an in-batch duplicate, a failing
                                       one (applied again one by one)

outbox-consume against a real PostgreSQL, the mock broker and (end to end)
the real relayer, like every test_consumer_*.py; shared fixtures and
helpers: consumer_fixtures.py.
"""

import re
import time
import uuid

import pytest

import harness
from consumer_fixtures import committed_offsets, consumer_args, event, points, wait_points
from consumer_fixtures import consume, consumer_binary, shop, tuning  # noqa: F401 (fixtures)

pytestmark = pytest.mark.real_kafka  # on the shared real Kafka (conftest.py)


def test_applies_each_event_once(shop, broker, kafka, consume, tuning):
    pg = shop
    broker.create_topic("order", 2)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    msgs = [event(a, 10, "1"), event(b, 5, "2"), event(a, 10, "1"),  # "1" redelivered
            event(a, 1, "3"), event(b, 2, None),                        # no event_id header
            (b.encode(), ('{"customer_id": "%s", "points": 100}' % b).encode(),
             [("event_id", b"\xff\xfe not utf-8"), ("event_type", b"order.placed")])]
    assert kafka.produce("order", msgs) == []
    p = consume(*consumer_args(pg, broker, tuning=tuning))
    wait_points(pg, {a: 11, b: 107}, 30, p)

    # The same events again (a relayer redelivering after a crash): skipped.
    assert kafka.produce("order", msgs[:2]) == []
    p.wait_for_log(r"assigned", timeout=20)
    time.sleep(1.5)
    assert points(pg) == {a: 11, b: 107}
    ids = sorted(r[0] for r in pg.query(
        "SELECT event_id FROM processed_events WHERE consumer = 'loyalty'"))
    assert len(ids) == 5
    assert ids[:3] == ["1", "2", "3"]
    for fallback in ids[3:]:  # no header, and a header that is not text
        assert fallback.startswith("kafka-%s-" % harness.topic("order")), fallback
        assert len(fallback.split("-")) == 4, fallback

    assert p.terminate(20) == 0
    log = p.log_text()
    assert "events applied" in log and "PostgreSQL reconnects" in log
    # SIGTERM committed the offsets of everything applied: 8 messages in all.
    offs = committed_offsets(broker.bootstrap, "loyalty", "order", [0, 1])
    assert sum(o for o in offs.values() if o >= 0) == 8, offs

    # A restart reads nothing again (offsets) and applies nothing twice.
    p2 = consume(*consumer_args(pg, broker, tuning=tuning))
    p2.wait_for_log(r"assigned", timeout=20)
    time.sleep(1.5)
    assert points(pg) == {a: 11, b: 107}
    assert p2.terminate(20) == 0
    assert "0 events applied, 0 duplicates" in p2.log_text()


def test_on_error_failed_records_and_goes_on(shop, broker, kafka, consume, tuning):
    pg = shop
    broker.create_topic("order", 1)
    a = str(uuid.uuid4())
    msgs = [event(a, 3, "10"),
            event(a, 0, "11", payload='{"customer_id": "not-a-uuid", "points": 1}'),
            event(a, 0, "12", payload="this is not json"),
            event(a, 4, "13")]
    assert kafka.produce("order", msgs) == []
    p = consume(*consumer_args(pg, broker, tuning=tuning, extra=["--on-error", "failed"]))
    wait_points(pg, {a: 7}, 30, p)
    harness.wait_until(lambda: pg.scalar("SELECT count(*) FROM failed_events") == 2, 10,
                       message="2 failed events")
    rows = pg.query("SELECT event_id, topic, \"partition\", \"offset\", key, event_type, payload, "
                    "error, sqlstate FROM failed_events WHERE consumer = 'loyalty' "
                    "ORDER BY event_id")
    assert [r[0] for r in rows] == ["11", "12"]
    eid, topic, part, off, key, typ, payload, error, state = rows[0]
    assert (topic, part, off, key, typ) == (harness.topic("order"), 0, 1, a, "order.placed")
    assert payload == '{"customer_id": "not-a-uuid", "points": 1}'
    assert "invalid input syntax for type uuid" in error and state == "22P02"
    assert rows[1][3] == 2 and rows[1][6] == "this is not json"
    assert "json" in rows[1][7] and rows[1][8] == "22P02"
    # Failed events count as processed: never retried.
    assert pg.scalar("SELECT count(*) FROM processed_events WHERE consumer = 'loyalty'") == 4
    assert p.running()
    log = p.log_text()
    assert "event_id=11 topic=%s partition=0 offset=1" % harness.topic("order") in log
    assert "recorded in failed_events" in log

    # Later events keep flowing and the offsets move past the failed ones.
    assert kafka.produce("order", [event(a, 5, "14")]) == []
    wait_points(pg, {a: 12}, 20, p)
    assert p.terminate(20) == 0
    assert committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: 5}


def test_on_error_halt_stops_at_the_bad_event(shop, broker, kafka, consume, tuning):
    pg = shop
    broker.create_topic("order", 1)
    a = str(uuid.uuid4())
    msgs = [event(a, 3, "20"), event(a, 4, "21"),
            event(a, 0, "22", payload='{"customer_id": "%s", "points": "lots"}' % a),
            event(a, 5, "23")]
    assert kafka.produce("order", msgs) == []
    p = consume(*consumer_args(pg, broker, tuning=tuning, extra=["--on-error", "halt"]))
    assert p.wait_exit(40) == 1
    log = p.log_text()
    assert ("event_id=22 topic=%s partition=0 offset=2 type=order.placed: apply failed: "
            "ERROR:  invalid input syntax for type integer: \"lots\" (SQLSTATE 22P02)"
            % harness.topic("order")) in log, log
    assert "--on-error halt" in log
    # The two events before it are applied and committed; nothing past it.
    assert points(pg) == {a: 7}
    assert pg.scalar("SELECT count(*) FROM failed_events") == 0
    assert sorted(r[0] for r in pg.query("SELECT event_id FROM processed_events")) == ["20", "21"]
    assert committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: 2}

    # A restart halts on it again rather than skipping it.
    p2 = consume(*consumer_args(pg, broker, tuning=tuning, extra=["--on-error", "halt"]))
    assert p2.wait_exit(40) == 1
    assert "event_id=22" in p2.log_text()
    assert points(pg) == {a: 7}


def test_bad_usage_and_bad_apply_sql(shop, broker, consume):
    pg = shop
    p = consume("--brokers", broker.bootstrap, "--topics", "order")
    assert p.wait_exit(10) == 2
    assert "--group is required" in p.log_text()
    p = consume(*consumer_args(pg, broker, extra=["--on-error", "sometimes"]))
    assert p.wait_exit(10) == 2
    assert "--on-error expects failed or halt" in p.log_text()
    p = consume(*consumer_args(pg, broker, apply="INSERT INTO no_such_table VALUES ($4)"))
    assert p.wait_exit(20) == 2
    assert "--apply statement does not prepare" in p.log_text()
    assert "no_such_table" in p.log_text()

    # The DSN password never reaches the log.
    pg.query("CREATE ROLE consumer_pw LOGIN PASSWORD 'Sekr3t-pw'")
    p = consume(*consumer_args(pg, broker, dsn=pg.dsn(user="consumer_pw",
                                                      password="Sekr3t-pw", dbname="nodb")))
    p.wait_for_log(r"cannot connect to PostgreSQL", timeout=20)
    assert p.terminate(20) == 0
    assert "Sekr3t-pw" not in p.log_text()


# ---------------------------------------------------------------------------
# Defaults only. Every test below runs outbox-consume with no -X and no
# batch options (tuning="defaults"), as users do.
# ---------------------------------------------------------------------------

def test_defaults_batch_mixes_processed_new_and_failing_events(shop, broker, kafka, consume):
    """The defaults apply a batch pipelined (one processed_events INSERT for
    the whole batch, then the --apply statements, no savepoints): in one
    batch an event already in processed_events, new ones, and a new one
    twice, only the new ones are applied, once. A failing event in a
    pipelined batch rolls it back and the batch is applied again message by
    message, so --on-error failed records just that event."""
    pg = shop
    broker.create_topic("order", 1)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    pg.query("INSERT INTO processed_events (consumer, event_id) VALUES ('loyalty', 'old1')")
    odd = 'n"2\\,{x} NULL'  # quotes, a backslash, array syntax: all of it the id
    assert kafka.produce("order", [event(a, 10, "old1"), event(a, 1, "new1"), event(b, 2, odd),
                                   event(a, 1, "new1")]) == []
    p = consume(*consumer_args(pg, broker, tuning="defaults", extra=["--on-error", "failed"]))
    wait_points(pg, {a: 1, b: 2}, 40, p)

    bad = '{"customer_id": "%s", "points": "lots"}' % a
    assert kafka.produce("order", [event(a, 5, "n3"), event(a, 0, "bad", payload=bad),
                                   event(b, 7, "n4"), event(a, 1, "new1")]) == []
    wait_points(pg, {a: 6, b: 9}, 30, p)
    harness.wait_until(lambda: pg.scalar("SELECT count(*) FROM failed_events") == 1, 10,
                       message="1 failed event")
    assert pg.scalar("SELECT event_id FROM failed_events") == "bad"
    assert sorted(r[0] for r in pg.query(
        "SELECT event_id FROM processed_events WHERE consumer = 'loyalty'")) == \
        sorted(["bad", "n3", "n4", "new1", odd, "old1"])
    # Offsets are committed asynchronously while it runs, not only at a stop.
    harness.wait_until(
        lambda: committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: 8}, 20,
        interval=0.5, message="offset 8 committed while running")
    assert p.running()
    assert p.terminate(20) == 0
    m = re.search(r"4 events applied, 3 duplicates skipped, 1 failed, (\d+) batches "
                  r"\((\d+) pipelined, (\d+) applied again one by one", p.log_text())
    assert m, p.log_tail()
    batches, pipelined, one_by_one = (int(x) for x in m.groups())
    assert pipelined >= 1 and one_by_one >= 1, m.group(0)
    assert pipelined + one_by_one == batches, m.group(0)
    assert committed_offsets(broker.bootstrap, "loyalty", "order", [0]) == {0: 8}
