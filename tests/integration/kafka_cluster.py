"""kafka_cluster.py — a real Apache Kafka (KRaft, no ZooKeeper) on 127.0.0.1
for the integration tests and the benchmark.

  KafkaCluster(nodes=3)   three brokers and one controller-only node, each a
                          JVM child of this process in a temp dir
  KafkaCluster(nodes=1)   one node that is broker and controller at once
  RemoteKafka(bootstrap)  a cluster someone else started (tests/run.sh's
                          shared one): the same topic and metadata helpers,
                          no process control

The broker's classpath comes from tests/tools/kafka.sh (Maven Central,
cached); when Maven Central cannot be reached, classpath() raises
KafkaUnavailable with kafka.sh's message and the fixtures skip with it.

Why a controller of its own beside three brokers: the issue's faults are
broker faults, and in combined mode (every node broker and controller)
losing two of three nodes also loses the controller quorum. The last
broker then cannot shrink the ISR, so a producer with acks=all sees
request timeouts instead of the NOT_ENOUGH_REPLICAS the fault is about,
and a killed leader could not be replaced. The controller is never
stopped by the tests; node ids are 1..nodes for brokers, 100 for it.

Every JVM gets SIGKILL when the test process dies (PR_SET_PDEATHSIG, as
harness does for PostgreSQL), and cleanup() kills what is left and removes
the data dirs, so nothing outlives pytest.

Run as a program it serves one cluster until SIGTERM/SIGINT or until its
parent is gone, for tests/run.sh to share between pytest workers:

  python3 tests/integration/kafka_cluster.py serve --nodes 3 --bootstrap-file F [--topic NAME:PARTITIONS]...

It writes the bootstrap servers to F once every broker is up, or exits 3
with the reason when Maven Central cannot be reached.
"""

import base64
import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import wait_until  # noqa: E402

KAFKA_SH = os.path.join(harness.REPO_ROOT, "tests", "tools", "kafka.sh")
CONTROLLER_ID = 100
STARTED = re.compile(r"Kafka Server started")

# Small JVMs: the suite runs several clusters at once on a 2-core machine.
# C1 only (TieredStopAtLevel=1) and the serial collector start faster and
# use fewer threads; the tests never push a broker hard.
JVM_OPTS = ["-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-XX:-UsePerfData", "-Djava.awt.headless=true"]

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.req.name = kafka.request.logger
logger.req.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


class KafkaUnavailable(Exception):
    """No broker classpath: Maven Central could not be reached (the message
    says so); the tests that need a real Kafka skip with it."""


_classpath = None
_unreachable = None
_classpath_lock = threading.Lock()


def classpath(timeout=900):
    """The broker's lib dir from tests/tools/kafka.sh (cached per process,
    and so is an unreachable Maven Central: one attempt per process).
    Raises KafkaUnavailable on kafka.sh's exit status 3, RuntimeError on
    any other failure."""
    global _classpath, _unreachable
    with _classpath_lock:
        if _unreachable is not None:
            raise KafkaUnavailable(_unreachable)
        if _classpath is None:
            res = subprocess.run(["bash", KAFKA_SH], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, timeout=timeout)
            if res.returncode == 3:
                lines = res.stderr.strip().splitlines()
                _unreachable = lines[-1] if lines else "Maven Central cannot be reached"
                raise KafkaUnavailable(_unreachable)
            if res.returncode != 0:
                raise RuntimeError("tests/tools/kafka.sh failed (%d):\n%s"
                                   % (res.returncode, res.stderr))
            _classpath = res.stdout.strip().splitlines()[-1]
        return _classpath


