"""test_check.py — `outbox-relay check`, the preflight, against real
PostgreSQL 15 servers misconfigured in each of the ways it looks for, and
the mock Kafka cluster: every test asserts that the check about that
mistake (and only the ones it implies) FAILs or WARNs with its fix, and
the exit code (1 on any FAIL, 0 otherwise). The healthy setup, with no
tuning flag, PASSes everything; --format json is the same report as an
array of {check, status, detail, fix}.

A "healthy" server here is PostgreSQL's defaults plus what
docs/operations.md asks for: wal_level = logical (the harness's) and
max_slot_wal_keep_size set; wal_sender_timeout at PostgreSQL's default 60 s
(the harness's clusters use 10 s, which the default --status-interval of
10 s is not well below: that is one of the failures tested).
"""

import json
import os
import re
import subprocess

import pytest

import harness

pytestmark = pytest.mark.real_kafka  # on the shared real Kafka (conftest.py)

# Only the tests where the plugin changes what is checked run once per
# plugin (conftest.py's `plugin` fixture); the others run with the default.
per_plugin = pytest.mark.usefixtures("plugin")

HEALTHY = {"wal_sender_timeout": "60s", "max_slot_wal_keep_size": "1GB"}
LINE = re.compile(r"^(PASS|WARN|FAIL) (\S+) +(.*?)(?:  fix: (.*))?$")


class Report:
    def __init__(self, res, fmt):
        self.rc = res.returncode
        self.stdout = res.stdout
        self.stderr = res.stderr
        self.items = {}
        if fmt == "json":
            for it in json.loads(res.stdout):
                self.items[it["check"]] = it
        else:
            for line in res.stdout.splitlines():
                m = LINE.match(line)
                if m:
                    self.items[m.group(2)] = {"check": m.group(2), "status": m.group(1),
                                              "detail": m.group(3), "fix": m.group(4)}

    def status(self, name):
        return self.items[name]["status"] if name in self.items else None

    def not_passed(self):
        return {k: v["status"] for k, v in self.items.items() if v["status"] != "PASS"}

    def __repr__(self):
        return "rc=%d\n%s\n%s" % (self.rc, self.stdout, self.stderr[-2000:])


