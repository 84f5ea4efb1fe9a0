#!/usr/bin/python3
"""peers.py — the body of bench/peers/run.sh (which builds and resolves
what it needs, then runs this). See run.sh for what is measured.

One PostgreSQL 15 (wal2json named in output_plugin_libraries), one backlog
of --events events (bench/schema.sql's bench_backlog(): half one-event
transactions, half 2..20-event ones, ~370-byte payloads) written after a
wal2json slot `peers_origin` was made; every WAL reader gets its own copy
of that slot (pg_copy_logical_replication_slot, with its plugin), so each
one reads the same WAL from the same point. Each brokered run gets a fresh
single-node Kafka (tests/integration/kafka_cluster.py serve) with topics
order and shipment (4 partitions each), warmed up as bench/run.sh does,
and our consumer (consumer.py) assigned to every partition before the
peer starts.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PG_BIN = "/usr/lib/postgresql/15/bin"
TOPICS = "order,shipment"
PARTITIONS = 4
TICK = os.sysconf("SC_CLK_TCK")
W2J_OPTS = ["-o", "format-version=2", "-o", "include-timestamp=1", "-o", "include-types=0",
            "-o", "add-tables=public.events_outbox", "-o", "actions=insert",
            "-o", "add-msg-prefixes=outbox"]
PGO_OPTS = ["-o", "proto_version=1", "-o", "publication_names=outbox_relay",
            "-o", "messages=true"]


def log(*a):
    print("[peers %s]" % time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def stop_group(proc):
    """SIGTERM to a peer's process group (a JVM's children too), SIGKILL
    after 60 s; nothing when it has exited already."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Fail(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def tail(path, n=5):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


# ------------------------------------------------------------- process trees

def _children(pid):
    out = []
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def tree(pid):
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += _children(p)
    return seen


def stat_ticks(pid, with_reaped):
    """utime+stime of pid (all its threads), plus cutime+cstime (children
    it reaped) when with_reaped."""
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    t = int(fields[11]) + int(fields[12])
    if with_reaped:
        t += int(fields[13]) + int(fields[14])
    return t


def rss_kb(pid, key="VmRSS"):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_ticks(pid):
    """CPU ticks of a process tree now: every live process's, plus what the
    root reaped (PostgreSQL: backends of connections that ended)."""
    t = 0
    for p in tree(pid):
        try:
            t += stat_ticks(p, p == pid)
        except OSError:
            pass
    return t


class TreeSampler:
    """Samples a process tree every 50 ms: the peak of the summed RSS and the
    CPU ticks of the tree (live processes plus what the root reaped)."""

    def __init__(self, pid):
        self.pid = pid
        self.peak_kb = 0
        self.ticks = 0
        self.nprocs = 1
        self.stop = threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def sample(self):
        ps = tree(self.pid)
        tot_rss, tot_t = 0, 0
        for p in ps:
            try:
                tot_t += stat_ticks(p, p == self.pid)
            except OSError:
                continue
            tot_rss += rss_kb(p)
        if tot_t >= self.ticks:
            self.ticks = tot_t
        self.peak_kb = max(self.peak_kb, tot_rss, rss_kb(self.pid, "VmHWM"))
        self.nprocs = max(self.nprocs, len(ps))

    def run(self):
        while not self.stop.wait(0.05):
            self.sample()

    def finish(self):
        self.sample()
        self.stop.set()
        self.th.join()


# ---------------------------------------------------------------- PostgreSQL

