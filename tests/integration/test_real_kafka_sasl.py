"""test_real_kafka_sasl.py — fault 6 of the real-Kafka issue: a SASL_SSL
listener of a real Apache Kafka 4.x (kafka_cluster.py's sasl_users: the
broker's own TLS certificate, signed by a CA of the cluster's, SCRAM-SHA-512
and PLAIN users, Kafka's StandardAuthorizer with ACLs).

  test_sasl_ssl_relay_and_consume
      the relayer and outbox-consume connect with -X only (security.protocol,
      sasl.*, ssl.ca.location) and the orders example ends with every
      customer's points exact
  test_wrong_password_is_a_clear_error
      a wrong password: both programs say that Kafka refused the SASL
      credentials and what to check, the relayer confirms nothing past the
      waiting event and keeps running, and no form of either password is in
      any log
  test_scram_sha_512
      SCRAM-SHA-512, the mechanism the issue names. librdkafka before 2.6.1
      (Debian 12 ships 2.0.2) sends a SCRAM proof that Kafka 3.9 and later
      refuse as invalid credentials even when they are right (librdkafka
      #4895, Kafka's strict RFC 5802 nonce check since CVE-2024-56128). With
      such a librdkafka the relayer and `check` (FAIL) must say so and name
      the way out, which must deliver; with a newer one the events must
      arrive
  test_acl_denying_writes_takes_the_authorization_path
      an ACL denying WRITE on one topic to the relayer's principal: events of
      other topics go on arriving, the denied one waits (gauge
      outbox_relay_delivery_waiting{reason="authorization"}), never dead-
      lettered, and after 30 s the relayer stops with exit 1 and the fix;
      once the ACL is gone a restart delivers everything, in order
"""

import os
import re
import types
import uuid

import pytest

import harness
from harness import wait_until
from kafka_cluster import KafkaCluster, KafkaUnavailable
from kafka_fixtures import _unavailable
from consumer_fixtures import consume, consumer_args, consumer_binary, place_orders, shop, wait_points  # noqa: F401
from test_check import expect, run_check
from test_kafka_errors import metric
from test_real_kafka import SLOT
from test_security import assert_no_secret

USER = "relay"
PASSWORD = "Pl4in-S3cr3t%2F@xq"
WRONG = "Wr0ngPl4in-%2F@zz"


@pytest.fixture(scope="module")
def sasl_cluster():
    """One broker (and controller) with a SASL_SSL listener; the relayer's
    principal is User:relay."""
    if os.environ.get("OUTBOX_TEST_KAFKA_UNAVAILABLE"):
        _unavailable(os.environ["OUTBOX_TEST_KAFKA_UNAVAILABLE"])
    try:
        cluster = KafkaCluster(nodes=1, sasl_users={USER: PASSWORD})
    except KafkaUnavailable as e:
        _unavailable(str(e))
    try:
        yield cluster
    finally:
        cluster.cleanup()


def sasl_args(cluster, mechanism="PLAIN", password=PASSWORD):
    return ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=" + mechanism,
            "-X", "sasl.username=" + USER, "-X", "sasl.password=" + password,
            "-X", "ssl.ca.location=" + cluster.ca_file]


def topic_name(what):
    return "sasl-%s-%s" % (what, uuid.uuid4().hex[:8])


def insert(pg, type_, n, aggregate=None):
    aggregate = aggregate or str(uuid.uuid4())
    ids = []
    for i in range(n):
        ids.append(pg.scalar(
            "INSERT INTO public.events_outbox (aggregate_id, type, payload) "
            "VALUES (%s, %s, %s::jsonb) RETURNING id",
            (aggregate, type_, '{"n": %d}' % i)))
    return ids


def ids_of(messages):
    return [int(m.headers["event_id"]) for m in messages]


def streaming(pg, r, timeout=60):
    def active():
        assert r.running(), "relayer exited (rc=%s):\n%s" % (r.returncode, r.log_tail())
        return bool((pg.slot_info(SLOT) or {}).get("active"))
    wait_until(active, timeout, interval=0.2, message="the relayer to stream")


