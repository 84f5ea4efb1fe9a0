"""test_deploy_stack.py — the compose stack as plain processes.

  test_compose_stack_without_engine      the stack run as processes: the postgres
                                         image's init files on a fresh cluster, the
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

import harness
from harness import wait_until
from deploy_helpers import (_binary, _fail, compose_topics, load_compose,
                            postgres_image_cmd_settings, postgres_init_files)


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


def test_compose_stack_without_engine(broker, kafka, tmp_path):
    """The compose stack with processes instead of containers: a cluster
    started with the postgres image's settings and initialised by its init
    files, the mock broker with the topics kafka-topics creates, and the
    relayer and consumer binaries with exactly the compose environment
    (only host names and ports swapped). An order placed as in
    docs/deploy.md becomes an event on "order" and loyalty points."""
    model, how = load_compose()
    s = model["services"]
    pg = _BaseImageCluster(settings=postgres_image_cmd_settings(), load_schema=False,
                           name="compose-pg")
    try:
        ran = run_postgres_init(pg, s["postgres"]["environment"])
        assert any(n.endswith(".sh") for n in ran), ran
        assert ran[:3] == ["001_outbox.sql", "002_processed_events.sql", "003_relay_role.sql"], ran
        db = s["postgres"]["environment"]["POSTGRES_DB"]
        assert pg.scalar("SELECT rolsuper OR NOT rolreplication FROM pg_roles "
                         "WHERE rolname = 'outbox_relay'") is False

        for t in compose_topics(s):
            broker.cmd("topic %s 3" % t)

        def swap(value):
            value = value.replace("host=postgres port=5432", "host=127.0.0.1 port=%d" % pg.port)
            return value.replace("kafka:9092", broker.bootstrap)

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
            assert pg.scalar("SELECT usename FROM pg_stat_replication") == "outbox_relay"
            customer = str(uuid.uuid4())
            conn = pg.connect(dbname=db)
            cur = conn.cursor()
            for amount in (2500, 1000, 199):
                cur.execute("SELECT place_order(%s, %s)", (customer, amount))
            msgs = kafka.read("order", expected=3, timeout=60)
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
