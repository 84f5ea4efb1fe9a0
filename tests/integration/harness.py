"""harness.py — processes and helpers behind the integration-test fixtures,
one import for the tests (`import harness`, `from harness import ...`).

Everything here starts something real and owns its shutdown. The code
lives in one module per concern; this one re-exports their names:

  harness_base   paths (REPO_ROOT, build_dir), the cleanup registry, free
                 ports, LSN text, wait_until, and the state of the running
                 test: its plugin (current_plugin) and PostgreSQL major
                 (current_pg_major), which conftest.py sets there.
  pg_cluster     PgCluster, a throwaway PostgreSQL (wal_level=logical,
                 wal2json) in a temp dir, run as the postgres user because
                 PostgreSQL refuses root; the outbox schema from sql/*.sql is
                 loaded on first start. The postmaster is our child (not
                 daemonized by pg_ctl) and gets SIGKILL if the test process
                 dies, so a killed pytest leaves no server behind. major=15
                 runs the host's binaries; 17 and 18 run the server inside a
                 Debian tree (tests/tools/pgtrees.sh), see PgInstall. Also
                 SlotHolder and Producers (background load).
  processes      Process, any daemon under test (build/outbox-relay): stderr
                 to a log file, bounded waits on log lines and exit, peak
                 RSS; ProcessFactory; tuned runs and default runs (TUNINGS);
                 the sanitizer scan of their logs.
  piped_helpers  MockBroker, build/mock-broker (librdkafka's mock cluster)
                 with its stdin control channel; FaultProxy and
                 ProxiedBroker (tests/tools/fault_proxy.py).
  kafka_io       read_messages / list_topics / produce: a topic read back
                 or written with confluent_kafka.

Every wait has a deadline; every object registers itself so that an atexit
hook (and the fixtures' finalizers) can stop it even when a test fails or
pytest is interrupted.
"""

import harness_base
from harness_base import (HOST_MAJOR, PG_BIN, PG_TREES, PLUGINS, REPO_ROOT,
                          _cleanup_all, _die_with_parent, _register, _run, _unregister,
                          build_dir, free_port, int_to_lsn, local_topic, lsn_to_int, plugin,
                          tools_dir, topic, wait_until)
from kafka_io import (Message, _consumer_conf, list_topics, produce, read_messages,
                      scan_messages, topic_partitions)
from pg_cluster import (BASE_SETTINGS, OUTPUT_PLUGIN_LIBRARIES, PgCluster, PgInstall,
                        PgUnavailable, Producers, SlotHolder, pg_install, pg_unavailable_reason,
                        server_path)
from piped_helpers import FaultProxy, MockBroker, ProxiedBroker, _LineReader, _PipedHelper
from processes import (DEFAULT_STATUS_INTERVAL, SANITIZER_REPORT, TUNINGS, Process,
                       ProcessFactory, _process_logs, confirm_timeout, process_log_count,
                       process_logs_since, sanitizer_findings, tuned)

# Names other files take from harness (the test state is read through
# __getattr__ below, never copied).
__all__ = [
    "HOST_MAJOR", "PG_BIN", "PG_TREES", "PLUGINS", "REPO_ROOT", "_cleanup_all",
    "_die_with_parent", "_register", "_run", "_unregister", "build_dir", "free_port",
    "int_to_lsn", "local_topic", "lsn_to_int", "plugin", "tools_dir", "topic", "wait_until",
    "Message",
    "_consumer_conf", "list_topics", "produce", "read_messages", "scan_messages",
    "topic_partitions", "BASE_SETTINGS", "OUTPUT_PLUGIN_LIBRARIES", "PgCluster", "PgInstall",
    "PgUnavailable", "Producers", "SlotHolder", "pg_install", "pg_unavailable_reason",
    "server_path", "FaultProxy", "MockBroker", "ProxiedBroker", "_LineReader", "_PipedHelper",
    "DEFAULT_STATUS_INTERVAL", "SANITIZER_REPORT", "TUNINGS", "Process", "ProcessFactory",
    "_process_logs", "confirm_timeout", "process_log_count", "process_logs_since",
    "sanitizer_findings", "tuned",
]


def __getattr__(name):
    """harness.current_plugin and harness.current_pg_major read the running
    test's state where it lives (harness_base); set it there too."""
    if name in ("current_plugin", "current_pg_major", "current_names"):
        return getattr(harness_base, name)
    raise AttributeError("module 'harness' has no attribute %r" % name)
