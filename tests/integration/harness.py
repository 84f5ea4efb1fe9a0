"""harness.py — processes and helpers behind the integration-test fixtures.

Everything here starts something real and owns its shutdown:

  PgCluster   a throwaway PostgreSQL (wal_level=logical, wal2json) in a
              temp dir, run as the postgres user because PostgreSQL refuses
              root; the outbox schema from sql/*.sql is loaded on first start.
              The postmaster is our child (not daemonized by pg_ctl) and gets
              SIGKILL if the test process dies, so a killed pytest leaves no
              server behind. major=15 runs the host's binaries; 17 and 18 run
              the server inside a Debian tree (tests/tools/pgtrees.sh), see
              PgInstall.
  MockBroker  build/mock-broker (librdkafka's mock cluster) with its stdin
              control channel.
  Process     any daemon under test (build/outbox-relay): stderr to a log
              file, bounded waits on log lines and exit, peak RSS.
  read_messages / list_topics   read a topic back with confluent_kafka.

Every wait has a deadline; every object registers itself so that an atexit
hook (and the fixtures' finalizers) can stop it even when a test fails or
pytest is interrupted.
"""

import atexit
import glob
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

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


# Sanitizer findings in a program's output: ASan, LSan (leaks at exit) and
# UBSan. Each Process's log is scanned when the test ends (conftest.py).
SANITIZER_REPORT = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: ")
_process_logs = []


def process_logs_since(n):
    """Logs of the Processes started after the first n (see process_log_count)."""
    return _process_logs[n:]


def process_log_count():
    return len(_process_logs)


def sanitizer_findings(log_path):
    """The first sanitizer report in a log (with some lines after it), or None."""
    try:
        with open(log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    m = SANITIZER_REPORT.search(text)
    if m is None:
        return None
    start = text.rfind("\n", 0, m.start()) + 1
    return text[start:start + 4000]


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
# PostgreSQL
# --------------------------------------------------------------------------

BASE_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "wal_level": "logical",
    "max_replication_slots": "10",
    "max_wal_senders": "10",
    "wal_sender_timeout": "10s",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "on",
    "shared_buffers": "32MB",
    "max_connections": "40",
}


# What docs/operations.md tells a user to configure: since the November 2026
# minors (15.19+, 17.12+, every major), a non-core output plugin must be
# named in output_plugin_libraries. Set where the server knows it
# (PgInstall.base_settings); a test that proves the refusals removes it
# again (settings={"output_plugin_libraries": None}).
OUTPUT_PLUGIN_LIBRARIES = "pgoutput, test_decoding, wal2json"


class PgUnavailable(RuntimeError):
    """This major's binaries are not on this machine (str(): why); the
    fixtures turn it into a skip."""


