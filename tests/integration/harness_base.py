"""harness_base.py — what every module of the test harness shares: the
repository and build paths, the registry that stops every started thing at
exit, free ports, LSN text, bounded waits, subprocess helpers, and the
state of the test running in this process (its output plugin and its
PostgreSQL major, set by conftest.py's `plugin` and `pg_major` fixtures).

harness.py re-exports all of it; the modules that start things
(pg_cluster, processes, piped_helpers, kafka_io) build on it.
"""

import atexit
import os
import random
import signal
import socket
import subprocess
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST_MAJOR = 15                         # the host's own PostgreSQL (bookworm)
PG_BIN = "/usr/lib/postgresql/15/bin"   # its binaries; other majors: PgInstall
PG_TREES = os.environ.get("OUTBOX_PG_TREES") or "/var/cache/outbox-relay/pg-trees"

_live = set()           # objects with a .cleanup() still to run at exit
_live_lock = threading.Lock()


def _register(obj):
    with _live_lock:
        _live.add(obj)


def _unregister(obj):
    with _live_lock:
        _live.discard(obj)


@atexit.register
def _cleanup_all():
    with _live_lock:
        objs = list(_live)
    for obj in objs:
        try:
            obj.cleanup()
        except Exception:  # best effort at interpreter exit
            pass


def build_dir():
    """The CMake build dir: $OUTBOX_RELAY_BUILD or <repo>/build."""
    return os.path.abspath(os.environ.get("OUTBOX_RELAY_BUILD") or os.path.join(REPO_ROOT, "build"))


def tools_dir():
    """Where the test tools (mock-broker, libnodelay.so) are built:
    $OUTBOX_TOOLS_BUILD, else the build dir. A sanitizer run points
    OUTBOX_RELAY_BUILD at the ASan build of the programs under test and
    keeps the tools from the plain build (an LD_PRELOADed library and ASan
    do not mix, and the broker is not what is being checked)."""
    return os.path.abspath(os.environ.get("OUTBOX_TOOLS_BUILD") or build_dir())


def _listen_ports():
    """The ports free_port() picks from: below the kernel's ephemeral range,
    which outgoing connections take their local ports from. A port the
    kernel handed out by bind(0) can be taken by any test's next connect
    before the server that was meant to listen on it binds it; with many
    tests at once that happened (demo: "could not bind ... Address already
    in use")."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return (10000, low - 1) if low > 12000 else None


_LISTEN_PORTS = _listen_ports()
_port_rng = random.Random()  # seeded from os.urandom: each xdist worker differs


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the
    ephemeral range where the system allows it (see _listen_ports)."""
    if _LISTEN_PORTS is not None:
        for _ in range(200):
            port = _port_rng.randint(*_LISTEN_PORTS)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lsn_to_int(text):
    """'16/B374D848' -> int; None stays None."""
    if text is None:
        return None
    hi, lo = str(text).split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(value):
    return "%X/%X" % (value >> 32, value & 0xFFFFFFFF)


def wait_until(predicate, timeout, interval=0.1, message="condition"):
    """Polls predicate() until it returns a truthy value (returned) or
    raises AssertionError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, message))
        time.sleep(interval)


def _run(argv, timeout=60, check=True, **kw):
    """subprocess.run with a deadline and the output in the error."""
    res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=timeout, text=True, **kw)
    if check and res.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(argv), res.returncode, res.stdout))
    return res


def _die_with_parent():
    """preexec_fn: SIGKILL this child when the test process dies, even by
    SIGKILL, so no daemon outlives pytest."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# --------------------------------------------------------------------------
# The test running in this process
# --------------------------------------------------------------------------

# The output plugin the current test runs the relayer with (conftest.py's
# `plugin` fixture sets it for the suites parametrised by plugin; None: the
# relayer's default). Every daemon gets it as OUTBOX_RELAY_PLUGIN, so a
# suite runs unchanged with either plugin; a test's own env or --plugin wins.
PLUGINS = ("wal2json", "pgoutput")
current_plugin = None


def plugin():
    """The output plugin relayers of this test use ("wal2json" by default)."""
    return current_plugin or "wal2json"


# The topic and group names of the test running in this process when its
# broker is the shared real Kafka (conftest.py's `broker`, a
# real_broker.TopicNames); None: the test's names are the cluster's.
current_names = None


def topic(name):
    """The cluster's name of the running test's topic `name` (for code that
    reads or writes Kafka itself rather than through conftest.Kafka)."""
    return current_names.topic(name) if current_names is not None else name


def local_topic(name):
    """The running test's name of the cluster's topic `name`."""
    if current_names is None:
        return name
    return current_names.local(name) or name


# The major of the test running in this process (conftest.py's pg_major
# fixture); None: HOST_MAJOR. PgCluster(major=None) uses it.
current_pg_major = None
