"""test_deploy_stack.py — the compose stack as plain processes.

  test_compose_stack_without_engine      the stack run as processes: the postgres
                                         image's init files on a fresh cluster, a
                                         real Kafka of the compose image's version
                                         with the kafka service's settings (the
                                         broker reports each of them back) and the
                                         topics of the kafka-topics one-shot, the
                                         relayer and consumer with the compose
                                         environment; an order placed in psql ends
                                         up as loyalty points

What CI can check of docker/ without a Docker engine (the other parts:
test_deploy_*.py; shared helpers: deploy_helpers.py).
"""

import os
import shutil
import subprocess
import time
import uuid

import pytest

import harness
from harness import wait_until
from deploy_helpers import (_binary, _fail, compose_broker_settings, compose_kafka_images,
                            compose_topic_specs, kafka_sh_default_version, load_compose,
                            postgres_image_cmd_settings, postgres_init_files)
from kafka_cluster import KafkaCluster, KafkaUnavailable
from kafka_fixtures import _unavailable


# --------------------------------------------------------------------------
# the stack as plain processes
# --------------------------------------------------------------------------

class _BaseImageCluster(harness.PgCluster):
    """A cluster whose pg_hba is what the official postgres image ends up
    with for clients on other hosts (here: every TCP client except the
    harness's own postgres user): the base image's catch-all
    `host all all all scram-sha-256` and no "replication" line, which a
    logical replication connection does not need (pg_hba matches it by its
    database)."""

    def _write_hba(self):
        lines = ["local all all trust",
                 "local replication all trust",
                 "host all postgres 127.0.0.1/32 trust",
                 "host replication postgres 127.0.0.1/32 trust",
                 "host all all all scram-sha-256"]
        path = os.path.join(self.datadir, "pg_hba.conf")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        shutil.chown(path, "postgres", "postgres")


def run_postgres_init(pg, pg_env):
    """Runs the init files as the official image's entrypoint does on an
    empty data dir: creates POSTGRES_DB, then *.sql with psql
    ON_ERROR_STOP as POSTGRES_USER into POSTGRES_DB, *.sh executed (they are
    executable) with the container's environment; then reloads pg_hba."""
    db = pg_env.get("POSTGRES_DB", "postgres")
    if db != "postgres":
        pg.connect().cursor().execute('CREATE DATABASE "%s"' % db)
    env = dict(os.environ)
    env.update(pg_env)
    env.update({"POSTGRES_USER": "postgres", "PGDATA": pg.datadir, "PGHOST": pg.dir,
                "PGPORT": str(pg.port)})
    ran = []
    for name, src in postgres_init_files():
        if name.endswith(".sql"):
            argv = ["psql", "-v", "ON_ERROR_STOP=1", "--no-psqlrc", "-q", "--username", "postgres",
                    "--dbname", db, "-f", src]
        elif name.endswith(".sh"):
            argv = ["bash", src]
        else:
            continue
        res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env, timeout=60)
        assert res.returncode == 0, "init file %s failed:\n%s" % (name, res.stdout)
        ran.append(name)
    pg.query("SELECT pg_reload_conf()")
    time.sleep(0.5)
    return ran


# --------------------------------------------------------------------------
# the compose kafka service as a real broker
# --------------------------------------------------------------------------

@pytest.fixture
def compose_kafka(tmp_path):
    """One KRaft node (broker and controller, as the compose service is) of
    tests/tools/kafka.sh's version, with the compose kafka service's
    settings on top of KafkaCluster's (see compose_broker_settings for the
    node identity, listener, quorum and log-dir entries it keeps its own).
    Skipped with the reason, as kafka_fixtures.py's are, when no Kafka can
    be had; OUTBOX_TEST_REQUIRE_KAFKA=1 makes that a failure. The broker's
    log is copied to the test's tmp dir."""
    model, how = load_compose()
    settings, _ = compose_broker_settings(model["services"])
    reason = os.environ.get("OUTBOX_TEST_KAFKA_UNAVAILABLE")
    if reason:
        _unavailable(reason)
    try:
        cluster = KafkaCluster(nodes=1, broker_settings=settings)
    except KafkaUnavailable as e:
        _unavailable(str(e))
    cluster.compose_settings = settings
    try:
        yield cluster
    finally:
        try:
            shutil.copy(cluster.log_path(1), str(tmp_path / "kafka.log"))
        except OSError:
            pass
        cluster.cleanup()


def broker_configs(bootstrap, broker_id):
    """{name: value} of the broker's configuration (DescribeConfigs). A
    name from server.properties that the broker does not know comes back
    without a value (None): Kafka hides it as a possible secret."""
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    res = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    entries = admin.describe_configs([res], request_timeout=30)[res].result(30)
    return {name: e.value for name, e in entries.items()}