class Postgres:
    def __init__(self, work):
        self.work = work
        self.port = free_port()
        self.dsn = "host=127.0.0.1 port=%d dbname=postgres user=postgres" % self.port
        self.proc = None

    def start(self):
        d = os.path.join(self.work, "pg")
        os.makedirs(d)
        shutil.chown(d, "postgres", "postgres")
        os.chmod(self.work, 0o755)
        r = subprocess.run(["runuser", "-u", "postgres", "--", PG_BIN + "/initdb", "-D", d + "/data",
                            "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale", "-N"],
                           capture_output=True, text=True)
        if r.returncode:
            raise Fail("initdb: " + r.stderr[-500:])
        # bench/run.sh's settings: durability kept, checkpoints out of the way.
        settings = ["listen_addresses=127.0.0.1", "port=%d" % self.port,
                    "unix_socket_directories=" + d, "wal_level=logical",
                    "max_replication_slots=40", "max_wal_senders=20", "max_connections=100",
                    "fsync=on", "synchronous_commit=on", "full_page_writes=on",
                    "shared_buffers=512MB", "wal_buffers=16MB", "max_wal_size=16GB",
                    "min_wal_size=1GB", "checkpoint_timeout=30min",
                    "logical_decoding_work_mem=64MB", "wal_sender_timeout=60s",
                    "log_min_messages=warning"]
        desc = subprocess.run([PG_BIN + "/postgres", "--describe-config"], capture_output=True,
                              text=True).stdout
        if re.search(r"^output_plugin_libraries", desc, re.M):
            settings.append("output_plugin_libraries=pgoutput,test_decoding,wal2json")
        args = [PG_BIN + "/postgres", "-D", d + "/data"]
        for s in settings:
            args += ["-c", s]
        self.log = open(os.path.join(self.work, "postgres.log"), "w")
        self.proc = subprocess.Popen(["setpriv", "--reuid=postgres", "--regid=postgres",
                                      "--clear-groups"] + args, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        for _ in range(300):
            if subprocess.run([PG_BIN + "/pg_isready", "-q", "-h", "127.0.0.1", "-p",
                               str(self.port)]).returncode == 0:
                return
            if self.proc.poll() is not None:
                raise Fail("postgres exited: " + tail(self.log.name))
            time.sleep(0.1)
        raise Fail("postgres not ready in 30 s")

    def psql(self, *cmds, file=None):
        args = [PG_BIN + "/psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", self.dsn]
        if file:
            args += ["-f", file]
        for c in cmds:
            args += ["-c", c]
        r = subprocess.run(args, capture_output=True, text=True,
                           env=dict(os.environ, PGOPTIONS="-c client_min_messages=warning"))
        if r.returncode:
            raise Fail("psql %s: %s" % (cmds or file, r.stderr.strip()[-500:]))
        return r.stdout.strip()

    def drop_slot(self, name):
        for _ in range(100):  # a stopped client's walsender may linger a moment
            try:
                self.psql("SELECT pg_drop_replication_slot('%s')" % name)
                return
            except Fail:
                time.sleep(0.1)
        raise Fail("cannot drop slot " + name)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --------------------------------------------------------------------- Kafka

class Kafka:
    def __init__(self, work, name):
        self.work, self.name = work, name
        self.bf = os.path.join(work, name + ".bootstrap")
        self.logf = os.path.join(work, name + ".kafka.log")

    def start(self):
        args = [sys.executable, os.path.join(REPO, "tests/integration/kafka_cluster.py"), "serve",
                "--nodes", "1", "--bootstrap-file", self.bf]
        for t in TOPICS.split(",") + ["bench-warmup"]:
            args += ["--topic", "%s:%d" % (t, PARTITIONS)]
        self.out = open(self.logf, "a")
        self.proc = subprocess.Popen(args, stdout=self.out, stderr=subprocess.STDOUT)
        for _ in range(3000):
            if os.path.exists(self.bf) and os.path.getsize(self.bf):
                break
            if self.proc.poll() is not None:
                raise Fail("kafka_cluster.py serve exited (%d): %s" % (self.proc.returncode,
                                                                      tail(self.logf)))
            time.sleep(0.1)
        else:
            raise Fail("Kafka did not start in 300 s")
        self.bootstrap = open(self.bf).read().strip()
        # Warm-up as bench/run.sh's kafka_warm: producer ids handed out, the
        # produce and fetch paths JIT-compiled, before any clock.
        n = 20000
        p = subprocess.run("seq %d | kcat -b %s -P -t bench-warmup -X enable.idempotence=true "
                           "-X linger.ms=0 -X batch.num.messages=5" % (n, self.bootstrap),
                           shell=True, stderr=self.out)
        c = subprocess.run(["kcat", "-b", self.bootstrap, "-C", "-t", "bench-warmup", "-o",
                            "beginning", "-e", "-q"], stdout=subprocess.DEVNULL, stderr=self.out)
        if p.returncode or c.returncode:
            raise Fail("kcat could not warm the broker up: " + tail(self.logf))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        try:
            os.unlink(self.bf)
        except OSError:
            pass


# --------------------------------------------------------------------- peers

class Bench:
    def __init__(self, a, work):
        self.a, self.work = a, work
        self.pg = Postgres(work)
        self.results = []

    def seed(self):
        pg = self.pg
        for f in sorted(os.listdir(os.path.join(REPO, "sql"))):
            if f.endswith(".sql"):
                pg.psql(file=os.path.join(REPO, "sql", f))
        pg.psql(file=os.path.join(REPO, "bench/schema.sql"))
        pg.psql("SELECT pg_create_logical_replication_slot('peers_origin', 'wal2json')")
        self.min_id = int(pg.psql("SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END "
                                  "FROM events_outbox_id_seq"))
        log("seeding a backlog of %d events" % self.a.events)
        pg.psql("SET synchronous_commit = off", "CALL bench_backlog(%d)" % self.a.events)
        pg.psql("VACUUM ANALYZE events_outbox", "CHECKPOINT")
        n = int(pg.psql("SELECT count(*) FROM events_outbox WHERE id >= %d" % self.min_id))
        if n != self.a.events:
            raise Fail("backlog has %d events, expected %d" % (n, self.a.events))
        # The end of the backlog for pg_recvlogical --endpos, then a
        # transaction both plugins send something for (bench/run.sh's
        # end_of_backlog: pgoutput would otherwise send nothing past it).
        self.end_lsn = pg.psql("SELECT pg_current_wal_lsn()")
        pg.psql("SELECT pg_logical_emit_message(true, 'bench-end', '')")
        self.txs = int(pg.psql("SELECT count(*) FROM bench_orders"))

    def slot(self, name, plugin):
        self.pg.psql("SELECT pg_copy_logical_replication_slot('peers_origin', '%s', false, '%s')"
                     % (name, plugin))
        return name

    def record(self, peer, rep, **kw):
        r = dict(peer=peer, rep=rep, events=self.a.events, **kw)
        self.results.append(r)
        log("%s rep %d: %s" % (peer, rep, json.dumps(kw)))

    # pg_recvlogical into /dev/null: the floor, drain time and CPU only.
    def floor(self, rep, plugin):
        name = self.slot("peers_recv", plugin)
        opts = W2J_OPTS if plugin == "wal2json" else PGO_OPTS
        pg0 = tree_ticks(self.pg.proc.pid)
        t0 = time.time()
        p = subprocess.Popen([PG_BIN + "/pg_recvlogical", "-d", self.pg.dsn, "--slot", name,
                              "--start", "--endpos", self.end_lsn, "--no-loop", "-f", "/dev/null"]
                             + opts, stderr=open(os.path.join(self.work, "recv.log"), "a"))
        _, status, ru = os.wait4(p.pid, 0)
        t1 = time.time()
        pg1 = tree_ticks(self.pg.proc.pid)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode:
            raise Fail("pg_recvlogical exited %d: %s" % (p.returncode,
                                                         tail(os.path.join(self.work, "recv.log"))))
        self.pg.drop_slot(name)
        secs = t1 - t0
        self.record("pg_recvlogical (%s)" % plugin, rep, drain_s=secs,
                    events_per_s=self.a.events / secs,
                    cpu_us_per_event=(ru.ru_utime + ru.ru_stime) * 1e6 / self.a.events,
                    pg_cpu_us_per_event=(pg1 - pg0) / TICK * 1e6 / self.a.events,
                    peak_rss_mib=ru.ru_maxrss / 1024, lost=None, duplicated=None,
                    out_of_order=None)

    # A brokered peer: fresh Kafka, our consumer assigned, then the peer,
    # timed from its start until the consumer has every event.
    def brokered(self, peer, rep, make_cmd, slot=None, expect_rc=(0,)):
        k = Kafka(self.work, "%s-%d" % (re.sub(r"\W+", "_", peer), rep))
        k.start()
        tag = k.name
        cons, cout = self.consume(k, tag, self.min_id, self.a.events, timeout=self.a.timeout)
        plog = os.path.join(self.work, tag + ".log")
        cmd = make_cmd(k.bootstrap)
        pg0 = tree_ticks(self.pg.proc.pid)
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=open(plog, "w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        sampler = TreeSampler(proc.pid)
        # Sample until the consumer is done (every event, or its timeout).
        while cons.poll() is None:
            if proc.poll() is not None and proc.returncode not in expect_rc:
                sampler.finish()
                cons.kill()
                raise Fail("%s exited %d: %s" % (peer, proc.returncode, tail(plog)))
            time.sleep(0.02)
        pg1 = tree_ticks(self.pg.proc.pid)
        if proc.poll() is None:
            sampler.finish()
        else:  # exited by itself (the polling relayer)
            sampler.stop.set()
        ticks, peak_kb = sampler.ticks, sampler.peak_kb
        if proc.poll() is not None:
            # The polling relayer prints its own CPU (getrusage) at exit:
            # the tail the last sample missed included.
            m = re.search(r"cpu_ms=([0-9.]+)", open(plog).read())
            if m:
                ticks = max(ticks, float(m.group(1)) / 1000 * TICK)
        stop_group(proc)
        res = json.load(open(cout))
        k.stop()
        if slot:
            self.pg.drop_slot(slot)
        if res["lost"] or not res["last_new_unix_us"]:
            log("%s: %d of %d events lost (log %s)" % (peer, res["lost"], self.a.events, plog))
            secs = None
        else:
            secs = res["last_new_unix_us"] / 1e6 - t0
        # Apart: the start-up (process start to the first event read) and
        # the rate after it, which a long-running peer shows.
        first = res["first_unix_us"] / 1e6 - t0 if res["first_unix_us"] else None
        after = (secs - first) if secs and first is not None else None
        self.record(peer, rep, drain_s=secs,
                    events_per_s=self.a.events / secs if secs else None,
                    first_event_s=first,
                    events_per_s_after_first=(self.a.events - 1) / after if after else None,
                    cpu_us_per_event=ticks / TICK * 1e6 / self.a.events,
                    pg_cpu_us_per_event=(pg1 - pg0) / TICK * 1e6 / self.a.events,
                    peak_rss_mib=peak_kb / 1024, processes=sampler.nprocs,
                    lost=res["lost"], duplicated=res["duplicated"],
                    out_of_order=res["out_of_order"], foreign=res["foreign"])

    def relay_cmd(self, plugin):
        def cmd(bootstrap, slot):
            return [self.a.relay, "--dsn", self.pg.dsn, "--brokers", bootstrap, "--slot", slot,
                    "--plugin", plugin, "--metrics-addr", "127.0.0.1:%d" % free_port()]
        return cmd

    def relay(self, rep, plugin):
        slot = self.slot("peers_relay", plugin)
        cmd = self.relay_cmd(plugin)
        self.brokered("outbox-relay (%s)" % plugin, rep, lambda b: cmd(b, slot), slot)

    def dbz_cmd(self, tag):
        def cmd(bootstrap, slot):
            return self.dbz_props_cmd(tag, bootstrap, slot)
        return cmd

    def dbz_name(self):
        return "Debezium %s (embedded, outbox router)" % self.a.dbz_version

    def debezium(self, rep):
        slot = self.slot("peers_dbz", "pgoutput")
        cmd = self.dbz_cmd("drain-%d" % rep)
        # The JVM exits 143 on SIGTERM (after its shutdown hook).
        self.brokered(self.dbz_name(), rep, lambda b: cmd(b, slot), slot, expect_rc=(0, 143))

    def dbz_props_cmd(self, tag, bootstrap, slot):
        offsets = os.path.join(self.work, "dbz-offsets-%s.dat" % tag)
        props = {
            "name": "outbox-peer",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": offsets,
            "database.hostname": "127.0.0.1",
            "database.port": str(self.pg.port),
            "database.user": "postgres",
            "database.password": "",
            "database.dbname": "postgres",
            "topic.prefix": "peers",
            "plugin.name": "pgoutput",
            "slot.name": slot,
            "publication.name": "outbox_relay",
            "publication.autocreate.mode": "disabled",
            "table.include.list": "public.events_outbox",
            # The slot (and the backlog after it) exist already: stream from
            # the slot, snapshot nothing.
            "snapshot.mode": "no_data",
            "tombstones.on.delete": "false",
            "transforms": "outbox",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
            "transforms.outbox.table.field.event.id": "id",
            "transforms.outbox.table.field.event.key": "aggregate_id",
            "transforms.outbox.table.field.event.payload": "payload",
            # Routed by the prefix of `type` (order.created -> order), as
            # outbox-relay's default topic template {prefix} does.
            "transforms.outbox.route.by.field": "type",
            "transforms.outbox.route.topic.regex": r"(?<routedByValue>[^.]*)\..*",
            "transforms.outbox.route.topic.replacement": "${routedByValue}",
        }
        pf = os.path.join(self.work, "dbz-%s.properties" % tag)
        with open(pf, "w") as f:
            for k, v in props.items():
                f.write("%s=%s\n" % (k, v.replace("\\", "\\\\")))
        return ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", "%s/*:%s" % (self.a.dbz_lib, self.a.dbz_classes), "DebeziumPeer",
                pf, bootstrap]

    # go-pq-cdc-kafka through our driver (bench/peers/gopqcdc/main.go).
    def gpc_cmd(self):
        def cmd(bootstrap, slot):
            # go-pq-cdc refuses an empty password; the bench's PostgreSQL
            # trusts loopback, so this one is never checked.
            return [self.a.gopqcdc, "-port", str(self.pg.port), "-password", "unchecked",
                    "-slot", slot, "-publication", "outbox_relay", "-brokers", bootstrap,
                    "-metric-port", str(free_port())]
        return cmd

    def gpc_name(self):
        return "go-pq-cdc-kafka %s" % self.a.gopqcdc_version

    def gopqcdc(self, rep):
        slot = self.slot("peers_gpc", "pgoutput")
        cmd = self.gpc_cmd()
        self.brokered(self.gpc_name(), rep, lambda b: cmd(b, slot), slot)

    def crash_gopqcdc(self):
        slot = self.slot("peers_crash_gpc", "pgoutput")
        cmd = self.gpc_cmd()
        self.crashed(self.gpc_name(), lambda b: cmd(b, slot), slot)

    def poll(self, rep):
        self.pg.psql("UPDATE events_outbox SET dispatched_at = NULL WHERE dispatched_at IS NOT NULL",
                     "VACUUM FULL events_outbox", "ANALYZE events_outbox", "CHECKPOINT")

        def cmd(bootstrap):
            return [self.a.poll, "--dsn", self.pg.dsn, "--brokers", bootstrap, "--exit-when-empty"]
        self.brokered("polling relayer (seed)", rep, cmd)

    def poll_cmd(self, bootstrap, slot):
        return [self.a.poll, "--dsn", self.pg.dsn, "--brokers", bootstrap]


    # ------------------------------------------------------------ crash runs

    def crashed(self, peer, make_cmd, slot=None, expect_rc=(0,)):
        """The drain again, on a fresh broker, with the peer SIGKILLed (its
        whole process group: the JVM too) once our consumer has read half
        the events, and started again with the same command: the same slot,
        the same Debezium offsets file, the same outbox rows. What it
        delivered twice, lost or reordered across the crash."""
        k = Kafka(self.work, "crash-" + re.sub(r"\W+", "_", peer))
        k.start()
        tag = k.name
        progress = os.path.join(self.work, tag + ".progress")
        cons, cout = self.consume(k, tag, self.min_id, self.a.events, timeout=self.a.timeout,
                                  extra=["--progress", progress, "--grace", "5"])
        plog = os.path.join(self.work, tag + ".log")

        def start():
            return subprocess.Popen(make_cmd(k.bootstrap), stdout=open(plog, "a"),
                                    stderr=subprocess.STDOUT, start_new_session=True)

        def read_so_far():
            try:
                return int(open(progress).read())
            except (OSError, ValueError):
                return 0
        proc = start()
        half = self.a.events // 2
        try:
            deadline = time.time() + self.a.timeout
            while read_so_far() < half:
                if proc.poll() is not None and proc.returncode not in expect_rc:
                    raise Fail("%s exited %d: %s" % (peer, proc.returncode, tail(plog)))
                if time.time() > deadline or cons.poll() is not None:
                    raise Fail("%s: half the events did not arrive (%d): %s"
                               % (peer, read_so_far(), tail(plog)))
                time.sleep(0.01)
            killed_at = read_so_far()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            t_restart = time.time()
            proc = start()
            while cons.poll() is None:
                if proc.poll() is not None and proc.returncode not in expect_rc:
                    cons.kill()
                    raise Fail("%s exited %d after the restart: %s"
                               % (peer, proc.returncode, tail(plog)))
                time.sleep(0.05)
        finally:
            stop_group(proc)
            if cons.poll() is None:
                cons.kill()
            k.stop()
        res = json.load(open(cout))
        if slot:
            self.pg.drop_slot(slot)
        # A fast peer may have delivered everything before the kill landed
        # (the consumer reports its count every 0.02 s): then nothing was
        # left to resume, and the row says so.
        done = res["last_new_unix_us"] / 1e6 - t_restart if res["last_new_unix_us"] else None
        if killed_at >= self.a.events or (done is not None and done < 0):
            log("%s: every event had arrived before the kill: not a crash mid-drain" % peer)
            done = None
        self.record(peer, 0, kind="crash", killed_after=killed_at,
                    restart_to_last_s=done if not res["lost"] else None,
                    lost=res["lost"], duplicated=res["duplicated"],
                    out_of_order=res["out_of_order"])

    def crash_relay(self, plugin):
        slot = self.slot("peers_crash", plugin)
        cmd = self.relay_cmd(plugin)
        self.crashed("outbox-relay (%s)" % plugin, lambda b: cmd(b, slot), slot)

    def crash_debezium(self):
        slot = self.slot("peers_crash_dbz", "pgoutput")
        cmd = self.dbz_cmd("crash")  # one offsets file for both starts
        self.crashed(self.dbz_name(), lambda b: cmd(b, slot), slot, expect_rc=(0, 143))

    def crash_poll(self):
        self.pg.psql("UPDATE events_outbox SET dispatched_at = NULL WHERE dispatched_at IS NOT NULL")

        def cmd(bootstrap):
            return [self.a.poll, "--dsn", self.pg.dsn, "--brokers", bootstrap, "--exit-when-empty"]
        self.crashed("polling relayer (seed)", cmd)

    # --------------------------------------------------- steady-rate latency

    def next_id(self):
        return int(self.pg.psql("SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END "
                                "FROM events_outbox_id_seq"))

    def consume(self, k, tag, min_id, count, latency=False, timeout=120, extra=()):
        """Starts consumer.py for ids [min_id, min_id + count); returns
        (process, its output file) once its partitions are assigned."""
        ready = os.path.join(self.work, tag + ".ready")
        cout = os.path.join(self.work, tag + ".consumer.json")
        clog = open(os.path.join(self.work, tag + ".consumer.log"), "w")
        cons = subprocess.Popen([sys.executable, os.path.join(REPO, "bench/peers/consumer.py"),
                                 "--bootstrap", k.bootstrap, "--topics", TOPICS,
                                 "--min-id", str(min_id), "--count", str(count),
                                 "--timeout", str(timeout), "--ready", ready, "--out", cout]
                                + (["--latency"] if latency else []) + list(extra),
                                stdout=clog, stderr=subprocess.STDOUT)
        for _ in range(600):
            if os.path.exists(ready):
                return cons, cout
            if cons.poll() is not None:
                raise Fail("consumer.py exited: " + tail(clog.name))
            time.sleep(0.05)
        raise Fail("consumer.py not ready in 30 s")

    def steady(self, rep, peer, make_cmd, plugin=None, expect_rc=(0,)):
        """The peer running on a fresh slot (made just before it: no backlog)
        and a fresh broker; one warm-up event read back; then for each rate,
        pgbench inserting at that rate for --steady-seconds, 1,000
        transactions/s of rate/1,000 events each (so 2,000 events/s is
        1,000 transactions of 2, 5,000 is 1,000 of 5, as bench/run.sh does:
        this machine commits about 2,000 one-event transactions/s with
        synchronous_commit on, and 5,000 would not be reached), 16 clients;
        each event's payload carries t_us (the server's clock_timestamp()
        in the INSERT, just before its commit), and our consumer's receive
        time minus t_us is the latency."""
        tag0 = "steady%d-%s" % (rep, re.sub(r"\W+", "_", peer))
        slot = None
        if plugin:
            slot = "peers_steady"
            self.pg.psql("SELECT pg_create_logical_replication_slot('%s', '%s')" % (slot, plugin))
        k = Kafka(self.work, tag0)
        k.start()
        plog = os.path.join(self.work, tag0 + ".log")
        proc = subprocess.Popen(make_cmd(k.bootstrap, slot), stdout=open(plog, "w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        sampler = TreeSampler(proc.pid)
        def script(per_tx):
            path = os.path.join(self.work, "steady-%d.pgbench" % per_tx)
            with open(path, "w") as f:
                f.write("INSERT INTO events_outbox (aggregate_id, type, payload) "
                        "SELECT gen_random_uuid(), 'order.created', jsonb_build_object('t_us', "
                        "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint, 'pad', "
                        "repeat('x', 300)) FROM generate_series(1, %d);\n" % per_tx)
            return path
        try:
            wid = self.next_id()
            cons, cout = self.consume(k, tag0 + "-warm", wid, 1, timeout=180)
            self.pg.psql("INSERT INTO events_outbox (aggregate_id, type, payload) VALUES "
                         "(gen_random_uuid(), 'order.warm', '{}')")
            while cons.poll() is None:
                if proc.poll() is not None and proc.returncode not in expect_rc:
                    cons.kill()
                    raise Fail("%s exited %d: %s" % (peer, proc.returncode, tail(plog)))
                time.sleep(0.05)
            if json.load(open(cout))["lost"]:
                raise Fail("%s: the warm-up event did not arrive in 180 s: %s" % (peer, tail(plog)))
            for rate in self.a.rates:
                n = rate * self.a.steady_seconds
                clients = 16
                per_tx = max(1, rate // 1000)
                txs = n // per_tx
                txs -= txs % clients
                n = txs * per_tx
                mid = self.next_id()
                tag = "%s-%d" % (tag0, rate)
                cons, cout = self.consume(k, tag, mid, n, latency=True,
                                          timeout=self.a.steady_seconds * 10 + 60)
                sampler.sample()
                c0 = sampler.ticks
                t0 = time.time()
                pgb = subprocess.run([PG_BIN + "/pgbench", "-n", "-M", "prepared",
                                      "-f", script(per_tx), "-c", str(clients), "-j", "2",
                                      "-R", str(rate // per_tx), "-t", str(txs // clients),
                                      self.pg.dsn],
                                     capture_output=True, text=True)
                if pgb.returncode:
                    raise Fail("pgbench: " + pgb.stderr[-500:])
                tps = re.search(r"^tps = ([0-9.]+)", pgb.stdout, re.M)
                while cons.poll() is None:
                    if proc.poll() is not None and proc.returncode not in expect_rc:
                        raise Fail("%s exited %d: %s" % (peer, proc.returncode, tail(plog)))
                    time.sleep(0.05)
                sampler.sample()
                res = json.load(open(cout))
                self.record(peer, rep, kind="steady", rate=rate, produced=n,
                            per_tx=per_tx, achieved_tps=float(tps.group(1)) if tps else None,
                            achieved_events_per_s=float(tps.group(1)) * per_tx if tps else None,
                            secs=time.time() - t0,
                            cpu_us_per_event=(sampler.ticks - c0) / TICK * 1e6 / n,
                            peak_rss_mib=sampler.peak_kb / 1024,
                            lost=res["lost"], duplicated=res["duplicated"],
                            out_of_order=res["out_of_order"],
                            p50_ms=res.get("latency_p50_ms"), p99_ms=res.get("latency_p99_ms"),
                            max_ms=res.get("latency_max_ms"))
        finally:
            sampler.finish()
            stop_group(proc)
            k.stop()
            if slot:
                self.pg.drop_slot(slot)


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def table(results, base="outbox-relay (wal2json)"):
    results = [r for r in results if r.get("kind") is None]
    peers = []
    for r in results:
        if r["peer"] not in peers:
            peers.append(r["peer"])
    med = {}
    for p in peers:
        rs = [r for r in results if r["peer"] == p]
        med[p] = {k: median([r.get(k) for r in rs]) for k in
                  ("events_per_s", "cpu_us_per_event", "peak_rss_mib",
                   "first_event_s", "events_per_s_after_first", "pg_cpu_us_per_event")}
        med[p]["n"] = len(rs)
        for k in ("lost", "duplicated", "out_of_order"):
            vs = [r.get(k) for r in rs if r.get(k) is not None]
            med[p][k] = sum(vs) if vs else None
    b = med.get(base, {})

    def f(v, fmt):
        return "—" if v is None else fmt % v

    def ratio(p, k):
        if b.get(k) in (None, 0) or med[p].get(k) is None:
            return "—"
        return "%.2f×" % (med[p][k] / b[k])
    lines = ["| peer | runs | drain events/s | first event after s | events/s after it "
             "| CPU µs/event | PostgreSQL CPU µs/event | peak RSS MiB | lost / dup / out of order "
             "| events/s ÷ relay | CPU ÷ relay | RSS ÷ relay |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in peers:
        m = med[p]
        corr = "—" if m["lost"] is None else "%d / %d / %d" % (m["lost"], m["duplicated"],
                                                               m["out_of_order"])
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            p, m["n"], f(m["events_per_s"], "%.0f"), f(m["first_event_s"], "%.2f"),
            f(m["events_per_s_after_first"], "%.0f"), f(m["cpu_us_per_event"], "%.1f"),
            f(m["pg_cpu_us_per_event"], "%.1f"),
            f(m["peak_rss_mib"], "%.1f"), corr, ratio(p, "events_per_s"),
            ratio(p, "cpu_us_per_event"), ratio(p, "peak_rss_mib")))
    return "\n".join(lines), med


def steady_medians(results):
    """The steady runs per (peer, rate), in the order they first ran: medians of
    the rates and latencies over the repetitions, sums of the counts."""
    groups = {}
    for r in results:
        if r.get("kind") == "steady":
            groups.setdefault((r["peer"], r["rate"]), []).append(r)
    out = []
    for (peer, rate), rs in groups.items():
        m = {"peer": peer, "rate": rate, "n": len(rs)}
        for k in ("achieved_events_per_s", "p50_ms", "p99_ms", "max_ms", "cpu_us_per_event"):
            m[k] = median([r.get(k) for r in rs])
        for k in ("lost", "duplicated", "out_of_order"):
            m[k] = sum(r.get(k) or 0 for r in rs)
        out.append(m)
    return out


def steady_table(results, base="outbox-relay (wal2json)"):
    rs = steady_medians(results)
    if not rs:
        return ""
    by = {(r["peer"], r["rate"]): r for r in rs}

    def f(v, fmt):
        return "—" if v is None else fmt % v
    lines = ["| peer | runs | rate events/s (achieved) | p50 ms | p99 ms | max ms | CPU µs/event "
             "| lost / dup / out of order | p99 ÷ relay | CPU ÷ relay |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        b = by.get((base, r["rate"]), {})

        def ratio(k):
            if not b.get(k) or r.get(k) is None:
                return "—"
            return "%.2f×" % (r[k] / b[k])
        lines.append("| %s | %d | %d (%s) | %s | %s | %s | %s | %d / %d / %d | %s | %s |" % (
            r["peer"], r["n"], r["rate"], f(r.get("achieved_events_per_s"), "%.0f"), f(r["p50_ms"], "%.1f"),
            f(r["p99_ms"], "%.1f"), f(r["max_ms"], "%.1f"), f(r["cpu_us_per_event"], "%.1f"),
            r["lost"], r["duplicated"], r["out_of_order"], ratio("p99_ms"),
            ratio("cpu_us_per_event")))
    return "\n".join(lines)


def crash_table(results):
    rs = [r for r in results if r.get("kind") == "crash"]
    if not rs:
        return ""
    lines = ["| peer | killed after (events read) | lost | duplicated | out of order "
             "| restart to last new event s |", "|---|---|---|---|---|---|"]
    for r in rs:
        killed = "%d" % r["killed_after"]
        if r["killed_after"] >= r["events"]:
            killed += " (all: drained before the kill)"
        lines.append("| %s | %s | %d | %d | %d | %s |" % (
            r["peer"], killed, r["lost"], r["duplicated"], r["out_of_order"],
            "—" if r.get("restart_to_last_s") is None else "%.2f" % r["restart_to_last_s"]))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--peers", default="recv,relay-w2j,relay-pgo,debezium,gopqcdc,poll")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--relay", required=True)
    ap.add_argument("--poll", required=True)
    ap.add_argument("--dbz-lib", required=True)
    ap.add_argument("--dbz-classes", required=True)
    ap.add_argument("--dbz-version", required=True)
    ap.add_argument("--gopqcdc", default="", help="the go-pq-cdc-kafka driver (gopqcdc.sh)")
    ap.add_argument("--gopqcdc-version", default="")
    ap.add_argument("--kafka-version", default="")
    ap.add_argument("--json", required=True)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--rates", default="2000,5000",
                    help="events/s of the steady-rate latency runs (empty: none)")
    ap.add_argument("--steady-seconds", type=int, default=10)
    ap.add_argument("--crash", action="store_true",
                    help="also drain once more per relaying peer with a SIGKILL halfway")
    a = ap.parse_args()
    peers = a.peers.split(",")
    a.rates = [int(x) for x in a.rates.split(",") if x]
    work = tempfile.mkdtemp(prefix="outbox-peers.")
    b = Bench(a, work)
    ok = False
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = open("/proc/loadavg").read().split()[:3]
    try:
        b.pg.start()
        b.seed()
        for rep in range(1, a.reps + 1):
            for p in peers:
                if p == "recv":
                    b.floor(rep, "wal2json")
                    b.floor(rep, "pgoutput")
                elif p == "relay-w2j":
                    b.relay(rep, "wal2json")
                elif p == "relay-pgo":
                    b.relay(rep, "pgoutput")
                elif p == "debezium":
                    b.debezium(rep)
                elif p == "gopqcdc":
                    b.gopqcdc(rep)
                elif p != "poll":
                    raise Fail("unknown peer " + p)
        # Last: its UPDATEs write WAL that the WAL readers above would decode.
        if "poll" in peers:
            for rep in range(1, a.reps + 1):
                b.poll(rep)
        # Crash runs: after the drains (the polling relayer's last again).
        if a.crash:
            for p in peers:
                if p == "relay-w2j":
                    b.crash_relay("wal2json")
                elif p == "relay-pgo":
                    b.crash_relay("pgoutput")
                elif p == "debezium":
                    b.crash_debezium()
                elif p == "gopqcdc":
                    b.crash_gopqcdc()
            if "poll" in peers:
                b.crash_poll()
        # Steady rates: each peer on a fresh slot, after every drain; --reps
        # rounds, medians in the table.
        for rep in range(1, a.reps + 1 if a.rates else 1):
            for p in peers:
                if p == "relay-w2j":
                    b.steady(rep, "outbox-relay (wal2json)", b.relay_cmd("wal2json"), "wal2json")
                elif p == "relay-pgo":
                    b.steady(rep, "outbox-relay (pgoutput)", b.relay_cmd("pgoutput"), "pgoutput")
                elif p == "debezium":
                    b.steady(rep, b.dbz_name(), b.dbz_cmd("steady-%d" % rep), "pgoutput",
                             expect_rc=(0, 143))
                elif p == "gopqcdc":
                    b.steady(rep, b.gpc_name(), b.gpc_cmd(), "pgoutput")
            if "poll" in peers:
                b.pg.psql("UPDATE events_outbox SET dispatched_at = now() WHERE dispatched_at IS NULL")
                b.steady(rep, "polling relayer (seed)", b.poll_cmd)
        ok = True
    except Fail as e:
        log("ERROR:", e)
    finally:
        b.pg.stop()
        if ok and not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log("logs kept in", work)
    md, med = table(b.results)
    st = steady_table(b.results)
    ct = crash_table(b.results)
    doc = {"started": started, "events": a.events, "reps": a.reps, "transactions": getattr(b, "txs", None),
           "loadavg_before": load0, "loadavg_after": open("/proc/loadavg").read().split()[:3],
           "nproc": os.cpu_count(), "kafka": a.kafka_version, "debezium": a.dbz_version,
           "gopqcdc": a.gopqcdc_version,
           "ok": ok, "runs": b.results, "medians": med, "steady_medians": steady_medians(b.results),
           "table": md, "steady_table": st,
           "crash_table": ct}
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(doc, f, indent=1)
    print(md)
    if st:
        print("\nSteady rates (%d s each; latency: the INSERT's clock_timestamp() to our consumer):\n"
              % a.steady_seconds)
        print(st)
    if ct:
        print("\nCrash runs (SIGKILL once half the events were read, then the same command "
              "again):\n")
        print(ct)
    print("\n%d events (%s transactions), %d repetition(s), medians; started %s, load before %s; raw: %s"
          % (a.events, doc["transactions"], a.reps, started, " ".join(load0), a.json))
    # A crash run duplicates by design (at-least-once); a peer other than
    # outbox-relay that loses or reorders across a crash is a finding the
    # table reports, not a failure of this bench.
    bad = [r for r in b.results
           if (r.get("kind") != "crash" and (r.get("lost") or r.get("duplicated")
                                             or r.get("out_of_order")))
           or (r.get("kind") == "crash" and r["peer"].startswith("outbox-relay")
               and (r.get("lost") or r.get("out_of_order")))]
    return 0 if ok and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
