"""test_consumer_start.py — defaults from any starting point: before
the topic exists, a topic that appears later, restarts.

Defaults only:
  test_defaults_started_before_the_topic_exists[order|^ord.*]
  test_defaults_topic_created_while_running  a subscribed topic appears
                                       after the consumer joined
  test_defaults_restart_after_events_exist   a new group, then a SIGKILL
                                       and a restart of a known group

outbox-consume against a real PostgreSQL, the mock broker and (end to end)
the real relayer, like every test_consumer_*.py; shared fixtures and
helpers: consumer_fixtures.py.
"""

import re
import signal
import time
import uuid

import pytest

import harness
from consumer_fixtures import (Orders, consumer_args, event, keys_covering, place_orders,
                               wait_points)
from consumer_fixtures import consume, consumer_binary, shop  # noqa: F401 (fixtures)

pytestmark = pytest.mark.real_kafka  # on the shared real Kafka (conftest.py)


# ---------------------------------------------------------------------------
# Defaults from any starting point. Every test below runs outbox-consume with
# no -X and no batch options (tuning="defaults"), as users do.
#
# The mock cluster of librdkafka 2.0.2 advertises Metadata up to v2, which
# has no AllowAutoTopicCreation flag, so any consumer's subscription creates
# the topic it names. "apiversion 3 0 4" makes the brokers advertise v4:
# consumers then send allow.auto.create.topics=false and only producers
# create topics, as on a real broker.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("topics", ["order", "^ord.*"])
def test_defaults_started_before_the_topic_exists(shop, broker, relayer, relay_args, consume,
                                                  topics):
    """The consumer subscribes before anything created the topic; the
    relayer creates it with the first event. For a topic name librdkafka
    retries a join that matches nothing every ~2 s (this passed before the
    defaults changed: a guard); a regex subscription finds the new topic
    only at the next metadata refresh, 5 minutes by librdkafka's default."""
    pg = shop
    # A real broker creates no topic for a consumer's Metadata request; the
    # mock's v2 does, unless told to answer v4 (allow_auto_topic_creation).
    if isinstance(broker, harness.MockBroker):
        broker.cmd("apiversion 3 0 4")
    con = consume(*consumer_args(pg, broker, group="g", topics=topics, tuning="defaults"))
    con.wait_for_log(r"Subscribed topic not available: " + re.escape(harness.topic(topics)),
                     timeout=20)
    rel = relayer(*relay_args)
    rel.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    customers = [str(uuid.uuid4()) for _ in range(6)]
    expected = {}
    place_orders(pg, customers, 20, expected)
    wait_points(pg, expected, 40, con)
    assert pg.scalar("SELECT count(*) FROM processed_events") == 20


def test_defaults_topic_created_while_running(shop, broker, kafka, consume):
    """A subscribed topic that appears after the consumer joined the group
    (the same metadata refresh finds partitions added to a topic, which the
    2.0.2 mock cannot do). librdkafka's default topic.metadata.refresh
    interval is 5 minutes: the consumer must find it within seconds."""
    pg = shop
    # A real broker creates no topic for a consumer's Metadata request; the
    # mock's v2 does, unless told to answer v4 (allow_auto_topic_creation).
    if isinstance(broker, harness.MockBroker):
        broker.cmd("apiversion 3 0 4")
    broker.create_topic("order", 2)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    assert kafka.produce("order", [event(a, 1, "o%d" % i) for i in range(5)]) == []
    con = consume(*consumer_args(pg, broker, topics="order,refund", tuning="defaults"))
    wait_points(pg, {a: 5}, 40, con)
    t0 = time.monotonic()
    assert kafka.produce("refund", [event(b, 2, "r%d" % i) for i in range(5)]) == []
    assert kafka.partitions("refund") == [0, 1, 2, 3]
    wait_points(pg, {a: 5, b: 10}, 40, con)
    print("\nnew topic consumed %.1f s after its first event" % (time.monotonic() - t0))
    assert pg.scalar("SELECT count(*) FROM processed_events") == 10


def test_defaults_restart_after_events_exist(shop, broker, kafka, consume):
    """Started after the events exist, by a new group; then SIGKILLed and
    started again (the group is known, its dead member still in it) after
    more events: everything is applied, exactly once, within seconds."""
    pg = shop
    broker.create_topic("order", 4)
    customers = keys_covering(4, per_partition=2)
    orders = Orders(kafka, customers)
    send, expected = orders.send, orders.expected

    send(40)
    con = consume(*consumer_args(pg, broker, tuning="defaults"))
    t0 = time.monotonic()
    wait_points(pg, dict(expected), 30, con)
    first = time.monotonic() - t0
    assert con.kill() == -signal.SIGKILL
    send(40)
    con = consume(*consumer_args(pg, broker, tuning="defaults"))
    t0 = time.monotonic()
    wait_points(pg, dict(expected), 30, con)
    print("\nnew group: all applied %.1f s after start; after a SIGKILL: %.1f s"
          % (first, time.monotonic() - t0))
    assert pg.scalar("SELECT count(*) FROM processed_events") == 80
    assert con.terminate(30) == 0