def test_compose_stack_without_engine(compose_kafka, tmp_path):
    """The compose stack with processes instead of containers: a cluster
    started with the postgres image's settings and initialised by its init
    files; a real Kafka node of the version kafka.sh resolves (the compose
    image's, test_deploy_compose.py checks), configured with the compose
    kafka service's settings, auto-creation off among them, so the topics
    exist only because the test creates them as the kafka-topics one-shot
    does; the relayer and consumer binaries with exactly the compose
    environment (only host names and ports swapped). An order placed as in
    docs/deploy.md becomes an event on "order" and loyalty points."""
    model, how = load_compose()
    s = model["services"]
    cluster = compose_kafka
    # The broker took every compose setting: it reports each one back with
    # the compose value. A misspelt name would start the broker all the
    # same (Kafka only warns in its log), and come back without a value.
    configs = broker_configs(cluster.bootstrap, 1)
    wrong = {k: (v, configs.get(k, "<not listed>"))
             for k, v in cluster.compose_settings.items() if configs.get(k) != v}
    assert not wrong, "compose kafka settings the broker does not hold (compose, broker): %s" % wrong
    assert configs["auto.create.topics.enable"] == "false", configs["auto.create.topics.enable"]
    assert set(compose_kafka_images(s).values()) == {kafka_sh_default_version()}

    # The kafka-topics one-shot.
    specs = compose_topic_specs(s)
    for name, partitions, rf in specs:
        cluster.create_topic(name, partitions=partitions, rf=rf)

    pg = _BaseImageCluster(settings=postgres_image_cmd_settings(), load_schema=False,
                           name="compose-pg")
    try:
        ran = run_postgres_init(pg, s["postgres"]["environment"])
        assert any(n.endswith(".sh") for n in ran), ran
        assert ran[:3] == ["001_outbox.sql", "002_processed_events.sql", "003_relay_role.sql"], ran
        db = s["postgres"]["environment"]["POSTGRES_DB"]
        assert pg.scalar("SELECT rolsuper OR NOT rolreplication FROM pg_roles "
                         "WHERE rolname = 'outbox_relay'") is False

        def swap(value):
            value = value.replace("host=postgres port=5432", "host=127.0.0.1 port=%d" % pg.port)
            return value.replace("kafka:9092", cluster.bootstrap)

        metrics_port = harness.free_port()
        renv = {k: swap(v) for k, v in s["relayer"]["environment"].items()}
        renv["OUTBOX_RELAY_METRICS_ADDR"] = "127.0.0.1:%d" % metrics_port
        renv["OUTBOX_RELAY_STATUS_INTERVAL"] = "0.5"
        relay_argv = [_binary("outbox-relay")] + [str(a) for a in s["relayer"].get("command") or []]
        relay = harness.Process(relay_argv, str(tmp_path / "relayer.log"), env=renv)

        cenv = {k: swap(v) for k, v in s["consumer"]["environment"].items()}
        consume_argv = [_binary("outbox-consume")] + [str(a) for a in s["consumer"].get("command") or []]
        consumer = harness.Process(consume_argv, str(tmp_path / "consumer.log"), env=cenv)
        try:
            wait_until(lambda: (relay.running() or _fail("relayer", relay)) and
                       (pg.slot_info("outbox_relay") or {}).get("active"), 60,
                       message="the relayer to stream as outbox_relay")
            holder = wait_until(lambda: pg.slot_holder_role("outbox_relay"), 30,
                                message="a walsender to hold the slot")
            assert holder == "outbox_relay", (holder, relay.log_tail())
            customer = str(uuid.uuid4())
            conn = pg.connect(dbname=db)
            cur = conn.cursor()
            for amount in (2500, 1000, 199):
                cur.execute("SELECT place_order(%s, %s)", (customer, amount))
            msgs = harness.read_messages(cluster.bootstrap, "order", expected=3, timeout=60)
            assert len(msgs) == 3, msgs
            assert {m.headers["event_type"] for m in msgs} == {"order.placed"}

            def points():
                if not consumer.running():
                    _fail("consumer", consumer)
                cur.execute("SELECT points FROM loyalty_points WHERE customer_id = %s", (customer,))
                row = cur.fetchone()
                return row and row[0] == 25 + 10 + 1
            wait_until(points, 60, message="loyalty points from the consumer")
            assert relay.terminate() == 0
            assert consumer.terminate() == 0
        finally:
            relay.cleanup()
            consumer.cleanup()
    finally:
        pg.cleanup()
    # Nothing but the one-shot's topics (and Kafka's own) came to exist,
    # each as the one-shot made it.
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0}).list_topics(timeout=10)
    made = {t: (len(tm.partitions), len(tm.partitions[0].replicas))
            for t, tm in md.topics.items() if not t.startswith("__")}
    assert made == {name: (partitions, rf) for name, partitions, rf in specs}, made