def _cluster_id():
    """A KRaft cluster id as StorageTool random-uuid makes one (URL-safe
    base64 of 16 random bytes, no padding, never starting with '-'),
    without a JVM start for it."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def _sweep_orphans():
    """Removes the data dirs of clusters whose owner died by SIGKILL (its
    JVMs died with it, PR_SET_PDEATHSIG, but nobody removed the dir)."""
    import glob
    for d in glob.glob(os.path.join(tempfile.gettempdir(), "outbox-kafka-*")):
        try:
            with open(os.path.join(d, "owner.pid")) as f:
                pid = int(f.read())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (OSError, ValueError):
            pass  # being created, or not ours to judge


# How many clusters of this machine may be starting JVMs at once, across
# every xdist worker and the run's shared cluster (lock files in the temp
# dir). A JVM's start is mostly CPU: ten workers starting clusters together
# on two cores made each of them miss its timeout. Waiting for a slot does
# not count against a start's timeout.
START_SLOTS = int(os.environ.get("OUTBOX_KAFKA_START_SLOTS", "2"))


@contextlib.contextmanager
def start_slot():
    """Holds one of START_SLOTS start slots for the with-block."""
    d = os.path.join(tempfile.gettempdir(), "outbox-kafka-start-slots")
    os.makedirs(d, exist_ok=True)
    held = None
    while held is None:
        for i in range(START_SLOTS):
            f = open(os.path.join(d, "slot-%d" % i), "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            held = f
            break
        else:
            time.sleep(0.3)
    try:
        yield
    finally:
        fcntl.flock(held, fcntl.LOCK_UN)
        held.close()


def _admin(bootstrap):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def _metadata(bootstrap, timeout=10):
    return _admin(bootstrap).list_topics(timeout=timeout)


class _TopicOps:
    """Topic and metadata helpers that need nothing but .bootstrap (for an
    owned cluster and a remote one alike)."""

    bootstrap = None
    replication = 1

    def create_topic(self, name, partitions=1, rf=None, configs=None, timeout=30):
        """Creates `name` and waits until every partition has a leader in
        the metadata; rf defaults to the cluster's size (at most 3)."""
        from confluent_kafka.admin import NewTopic
        rf = rf or self.replication
        nt = NewTopic(name, num_partitions=partitions, replication_factor=rf,
                      config={k: str(v) for k, v in (configs or {}).items()})
        admin = _admin(self.bootstrap)  # held: a collected client fails its futures
        admin.create_topics([nt], request_timeout=timeout)[name].result(timeout)

        # Asked of every broker: a broker whose metadata lags (KRaft, a
        # loaded machine) would tell a consumer that joins next the topic
        # has no partitions, and its group got nothing assigned until the
        # next metadata refresh (5 min by default).
        def ready():
            for address in self.bootstrap.split(","):
                tm = _metadata(address).topics.get(name)
                if not (tm is not None and tm.error is None and len(tm.partitions) == partitions
                        and all(p.leader >= 0 for p in tm.partitions.values())):
                    return False
            return True
        wait_until(ready, timeout, interval=0.2, message="topic %s to have leaders" % name)
        return name

    def partition_info(self, topic, partition):
        """confluent_kafka's PartitionMetadata (.leader, .replicas, .isrs)."""
        tm = _metadata(self.bootstrap).topics.get(topic)
        if tm is None or tm.error is not None or partition not in tm.partitions:
            raise KeyError("%s[%d] is not in the metadata" % (topic, partition))
        return tm.partitions[partition]

    def leader_of(self, topic, partition):
        """The broker id (= node number of a KafkaCluster) leading the
        partition, -1 while it has none."""
        return self.partition_info(topic, partition).leader

    def isr_of(self, topic, partition):
        return sorted(self.partition_info(topic, partition).isrs)

    def brokers(self):
        """Ids of the brokers the metadata lists (live ones)."""
        return sorted(_metadata(self.bootstrap).brokers)

    def wait_isr(self, topic, partition, size, timeout=60):
        """Waits until the partition's ISR has `size` members."""
        def isr():
            try:
                members = self.isr_of(topic, partition)
            except Exception:  # metadata unavailable for a moment: ask again
                return None
            return len(members) == size and members
        return wait_until(isr, timeout, interval=0.3,
                          message="%s[%d] ISR of %d" % (topic, partition, size))


class RemoteKafka(_TopicOps):
    """A cluster started elsewhere (tests/run.sh shares one through
    $OUTBOX_TEST_KAFKA_BOOTSTRAP). Stopping or killing its brokers would
    break every other test using it, so there is no process control:
    fault tests take a cluster of their own (own_kafka_cluster)."""

    def __init__(self, bootstrap, replication=3):
        self.bootstrap = bootstrap
        self.replication = replication

    def cleanup(self):
        pass


BIND_ATTEMPTS = 3  # starts of a cluster whose port was taken meanwhile


