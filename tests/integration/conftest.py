"""conftest.py — fixtures for the integration tests of outbox-relay.

  pg_factory   start extra PostgreSQL clusters with other settings:
               pg_factory(settings={"wal_level": "replica"}, password_auth="scram-sha-256")
  pg           one fresh cluster per test (wal_level=logical, schema loaded)
  broker       a fresh build/mock-broker per test (.bootstrap, .cmd("down")); in
               a suite marked real_kafka, the shared real cluster with the
               test's names prefixed (real_broker.py), unless the test is
               marked mock_kafka("why")
  relayer      factory: relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, env={...})
               starts build/outbox-relay; returns a harness.Process
  relay_args   the usual "--dsn ... --brokers ..." pair for pg and broker
  kafka        read-back helpers bound to the broker: kafka.read(topic, expected, timeout),
               kafka.topics()
  kafka_cluster, kafka_single, own_kafka_cluster, unique_topic
               a real Apache Kafka (KRaft): see kafka_fixtures.py
  plugin       the output plugin of the test's relayers: a suite with
               `pytestmark = pytest.mark.usefixtures("plugin")` runs every test
               once per plugin (harness.PLUGINS); @pytest.mark.plugins("wal2json")
               restricts one test to the plugins it is about
  pg_major     the PostgreSQL major of the test's clusters (15, 17, 18): a suite
               with `pytestmark = pytest.mark.usefixtures("plugin", "pg_major")`
               runs every test once per major of $OUTBOX_TEST_PG_MAJORS
               (default "15 17 18"; ids like test_x[wal2json-pg17]);
               @pytest.mark.pg_majors(15) restricts one test (a test
               without pg or pg_factory runs once, on the first major,
               unless it names its majors so). A major whose
               binaries are missing (tests/tools/pgtrees.sh could not build
               its tree) is SKIPPED with the reason. Tests without pg_major
               run on 15 only. A suite marked plugin_per_major runs both
               plugins on 15 but one on each newer major (PLUGIN_ON_MAJOR),
               unless OUTBOX_TEST_PG_ALL_PLUGINS=1.

Run: cmake --build build && /usr/bin/python3 -m pytest -q tests/integration
The build dir is $OUTBOX_RELAY_BUILD (default <repo>/build).
"""

import os
import re
import shutil
import signal
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import harness_base  # noqa: E402
# A real Apache Kafka: kafka_cluster, kafka_single, own_kafka_cluster, unique_topic.
from kafka_fixtures import (kafka_cluster, kafka_no_autocreate, kafka_single,  # noqa: E402,F401
                            own_kafka_cluster, unique_topic)
from real_broker import RealBroker  # noqa: E402


def pg_majors():
    """The majors the multi-major suites run on: $OUTBOX_TEST_PG_MAJORS
    (spaces or commas), default all we support."""
    text = os.environ.get("OUTBOX_TEST_PG_MAJORS") or "15 17 18"
    return [int(m) for m in text.replace(",", " ").split()]


# The plugin a plugin_per_major suite runs with on each newer major: both
# plugins still meet both newer majors across the suites so marked, at half
# the cost (tests/run.sh's time budget). Suites whose subject is decoding
# (core, pgoutput, partitions, layouts) run every plugin on every major.
PLUGIN_ON_MAJOR = {17: "pgoutput", 18: "wal2json"}


def _test_majors(metafunc):
    only = metafunc.definition.get_closest_marker("pg_majors")
    majors = [m for m in pg_majors() if only is None or m in only.args]
    if only is None and not {"pg", "pg_factory"} & set(metafunc.fixturenames):
        majors = majors[:1]  # starts no server: once is enough
    return majors


