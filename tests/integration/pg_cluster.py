"""pg_cluster.py — PostgreSQL for the integration tests.

  PgCluster   a throwaway PostgreSQL (wal_level=logical, wal2json) in a
              temp dir, run as the postgres user because PostgreSQL refuses
              root; the outbox schema from sql/*.sql is loaded on first start.
              The postmaster is our child (not daemonized by pg_ctl) and gets
              SIGKILL if the test process dies, so a killed pytest leaves no
              server behind. major=15 runs the host's binaries; 17 and 18 run
              the server inside a Debian tree (tests/tools/pgtrees.sh), see
              PgInstall.
  SlotHolder  a replication connection that keeps a slot active.
  Producers   background threads committing outbox events.

The test's major is harness_base.current_pg_major (conftest.py's pg_major
fixture). harness.py re-exports every name.
"""

import atexit
import glob
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid

import harness_base
from harness_base import (HOST_MAJOR, PG_TREES, REPO_ROOT, _register, _run, _unregister,
                          free_port, int_to_lsn, lsn_to_int, plugin, wait_until)

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
    major = int(major or harness_base.current_pg_major or HOST_MAJOR)
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
                conn = psycopg2.connect(self.dsn(), connect_timeout=5)
                try:
                    with conn.cursor() as cur:
                        cur.execute("SHOW data_directory")
                        answering = cur.fetchone()[0]
                finally:
                    conn.close()
                ours = self.install.server_path(self.datadir)
                if os.path.normpath(answering) != os.path.normpath(ours):
                    # Another test's server took the port between
                    # free_port() and our bind, and answered for us (ours
                    # then fails to bind): the test would run on its data.
                    self.stop(mode="immediate")
                    raise RuntimeError("Address already in use: port %d answers for %s, not %s"
                                       % (self.port, answering, ours))
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

    def slot_holder_role(self, slot="outbox_relay"):
        """The role of the walsender holding the slot, read in one statement
        (None while no process holds it). Asking pg_replication_slots and
        then pg_stat_replication separately saw the slot active and then no
        walsender once in CI (not reproduced since)."""
        return self.scalar("SELECT a.usename FROM pg_replication_slots s "
                           "JOIN pg_stat_activity a ON a.pid = s.active_pid "
                           "WHERE s.slot_name = %s AND a.backend_type = 'walsender'", (slot,))

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



class PgStandby(PgCluster):
    """A physical standby of `primary` (same major), made the way a user
    does: a physical slot on the primary, pg_basebackup -R (which writes
    primary_conninfo WITHOUT a dbname into postgresql.auto.conf), then the
    standby started with primary_slot_name and hot_standby_feedback on.

    sync_slots: also sync_replication_slots = on (17+), so the standby keeps
    copies of the primary's failover slots. conninfo_dbname: set
    primary_conninfo with dbname (what the slot-sync worker needs); False
    keeps pg_basebackup's, the common mistake. settings: more -c settings.
    .promote() makes it a primary. Clean it up with .cleanup() (the
    fixture that made it); the primary's cleanup does not.
    """

    def __init__(self, primary, name="standby", slot="standby1", sync_slots=True,
                 conninfo_dbname=True, settings=None):
        self.name = name
        self.without_sql = set()
        self.install = primary.install
        self.major = primary.major
        self.primary = primary
        self.physical_slot = slot
        self.port = free_port()
        self.settings = dict(primary.settings)
        self.password_auth = None
        self.dir = self.install.mkdtemp("outbox-%s-" % name)
        self.datadir = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "postgres.log")
        self._conns = []
        self._holders = []
        self.proc = None
        self._log = None
        _register(self)
        if not primary.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                              (slot,)):
            primary.query("SELECT pg_create_physical_replication_slot(%s, true)", (slot,))
        self.run_tool("pg_basebackup", "-D", self.server_path(self.datadir), "-h", "127.0.0.1",
                      "-p", primary.port, "-U", "postgres", "-R", "-X", "stream", "-c", "fast",
                      timeout=120)
        extra = {"primary_slot_name": slot, "hot_standby_feedback": "on"}
        if sync_slots:
            extra["sync_replication_slots"] = "on"
        if conninfo_dbname:
            extra["primary_conninfo"] = ("host=127.0.0.1 port=%d user=postgres dbname=postgres "
                                         "application_name=%s" % (primary.port, name))
        self._update_settings(extra)
        self._update_settings(settings)
        self.start()

    def promote(self, timeout=60):
        """pg_promote(): returns once the server accepts writes."""
        self.query("SELECT pg_promote(true, %s)", (timeout,))
        wait_until(lambda: not self.scalar("SELECT pg_is_in_recovery()"), timeout,
                   message="%s to be promoted" % self.name)

    def slot_synced(self, slot="outbox_relay"):
        """True once this standby holds a persisted synced copy of slot."""
        return bool(self.scalar("SELECT synced AND NOT temporary FROM pg_replication_slots "
                                "WHERE slot_name = %s", (slot,)))


def multi_host_dsn(clusters, dbname="postgres", user="postgres", **extra):
    """A libpq DSN naming every cluster's host and port in order, e.g. with
    target_session_attrs="read-write": what a relayer beside a primary and
    its standby is given."""
    parts = ["host=%s" % ",".join("127.0.0.1" for _ in clusters),
             "port=%s" % ",".join(str(c.port) for c in clusters),
             "dbname=%s" % dbname, "user=%s" % user]
    parts += ["%s=%s" % kv for kv in extra.items()]
    return " ".join(parts)


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