class _Node:
    """One JVM: a broker, a controller, or both (process.roles)."""

    def __init__(self, node_id, roles, root, lib, heap):
        self.id, self.roles, self.lib, self.heap = node_id, roles, lib, heap
        self.dir = os.path.join(root, "node-%d" % node_id)
        self.data = os.path.join(self.dir, "data")
        self.config = os.path.join(self.dir, "server.properties")
        self.log_path = os.path.join(self.dir, "server.log")
        self.port = harness.free_port() if "broker" in roles else None
        self.controller_port = harness.free_port() if "controller" in roles else None
        self.sasl_port = None
        self.scram_users = {}  # SCRAM-SHA-512 credentials written at format time
        self.proc = None
        self._log = None
        self._mark = 0
        os.makedirs(self.dir)

    def java(self, main, *args):
        return (["java", "-Xmx" + self.heap] + JVM_OPTS +
                ["-Dlog4j2.configurationFile=" + os.path.join(os.path.dirname(self.dir),
                                                              "log4j2.properties"),
                 "-cp", os.path.join(self.lib, "*"), main] + list(args))

    def write_config(self, props):
        with open(self.config, "w") as f:
            for k, v in props.items():
                f.write("%s=%s\n" % (k, v))

    def format(self, cluster_id):
        """StorageTool format: the meta.properties KRaft refuses to start
        without. Returns the Popen (formats run in parallel)."""
        scram = []
        for name, password in sorted(self.scram_users.items()):
            scram += ["--add-scram", "SCRAM-SHA-512=[name=%s,password=%s]" % (name, password)]
        return subprocess.Popen(self.java("kafka.tools.StorageTool", "format", "-t", cluster_id,
                                          "-c", self.config, *scram),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=harness._die_with_parent)

    def start(self):
        assert not self.running(), "node %d is already running" % self.id
        if self._log is not None:
            self._log.close()
        self._log = open(self.log_path, "ab")
        self._mark = os.path.getsize(self.log_path)
        self.proc = subprocess.Popen(self.java("kafka.Kafka", self.config), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     preexec_fn=harness._die_with_parent)

    def log_since_start(self):
        with open(self.log_path, "rb") as f:
            f.seek(self._mark)
            return f.read().decode("utf-8", "replace")

    def log_tail(self, n=30):
        return "\n".join(self.log_since_start().splitlines()[-n:])

    def wait_started(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            if STARTED.search(self.log_since_start()):
                return
            if not self.running():
                raise RuntimeError("Kafka node %d exited (rc=%s) before starting; log tail:\n%s"
                                   % (self.id, self.proc.returncode, self.log_tail()))
            if time.monotonic() >= deadline:
                raise RuntimeError("Kafka node %d did not start within %.0fs; log tail:\n%s"
                                   % (self.id, timeout, self.log_tail()))
            time.sleep(0.2)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal_and_wait(self, sig, timeout):
        if not self.running():
            return True
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def cleanup(self):
        if self.running():
            self.signal_and_wait(signal.SIGKILL, 30)
        if self._log is not None:
            self._log.close()
            self._log = None


class KafkaCluster(_TopicOps):
    """A real Kafka cluster on 127.0.0.1, started by the constructor.

    nodes: brokers (ids 1..nodes). With more than one, a controller-only
    node (id 100) runs beside them (see the module's comment); a single
    node is broker and controller at once, with the internal topics'
    replication factor and min ISR at 1.

    .bootstrap               "127.0.0.1:p1,127.0.0.1:p2,..."
    .stop(n) / .kill(n)      SIGTERM (controlled shutdown, waited for) / SIGKILL of broker n
    .start(n)                start broker n again on its data dir, wait until it is up
    .leader_of(topic, p)     broker id leading the partition
    .create_topic(name, partitions, rf, configs)
    .cleanup()               SIGKILL everything, remove the data dirs

    broker_settings: server.properties entries every broker gets on top of
    the defaults below, for tests of a misconfigured cluster, e.g.
    {"auto.create.topics.enable": "false"}.

    sasl_users: {name: password} (no '"' or '\\' in either). Each broker
    then also listens with SASL_SSL at .sasl_bootstrap: mechanisms
    SCRAM-SHA-512 (the users created at format time) and PLAIN (the same
    users in the listener's JAAS entry), TLS with a certificate for
    127.0.0.1 signed by a CA of the cluster's own (.ca_file); it
    authorizes with Kafka's
    StandardAuthorizer: everything is allowed where no ACL names the
    resource, ACLs (.acl()) deny or allow per principal. The PLAINTEXT
    listener (.bootstrap, the ANONYMOUS super user) stays for the tests'
    own admin and read-back.
    """

    def __init__(self, nodes=3, heap="384m", start_timeout=180, keep_dir=False,
                 broker_settings=None, sasl_users=None):
        self.lib = classpath()
        self.n = nodes
        self.broker_settings = dict(broker_settings or {})
        self.sasl_users = dict(sasl_users or {})
        self.replication = min(3, nodes)
        self.keep_dir = keep_dir
        _sweep_orphans()
        # free_port() cannot reserve a port: another test's server may take
        # one before a broker binds it. Such a start is redone on new ports.
        for attempt in range(1, BIND_ATTEMPTS + 1):
            try:
                self._start(nodes, heap, start_timeout)
                return
            except RuntimeError as e:
                if "Address already in use" not in str(e) or attempt == BIND_ATTEMPTS:
                    raise
                sys.stderr.write("kafka_cluster: a port was taken before a node bound it; "
                                 "starting again on other ports (attempt %d)\n" % (attempt + 1))

    def _start(self, nodes, heap, start_timeout):
        """One attempt at the whole cluster: its directory, ports,
        configuration, format and start; cleaned up when it fails."""
        self.root = tempfile.mkdtemp(prefix="outbox-kafka-")
        with open(os.path.join(self.root, "owner.pid"), "w") as f:
            f.write("%d\n" % os.getpid())
        with open(os.path.join(self.root, "log4j2.properties"), "w") as f:
            f.write(LOG4J2)
        combined = nodes == 1
        self.brokers_by_id = {}
        for i in range(1, nodes + 1):
            roles = "broker,controller" if combined else "broker"
            self.brokers_by_id[i] = _Node(i, roles, self.root, self.lib, heap)
        self.controller = (self.brokers_by_id[1] if combined else
                           _Node(CONTROLLER_ID, "controller", self.root, self.lib, "192m"))
        self.nodes = [self.controller] + [b for b in self.brokers_by_id.values()
                                          if b is not self.controller]
        self.bootstrap = ",".join("127.0.0.1:%d" % b.port for b in self.brokers_by_id.values())
        self.sasl_bootstrap = self.ca_file = None
        if self.sasl_users:
            for b in self.brokers_by_id.values():
                b.sasl_port = harness.free_port()
            self.sasl_bootstrap = ",".join("127.0.0.1:%d" % b.sasl_port
                                           for b in self.brokers_by_id.values())
        harness._register(self)
        try:
            if self.sasl_users:
                self._certificates()
            self._configure()
            with start_slot():
                self._format(start_timeout)
                t0 = time.monotonic()
                for node in self.nodes:
                    node.start()
                for node in self.nodes:
                    node.wait_started(max(10, start_timeout - (time.monotonic() - t0)))
                self.wait_brokers(sorted(self.brokers_by_id), start_timeout)
        except BaseException:
            self.cleanup()
            raise

    # -- set-up ------------------------------------------------------------

    def _configure(self):
        voters = "%d@127.0.0.1:%d" % (self.controller.id, self.controller.controller_port)
        rf, min_isr = self.replication, min(2, self.replication)
        for node in self.nodes:
            listeners = []
            props = {"process.roles": node.roles, "node.id": node.id,
                     "controller.quorum.voters": voters,
                     "controller.listener.names": "CONTROLLER",
                     "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                     "log.dirs": node.data}
            if node.port is not None:
                listeners.append("PLAINTEXT://127.0.0.1:%d" % node.port)
                props["advertised.listeners"] = "PLAINTEXT://127.0.0.1:%d" % node.port
                props["inter.broker.listener.name"] = "PLAINTEXT"
            if node.controller_port is not None:
                listeners.append("CONTROLLER://127.0.0.1:%d" % node.controller_port)
            props["listeners"] = ",".join(listeners)
            props.update({
                # Internal topics sized for a test: few partitions, and a
                # single node replicates nothing.
                "offsets.topic.num.partitions": 3,
                "offsets.topic.replication.factor": rf,
                "transaction.state.log.num.partitions": 3,
                "transaction.state.log.replication.factor": rf,
                "transaction.state.log.min.isr": min_isr,
                "share.coordinator.state.topic.num.partitions": 3,
                "share.coordinator.state.topic.replication.factor": rf,
                "share.coordinator.state.topic.min.isr": min_isr,
                "default.replication.factor": rf,
                "num.partitions": 1,
                "group.initial.rebalance.delay.ms": 0,
                # Few threads and a small cleaner buffer (128 MiB by default).
                "log.cleaner.dedupe.buffer.size": 4 * 1024 * 1024,
                "log.cleaner.threads": 1,
                "num.network.threads": 2,
                "num.io.threads": 2,
                "background.threads": 2,
                "num.recovery.threads.per.data.dir": 1,
                "num.replica.fetchers": 1,
            })
            if self.sasl_users:
                props.update(self._sasl_props(node, listeners))
            # The controllers too: Kafka 4's controller (KIP-966) records
            # min.insync.replicas from its own server.properties as the
            # cluster-wide dynamic default, which wins over every broker's
            # static value (a broker-only setting left topics at 1).
            props.update(self.broker_settings)
            node.write_config(props)

    def _certificates(self):
        """A CA of this cluster and a broker certificate for 127.0.0.1 it
        signed (openssl), the key and chain in one PEM file as Kafka's
        PEM keystore reads it."""
        d = os.path.join(self.root, "tls")
        os.makedirs(d)
        self.ca_file = os.path.join(d, "ca.pem")
        self.keystore = os.path.join(d, "broker.pem")
        ext = os.path.join(d, "san.ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        steps = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=outbox-relay test CA", "-keyout", "ca.key", "-out", "ca.pem"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
             "-keyout", "broker.key", "-out", "broker.csr"],
            ["x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "broker.crt"],
        ]
        for args in steps:
            res = subprocess.run(["openssl"] + args, cwd=d, capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError("openssl %s failed: %s" % (args[0], res.stderr))
        with open(self.keystore, "w") as out:
            for part in ("broker.key", "broker.crt"):
                with open(os.path.join(d, part)) as f:
                    out.write(f.read())

    def _sasl_props(self, node, listeners):
        """The SASL_SSL listener and the authorizer (see the class)."""
        props = {
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
            "super.users": "User:ANONYMOUS",
        }
        if node.port is not None:
            listeners.append("SASL_SSL://127.0.0.1:%d" % node.sasl_port)
            props.update({
                "listeners": ",".join(listeners),
                "advertised.listeners": "PLAINTEXT://127.0.0.1:%d,SASL_SSL://127.0.0.1:%d"
                                        % (node.port, node.sasl_port),
                "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "listener.name.sasl_ssl.plain.sasl.jaas.config":
                    "org.apache.kafka.common.security.plain.PlainLoginModule required %s;"
                    % " ".join('user_%s="%s"' % kv for kv in sorted(self.sasl_users.items())),
                "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
                "listener.name.sasl_ssl.ssl.keystore.location": self.keystore,
            })
        return props

    def acl(self, action, principal, topic, operation="WRITE", permission="DENY"):
        """Adds (action "add") or removes ("remove") the ACL `permission`
        `operation` on the literal topic for principal ("User:relay"),
        through Kafka's own Admin client (tests/tools/KafkaAcl.java, run by
        Java's source launcher on the broker's classpath)."""
        tool = os.path.join(harness.REPO_ROOT, "tests", "tools", "KafkaAcl.java")
        cmd = self.controller.java(tool, self.bootstrap, action, principal, topic, operation,
                                   permission)
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise RuntimeError("KafkaAcl %s failed (%d): %s%s"
                               % (action, res.returncode, res.stdout, res.stderr))

    def _format(self, timeout):
        cid = _cluster_id()
        for node in self.nodes:
            node.scram_users = self.sasl_users
        procs = [(node, node.format(cid)) for node in self.nodes]
        for node, p in procs:
            try:
                out, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                raise RuntimeError("formatting Kafka node %d took over %ds" % (node.id, timeout))
            if p.returncode != 0:
                raise RuntimeError("StorageTool format of node %d failed (%d):\n%s"
                                   % (node.id, p.returncode, out))

    # -- state ---------------------------------------------------------------

    def _broker(self, n):
        if n not in self.brokers_by_id:
            raise KeyError("no broker %r (brokers are %s)" % (n, sorted(self.brokers_by_id)))
        return self.brokers_by_id[n]

    def wait_brokers(self, ids, timeout=60):
        """Waits until the metadata lists exactly the brokers `ids`."""
        want = sorted(ids)

        def seen():
            try:
                return self.brokers() == want
            except Exception:
                return False
        wait_until(seen, timeout, interval=0.3, message="brokers %s in the metadata" % want)

    def running(self, n):
        return self._broker(n).running()

    # -- faults ------------------------------------------------------------

    def stop(self, n, timeout=60):
        """Stops broker n with SIGTERM (controlled shutdown: leadership
        moves away first) and waits for it; SIGKILL if it hangs."""
        node = self._broker(n)
        if not node.signal_and_wait(signal.SIGTERM, timeout):
            node.signal_and_wait(signal.SIGKILL, 30)
            raise AssertionError("Kafka broker %d ignored SIGTERM for %ds; log tail:\n%s"
                                 % (n, timeout, node.log_tail()))

    def kill(self, n):
        """SIGKILLs broker n, as a crash would (no controlled shutdown)."""
        self._broker(n).signal_and_wait(signal.SIGKILL, 30)

    def start(self, n, timeout=240):
        """Starts broker n again on its data dir and waits until it is up
        and registered (not necessarily back in every ISR: wait_isr)."""
        node = self._broker(n)
        with start_slot():
            node.start()
            node.wait_started(timeout)
        wait_until(lambda: n in self._brokers_quiet(), timeout, interval=0.3,
                   message="broker %d in the metadata" % n)

    def _brokers_quiet(self):
        try:
            return self.brokers()
        except Exception:
            return []

    def log_path(self, n):
        return self._broker(n).log_path

    def cleanup(self):
        for node in self.nodes:
            node.cleanup()
        if not self.keep_dir:
            shutil.rmtree(self.root, ignore_errors=True)
        harness._unregister(self)


# --------------------------------------------------------------------------
# serve: one cluster for a whole test run (tests/run.sh)
# --------------------------------------------------------------------------

def shared_settings(nodes):
    """server.properties of the cluster every test shares (serve, and
    kafka_fixtures when no tests/run.sh started one): the suites moved from
    the mock (real_broker.py) find what they were written for, 4 partitions
    to an auto-created topic, and what users are told to run, RF 3 with
    min.insync.replicas 2 so that acks=all survives one broker's loss.
    Their consumers' session.timeout.ms (4 s) is below Kafka's default
    floor (6 s), which the broker would refuse with INVALID_SESSION_TIMEOUT."""
    settings = {"num.partitions": 4, "group.min.session.timeout.ms": 1000}
    if nodes >= 3:
        settings["min.insync.replicas"] = 2
    return settings


def _serve(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="kafka_cluster.py serve")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--bootstrap-file", required=True)
    ap.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS",
                    help="a topic to create before the bootstrap file is written")
    args = ap.parse_args(argv)
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t0 = time.monotonic()
    try:
        cluster = KafkaCluster(nodes=args.nodes, broker_settings=shared_settings(args.nodes))
    except KafkaUnavailable as e:
        print(str(e), file=sys.stderr)
        return 3
    try:
        for t in args.topic:
            name, _, parts = t.partition(":")
            cluster.create_topic(name, partitions=int(parts or 1))
        tmp = args.bootstrap_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(cluster.bootstrap + "\n")
        os.rename(tmp, args.bootstrap_file)
        print("kafka_cluster: %d broker(s) at %s, started in %.1fs (data in %s)"
              % (args.nodes, cluster.bootstrap, time.monotonic() - t0, cluster.root),
              file=sys.stderr, flush=True)

        # The caller (tests/run.sh) dying by SIGKILL gets this process
        # reparented: stop then too, and the JVMs die with it.
        parent = os.getppid()
        while not stop.wait(1):
            if os.getppid() != parent:
                print("kafka_cluster: the caller is gone, stopping", file=sys.stderr)
                return 1
            dead = [n.id for n in cluster.nodes if not n.running()]
            if dead:
                print("kafka_cluster: node(s) %s exited" % dead, file=sys.stderr)
                return 1
        return 0
    finally:
        cluster.cleanup()


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "serve":
        sys.exit(__doc__)
    sys.exit(_serve(sys.argv[2:]))
