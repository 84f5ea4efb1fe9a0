"""test_consumer_outages.py — PostgreSQL and the brokers go away and
come back.

  test_survives_postgres_restart       the batch in flight is applied after
                                       reconnecting, nothing skipped
  test_survives_broker_outage          brokers down past the session timeout
Each runs twice: [tuned] with the FAST_GROUP -X settings and small
batches, [defaults] with no -X and no batch options at all.

outbox-consume against a real PostgreSQL, the mock broker and (end to end)
the real relayer, like every test_consumer_*.py; shared fixtures and
helpers: consumer_fixtures.py.
"""

import time
import uuid

import pytest

from consumer_fixtures import Orders, consumer_args, event, wait_points
from consumer_fixtures import consume, consumer_binary, shop, tuning  # noqa: F401 (fixtures)

pytestmark = pytest.mark.real_kafka  # on the shared real Kafka (conftest.py)


def test_survives_postgres_restart(shop, broker, kafka, consume, tuning):
    """PostgreSQL goes away while events arrive: the consumer pauses,
    reconnects, and applies everything exactly once."""
    pg = shop
    broker.create_topic("order", 2)
    customers = [str(uuid.uuid4()) for _ in range(3)]
    orders = Orders(kafka, customers, id_format="%d", zero=True)
    send, expected = orders.send, orders.expected

    send(30)
    p = consume(*consumer_args(pg, broker, tuning=tuning))
    wait_points(pg, dict(expected), 30, p)
    pg.stop(mode="immediate")
    send(30)
    time.sleep(1)
    pg.start()
    p.wait_for_log(r"connected to PostgreSQL \(backend pid", timeout=40)
    send(30)
    wait_points(pg, dict(expected), 40, p)
    assert pg.scalar("SELECT count(*) FROM processed_events") == 90
    assert p.running()
    assert "connection" in p.log_text().lower()


@pytest.mark.mock_kafka("every broker down and back: the mock's \"down\"/\"up\"; the "
                        "consumer through real broker restarts is test_real_kafka_consumer.py's")
def test_survives_broker_outage(shop, broker, kafka, consume, tuning):
    """All brokers down for longer than the session timeout: the consumer
    keeps polling, rejoins when they are back, and nothing is lost or applied
    twice."""
    pg = shop
    broker.create_topic("order", 2)
    c = str(uuid.uuid4())
    assert kafka.produce("order", [event(c, i, "a%d" % i) for i in range(1, 21)]) == []
    p = consume(*consumer_args(pg, broker, tuning=tuning))
    wait_points(pg, {c: 210}, 30, p)
    broker.cmd("down")
    time.sleep(6)
    assert p.running(), p.log_tail()
    broker.cmd("up")
    assert kafka.produce("order", [event(c, i, "a%d" % i) for i in range(15, 31)]) == []
    wait_points(pg, {c: sum(range(1, 31))}, 40, p)
    assert pg.scalar("SELECT count(*) FROM processed_events") == 30
    assert "brokers are down" in p.log_text() or "Disconnected" in p.log_text()
    assert p.terminate(30) == 0
