"""real_broker.py — the `broker` of the suites that prove our Kafka claims
(core, chaos, HA, backfill, layouts, consumer, security, check): the shared
real Apache Kafka cluster (kafka_fixtures.kafka_cluster) instead of
librdkafka's mock, with the relayer's and the consumer's defaults.

The suites were written for a mock broker of their own, where "order" and
the group "loyalty" belonged to one test. On a cluster every test of the
run shares, those names would meet another test's events. So each test
gets a prefix ("t<8 hex>."), and TopicNames puts it in front of every
topic and group name where the test's programs meet the cluster:

  - outbox-relay (every subcommand) talking to the shared cluster: its
    --topic template (the default one when the test gave none, with
    --layout debezium's default too) and --dead-letter-topic, from the
    command line, the test's environment or a --config file;
  - outbox-consume: --topics (a ^regex too) and --group;
  - the read-back helpers (conftest.Kafka): kafka.read("order") reads the
    prefixed topic and hands back messages whose .topic is "order" again,
    kafka.topics() lists this test's topics only.

Processes pick the mapping up from harness_base.current_names (set by the
`broker` fixture for the test's duration), as they pick up the plugin.
What the programs log and write (a consumer's $5 topic, metrics labels)
carries the prefixed names; a test that reads those asks
broker.names.topic(name) for the real one.

The mock stays where only it can inject a fault: a test that calls
broker.cmd() is marked @pytest.mark.mock_kafka("why") and gets a mock
broker as before; calling .cmd() on the real one fails with that advice.
"""

import os
import re
import uuid

# The relayer's default topic templates (src/config/config.c), which a
# test that gives none runs with: the prefix goes in front of these.
DEFAULT_TOPIC = "{prefix}"
DEBEZIUM_TOPIC = "outbox.event.{aggregatetype}"
DEFAULT_DEAD_LETTER = "outbox.dead-letter"


def _opt(argv, name):
    """The value of --name in argv (--name V or --name=V), else None."""
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def _replace_opt(argv, name, fn):
    """argv with every value of --name replaced by fn(value); whether any was."""
    out, found, i = [], False, 0
    while i < len(argv):
        a = argv[i]
        if a == name and i + 1 < len(argv):
            out += [a, fn(argv[i + 1])]
            found = True
            i += 2
            continue
        if a.startswith(name + "="):
            out.append("%s=%s" % (name, fn(a[len(name) + 1:])))
            found = True
        else:
            out.append(a)
        i += 1
    return out, found


def _config_file_values(path):
    """name = value lines of a relayer --config file (comments skipped)."""
    values = {}
    try:
        with open(path) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if "=" in line:
                    k, v = line.split("=", 1)
                    values[k.strip()] = v.strip().strip("'\"")
    except OSError:
        pass
    return values


class TopicNames:
    """One test's names in the shared cluster: prefix + the name it uses."""

    def __init__(self, bootstrap, prefix=None):
        self.bootstrap = bootstrap
        self.prefix = prefix or "t%s." % uuid.uuid4().hex[:8]

    def topic(self, name):
        """The cluster's name of the test's topic (or template, or ^regex)."""
        if name.startswith("^"):
            return "^" + re.escape(self.prefix) + name[1:]
        return name if name.startswith(self.prefix) else self.prefix + name

    group = topic

    def local(self, name):
        """The test's name of a cluster topic; None if not this test's."""
        return name[len(self.prefix):] if name.startswith(self.prefix) else None

    # -- the programs' arguments ----------------------------------------

    def _talks_to_us(self, argv, env):
        brokers = _opt(argv, "--brokers")
        if brokers is None:
            brokers = env.get("OUTBOX_RELAY_BROKERS") or env.get("OUTBOX_CONSUME_BROKERS")
        if brokers is None and _opt(argv, "--config"):
            brokers = _config_file_values(_opt(argv, "--config")).get("brokers")
        return brokers == self.bootstrap

    def rewrite(self, argv, env):
        """(argv, env) of a process about to start, with this test's names
        where it meets the shared cluster; unchanged for any other program
        or broker."""
        prog = os.path.basename(argv[0])
        if not self._talks_to_us(argv, env):
            return argv, env
        if prog.startswith("outbox-relay"):
            return self._relayer(argv, env)
        if prog.startswith("outbox-consume"):
            return self._consumer(argv, env)
        return argv, env

    def _relayer(self, argv, env):
        if "--help" in argv or "--version" in argv:
            return argv, env
        env = dict(env)
        cfg = _config_file_values(_opt(argv, "--config")) if _opt(argv, "--config") else {}
        for opt, var, default in (("--topic", "OUTBOX_RELAY_TOPIC", None),
                                  ("--dead-letter-topic", "OUTBOX_RELAY_DEAD_LETTER_TOPIC",
                                   DEFAULT_DEAD_LETTER)):
            argv, found = _replace_opt(argv, opt, self.topic)
            if found:
                continue
            if env.get(var):
                env[var] = self.topic(env[var])
                continue
            value = cfg.get(opt[2:])
            if value is None:
                value = default
            if value is None:  # the default template, which depends on the layout
                layout = (_opt(argv, "--layout") or env.get("OUTBOX_RELAY_LAYOUT")
                          or cfg.get("layout") or "default")
                value = DEBEZIUM_TOPIC if layout == "debezium" else DEFAULT_TOPIC
            argv = argv + [opt, self.topic(value)]
        return argv, env

    def _consumer(self, argv, env):
        env = dict(env)
        argv, found = _replace_opt(argv, "--topics",
                                   lambda v: ",".join(self.topic(t) for t in v.split(",")))
        if not found and env.get("OUTBOX_CONSUME_TOPICS"):
            env["OUTBOX_CONSUME_TOPICS"] = ",".join(
                self.topic(t) for t in env["OUTBOX_CONSUME_TOPICS"].split(","))
        argv, found = _replace_opt(argv, "--group", self.group)
        if not found and env.get("OUTBOX_CONSUME_GROUP"):
            env["OUTBOX_CONSUME_GROUP"] = self.group(env["OUTBOX_CONSUME_GROUP"])
        return argv, env


class RealBroker:
    """What a test's `broker` is on the shared cluster: .bootstrap, .brokers
    and .names; no fault injection (.cmd), which only the mock has."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap
        self.brokers = 3
        self.names = TopicNames(cluster.bootstrap)

    def cmd(self, line, timeout=30, check=True):
        raise RuntimeError(
            "broker.cmd(%r): this test injects a fault only librdkafka's mock can; mark it "
            "@pytest.mark.mock_kafka(\"why\") to run it on the mock broker" % line)

    def create_topic(self, name, partitions=4):
        """Creates the test's topic `name` (replication factor 3, the
        cluster's min.insync.replicas 2), as the mock's "topic" command does
        (4 partitions unless told); returns the test's name."""
        self.cluster.create_topic(self.names.topic(name), partitions=partitions or 4, rf=3)
        return name

    def cleanup(self):
        """Deletes the test's topics (without waiting): a run makes
        thousands, and each costs the shared brokers files and memory."""
        try:
            from confluent_kafka.admin import AdminClient
            admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
            topics = [t for t in admin.list_topics(timeout=10).topics
                      if t.startswith(self.names.prefix)]
            if topics:
                for f in admin.delete_topics(topics, operation_timeout=0,
                                             request_timeout=10).values():
                    try:
                        f.result(10)
                    except Exception:  # already gone, or the cluster busy: harmless
                        pass
        except Exception:
            pass