def pytest_generate_tests(metafunc):
    names = metafunc.fixturenames
    plugins = None
    if "plugin" in names:
        only = metafunc.definition.get_closest_marker("plugins")
        plugins = list(only.args if only else harness.PLUGINS)
    if ("plugin" in names and "pg_major" in names
            and metafunc.definition.get_closest_marker("plugin_per_major")
            and os.environ.get("OUTBOX_TEST_PG_ALL_PLUGINS") != "1"):
        pairs = [(p, m) for p in plugins for m in _test_majors(metafunc)
                 if m == harness.HOST_MAJOR or PLUGIN_ON_MAJOR.get(m, p) == p]
        metafunc.parametrize(["plugin", "pg_major"], pairs, indirect=True,
                             ids=["%s-pg%d" % pm for pm in pairs])
        return
    if plugins is not None:
        metafunc.parametrize("plugin", plugins, indirect=True)
    if "pg_major" in names:
        majors = _test_majors(metafunc)
        metafunc.parametrize("pg_major", majors, indirect=True, ids=["pg%d" % m for m in majors])


@pytest.fixture
def plugin(request):
    """The output plugin every daemon of this test runs the relayer with
    (OUTBOX_RELAY_PLUGIN, harness_base.current_plugin)."""
    harness_base.current_plugin = request.param
    yield request.param
    harness_base.current_plugin = None


@pytest.fixture
def pg_major(request):
    """The PostgreSQL major of this test's clusters (harness_base.current_pg_major);
    skips the test when that major's binaries are not on this machine."""
    why = harness.pg_unavailable_reason(request.param)
    if why:
        pytest.skip(why)
    harness_base.current_pg_major = request.param
    yield request.param
    harness_base.current_pg_major = None


def _slow_first_ranks():
    ranks = {}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow_tests.txt")
    with open(path) as f:
        for line in f:
            nodeid = line.split("#", 1)[0].strip()
            if nodeid:
                ranks.setdefault(nodeid, len(ranks))
    return ranks


def pytest_collection_modifyitems(session, config, items):
    """The longest tests first (slow_tests.txt), the rest in file order: a
    stable order, the same in every xdist worker."""
    ranks = _slow_first_ranks()

    def key(pair):
        i, item = pair
        rel = item.nodeid.split("integration/", 1)[-1]
        return (0, ranks[rel]) if rel in ranks else (1, i)
    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


def pytest_xdist_make_scheduler(config, log):
    """Longest first, one test at a time: each worker holds the test it runs
    and the next one (xdist needs that one to plan teardown) and takes the
    next pending test when it finishes one. xdist's own load scheduler hands
    out chunks of consecutive tests, which put several long tests on one
    worker and left others idle at the end."""
    from xdist.scheduler import LoadScheduling

    class LongestFirst(LoadScheduling):
        def schedule(self):
            assert self.collection_is_completed
            if self.collection is not None:
                for node in self.nodes:
                    self.check_schedule(node)
                return
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = list(self.node2collection.values())[0]
            self.pending[:] = range(len(self.collection))
            for node in self.nodes:
                self.check_schedule(node)

        def check_schedule(self, node, duration=0):
            if node.shutting_down:
                return
            want = 2 - len(self.node2pending[node])
            if self.pending and want > 0:
                self._send_tests(node, min(want, len(self.pending)))
            if not self.pending:
                node.shutdown()

    return LongestFirst(config, log)


def pytest_configure(config):
    config.addinivalue_line("markers", "plugins(*names): the output plugins a test runs with")
    config.addinivalue_line("markers", "pg_majors(*majors): the PostgreSQL majors a test runs on")
    config.addinivalue_line("markers", "real_kafka: the suite's `broker` is the shared real "
                            "Kafka cluster (real_broker.py)")
    config.addinivalue_line("markers", "mock_kafka(why): this test's `broker` is the mock "
                            "(it injects a fault only the mock can)")
    config.addinivalue_line("markers", "plugin_per_major: one plugin per newer major "
                            "(conftest.PLUGIN_ON_MAJOR), both on 15")
    # SIGTERM to pytest (a CI timeout) unwinds like Ctrl-C, so fixture
    # finalizers and the atexit hook stop every cluster and daemon.
    def on_term(signum, frame):
        raise KeyboardInterrupt("SIGTERM")
    signal.signal(signal.SIGTERM, on_term)