def run_check(relayer_binary, *args, fmt="text", env=None):
    """Runs `outbox-relay check` (the test's plugin, as every daemon of a
    suite gets it) and parses its report."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    full_env["OUTBOX_RELAY_PLUGIN"] = harness.plugin()
    full_env.update(env or {})
    argv = [relayer_binary, "check"] + [str(a) for a in args]
    if fmt == "json":
        argv += ["--format", "json"]
    if harness.current_names is not None:  # the shared real Kafka: the test's topic names
        argv, full_env = harness.current_names.rewrite(argv, full_env)
    res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=120, env=full_env)
    # under a sanitizer build (OUTBOX_RELAY_BUILD=build-asan) a finding fails the test
    assert not harness.SANITIZER_REPORT.search(res.stderr), res.stderr[-4000:]
    return Report(res, fmt)


def expect(report, name, status, detail=None, fix=None):
    """The item name has status, its detail and fix contain the given texts."""
    item = report.items.get(name)
    assert item is not None, "no %s check in %r" % (name, report)
    assert item["status"] == status, "%s: %s, expected %s\n%r" % (name, item["status"], status,
                                                                   report)
    if detail is not None:
        assert detail in item["detail"], "%s detail %r lacks %r" % (name, item["detail"], detail)
    if fix is not None:
        assert item["fix"] and fix in item["fix"], "%s fix %r lacks %r" % (name, item["fix"], fix)
    return item


def apply_fix(pg, item, user="postgres"):
    """Runs the SQL of a fix (up to a trailing "(as ...)" remark) as user."""
    sql = item["fix"].split("; (")[0]
    import psycopg2
    conn = psycopg2.connect(pg.dsn(user=user), connect_timeout=10)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(sql)
    conn.close()


def insert_event(pg, payload='{"a": 1}', type_="order.placed", table="events_outbox"):
    pg.query("INSERT INTO %s (aggregate_id, type, payload) VALUES (gen_random_uuid(), %%s, "
             "%%s::jsonb)" % table, (type_, payload))


@pytest.fixture
def healthy(pg_factory, broker):
    """A server and broker on which every check passes: an event in the
    outbox and its topic created."""
    pg = pg_factory(settings=HEALTHY)
    insert_event(pg)
    broker.create_topic("order")
    return pg


# --------------------------------------------------------------------------
# healthy
# --------------------------------------------------------------------------

def test_healthy_setup_passes_every_check(relayer_binary, healthy, broker, plugin):
    r = run_check(relayer_binary, "--dsn", healthy.dsn(), "--brokers", broker.bootstrap)
    assert r.rc == 0, r
    assert r.not_passed() == {}, r
    expected = {"server", "wal_level", "role", "replication_slots", "wal_senders", "plugin",
                "max_slot_wal_keep_size", "wal_sender_timeout", "table", "columns", "logged",
                "indexes", "privileges", "bookkeeping", "slot", "kafka", "topics",
                "message_size"}
    if plugin == "pgoutput":
        expected.add("publication")
    if not isinstance(broker, harness.MockBroker):
        expected.add("replication")  # DescribeConfigs, which the mock does not answer
    assert set(r.items) == expected, r
    assert "check: %d passed, 0 warnings, 0 failed" % len(expected) in r.stdout
    expect(r, "plugin", "PASS", detail=plugin)
    # the temporary slot of the wal2json test is gone
    assert healthy.scalar("SELECT count(*) FROM pg_replication_slots") == 0

    # An existing slot of the right plugin, unused: still healthy, its lag said.
    healthy.create_slot()
    insert_event(healthy)
    r = run_check(relayer_binary, "--dsn", healthy.dsn(), "--brokers", broker.bootstrap)
    assert r.rc == 0 and r.not_passed() == {}, r
    expect(r, "slot", "PASS", detail="inactive, wal_status reserved, lag ")
    expect(r, "replication_slots", "PASS", detail="the relayer's slot exists already")


@per_plugin
def test_json_format(relayer_binary, healthy, broker):
    r = run_check(relayer_binary, "--dsn", healthy.dsn(), "--brokers", broker.bootstrap,
                  fmt="json")
    assert r.rc == 0, r
    arr = json.loads(r.stdout)
    assert isinstance(arr, list) and len(arr) >= 18
    for it in arr:
        assert set(it) == {"check", "status", "detail", "fix"}, it
        assert it["status"] == "PASS" and it["fix"] is None, it
    # a failing one: the fix is a string and the exit code 1
    healthy.query("ALTER TABLE events_outbox SET UNLOGGED")
    r = run_check(relayer_binary, "--dsn", healthy.dsn(), "--brokers", broker.bootstrap,
                  fmt="json")
    assert r.rc == 1, r
    logged = [it for it in json.loads(r.stdout) if it["check"] == "logged"][0]
    assert logged["status"] == "FAIL"
    assert "ALTER TABLE public.events_outbox SET LOGGED;" in logged["fix"]


def test_bad_usage_exits_2(relayer_binary):
    r = run_check(relayer_binary, "--format", "yaml", "--dsn", "dbname=x")
    assert r.rc == 2 and "--format" in r.stderr, r
    r = run_check(relayer_binary)
    assert r.rc == 2 and "--dsn is required" in r.stderr, r


def test_no_brokers_skips_kafka_with_a_warning(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    insert_event(pg, payload='{"p": "%s"}' % ("x" * 3000))
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "-X", "message.max.bytes=2000")
    assert r.rc == 1, r
    expect(r, "kafka", "WARN", detail="skipped", fix="--brokers")
    assert "topics" not in r.items
    # the producer's own limit is still checked
    expect(r, "message_size", "FAIL", detail="the producer's message.max.bytes")
    assert r.not_passed() == {"kafka": "WARN", "message_size": "FAIL"}, r


def test_cannot_connect(relayer_binary):
    port = harness.free_port()
    r = run_check(relayer_binary, "--dsn", "host=127.0.0.1 port=%d dbname=app user=u "
                  "password=Sekr1tPw" % port)
    assert r.rc == 1, r
    expect(r, "server", "FAIL", detail="cannot connect", fix="--dsn")
    assert "Sekr1tPw" not in r.stdout + r.stderr


# --------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------

@per_plugin
def test_wal_level_replica(relayer_binary, pg_factory):
    pg = pg_factory(settings=dict(HEALTHY, wal_level="replica"))
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    assert r.rc == 1, r
    expect(r, "wal_level", "FAIL", detail="wal_level = replica",
           fix="ALTER SYSTEM SET wal_level = logical")
    if harness.plugin() == "wal2json":
        expect(r, "plugin", "WARN", detail="wal_level is not logical")


@per_plugin
def test_no_free_replication_slot(relayer_binary, pg_factory):
    pg = pg_factory(settings=dict(HEALTHY, max_replication_slots="1"))
    pg.query("SELECT pg_create_physical_replication_slot('someone_else')")
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    assert r.rc == 1, r
    expect(r, "replication_slots", "FAIL", detail="max_replication_slots = 1, 1 in use, 0 free",
           fix="raise max_replication_slots")
    if harness.plugin() == "wal2json":
        expect(r, "plugin", "WARN", detail="no replication slot is free")


def test_no_free_wal_sender(relayer_binary, pg_factory):
    pg = pg_factory(settings=dict(HEALTHY, max_wal_senders="0"))
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    assert r.rc == 1, r
    expect(r, "wal_senders", "FAIL", detail="max_wal_senders = 0", fix="raise max_wal_senders")
    expect(r, "role", "FAIL", detail="a logical replication connection fails")


def test_max_slot_wal_keep_size_unset_warns(relayer_binary, pg_factory, broker):
    pg = pg_factory(settings={"wal_sender_timeout": "60s"})  # keep size: PostgreSQL's -1
    insert_event(pg)
    broker.create_topic("order")
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--brokers", broker.bootstrap)
    assert r.rc == 0, r  # a warning only
    expect(r, "max_slot_wal_keep_size", "WARN", detail="-1 (unlimited)",
           fix="ALTER SYSTEM SET max_slot_wal_keep_size")
    assert r.not_passed() == {"max_slot_wal_keep_size": "WARN"}, r


def test_wal_sender_timeout_against_status_interval(relayer_binary, pg_factory):
    pg = pg_factory(settings={"max_slot_wal_keep_size": "1GB", "wal_sender_timeout": "10s"})
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    expect(r, "wal_sender_timeout", "FAIL", detail="wal_sender_timeout = 10.0 s, "
           "--status-interval = 10.0 s", fix="lower --status-interval below 5.0 s")
    assert r.rc == 1
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--status-interval", "7")
    expect(r, "wal_sender_timeout", "WARN", fix="--status-interval")
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--status-interval", "4")
    expect(r, "wal_sender_timeout", "PASS")


@per_plugin
@pytest.mark.plugins("wal2json")
def test_wal2json_missing(relayer_binary, pg_factory, public_tmp_dir):
    pg = pg_factory(settings=dict(HEALTHY, dynamic_library_path=public_tmp_dir()))
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    assert r.rc == 1, r
    expect(r, "plugin", "FAIL", detail="does not load", fix="install postgresql-15-wal2json")
    assert pg.scalar("SELECT count(*) FROM pg_replication_slots") == 0


@per_plugin
@pytest.mark.plugins("wal2json")
def test_plugin_test_does_not_wait_for_a_long_transaction(relayer_binary, pg_factory):
    """Creating a slot waits for every running transaction with an xid: the
    plugin test gives up after check's lock timeout (2 s; a WARN), and the
    checks after it still run on the same connection."""
    pg = pg_factory(settings=HEALTHY)
    long_tx = pg.connect(autocommit=False)
    with long_tx.cursor() as cur:
        cur.execute("INSERT INTO events_outbox (aggregate_id, type, payload) "
                    "VALUES (gen_random_uuid(), 'order.placed', '{}')")
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    long_tx.rollback()
    expect(r, "plugin", "WARN", detail="canceling statement due to lock timeout",
           fix="long-running transaction")
    expect(r, "max_slot_wal_keep_size", "PASS")
    expect(r, "columns", "PASS")
    assert pg.scalar("SELECT count(*) FROM pg_replication_slots") == 0


@pytest.mark.mock_kafka("the verdict when the brokers cannot say whether they create topics "
                        "(the mock has no DescribeConfigs)")
def test_empty_outbox(relayer_binary, pg_factory, broker):
    """No event yet: nothing names a topic, so whether the brokers create
    topics decides, and the mock cannot tell (no DescribeConfigs)."""
    pg = pg_factory(settings=HEALTHY)
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--brokers", broker.bootstrap)
    assert r.rc == 0, r
    expect(r, "message_size", "PASS", detail="the outbox is empty")
    expect(r, "topics", "WARN", detail="the outbox holds no event", fix="create the topic")
    assert r.not_passed() == {"topics": "WARN"}, r


# --------------------------------------------------------------------------
# the role
# --------------------------------------------------------------------------

def test_role_without_replication(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    pg.create_role("app_ro", replication=False)
    r = run_check(relayer_binary, "--dsn", pg.dsn(user="app_ro"))
    assert r.rc == 1, r
    expect(r, "role", "FAIL", detail="neither REPLICATION nor SUPERUSER",
           fix='ALTER ROLE "app_ro" REPLICATION')


@per_plugin
def test_least_privilege_role_of_sql_003_passes(relayer_binary, pg_factory, broker):
    """The role sql/003_relay_role.sql creates has every privilege check
    wants (with pgoutput, the owner ran sql/008_publication.sql)."""
    pg = pg_factory(settings=HEALTHY)
    pg.prepare_for_unprivileged_relayer()
    insert_event(pg)
    broker.create_topic("order")
    r = run_check(relayer_binary, "--dsn", pg.dsn(user="outbox_relay"), "--brokers",
                  broker.bootstrap)
    assert r.rc == 0 and r.not_passed() == {}, r
    expect(r, "role", "PASS", detail="role outbox_relay has REPLICATION")


def test_role_without_delete_or_bookkeeping(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    pg.create_role("half", grant_outbox=False)
    pg.query("GRANT SELECT ON public.events_outbox TO half")
    r = run_check(relayer_binary, "--dsn", pg.dsn(user="half"))
    assert r.rc == 1, r
    item = expect(r, "privileges", "FAIL", detail="may not DELETE",
                  fix='GRANT DELETE ON "public"."events_outbox" TO "half"')
    expect(r, "bookkeeping", "WARN", detail="public.outbox_relay_slots is not writable",
           fix="GRANT SELECT, INSERT, UPDATE ON public.outbox_relay_slots")
    # the reaper off: no DELETE needed
    r = run_check(relayer_binary, "--dsn", pg.dsn(user="half"), "--retention", "0")
    expect(r, "privileges", "PASS")
    apply_fix(pg, item)  # as the owner, as the fix says
    r = run_check(relayer_binary, "--dsn", pg.dsn(user="half"))
    expect(r, "privileges", "PASS", detail="may SELECT and DELETE")


def test_bookkeeping_tables_missing(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    pg.query("DROP TABLE public.outbox_relay_reaper_marks")
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    expect(r, "bookkeeping", "WARN", detail="public.outbox_relay_reaper_marks is missing",
           fix="psql -f sql/003_relay_role.sql")
    pg.query("DROP TABLE public.outbox_relay_slots")
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--backfill", "pending")
    assert r.rc == 1, r
    expect(r, "bookkeeping", "FAIL", detail="--backfill cannot run")


# --------------------------------------------------------------------------
# the outbox table
# --------------------------------------------------------------------------

def test_table_missing(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--table", "public.nope")
    assert r.rc == 1, r
    expect(r, "table", "FAIL", detail="public.nope does not exist", fix="sql/001_outbox.sql")
    assert "columns" not in r.items


def test_table_missing_a_column(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    pg.query("ALTER TABLE events_outbox DROP COLUMN created_at CASCADE")
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    assert r.rc == 1, r
    item = expect(r, "columns", "FAIL", detail='"created_at" is missing',
                  fix='ALTER TABLE "public"."events_outbox" ADD COLUMN "created_at" timestamp '
                      'with time zone;')
    apply_fix(pg, item)  # the fix as given works
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    expect(r, "columns", "PASS")


def test_column_type_the_plugin_cannot_relay(relayer_binary, pg_factory, plugin):
    """A bigint aggregate_id: wal2json sends it as a JSON number, which the
    decoder refuses; pgoutput sends every value as text."""
    pg = pg_factory(settings=HEALTHY)
    pg.query("CREATE TABLE public.alt_outbox (id bigserial PRIMARY KEY, aggregate_id bigint, "
             "type text, payload jsonb, created_at timestamptz DEFAULT now()); "
             "CREATE INDEX ON public.alt_outbox (created_at)")
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--table", "public.alt_outbox",
                  "--publication", "alt_pub")
    if plugin == "wal2json":
        item = expect(r, "columns", "FAIL", detail='"aggregate_id" is bigint, which wal2json '
                      'sends as a JSON number',
                      fix='ALTER COLUMN "aggregate_id" TYPE text USING "aggregate_id"::text;')
        apply_fix(pg, item)
        r = run_check(relayer_binary, "--dsn", pg.dsn(), "--table", "public.alt_outbox")
        expect(r, "columns", "PASS")
    else:
        expect(r, "columns", "PASS")


def test_unlogged_table(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    pg.query("ALTER TABLE events_outbox SET UNLOGGED")
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    assert r.rc == 1, r
    item = expect(r, "logged", "FAIL", detail="1 table(s) of the outbox are UNLOGGED",
                  fix="ALTER TABLE public.events_outbox SET LOGGED;")
    apply_fix(pg, item)
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    expect(r, "logged", "PASS")


def test_unlogged_partition(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    pg.query("CREATE TABLE public.p_outbox (id bigserial, aggregate_id uuid, type text, "
             "payload jsonb, created_at timestamptz NOT NULL DEFAULT now(), "
             "PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at); "
             "CREATE INDEX ON public.p_outbox (created_at); "
             "CREATE TABLE public.p_outbox_old PARTITION OF public.p_outbox "
             "FOR VALUES FROM ('2000-01-01') TO ('2020-01-01'); "
             "CREATE UNLOGGED TABLE public.p_outbox_new PARTITION OF public.p_outbox "
             "FOR VALUES FROM ('2020-01-01') TO ('2100-01-01')")
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--table", "public.p_outbox",
                  "--publication", "p_pub")
    assert r.rc == 1, r
    expect(r, "table", "PASS", detail="(partitioned)")
    expect(r, "logged", "FAIL", fix="ALTER TABLE public.p_outbox_new SET LOGGED;")
    assert "p_outbox_old" not in r.items["logged"]["fix"]


def test_no_created_at_index(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    pg.query("DROP INDEX events_outbox_created_at_idx")
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    item = expect(r, "indexes", "WARN", detail="no index leads with created_at",
                  fix='CREATE INDEX CONCURRENTLY ON "public"."events_outbox" (created_at);')
    apply_fix(pg, item)
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    expect(r, "indexes", "PASS")


# --------------------------------------------------------------------------
# the slot and the publication
# --------------------------------------------------------------------------

def test_slot_of_another_plugin(relayer_binary, pg_factory, plugin):
    pg = pg_factory(settings=HEALTHY)
    other = "pgoutput" if plugin == "wal2json" else "wal2json"
    pg.create_slot(plugin=other)
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    assert r.rc == 1, r
    expect(r, "slot", "FAIL", detail="has output plugin %s, the relayer runs with --plugin %s"
           % (other, plugin), fix="run with --plugin %s" % other)


def test_dropped_slot_with_history(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    pg.query("INSERT INTO public.outbox_relay_slots (slot_name, created_lsn) "
             "VALUES ('outbox_relay', '0/1000')")
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    assert r.rc == 1, r
    expect(r, "slot", "FAIL", detail="was dropped or lost", fix="--recreate-slot")
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--recreate-slot")
    assert r.rc == 0, r
    expect(r, "slot", "WARN", detail="--recreate-slot", fix="--backfill pending")


@per_plugin
@pytest.mark.plugins("pgoutput")
def test_publication_not_covering_the_table(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    pg.query("CREATE TABLE public.other (id int PRIMARY KEY); "
             "CREATE PUBLICATION outbox_relay FOR TABLE public.other")
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    assert r.rc == 1, r
    item = expect(r, "publication", "FAIL", detail="does not publish the outbox table",
                  fix='ALTER PUBLICATION "outbox_relay" ADD TABLE "public"."events_outbox"')
    apply_fix(pg, item)
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    expect(r, "publication", "PASS")


@per_plugin
@pytest.mark.plugins("pgoutput")
def test_publication_missing_and_role_may_not_create_it(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)  # sql/003's role, and nobody ran sql/008
    r = run_check(relayer_binary, "--dsn", pg.dsn(user="outbox_relay"))
    assert r.rc == 1, r
    expect(r, "publication", "FAIL", detail="may not create it",
           fix='CREATE PUBLICATION "outbox_relay" FOR TABLE "public"."events_outbox"')


@per_plugin
@pytest.mark.plugins("wal2json")
def test_no_publication_check_for_wal2json(relayer_binary, pg_factory):
    pg = pg_factory(settings=HEALTHY)
    r = run_check(relayer_binary, "--dsn", pg.dsn())
    assert "publication" not in r.items, r


# --------------------------------------------------------------------------
# Kafka
# --------------------------------------------------------------------------

@pytest.mark.mock_kafka("a cluster that is down: the mock's \"down\"")
def test_broker_down(relayer_binary, healthy, broker):
    broker.cmd("down")
    r = run_check(relayer_binary, "--dsn", healthy.dsn(), "--brokers", broker.bootstrap)
    assert r.rc == 1, r
    expect(r, "kafka", "FAIL", detail="no metadata from Kafka at %s" % broker.bootstrap,
           fix="check --brokers")
    assert "topics" not in r.items


def test_broker_unreachable_port(relayer_binary, healthy):
    brokers = "127.0.0.1:%d" % harness.free_port()
    r = run_check(relayer_binary, "--dsn", healthy.dsn(), "--brokers", brokers)
    assert r.rc == 1, r
    item = expect(r, "kafka", "FAIL", detail="no metadata from Kafka at %s within 10 s" % brokers)
    assert "Connection refused" in item["detail"], item  # librdkafka's first error
    # the producer's record limit is still checked
    expect(r, "message_size", "PASS", detail="the producer's message.max.bytes")


@pytest.mark.mock_kafka("the verdict when the brokers cannot say whether they create "
                        "topics (the mock has no DescribeConfigs); a real cluster's answer "
                        "is test_real_kafka_faults.py's")
def test_topic_missing_and_auto_create_unknown(relayer_binary, pg_factory, broker):
    """The mock cluster has no DescribeConfigs: whether it creates topics is
    unknown, which is a warning naming the missing topic."""
    pg = pg_factory(settings=HEALTHY)
    insert_event(pg, type_="invoice.sent")
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--brokers", broker.bootstrap)
    assert r.rc == 0, r
    expect(r, "topics", "WARN", detail="missing: invoice (auto.create.topics.enable unknown",
           fix="kafka-topics.sh --create")
    # check created nothing
    assert "invoice" not in harness.list_topics(broker.bootstrap)
    # a fixed --topic and the dead-letter topic are looked for too
    broker.create_topic("events")
    r = run_check(relayer_binary, "--dsn", pg.dsn(), "--brokers", broker.bootstrap,
                  "--topic", "events", "--on-poison", "dead-letter")
    expect(r, "topics", "WARN", detail="missing: outbox.dead-letter")
    assert "present: events" in r.items["topics"]["detail"]


def test_payload_larger_than_message_max_bytes(relayer_binary, healthy, broker):
    insert_event(healthy, payload='{"blob": "%s"}' % ("x" * 5000))
    r = run_check(relayer_binary, "--dsn", healthy.dsn(), "--brokers", broker.bootstrap,
                  "-X", "message.max.bytes=4000")
    assert r.rc == 1, r
    item = expect(r, "message_size", "FAIL", detail="the largest payload (5012 bytes, of all 2 "
                  "rows)", fix="-X message.max.bytes to at least 6036")
    assert "exceeds 4000 bytes (the producer's message.max.bytes)" in item["detail"]
    assert r.not_passed() == {"message_size": "FAIL"}, r


@per_plugin
def test_password_never_printed(relayer_binary, pg_factory, broker):
    pg = pg_factory(settings=HEALTHY, password_auth="scram-sha-256")
    pg.query("ALTER ROLE outbox_relay PASSWORD 'Pw-0f-the-relayer'")
    pg.prepare_for_unprivileged_relayer()
    dsn = pg.dsn(user="outbox_relay", password="Pw-0f-the-relayer")
    r = run_check(relayer_binary, "--dsn", dsn, "--brokers", broker.bootstrap)
    expect(r, "role", "PASS")
    assert "Pw-0f-the-relayer" not in r.stdout + r.stderr
    bad = pg.dsn(user="outbox_relay", password="Wr0ng-pw-guess")
    r = run_check(relayer_binary, "--dsn", bad, fmt="json")
    expect(r, "server", "FAIL", detail="password authentication failed")
    assert "Wr0ng-pw-guess" not in r.stdout + r.stderr
