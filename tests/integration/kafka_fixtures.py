"""kafka_fixtures.py — pytest fixtures for a real Apache Kafka (kafka_cluster.py),
imported by conftest.py.

  kafka_cluster      3 brokers (RF 3 possible), shared by every test of the
                     run: the one tests/run.sh started
                     ($OUTBOX_TEST_KAFKA_BOOTSTRAP), else one this xdist
                     worker starts on first use. No process control: a test
                     must not take a shared broker down.
  kafka_single       1 broker (RF 1) shared the same way
                     ($OUTBOX_TEST_KAFKA_SINGLE_BOOTSTRAP, else started here)
  own_kafka_cluster  a 3-broker cluster of this test alone, for faults
                     (.stop/.kill/.start of a broker); its brokers' logs
                     are copied to the test's tmp dir at teardown
  kafka_no_autocreate
                     1 broker with auto.create.topics.enable=false, started
                     by this xdist worker on first use and shared by its
                     tests (names only, like kafka_cluster): a producer's
                     missing topic stays missing until the test creates it
  unique_topic       unique_topic("suffix") -> a topic (and group) name no
                     other test of the run uses

Sharing: the whole run shares one cluster because every worker starting its
own would mean 10 xdist workers x 4 JVMs on a 2-core machine. Tests keep
out of each other's way by names only (unique_topic), so they must not
change broker-wide state.

When Maven Central cannot be reached (tests/tools/kafka.sh exits 3), or
tests/run.sh could not start the shared cluster and says why in
$OUTBOX_TEST_KAFKA_UNAVAILABLE, every test that needs a real Kafka is
skipped with that reason; OUTBOX_TEST_REQUIRE_KAFKA=1 makes it a failure
(CI machines that must have Kafka).
"""

import os
import re
import shutil
import uuid

import pytest

from kafka_cluster import KafkaCluster, KafkaUnavailable, RemoteKafka, shared_settings


def _unavailable(reason):
    msg = "no real Kafka: %s" % reason
    if os.environ.get("OUTBOX_TEST_REQUIRE_KAFKA"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def _shared(env, nodes):
    reason = os.environ.get("OUTBOX_TEST_KAFKA_UNAVAILABLE")
    if reason:
        _unavailable(reason)
    bootstrap = os.environ.get(env)
    if bootstrap:
        yield RemoteKafka(bootstrap, replication=min(3, nodes))
        return
    yield from _own(nodes=nodes, broker_settings=shared_settings(nodes))


def _own(**cluster_kw):
    """A cluster of this process, seen without process control (as one from
    run.sh is); skipped with the reason when Kafka cannot be had."""
    try:
        cluster = KafkaCluster(**cluster_kw)
    except KafkaUnavailable as e:
        _unavailable(str(e))
    try:
        yield RemoteKafka(cluster.bootstrap, replication=cluster.replication)
    finally:
        cluster.cleanup()


@pytest.fixture(scope="session")
def kafka_cluster():
    yield from _shared("OUTBOX_TEST_KAFKA_BOOTSTRAP", 3)


@pytest.fixture(scope="session")
def kafka_single():
    yield from _shared("OUTBOX_TEST_KAFKA_SINGLE_BOOTSTRAP", 1)


@pytest.fixture(scope="session")
def kafka_no_autocreate():
    reason = os.environ.get("OUTBOX_TEST_KAFKA_UNAVAILABLE")
    if reason:
        _unavailable(reason)
    yield from _own(nodes=1, broker_settings={"auto.create.topics.enable": "false"})


@pytest.fixture
def own_kafka_cluster(tmp_path):
    reason = os.environ.get("OUTBOX_TEST_KAFKA_UNAVAILABLE")
    if reason:
        _unavailable(reason)
    try:
        cluster = KafkaCluster(nodes=3)
    except KafkaUnavailable as e:
        _unavailable(str(e))
    try:
        yield cluster
    finally:
        for node in cluster.nodes:
            try:
                shutil.copy(node.log_path, str(tmp_path / ("kafka-node-%d.log" % node.id)))
            except OSError:
                pass
        cluster.cleanup()


@pytest.fixture
def unique_topic(request):
    """unique_topic(suffix="") -> "it-<test>-<suffix>-<8 hex>", legal as a
    topic and group name and under Kafka's 249-character limit."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:60]

    def make(suffix=""):
        parts = ["it", base] + ([suffix] if suffix else []) + [uuid.uuid4().hex[:8]]
        return "-".join(parts)
    return make