def librdkafka_version(relayer_binary):
    """librdkafka's version as the relayer reports it at start."""
    out = harness._run([relayer_binary, "--version"]).stdout
    m = re.search(r"^librdkafka (\d+)\.(\d+)\.(\d+)", out, re.M)
    assert m, "outbox-relay --version names no librdkafka version:\n" + out
    return tuple(int(x) for x in m.groups())


def test_sasl_ssl_relay_and_consume(sasl_cluster, shop, relayer, consume):
    pg = shop
    topic = sasl_cluster.create_topic(topic_name("orders"), partitions=3)
    r = relayer("--dsn", pg.dsn(), "--brokers", sasl_cluster.sasl_bootstrap, "--topic", topic,
                *sasl_args(sasl_cluster))
    streaming(pg, r)
    # The consumer reads through the SASL_SSL listener too (consumer_args
    # takes its --brokers from .bootstrap).
    over_sasl = types.SimpleNamespace(bootstrap=sasl_cluster.sasl_bootstrap)
    con = consume(*consumer_args(pg, over_sasl, topics=topic, group=topic_name("group"),
                                 tuning="defaults", extra=sasl_args(sasl_cluster)))
    customers = [str(uuid.uuid4()) for _ in range(4)]
    expected = {}
    place_orders(pg, customers, 20, expected)
    wait_points(pg, expected, 90, con)
    assert pg.scalar("SELECT count(*) FROM processed_events") == 20
    assert r.running() and con.running()
    for proc in (r, con):
        proc.terminate()
        assert_no_secret(proc.log_text(), [PASSWORD], "a log")


def refused_login(proc, mechanism):
    """Waits for the advice kafka_conf_auth_advice() writes."""
    proc.wait_for_log(r"Kafka refused the SASL credentials \(sasl\.mechanisms=%s, "
                      r"sasl\.username=%s\): check sasl\.username and sasl\.password"
                      % (re.escape(mechanism), USER), timeout=60)


def test_wrong_password_is_a_clear_error(sasl_cluster, pg, relayer, consume):
    topic = sasl_cluster.create_topic(topic_name("wrong"))
    r = relayer("--dsn", pg.dsn(), "--brokers", sasl_cluster.sasl_bootstrap, "--topic", topic,
                "--status-interval", "1", *sasl_args(sasl_cluster, password=WRONG))
    streaming(pg, r)
    before = pg.confirmed_flush_lsn(SLOT)
    insert(pg, "wrong.x", 3)
    end = pg.scalar("SELECT pg_current_wal_lsn()")
    refused_login(r, "PLAIN")
    # Waiting, not exiting; and nothing confirmed past the events Kafka
    # never took (a status update goes out every second).
    r.assert_running_for(5)
    assert pg.confirmed_flush_lsn(SLOT) < harness.lsn_to_int(end), \
        "the slot moved past events no broker acknowledged (was %s)" % harness.int_to_lsn(before)
    assert harness.read_messages(sasl_cluster.bootstrap, topic, expected=0, timeout=3) == []
    con = consume("--brokers", sasl_cluster.sasl_bootstrap, "--group", topic_name("group"),
                  "--topics", topic, "--dsn", pg.dsn(), "--consumer", "c1",
                  "--apply", "SELECT 1",
                  *sasl_args(sasl_cluster, password=WRONG))
    refused_login(con, "PLAIN")
    for proc in (r, con):
        if proc.running():
            proc.terminate(60)  # the relayer waits 30 s for its deliveries
        assert_no_secret(proc.log_text(), [WRONG, PASSWORD], "a log")