@pytest.fixture(autouse=True)
def no_sanitizer_findings():
    """Fails a test whose programs reported an ASan/LSan/UBSan finding (in
    a sanitizer build, tests/run.sh's second pass): a leak at exit or
    undefined behaviour is a defect even when the events all arrived."""
    first = harness.process_log_count()
    yield
    for log in harness.process_logs_since(first):
        report = harness.sanitizer_findings(log)
        if report:
            pytest.fail("sanitizer finding in %s:\n%s" % (log, report), pytrace=False)


# A log line that ends where its reason should be ("... failed:", "...: ")
# said something went wrong without saying what: libpq's message was lost
# on the way (the START_REPLICATION refusal logged that way once).
_EMPTY_REASON = re.compile(r"^\S+ (?:error|warn)\s.*:[ \t]*$", re.M)


@pytest.fixture(autouse=True)
def no_empty_reasons():
    """Fails a test whose relayers or consumers logged an error or warning
    with an empty reason, whatever the test itself checks."""
    first = harness.process_log_count()
    yield
    for log in harness.process_logs_since(first):
        try:
            with open(log, errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        m = _EMPTY_REASON.search(text)
        if m:
            pytest.fail("%s logged a failure with an empty reason:\n%s" % (log, m.group(0)),
                        pytrace=False)


@pytest.fixture(scope="session")
def build_dir():
    return harness.build_dir()


@pytest.fixture
def pg_factory(request):
    """Starts PostgreSQL clusters on demand, of the test's major (pg_major;
    15 without it); all are stopped and removed at teardown, whatever the
    test's outcome."""
    clusters = []
    major = request.getfixturevalue("pg_major") if "pg_major" in request.fixturenames else None

    def make(settings=None, password_auth=None, load_schema=True, name="pg", port=None,
             without_sql=()):
        c = harness.PgCluster(settings=settings, password_auth=password_auth,
                              load_schema=load_schema, name=name, port=port,
                              without_sql=without_sql, major=major or harness.HOST_MAJOR)
        clusters.append(c)
        return c

    yield make
    for c in reversed(clusters):
        c.cleanup()


@pytest.fixture
def pg(pg_factory):
    """A fresh cluster per test: tests create slots, roles and rows, and a
    shared cluster would let one test's slot hold WAL for the next."""
    return pg_factory()


@pytest.fixture
def public_tmp_dir():
    """Factory of empty dirs the postgres user can read (pytest's tmp_path
    is private to root), where the test's server sees them (in its tree for
    17+: pass harness.server_path(d) to the server); removed at teardown."""
    dirs = []

    def make():
        d = harness.pg_install().mkdtemp("outbox-public-")
        dirs.append(d)
        return d

    yield make
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def libdir_without(public_tmp_dir):
    """Factory: libdir_without("wal2json") is a dynamic_library_path for
    the test's server (its own view of the path) where every module of its
    major's lib dir is found except those named. Only the empty dir used
    to do on 15 and 17, where core extensions (plpgsql, loaded by
    sql/003) load as "$libdir/x"; since 18 they load by bare name too."""
    def make(*names):
        inst = harness.pg_install()
        d = public_tmp_dir()
        for f in os.listdir(inst.host_path(inst.pkglibdir)):
            if f.endswith(".so") and f[:-3] not in names:
                os.symlink(os.path.join(inst.pkglibdir, f), os.path.join(d, f))
        return inst.server_path(d)
    return make


@pytest.fixture
def broker_factory(tmp_path):
    brokers = []

    def make(brokers_n=1, partitions=4):
        b = harness.MockBroker(str(tmp_path), brokers=brokers_n, partitions=partitions)
        brokers.append(b)
        return b

    yield make
    for b in reversed(brokers):
        b.cleanup()


def _on_real_kafka(node):
    """Whether this test's `broker` is the shared real cluster: its suite is
    marked real_kafka, the test not mock_kafka, and OUTBOX_TEST_BROKER is
    not "mock" (a machine without Java or Maven Central, on purpose)."""
    return (node.get_closest_marker("real_kafka") is not None
            and node.get_closest_marker("mock_kafka") is None
            and os.environ.get("OUTBOX_TEST_BROKER", "") != "mock")


@pytest.fixture
def broker(request, broker_factory):
    """The test's Kafka. In a suite marked real_kafka: the shared real
    cluster (real_broker.RealBroker: 3 brokers, RF 3, min.insync.replicas
    2, the test's topics and groups prefixed); skipped with the reason when
    there is no real Kafka. Elsewhere, and for a test marked mock_kafka: a
    build/mock-broker of its own (.cmd injects faults)."""
    if not _on_real_kafka(request.node):
        yield broker_factory()
        return
    b = RealBroker(request.getfixturevalue("kafka_cluster"))
    harness_base.current_names = b.names
    try:
        yield b
    finally:
        harness_base.current_names = None
        b.cleanup()


class Kafka:
    """Read-back helpers bound to one broker; on the shared real cluster
    they take and give the test's own topic names (real_broker.TopicNames)."""

    def __init__(self, bootstrap, names=None):
        self.bootstrap = bootstrap
        self.names = names

    def _topic(self, topic):
        return self.names.topic(topic) if self.names else topic

    def _local(self, msgs):
        if self.names:
            for m in msgs:
                m.topic = self.names.local(m.topic) or m.topic
        return msgs

    def read(self, topic, expected=None, timeout=30, wait_topic=True):
        return self._local(harness.read_messages(self.bootstrap, self._topic(topic),
                                                 expected=expected, timeout=timeout,
                                                 wait_topic=wait_topic))

    def read_until_ids(self, topic, ids, timeout=60):
        """The topic's records once every event id in `ids` (ints, the
        event_id header) is among them, duplicates allowed; or what is there
        at the timeout. Where at-least-once may send events again (a server
        restart), a count of records would stop on the copies."""
        want = set(ids)
        deadline = time.monotonic() + timeout
        n = len(want)
        while True:
            got = self.read(topic, expected=n, timeout=max(1, deadline - time.monotonic()))
            if {int(m.headers["event_id"]) for m in got} >= want or time.monotonic() >= deadline:
                return got
            n = len(got) + 1

    def topics(self, timeout=10):
        names = harness.list_topics(self.bootstrap, timeout=timeout)
        if self.names:
            names = [self.names.local(t) for t in names if self.names.local(t) is not None]
        return names

    def partitions(self, topic, timeout=10):
        return harness.topic_partitions(self.bootstrap, self._topic(topic), timeout=timeout)

    def scan(self, topic, on_message, expected, timeout=60):
        return harness.scan_messages(self.bootstrap, self._topic(topic), on_message, expected,
                                     timeout=timeout)

    def produce(self, topic, messages, timeout=30, **conf):
        return harness.produce(self.bootstrap, self._topic(topic), messages, timeout=timeout,
                               **conf)


@pytest.fixture
def kafka(broker):
    return Kafka(broker.bootstrap, getattr(broker, "names", None))


@pytest.fixture
def relayer_binary(build_dir):
    path = os.path.join(build_dir, "outbox-relay")
    if not os.access(path, os.X_OK):
        pytest.fail("%s does not exist: cmake --build build first" % path)
    return path


@pytest.fixture
def relayer(relayer_binary, tmp_path):
    """Factory: relayer(*args, env=None) starts build/outbox-relay with the
    given arguments; stderr and stdout go to <tmp>/relayer-N.log. Every
    relayer still running at teardown is SIGKILLed."""
    start = harness.ProcessFactory(relayer_binary, str(tmp_path), "relayer")
    yield start
    start.cleanup()


@pytest.fixture
def relay_args(pg, broker):
    return ["--dsn", pg.dsn(), "--brokers", broker.bootstrap]