class PgInstall:
    """The binaries of one PostgreSQL major and how to run them.

    major 15 (HOST_MAJOR): the host's /usr/lib/postgresql/15. Others: a
    Debian tree PG_TREES/pgNN built by tests/tools/pgtrees.sh (usable once
    its pgNN.stamp exists), whose programs run chrooted into the tree as
    the tree's own postgres user. The server then shares our network
    namespace, so clients (psycopg2, the relayer) reach it on 127.0.0.1
    unchanged; only file paths differ: a file the server sees as /tmp/x is
    root + "/tmp/x" here (host_path / server_path).
    """

    def __init__(self, major):
        import pwd
        self.major = int(major)
        self.bin = "/usr/lib/postgresql/%d/bin" % self.major     # as the server sees it
        self.pkglibdir = "/usr/lib/postgresql/%d/lib" % self.major
        if self.major == HOST_MAJOR:
            self.root = None
            pw = pwd.getpwnam("postgres")
            self.uid, self.gid, self.home = pw.pw_uid, pw.pw_gid, pw.pw_dir
        else:
            self.root = os.path.join(PG_TREES, "pg%d" % self.major)
            why = self._unavailable_reason()
            if why:
                raise PgUnavailable(why)
            with open(os.path.join(self.root, "etc", "passwd")) as f:
                for line in f:
                    fields = line.rstrip("\n").split(":")
                    if fields[0] == "postgres":
                        self.uid, self.gid, self.home = int(fields[2]), int(fields[3]), fields[5]
                        break
                else:
                    raise PgUnavailable("no postgres user in %s/etc/passwd" % self.root)
        self._params = None
        self._template = None
        self._lock = threading.Lock()

    def _unavailable_reason(self):
        stamp = os.path.join(PG_TREES, "pg%d.stamp" % self.major)
        if os.path.exists(stamp) and os.access(self.host_path(self.bin + "/postgres"), os.X_OK):
            return None
        why = "no PostgreSQL %d tree in %s" % (self.major, PG_TREES)
        try:
            with open(os.path.join(PG_TREES, "pg%d.unavailable" % self.major)) as f:
                why += ": " + f.read().strip()
        except OSError:
            why += " (build it: bash tests/tools/pgtrees.sh %d)" % self.major
        return why

    # -- paths -------------------------------------------------------------

    def host_path(self, path):
        """Where a path the server sees is in our file system."""
        return path if self.root is None else self.root + path

    def server_path(self, path):
        """How the server sees one of our paths (which must be in the tree)."""
        if self.root is None:
            return path
        path = os.path.abspath(path)
        if not path.startswith(self.root + "/"):
            raise ValueError("%s is outside the PostgreSQL %d tree %s" % (path, self.major, self.root))
        return path[len(self.root):]

    def mkdtemp(self, prefix):
        """An empty dir owned by this major's postgres user, in a place its
        server can see (the tree's /tmp); returns our path to it."""
        d = tempfile.mkdtemp(prefix=prefix, dir=self.host_path("/tmp") if self.root else None)
        os.chmod(d, 0o755)
        self.chown(d)
        return d

    def chown(self, path):
        os.chown(path, self.uid, self.gid)

    # -- running its programs ----------------------------------------------

    def preexec(self, die_with_parent=True):
        """A preexec_fn: into the tree (if any), drop root for its postgres
        user (PostgreSQL refuses root), then SIGKILL on the test process's
        death (after setuid: a credential change clears the death signal)."""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        root, uid, gid = self.root, self.uid, self.gid

        def fn():
            if root is not None:
                os.chroot(root)
                os.chdir("/")
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            if die_with_parent:
                libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG

        return fn

    def env(self):
        """The environment of its programs: ours with its postgres user's
        HOME, and for a tree a locale every tree has (the host's LANG may
        name one a minimal tree lacks)."""
        env = dict(os.environ, HOME=self.home)
        if self.root is not None:
            env.update(LC_ALL="C", LANG="C")
            env.pop("LANGUAGE", None)
        return env

    def argv(self, tool, *args):
        return [tool if tool.startswith("/") else "%s/%s" % (self.bin, tool)] + [str(a) for a in args]

    def run(self, tool, *args, timeout=60, check=True, as_postgres=True):
        """Runs one of its programs (pg_waldump, pg_resetwal, ...; a bare
        name is looked up in its bin dir) to completion as its postgres
        user, inside the tree for 17+; paths in args are the server's view
        (server_path). Returns the CompletedProcess (stdout+stderr in
        .stdout); raises RuntimeError on a non-zero exit if check."""
        return _run(self.argv(tool, *args), timeout=timeout, check=check, env=self.env(),
                    cwd="/", preexec_fn=self.preexec() if as_postgres else self._enter_tree)

    def _enter_tree(self):
        """preexec_fn of what may run as root (postgres --describe-config)."""
        if self.root is not None:
            os.chroot(self.root)
            os.chdir("/")

    def version(self):
        """'PostgreSQL 17.12' style server version string of this install."""
        out = self.run("postgres", "--version", as_postgres=False).stdout
        return out.strip()

    def parameters(self):
        """The names of the parameters this server binary knows (postgres
        --describe-config), to configure only what exists on its minor."""
        with self._lock:
            if self._params is None:
                out = self.run("postgres", "--describe-config", as_postgres=False).stdout
                self._params = {line.split("\t", 1)[0] for line in out.splitlines() if line}
            return self._params

    def base_settings(self):
        settings = dict(BASE_SETTINGS)
        if "output_plugin_libraries" in self.parameters():
            settings["output_plugin_libraries"] = OUTPUT_PLUGIN_LIBRARIES
        return settings

    def template_datadir(self):
        """initdb once per process and major; every cluster copies this data
        dir (cp -a is ~10x faster than initdb)."""
        with self._lock:
            if self._template is None:
                root = self.mkdtemp("outbox-pgtemplate-")
                data = os.path.join(root, "data")
                os.mkdir(data, 0o700)
                self.chown(data)
                self.run("initdb", "-D", self.server_path(data), "-A", "trust", "-U", "postgres",
                         "-E", "UTF8", "--no-locale", "-N", timeout=120)
                self._template = root
                atexit.register(shutil.rmtree, root, True)
            return os.path.join(self._template, "data")


_installs = {}
_installs_lock = threading.Lock()


def pg_install(major=None):
    """The PgInstall of `major` (default: the test's, see current_pg_major),
    made once per process; raises PgUnavailable when it is not here."""
    major = int(major or current_pg_major or HOST_MAJOR)
    with _installs_lock:
        inst = _installs.get(major)
        if inst is None:
            try:
                inst = PgInstall(major)
            except PgUnavailable as e:
                inst = e
            _installs[major] = inst
    if isinstance(inst, PgUnavailable):
        raise inst
    return inst


def pg_unavailable_reason(major):
    """None if clusters of `major` can be started here, else why not."""
    try:
        pg_install(major)
        return None
    except PgUnavailable as e:
        return str(e)


def server_path(path):
    """How the server of the test's major sees one of our paths."""
    return pg_install().server_path(path)


# The major of the test running in this process (conftest.py's pg_major
# fixture); None: HOST_MAJOR. PgCluster(major=None) uses it.
current_pg_major = None