def test_scram_sha_512(sasl_cluster, pg, relayer, relayer_binary):
    topic = sasl_cluster.create_topic(topic_name("scram"))
    r = relayer("--dsn", pg.dsn(), "--brokers", sasl_cluster.sasl_bootstrap, "--topic", topic,
                *sasl_args(sasl_cluster, mechanism="SCRAM-SHA-512"))
    streaming(pg, r)
    ids = insert(pg, "scram.x", 3)
    version = librdkafka_version(relayer_binary)
    if version < (2, 6, 1):
        # The right password, refused: the log must say why, at the start
        # and at the refusal, and name the ways out.
        r.wait_for_log(r"the Kafka producer uses sasl\.mechanisms=SCRAM-SHA-512 with librdkafka "
                       r"%d\.%d\.%d: brokers of Kafka 3\.9 and later refuse" % version,
                       timeout=10)
        refused_login(r, "SCRAM-SHA-512")
        r.wait_for_log(r"is older than 2\.6\.1, and brokers of Kafka 3\.9 and later refuse its "
                       r"SCRAM proof .*sasl\.mechanisms=PLAIN over SASL_SSL", timeout=10)
        assert r.running()
        # check says the same, and fails.
        rep = run_check(relayer_binary, "--dsn", pg.dsn(), "--brokers",
                        sasl_cluster.sasl_bootstrap, "--topic", topic,
                        *sasl_args(sasl_cluster, mechanism="SCRAM-SHA-512"))
        item = expect(rep, "kafka", "FAIL", detail="SASL authentication",
                      fix="is older than 2.6.1")
        assert "sasl.mechanisms=PLAIN over SASL_SSL" in item["fix"], item
        assert rep.rc == 1, rep
        assert_no_secret(rep.stdout + rep.stderr, [PASSWORD], "check's output")
        # The way out the log names works with the same user and password.
        # (A stop waits --shutdown-timeout, 30 s, for the refused deliveries.)
        r.terminate(60)
        r = relayer("--dsn", pg.dsn(), "--brokers", sasl_cluster.sasl_bootstrap, "--topic",
                    topic, *sasl_args(sasl_cluster, mechanism="PLAIN"))
    got = harness.read_messages(sasl_cluster.bootstrap, topic, expected=3, timeout=60)
    assert ids_of(got) == ids
    r.terminate()
    assert_no_secret(r.log_text(), [PASSWORD], "the relayer's log")


def test_acl_denying_writes_takes_the_authorization_path(sasl_cluster, pg, relayer):
    allowed = sasl_cluster.create_topic(topic_name("allowed"))
    denied = sasl_cluster.create_topic(topic_name("denied"))
    sasl_cluster.acl("add", "User:" + USER, denied, "WRITE", "DENY")
    try:
        port = harness.free_port()
        args = ["--dsn", pg.dsn(), "--brokers", sasl_cluster.sasl_bootstrap,
                "--topic", "{type}", "--on-poison", "dead-letter",
                "--metrics-addr", "127.0.0.1:%d" % port, *sasl_args(sasl_cluster)]
        r = relayer(*args)
        streaming(pg, r)
        first = insert(pg, allowed, 2)
        stuck = insert(pg, denied, 2)
        got = harness.read_messages(sasl_cluster.bootstrap, allowed, expected=2, timeout=60)
        assert ids_of(got) == first
        r.wait_for_log(r"authorization", timeout=60)
        wait_until(lambda: metric(port, 'outbox_relay_delivery_waiting{reason="authorization"}')
                   == 1, 30, interval=0.5, message="the authorization gauge")
        # Permanent after 30 s without a delivery getting through: exit 1
        # with the fix, never a dead letter.
        wait_until(lambda: not r.running(), 90, interval=0.5, message="the relayer to stop")
        assert r.returncode == 1, "rc=%s:\n%s" % (r.returncode, r.log_tail())
        # The 30 s are a floor: the refusal is judged at the rewinds, whose
        # pauses double.
        m = r.wait_for_log(r"still refused after (\d+) s .*not dead-lettered.*grant the ACL",
                           timeout=1)
        assert 30 <= int(m.group(1)) <= 90, m.group(0)
        topics = harness.list_topics(sasl_cluster.bootstrap)
        for t in topics:
            if "dead" in t:
                assert harness.read_messages(sasl_cluster.bootstrap, t, expected=0,
                                             timeout=3) == [], "dead-lettered: %s" % t
    finally:
        sasl_cluster.acl("remove", "User:" + USER, denied, "WRITE", "DENY")
    # The ACL granted, a restart delivers the waiting events, in order.
    r2 = relayer(*args)
    got = harness.read_messages(sasl_cluster.bootstrap, denied, expected=2, timeout=90)
    assert ids_of(got) == stuck
    r2.terminate()
    for proc in (r, r2):
        assert_no_secret(proc.log_text(), [PASSWORD], "a log")