class PgCluster:
    """One throwaway PostgreSQL cluster.

    major: 15, 17 or 18 (None: the test's, see current_pg_major); .major,
    .install (its PgInstall: .run_tool, .server_path). .dir and .datadir
    are our paths (inside the tree for 17+).
    settings: extra server settings, passed as -c name=value after (so
    overriding) BASE_SETTINGS, e.g. {"wal_level": "replica"}. password_auth: None (trust everywhere), or
    "md5" / "scram-sha-256": every role except postgres must then log in
    with a password over TCP (postgres itself stays trusted so the harness
    can always connect). load_schema: run sql/*.sql in order after start.
    without_sql: file names of sql/ that load_schema leaves out, e.g.
    ("007_partition_guard.sql",) for a database where the optional guard
    was never loaded.
    """

    def __init__(self, settings=None, password_auth=None, load_schema=True, name="pg", port=None,
                 without_sql=(), major=None):
        self.name = name
        self.without_sql = set(without_sql)
        self.install = pg_install(major)
        self.major = self.install.major
        self.port = port or free_port()
        self.settings = self.install.base_settings()
        self._update_settings(settings)
        self.password_auth = password_auth
        if password_auth:
            self.settings.setdefault("password_encryption", password_auth)
        self.dir = self.install.mkdtemp("outbox-%s-" % name)
        self.datadir = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "postgres.log")
        self._conns = []
        self._holders = []
        self.proc = None
        self._log = None
        _register(self)
        _run(["cp", "-a", self.install.template_datadir(), self.datadir])
        self._write_hba()
        for attempt in range(5):
            try:
                self.start()
                break
            except RuntimeError as e:
                # Another test's server took the port after free_port()
                # saw it free: a port of our own choosing, so take another.
                if port is not None or attempt == 4 or "Address already in use" not in str(e):
                    raise
                self.stop()  # reaps the exited postmaster, closes its log
                self.port = free_port()
        if load_schema:
            self.load_sql_dir(os.path.join(REPO_ROOT, "sql"))

    # -- lifecycle ---------------------------------------------------------

    def _update_settings(self, settings):
        """Overrides server settings; a value of None removes the setting
        (the server's own default then applies)."""
        for k, v in (settings or {}).items():
            if v is None:
                self.settings.pop(k, None)
            else:
                self.settings[k] = str(v)

    def _write_hba(self):
        lines = ["local all all trust", "local replication all trust"]
        if self.password_auth:
            m = self.password_auth
            lines += ["host all postgres 127.0.0.1/32 trust",
                      "host replication postgres 127.0.0.1/32 trust",
                      "host all all 127.0.0.1/32 " + m,
                      "host replication all 127.0.0.1/32 " + m]
        else:
            lines += ["host all all 127.0.0.1/32 trust",
                      "host replication all 127.0.0.1/32 trust"]
        path = os.path.join(self.datadir, "pg_hba.conf")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.install.chown(path)

    def _argv(self):
        sp = self.install.server_path
        argv = self.install.argv("postgres", "-D", sp(self.datadir), "-p", self.port,
                                 "-k", sp(self.dir))
        for k, v in self.settings.items():
            argv += ["-c", "%s=%s" % (k, v)]
        return argv

    def start(self, timeout=60):
        """Starts the postmaster as a child of this process (not daemonized
        by pg_ctl) running as postgres, so that it dies with the test run
        even if pytest is SIGKILLed; returns once it accepts connections."""
        import psycopg2
        if self.proc is not None and self.proc.poll() is None:
            return
        self._log = open(self.logfile, "ab")
        self.proc = subprocess.Popen(self._argv(), stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, cwd=self.dir,
                                     start_new_session=True, env=self.install.env(),
                                     preexec_fn=self.install.preexec())
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("postgres exited with %s during start:\n%s"
                                   % (self.proc.returncode, self.log_text()[-3000:]))
            try:
                psycopg2.connect(self.dsn(), connect_timeout=5).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() >= deadline:
                    self.stop(mode="immediate")
                    raise RuntimeError("postgres not ready within %ds:\n%s"
                                       % (timeout, self.log_text()[-3000:]))
                time.sleep(0.1)

    def stop(self, mode="fast", timeout=60):
        """Stops the server (smart/fast/immediate as pg_ctl -m would);
        harmless when it is not running. SIGKILL after timeout."""
        self.close_connections()
        if self.proc is None:
            return
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        self._log.close()

    def restart(self, settings=None, timeout=60):
        """Stops (fast) and starts again, optionally with changed settings."""
        self.stop()
        self._update_settings(settings)
        self.start(timeout=timeout)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def run_tool(self, tool, *args, timeout=60, check=True):
        """Runs a program of this cluster's major (pg_waldump, pg_resetwal,
        pg_basebackup ...) as postgres, inside its tree for 17+; see
        PgInstall.run. Paths in args: the server's view (server_path)."""
        return self.install.run(tool, *args, timeout=timeout, check=check)

    def server_path(self, path):
        """How this server (and run_tool) sees one of our paths."""
        return self.install.server_path(path)

    def cleanup(self):
        """Stops the server (always) and removes the temp dir."""
        for h in list(self._holders):
            h.release()
        try:
            self.stop(mode="immediate", timeout=30)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            _unregister(self)

    def log_text(self):
        try:
            with open(self.logfile, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # -- connections -------------------------------------------------------

    def dsn(self, user="postgres", password=None, dbname="postgres", **extra):
        parts = ["host=127.0.0.1", "port=%d" % self.port, "dbname=%s" % dbname, "user=%s" % user]
        if password is not None:
            parts.append("password=%s" % password)
        parts += ["%s=%s" % kv for kv in extra.items()]
        return " ".join(parts)

    def connect(self, autocommit=True, **dsn_kw):
        """A psycopg2 connection (autocommit by default), closed at cleanup."""
        import psycopg2
        conn = psycopg2.connect(self.dsn(**dsn_kw), connect_timeout=10)
        conn.autocommit = autocommit
        self._conns.append(conn)
        return conn

    def close_connections(self):
        for c in self._conns:
            try:
                c.close()
            except Exception:
                pass
        self._conns = []

    def query(self, sql, params=None):
        """Runs one statement on a fresh autocommit connection; returns all
        rows (or None for statements without a result)."""
        import psycopg2
        with psycopg2.connect(self.dsn(), connect_timeout=10) as conn:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql, params)
                rows = cur.fetchall() if cur.description else None
        conn.close()
        return rows

    def scalar(self, sql, params=None):
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    # Not part of the schema every test gets: with --plugin pgoutput the
    # relayer creates the publication itself when its role may (the path a
    # user who just tries it takes); a least-privilege role needs the
    # table's owner to run this file (create_role).
    PUBLICATION_SQL = "008_publication.sql"

    def load_sql_dir(self, path):
        for f in sorted(glob.glob(os.path.join(path, "*.sql"))):
            name = os.path.basename(f)
            if name != self.PUBLICATION_SQL and name not in self.without_sql:
                self.load_sql(f)

    def prepare_for_unprivileged_relayer(self):
        """What the table's owner does for a relayer role that is not the
        owner (docs/operations.md): with pgoutput, create the publication
        (sql/008_publication.sql); nothing for wal2json."""
        if plugin() == "pgoutput":
            self.load_sql(os.path.join(REPO_ROOT, "sql", self.PUBLICATION_SQL))

    def load_sql(self, f):
        with open(f) as fh:
            self.query(fh.read())

    # -- roles -------------------------------------------------------------

    def create_role(self, name, replication=True, password=None, login=True, superuser=False,
                    grant_outbox=True):
        """Creates a role; with grant_outbox the same grants as
        sql/003_relay_role.sql gives outbox_relay."""
        from psycopg2 import sql as S
        attrs = ["LOGIN" if login else "NOLOGIN",
                 "REPLICATION" if replication else "NOREPLICATION",
                 "SUPERUSER" if superuser else "NOSUPERUSER"]
        stmt = S.SQL("CREATE ROLE {} WITH " + " ".join(attrs)).format(S.Identifier(name))
        if password is not None:
            stmt = stmt + S.SQL(" PASSWORD {}").format(S.Literal(password))
        self.query(stmt)
        if grant_outbox:
            self.query(S.SQL("GRANT USAGE ON SCHEMA public TO {0}; "
                             "GRANT SELECT, DELETE ON public.events_outbox TO {0}")
                       .format(S.Identifier(name)))
            self.prepare_for_unprivileged_relayer()

    # -- WAL and slots -----------------------------------------------------

    def current_wal_lsn(self):
        return lsn_to_int(self.scalar("SELECT pg_current_wal_lsn()"))

    def confirmed_flush_lsn(self, slot="outbox_relay"):
        """The slot's confirmed_flush_lsn as an int (None if no such slot)."""
        return lsn_to_int(self.scalar(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (slot,)))

    def slot_info(self, slot="outbox_relay"):
        """dict(plugin, slot_type, active, active_pid, confirmed_flush_lsn) or None."""
        rows = self.query("SELECT plugin, slot_type, active, active_pid, confirmed_flush_lsn "
                          "FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        if not rows:
            return None
        plugin, slot_type, active, pid, lsn = rows[0]
        return dict(plugin=plugin, slot_type=slot_type, active=active, active_pid=pid,
                    confirmed_flush_lsn=lsn_to_int(lsn))

    def commit_end_lsn(self, xid, since_lsn):
        """End LSN of transaction xid's commit record (an int), found with
        pg_walinspect between since_lsn and the flushed end of WAL; None if
        it is not there. A slot whose confirmed_flush_lsn is >= this value
        will not send the transaction again."""
        self.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        return lsn_to_int(self.scalar(
            "SELECT max(end_lsn) FROM pg_get_wal_records_info(%s::pg_lsn, pg_current_wal_flush_lsn()) "
            "WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT' AND xid = %s::xid",
            (int_to_lsn(since_lsn), str(xid))))

    def create_slot(self, slot="outbox_relay", plugin=None):
        """Creates a logical slot (plugin None: the test's, see plugin());
        returns its consistent point as an int. For pgoutput the publication
        is created first, as the relayer would (publication.h)."""
        if plugin is None:
            plugin = globals()["plugin"]()
        if plugin == "pgoutput":
            self.load_sql(os.path.join(REPO_ROOT, "sql", self.PUBLICATION_SQL))
        return lsn_to_int(self.query(
            "SELECT lsn FROM pg_create_logical_replication_slot(%s, %s)", (slot, plugin))[0][0])

    def drop_slot(self, slot="outbox_relay"):
        self.query("SELECT pg_drop_replication_slot(%s)", (slot,))

    def hold_slot(self, slot="outbox_relay", timeout=15):
        """Makes the slot active from a replication connection of this
        process (keepalives answered, nothing confirmed) until .release()."""
        h = SlotHolder(self, slot)
        h.start(timeout)
        self._holders.append(h)
        return h


class SlotHolder:
    """A logical replication connection that keeps a slot active.

    A thread reads and discards messages and sends standby status updates
    that confirm nothing, so wal_sender_timeout never ends the session.
    """

    def __init__(self, pg, slot):
        self.pg = pg
        self.slot = slot
        self._stop = threading.Event()
        self._thread = None
        self._conn = None
        self.error = None

    def start(self, timeout):
        import psycopg2
        import psycopg2.extras
        self._conn = psycopg2.connect(self.pg.dsn(), connect_timeout=10,
                                      connection_factory=psycopg2.extras.LogicalReplicationConnection)
        cur = self._conn.cursor()
        # pgoutput refuses to start without its protocol options
        opts = None
        if (self.pg.slot_info(self.slot) or {}).get("plugin") == "pgoutput":
            opts = {"proto_version": "1", "publication_names": "outbox_relay"}
        cur.start_replication(slot_name=self.slot, decode=False, options=opts)
        self._thread = threading.Thread(target=self._loop, args=(cur,), daemon=True)
        self._thread.start()
        wait_until(lambda: (self.pg.slot_info(self.slot) or {}).get("active"), timeout,
                   message="slot %s to become active" % self.slot)

    def _loop(self, cur):
        try:
            while not self._stop.is_set():
                msg = cur.read_message()
                if msg is None:
                    cur.send_feedback()  # keepalive; flush_lsn stays 0 = unchanged
                    select.select([self._conn], [], [], 0.5)
        except Exception as e:  # the connection dies at release or pg stop
            if not self._stop.is_set():
                self.error = e

    def release(self, timeout=15):
        """Closes the replication connection and waits until the slot is no
        longer active."""
        if self._conn is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            self._conn.close()
        except Exception:
            pass
        self._conn = None
        if self in self.pg._holders:
            self.pg._holders.remove(self)
        try:
            wait_until(lambda: not (self.pg.slot_info(self.slot) or {}).get("active"), timeout,
                       message="slot %s to be released" % self.slot)
        except Exception:
            pass


# --------------------------------------------------------------------------
# Line-oriented pipes with deadlines
# --------------------------------------------------------------------------

class _LineReader:
    """Reads whole lines from a pipe fd with a deadline (no stdio buffering
    to hide data from select)."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""

    def readline(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete line within %.1fs (have %r)" % (timeout, self.buf))
            r, _, _ = select.select([self.fd], [], [], left)
            if not r:
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise EOFError("pipe closed (have %r)" % self.buf)
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("utf-8", "replace")


# --------------------------------------------------------------------------
# Tuned and default runs (issue 11: every binary runs each scenario at least
# once with no tuning flag; defaults are what users run)
# --------------------------------------------------------------------------

TUNINGS = ("tuned", "defaults")


def tuned(tuning, *flags):
    """`flags` for tuning "tuned", nothing at all for "defaults". Use with
    @pytest.mark.parametrize("tuning", harness.TUNINGS) on a suite's
    central scenarios; a "defaults" run must wait on conditions with
    deadlines that allow for the defaults (--status-interval 10 s: the
    slot's confirmed_flush_lsn may lag that long)."""
    assert tuning in TUNINGS, tuning
    return list(flags) if tuning == "tuned" else []


DEFAULT_STATUS_INTERVAL = 10    # s, outbox-relay's --status-interval default


def confirm_timeout(tuning, seconds):
    """A deadline for the slot to confirm something: `seconds` as tuned;
    with the defaults two more status intervals (an update may have just
    gone out when the delivery report arrives)."""
    return seconds if tuning == "tuned" else seconds + 2 * DEFAULT_STATUS_INTERVAL


# --------------------------------------------------------------------------
# Background load: producer threads
# --------------------------------------------------------------------------

class Producers:
    """Threads committing one outbox event per transaction until stopped;
    remembers the ids of committed events (in commit order per thread).
    Thread i of n writes the (sql, params) that self._rows(i, n) yields,
    `rate` transactions per second; sql must return the new row's id. By
    default each thread writes to an aggregate of its own."""

    def __init__(self, pg, threads=2, rate=100):
        self.pg = pg
        self.committed = []
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.errors = []
        self.threads = [threading.Thread(target=self._run, args=(i, threads, rate), daemon=True)
                        for i in range(threads)]

    def _rows(self, i, n):
        agg = str(uuid.uuid4())
        seq = 0
        while True:
            seq += 1
            yield ("INSERT INTO events_outbox (aggregate_id, type, payload) "
                   "VALUES (%s, 'order.placed', %s) RETURNING id",
                   (agg, '{"thread": %d, "seq": %d}' % (i, seq)))

    def _run(self, i, n, rate):
        try:
            import psycopg2
            conn = psycopg2.connect(self.pg.dsn(), connect_timeout=10)
            rows = self._rows(i, n)
            with conn.cursor() as cur:
                while not self.stop_flag.is_set():
                    cur.execute(*next(rows))
                    eid = cur.fetchone()[0]
                    conn.commit()
                    with self.lock:
                        self.committed.append(str(eid))
                    time.sleep(1.0 / rate)
            conn.close()
        except Exception as e:  # surfaced by stop()
            self.errors.append(e)

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        """Stops the threads; returns the committed ids. Raises if a thread
        failed."""
        self.stop_flag.set()
        for t in self.threads:
            t.join(30)
        assert not self.errors, self.errors
        with self.lock:
            return list(self.committed)


# --------------------------------------------------------------------------
# Helper programs driven over a pipe (mock broker, fault proxy)
# --------------------------------------------------------------------------

class _PipedHelper:
    """A helper program of the tests driven by one-line commands on its
    stdin (answers on stdout, stderr to <log_dir>/<name>-<id>.log). It dies
    with the test process (its stdin pipe closes) and is stopped by quit +
    EOF, SIGKILLed if it does not exit in time. Subclasses call _spawn()."""

    def _spawn(self, argv, log_dir, name, first, env=None):
        """Starts argv; returns its first stdout line, which must start
        with `first` (else the helper is cleaned up and this raises)."""
        self.logfile = os.path.join(log_dir, "%s-%s.log" % (name, uuid.uuid4().hex[:6]))
        self._log = open(self.logfile, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env=env, preexec_fn=_die_with_parent)
        _register(self)
        self._reader = _LineReader(self.proc.stdout.fileno())
        return self._expect_line(first, name)

    def _expect_line(self, first, name):
        try:
            line = self._reader.readline(15)
        except Exception:
            self.cleanup()
            raise
        if not line.startswith(first):
            self.cleanup()
            raise RuntimeError("%s said %r" % (name, line))
        return line

    def _send(self, line, timeout):
        """Writes one command line; returns the answer line."""
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()
        return self._reader.readline(timeout)

    def stop(self, timeout=10):
        """quit + EOF; SIGKILL if it does not exit in time. Returns rc."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def cleanup(self):
        try:
            self.stop()
        finally:
            for f in (self.proc.stdout, self._log):
                try:
                    f.close()
                except Exception:
                    pass
            _unregister(self)


# --------------------------------------------------------------------------
# Mock broker
# --------------------------------------------------------------------------

class MockBroker(_PipedHelper):
    """build/mock-broker as a subprocess: .bootstrap and .cmd(line)."""

    def __init__(self, log_dir, brokers=1, partitions=4, binary=None, extra_args=()):
        binary = binary or os.path.join(tools_dir(), "mock-broker")
        if not os.access(binary, os.X_OK):
            raise FileNotFoundError("%s not built (cmake --build build --target mock-broker)" % binary)
        # TCP_NODELAY on the broker's connections, as a real broker has them
        # (tests/tools/nodelay_preload.c): without it a pipelined response
        # waits up to 40 ms for the client's delayed ACK, and read-backs of
        # big topics fall behind the mock's 5 MiB per-partition log.
        preload = os.path.join(tools_dir(), "libnodelay.so")
        if not os.access(preload, os.R_OK):
            raise FileNotFoundError("%s not built (cmake --build build --target nodelay)" % preload)
        line = self._spawn([binary, "--brokers", str(brokers), "--partitions", str(partitions)]
                           + list(extra_args), log_dir, "mock-broker", "BOOTSTRAP ",
                           env=dict(os.environ, LD_PRELOAD=preload))
        self.bootstrap = line.split(" ", 1)[1].strip()
        self.brokers = brokers

    def cmd(self, line, timeout=30, check=True):
        """Sends one command and returns the answer ('ok' or 'err ...');
        with check, an 'err' answer raises."""
        answer = self._send(line, timeout)
        if check and answer != "ok":
            raise RuntimeError("mock-broker %r -> %r" % (line, answer))
        return answer


# --------------------------------------------------------------------------
# Daemon under test
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


class Process:
    """A daemon with stderr (and stdout) captured to a log file.

    env: extra environment; OUTBOX_RELAY_* variables of the calling
    environment are removed first so tests never inherit configuration
    (apart from the test's plugin, see current_plugin).
    """

    def __init__(self, argv, log_path, env=None, cwd=None):
        self.argv = list(argv)
        self.log_path = log_path
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
        if current_plugin is not None:
            full_env["OUTBOX_RELAY_PLUGIN"] = current_plugin
        full_env.update(env or {})
        self._log = open(log_path, "wb")
        _process_logs.append(log_path)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
                                     preexec_fn=_die_with_parent)
        self.pid = self.proc.pid
        self.returncode = None
        self._maxrss_kb = None
        self._last_hwm = None
        self._log_offset = 0
        _register(self)

    # -- state -------------------------------------------------------------

    def _reap(self, block_timeout=0.0):
        """Collects the exit status (and ru_maxrss) with wait4; True if the
        process has exited."""
        if self.returncode is not None:
            return True
        deadline = time.monotonic() + block_timeout
        while True:
            try:
                pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            except ChildProcessError:
                # Somebody else reaped it (should not happen); fall back.
                self.returncode = self.proc.poll()
                return True
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                self.proc.returncode = self.returncode
                self._maxrss_kb = ru.ru_maxrss
                self._log.close()
                _unregister(self)
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def running(self):
        return not self._reap()

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n=40):
        return "\n".join(self.log_text().splitlines()[-n:])

    # -- waits -------------------------------------------------------------

    def wait_for_log(self, pattern, timeout=30, since_mark=False, flags=re.IGNORECASE):
        """Waits until the log matches the regex `pattern` (case-insensitive
        by default); returns the match. Fails early if the process exits
        without producing it. since_mark: only text after the last mark()."""
        rx = re.compile(pattern, flags)
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text()
            if since_mark:
                text = text[self._log_offset:]
            m = rx.search(text)
            if m:
                return m
            exited = not self.running()
            if exited:
                text = self.log_text()[self._log_offset if since_mark else 0:]
                m = rx.search(text)
                if m:
                    return m
                raise AssertionError("process exited (rc=%s) without logging /%s/; log tail:\n%s"
                                     % (self.returncode, pattern, self.log_tail()))
            if time.monotonic() >= deadline:
                raise AssertionError("no /%s/ in the log within %.1fs; log tail:\n%s"
                                     % (pattern, timeout, self.log_tail()))
            time.sleep(0.1)

    def mark(self):
        """Remembers the current end of the log for wait_for_log(since_mark=True)."""
        self._log_offset = len(self.log_text())

    def wait_exit(self, timeout=30):
        """Waits for exit; returns the exit code (negative = signal)."""
        if not self._reap(timeout):
            raise AssertionError("process %d still running after %.1fs; log tail:\n%s"
                                 % (self.pid, timeout, self.log_tail()))
        return self.returncode

    def assert_running_for(self, seconds):
        """Fails if the process exits within `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.running():
                raise AssertionError("process exited (rc=%s) but should keep running; log tail:\n%s"
                                     % (self.returncode, self.log_tail()))
            time.sleep(0.1)

    # -- signals -----------------------------------------------------------

    def signal(self, sig):
        if self.running():
            os.kill(self.pid, sig)

    def terminate(self, timeout=30):
        """SIGTERM and wait; returns the exit code. SIGKILLs and fails if it
        does not stop within timeout."""
        self.rss_peak_kb()
        self.signal(signal.SIGTERM)
        if not self._reap(timeout):
            self.kill()
            raise AssertionError("process ignored SIGTERM for %.1fs; log tail:\n%s"
                                 % (timeout, self.log_tail()))
        return self.returncode

    def kill(self):
        """SIGKILL and reap; returns the exit code."""
        self.rss_peak_kb()
        self.signal(signal.SIGKILL)
        self._reap(10)
        return self.returncode

    def rss_peak_kb(self):
        """Peak resident set size in KiB: VmHWM while running, ru_maxrss of
        the reaped child afterwards."""
        if self.returncode is None:
            try:
                with open("/proc/%d/status" % self.pid) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            self._last_hwm = int(line.split()[1])
                            break
            except OSError:
                pass
        if self.returncode is not None and self._maxrss_kb is not None:
            return max(self._maxrss_kb, self._last_hwm or 0)
        return self._last_hwm

    def cleanup(self):
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap(10)
        try:
            self._log.close()
        except Exception:
            pass
        _unregister(self)


class ProcessFactory:
    """Starts `binary` as a Process per call: factory(*args, env=None); the
    log of the Nth is <log_dir>/<name>-N.log. cleanup() SIGKILLs every one
    still running (a fixture's teardown)."""

    def __init__(self, binary, log_dir, name):
        self.binary, self.log_dir, self.name = binary, log_dir, name
        self.procs = []

    def __call__(self, *args, env=None):
        log = os.path.join(self.log_dir, "%s-%d.log" % (self.name, len(self.procs) + 1))
        p = Process([self.binary] + [str(a) for a in args], log, env=env)
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            p.cleanup()


# --------------------------------------------------------------------------
# Kafka read-back
# --------------------------------------------------------------------------

class Message:
    __slots__ = ("topic", "partition", "offset", "key", "value", "headers", "raw_value")

    def __init__(self, m):
        self.topic = m.topic()
        self.partition = m.partition()
        self.offset = m.offset()
        k = m.key()
        self.key = k.decode("utf-8") if k is not None else None
        self.raw_value = m.value()
        try:  # a bytea payload need not be UTF-8: raw_value has its bytes
            self.value = self.raw_value.decode("utf-8") if self.raw_value is not None else None
        except UnicodeDecodeError:
            self.value = None
        self.headers = {}
        for name, val in (m.headers() or []):
            self.headers[name] = val.decode("utf-8") if val is not None else None

    def __repr__(self):
        return "Message(%s[%d]@%d key=%r headers=%r value=%r)" % (
            self.topic, self.partition, self.offset, self.key, self.headers,
            self.value if self.value is None or len(self.value) < 200 else self.value[:200] + "...")


def _consumer_conf(bootstrap):
    return {"bootstrap.servers": bootstrap,
            "group.id": "harness-" + uuid.uuid4().hex[:8],
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
            "log_level": 0}


def list_topics(bootstrap, timeout=10):
    """Names of the topics the cluster knows (no auto-creation)."""
    from confluent_kafka import Consumer
    c = Consumer(_consumer_conf(bootstrap))
    try:
        md = c.list_topics(timeout=timeout)
        return sorted(t for t, tm in md.topics.items() if tm.error is None)
    finally:
        c.close()


def topic_partitions(bootstrap, topic, timeout=10):
    """Partition ids of `topic`, or None if it does not exist."""
    from confluent_kafka import Consumer
    c = Consumer(_consumer_conf(bootstrap))
    try:
        md = c.list_topics(timeout=timeout)
        tm = md.topics.get(topic)
        if tm is None or tm.error is not None:
            return None
        return sorted(tm.partitions)
    finally:
        c.close()


def read_messages(bootstrap, topic, expected=None, timeout=30, wait_topic=True):
    """Reads `topic` from the beginning of every partition.

    Returns when `expected` messages have arrived, or after `timeout`
    seconds (so expected=None means "everything seen within timeout").
    A topic that does not exist yet is waited for (until the deadline)
    without being auto-created; if it never appears, [] is returned.
    Messages come back per partition in offset order.
    """
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING, KafkaError
    deadline = time.monotonic() + timeout
    c = Consumer(_consumer_conf(bootstrap))
    out = []
    try:
        parts = None
        while True:
            md = c.list_topics(timeout=max(0.5, min(5, deadline - time.monotonic())))
            tm = md.topics.get(topic)
            if tm is not None and tm.error is None and tm.partitions:
                parts = sorted(tm.partitions)
                break
            if not wait_topic or time.monotonic() >= deadline:
                return out
            time.sleep(0.2)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        while expected is None or len(out) < expected:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            batch = c.consume(num_messages=10000, timeout=min(left, 0.5))
            for m in batch:
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError("consume error: %s" % m.error())
                out.append(Message(m))
    finally:
        c.close()
    out.sort(key=lambda m: (m.partition, m.offset))
    return out


def scan_messages(bootstrap, topic, on_message, expected, timeout=60):
    """Like read_messages, for big topics: calls on_message(m) with each raw
    confluent_kafka.Message instead of keeping them; returns the count seen
    when `expected` arrived or the timeout passed."""
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
    deadline = time.monotonic() + timeout
    c = Consumer(dict(_consumer_conf(bootstrap), **{"fetch.max.bytes": 52428800,
                                                     "queued.max.messages.kbytes": 262144}))
    n = 0
    try:
        while True:
            md = c.list_topics(timeout=max(0.5, min(5, deadline - time.monotonic())))
            tm = md.topics.get(topic)
            if tm is not None and tm.error is None and tm.partitions:
                break
            if time.monotonic() >= deadline:
                return 0
            time.sleep(0.2)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(tm.partitions)])
        while n < expected:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for m in c.consume(num_messages=100000, timeout=min(left, 0.5)):
                if m.error() is not None:
                    raise RuntimeError("consume error: %s" % m.error())
                on_message(m)
                n += 1
    finally:
        c.close()
    return n


def produce(bootstrap, topic, messages, timeout=30, **conf):
    """Produces (key, value, headers) tuples; returns the delivery errors
    (empty list = all delivered)."""
    from confluent_kafka import Producer
    p = Producer(dict({"bootstrap.servers": bootstrap, "log_level": 3}, **conf))
    errors = []

    def dr(err, msg):
        if err is not None:
            errors.append(err)

    for key, value, headers in messages:
        p.produce(topic, key=key, value=value, headers=headers, on_delivery=dr)
    left = p.flush(timeout)
    if left:
        errors.append("%d message(s) not delivered within %.1fs" % (left, timeout))
    return errors


# --------------------------------------------------------------------------
# Fault proxy (tests/tools/fault_proxy.py)
# --------------------------------------------------------------------------

class FaultProxy(_PipedHelper):
    """tests/tools/fault_proxy.py in front of 127.0.0.1:target_port: point a
    client at .port, then break its path with .stall(), .resume(), .delay(),
    .cut(), .reset(), .refuse(). direction: "up" (client -> target), "down"
    (target -> client) or "both"; which: "existing" (the connections open
    now), "new", "all" or a connection id (see .conns()).

    The proxy exits when this object's stdin pipe closes (the test process
    died), after max_seconds, or on .stop()."""

    def __init__(self, target_port, log_dir, listen_port=0, max_seconds=1800):
        script = os.path.join(REPO_ROOT, "tests", "tools", "fault_proxy.py")
        self.target_port = target_port
        line = self._spawn(["python3", script, "--target", "127.0.0.1:%d" % target_port,
                            "--listen", "127.0.0.1:%d" % listen_port,
                            "--max-seconds", str(max_seconds)],
                           log_dir, "fault-proxy", "LISTEN ")
        self.port = int(line.rsplit(":", 1)[1])
        self.address = "127.0.0.1:%d" % self.port

    def cmd(self, line, timeout=10):
        """One command; returns the answer after "ok" ('' if none); an
        "err" answer raises."""
        answer = self._send(line, timeout)
        if not answer.startswith("ok"):
            raise RuntimeError("fault_proxy %r -> %r" % (line, answer))
        return answer[2:].strip()

    def stall(self, direction="both", which="existing"):
        self.cmd("stall %s %s" % (direction, which))

    def resume(self, direction="both", which="all"):
        self.cmd("resume %s %s" % (direction, which))

    def delay(self, ms, direction="both", which="all"):
        self.cmd("delay %d %s %s" % (ms, direction, which))

    def cut(self, direction="both", which="existing"):
        self.cmd("cut %s %s" % (direction, which))

    def reset(self, which="existing"):
        self.cmd("reset %s" % which)

    def refuse(self, on=True):
        self.cmd("refuse %s" % ("on" if on else "off"))

    def conns(self):
        """The open connections: [{"id", "up", "down", "flags", "port"}]
        (bytes forwarded each way; flags U/D stalled up/down, u/d EOF seen;
        port: the proxy's local port towards the target, PostgreSQL's
        pg_stat_activity.client_port)."""
        words = self.cmd("conns").split()
        out = []
        for w in words[1:]:
            cid, up, down, flags, port = w.split(":")
            out.append({"id": int(cid), "up": int(up), "down": int(down),
                        "flags": "" if flags == "-" else flags, "port": int(port)})
        return out

    def conn_for_port(self, port):
        """The id of the connection whose target side uses local port
        `port` (pg_stat_activity.client_port), or None."""
        for c in self.conns():
            if c["port"] == port:
                return c["id"]
        return None

    def stats(self):
        """Since start: {"accepted": connections, "up": bytes, "down": bytes}."""
        return {k: int(v) for k, v in (w.split("=") for w in self.cmd("stats").split())}


class ProxiedBroker(MockBroker):
    """A MockBroker whose every client connection goes through a FaultProxy
    per broker: the brokers advertise the proxies' ports (mock-broker
    --advertise), so .bootstrap and the Metadata both name the proxies.
    .proxies[i] is broker i+1's proxy; .stall()/.resume() act on all."""

    def __init__(self, log_dir, brokers=1, partitions=4):
        ports = [free_port() for _ in range(brokers)]
        super().__init__(log_dir, brokers=brokers, partitions=partitions,
                         extra_args=["--advertise", ",".join(map(str, ports))])
        self.proxies = []
        line = self._expect_line("LISTEN ", "mock-broker")
        try:
            real = [int(a.rsplit(":", 1)[1]) for a in line.split(" ", 1)[1].split(",")]
            for adv, port in zip(ports, real):
                self.proxies.append(FaultProxy(port, log_dir, listen_port=adv))
        except Exception:
            self.cleanup()
            raise

    def stall(self, direction="both", which="existing"):
        for p in self.proxies:
            p.stall(direction, which)

    def resume(self, direction="both", which="all"):
        for p in self.proxies:
            p.resume(direction, which)

    def cleanup(self):
        for p in getattr(self, "proxies", []):
            p.cleanup()
        super().cleanup()
