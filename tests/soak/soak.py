#!/usr/bin/env python3
"""soak.py — issue 11's soak: the relayer with its defaults for SOAK_SECONDS
(600) at SOAK_RATE (2,000) events/s with a fault every SOAK_FAULT_EVERY (60)
seconds. Not part of CI; run it with `bash tests/soak/run.sh`.

Set-up (tests/integration/harness.py): one PostgreSQL 15 with PostgreSQL's
own wal_sender_timeout (60 s, not the harness's 10 s), three mock brokers
behind fault proxies (harness.ProxiedBroker), a fault proxy in front of
PostgreSQL for the relayer, and the relayer with NO tuning: only --dsn,
--brokers, --metrics-addr (for the delivered counter) and --retention 0
(nothing is reaped, so the outbox table is the truth at the end). It runs
under test_chaos.Supervisor, which restarts it after a SIGKILL 0.1-1 s
later, as systemd (RestartSec=100ms) would.

Producers: SOAK_PRODUCERS (4) threads (test_chaos.Producer's bookkeeping
and reconnects), each committing transactions of SOAK_BATCH (20) events
over 1-3 aggregates with a server-side generate_series, 5 % more rolled
back.
Every event has a per-aggregate sequence number from soak_seq (gapless,
in commit order), as in test_chaos. A consumer thread reads both topics
(2 x 16 partitions) from the start while producing: the mock keeps only
the newest 5 MiB of a partition, so a read at the end would find the
beginning gone; a gap in a partition's offsets fails the run.

Faults, one at a time, the next at the next multiple of SOAK_FAULT_EVERY
(or as soon as the previous one has recovered, if that took longer):
  minute 1   SIGKILL of the relayer in the middle of a broker outage
             (brokers down for SOAK_OUTAGE, the SIGKILL a third of the way
             in, the restart 0.1-1 s later by test_chaos.Supervisor.kill).
             It is the only SIGKILL: the process started then is the one
             whose VmRSS is compared between minute 2 (SOAK_RSS_FROM) and
             the end, so it must live through that window; and it starts
             with the brokers down, so it fills its in-flight window
             (--max-inflight 10000) before minute 2 and the comparison
             measures growth, not the first fill of librdkafka's queue;
  then, cycling: stalled PostgreSQL path (proxy stalls every open
             connection both ways, held until a new walsender streams the
             slot: the default --wal-receiver-timeout is 60 s), stalled
             broker paths (held until the delivered counter, flat, moves
             again: librdkafka's socket.timeout.ms is 60 s), PostgreSQL
             restart (fast), broker outage (all brokers "down" for
             SOAK_OUTAGE = 15 s). The two short ones come last so that the
             relayer is streaming steadily again at minute 10.
After each fault: "recovered" = every row with an id up to max(id) at the
fault's end has been read back from Kafka (bounded; not recovering fails).

At the end: a marker row; wait (bounded) until the slot confirmed its
commit; SIGTERM (exit 0 required); read up to the high watermarks; then
0 lost (every row's event_id seen), 0 foreign (nothing that is not a row),
key/topic/sequence of each first copy as in its row, per aggregate the
first copies in commit order (where a retriable-error rewind was logged,
docs/failure-modes.md "Retriable delivery errors" documents that only the
last copies are: then those are checked), the producers' bookkeeping
against the table, no exit we did not cause, and VmRSS (sampled every 2 s)
at the end minus at minute 2 below 1 MiB (same pid). Exit 1 on any failure.

Knobs (environment): SOAK_SECONDS, SOAK_RATE, SOAK_FAULT_EVERY, SOAK_OUTAGE,
SOAK_FAULTS (the cycle after the first fault, e.g. "pg_restart,broker_outage"),
SOAK_RSS_FROM (120), SOAK_PRODUCERS, SOAK_BATCH, SOAK_SEED (the SIGKILL's
restart pause, aggregates and rollbacks). Logs (relayers, proxies, broker)
stay in the /tmp/outbox-soak-* directory it prints.
"""

import array
import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import psycopg2  # noqa: E402

import harness  # noqa: E402
import test_chaos  # noqa: E402
from harness import wait_until  # noqa: E402

SLOT = "outbox_relay"
TOPICS = ("soaka", "soakb")
PARTITIONS = 16
AGGREGATES = 64
ROLLBACK_RATE = 0.05
PAD = "x" * 120
CYCLE = ("pg_stall", "broker_stall", "pg_restart", "broker_outage")


def env_num(name, default, kind=int):
    return kind(os.environ.get(name) or default)


def log(fmt, *args):
    print(("%7.1f  " % (time.monotonic() - T0)) + (fmt % args if args else fmt), flush=True)


T0 = time.monotonic()


class SoakProducer(test_chaos.Producer):
    """test_chaos.Producer's bookkeeping and reconnects; batches of
    `batch` events per transaction at `rate` events/s."""

    lag = 5
    rollback_rate = ROLLBACK_RATE

    def __init__(self, pg, n, aggs, rng, stop, rate, batch):
        super().__init__(pg, n, aggs, rng, stop)
        self.rate, self.batch = rate, batch
        # Rolled-back transactions on top: `rate` is what commits.
        self.period = self.batch * (1 - ROLLBACK_RATE) / self.rate

    def _pick(self):
        aggs = sorted(self.rng.sample(self.aggs, self.rng.randint(1, 3)))
        self._sizes = [self.batch // len(aggs)] * len(aggs)
        self._sizes[0] += self.batch - sum(self._sizes)
        return aggs

    def _insert(self, cur, aggs, tx, ids):
        for agg, k in zip(aggs, self._sizes):
            cur.execute(
                "WITH s AS (UPDATE soak_seq SET seq = seq + %(k)s WHERE agg = %(agg)s "
                "RETURNING seq, topic) "
                "INSERT INTO public.events_outbox (aggregate_id, type, payload) "
                "SELECT %(agg)s::uuid, s.topic || '.changed', jsonb_build_object("
                "'agg', %(agg)s::text, 'seq', s.seq - %(k)s + g, 'p', %(p)s, 'tx', %(tx)s, "
                "'pad', %(pad)s) FROM s, generate_series(1, %(k)s) AS g ORDER BY g "
                "RETURNING id", dict(k=k, agg=agg, p=self.n, tx=tx, pad=PAD))
            ids += [r[0] for r in cur.fetchall()]


class Reader(threading.Thread):
    """Reads every partition of TOPICS from the beginning, continuously.
    Per aggregate: event ids and sequence numbers in offset order; per
    event id (first copy): the sequence number and aggregate seen."""

    def __init__(self, bootstrap, agg_index, agg_topic):
        super().__init__(daemon=True, name="reader")
        self.bootstrap, self.agg_index, self.agg_topic = bootstrap, agg_index, agg_topic
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.seen = bytearray(1 << 20)          # seen[eid] = 1
        self.kseq = array.array("i", [-1]) * (1 << 20)
        self.kagg = array.array("h", [-1]) * (1 << 20)
        self.per_agg = [(array.array("q"), array.array("i")) for _ in agg_index]
        self.next_off = {}
        self.records = self.duplicates = 0
        self.gaps, self.errors, self.wrong_topic, self.bad = [], [], [], []
        self.other = 0                           # records of unknown aggregates (the marker)
        self.other_ids = []
        self.error = None

    def _grow(self, eid):
        while eid >= len(self.seen):
            n = len(self.seen)
            self.seen.extend(bytes(n))
            self.kseq.extend(array.array("i", [-1]) * n)
            self.kagg.extend(array.array("h", [-1]) * n)

    def positions(self):
        with self.lock:
            return dict(self.next_off)

    def count_seen_upto(self, eid):
        with self.lock:
            return self.seen[:eid + 1].count(1)

    def run(self):
        from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "soak-" + uuid.uuid4().hex[:8],
                      "enable.auto.commit": False, "auto.offset.reset": "error",
                      "fetch.wait.max.ms": 100, "fetch.max.bytes": 52428800,
                      "queued.max.messages.kbytes": 262144, "log_level": 0,
                      "error_cb": lambda e: None})
        try:
            c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in TOPICS for p in range(PARTITIONS)])
            while not self.stop.is_set():
                msgs = c.consume(num_messages=20000, timeout=0.5)
                with self.lock:
                    for m in msgs:
                        self._one(m)
        except Exception as e:  # reported by the main thread
            self.error = repr(e)
        finally:
            c.close()

    def _one(self, m):
        err = m.error()
        if err is not None:
            self.errors.append(str(err))
            return
        k = (m.topic(), m.partition())
        off = m.offset()
        want = self.next_off.get(k, 0)
        if off < want:
            return                               # a re-fetch of what we have
        if off > want:
            self.gaps.append((k, want, off))
        self.next_off[k] = off + 1
        self.records += 1
        headers = dict(m.headers() or [])
        eid = int(headers["event_id"])
        key = m.key().decode()
        ai = self.agg_index.get(key)
        if ai is None:
            self.other += 1
            self.other_ids.append(eid)
            return
        seq = json.loads(m.value())["seq"]
        if self.agg_topic[key] != m.topic():
            self.wrong_topic.append((eid, m.topic(), key))
        self._grow(eid)
        if self.seen[eid]:
            self.duplicates += 1
        else:
            self.seen[eid] = 1
            self.kseq[eid] = seq
            self.kagg[eid] = ai
        eids, seqs = self.per_agg[ai]
        eids.append(eid)
        seqs.append(seq)


def delivered_total(proc):
    """outbox_relay_events_delivered_total of the relayer, or None."""
    try:
        with urllib.request.urlopen("http://%s/metrics" % proc.metrics_addr, timeout=2) as r:
            text = r.read().decode()
    except Exception:
        return None
    total = None
    for line in text.splitlines():
        if line.startswith("outbox_relay_events_delivered_total"):
            total = (total or 0) + float(line.split()[-1])
    return total


def read_rss(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def main():
    duration = env_num("SOAK_SECONDS", 600)
    rate = env_num("SOAK_RATE", 2000, float)
    every = env_num("SOAK_FAULT_EVERY", 60)
    outage = env_num("SOAK_OUTAGE", 15, float)
    n_prod = env_num("SOAK_PRODUCERS", 4)
    batch = env_num("SOAK_BATCH", 20)
    seed = env_num("SOAK_SEED", int(time.time() * 1000) % 1000000)
    cycle = [f for f in (os.environ.get("SOAK_FAULTS") or ",".join(CYCLE)).split(",") if f]
    rss_from = env_num("SOAK_RSS_FROM", 120)
    rng = random.Random(seed)
    logdir = tempfile.mkdtemp(prefix="outbox-soak-")
    log("soak: %d s at %.0f events/s, a fault every %d s, seed %d, logs in %s",
        duration, rate, every, seed, logdir)
    failures = []

    pg = harness.PgCluster(settings={"wal_sender_timeout": "60s"}, name="soak")
    broker = harness.ProxiedBroker(logdir, brokers=3)
    pg_proxy = harness.FaultProxy(pg.port, logdir, max_seconds=duration + 1800)
    for t in TOPICS:
        broker.cmd("topic %s %d" % (t, PARTITIONS))
    aggs = [str(uuid.uuid4()) for _ in range(AGGREGATES)]
    agg_topic = {a: TOPICS[i % 2] for i, a in enumerate(aggs)}
    agg_index = {a: i for i, a in enumerate(aggs)}
    pg.query("CREATE TABLE soak_seq (agg uuid PRIMARY KEY, topic text NOT NULL, seq int NOT NULL DEFAULT 0)")
    for a in aggs:
        pg.query("INSERT INTO soak_seq (agg, topic) VALUES (%s, %s)", (a, agg_topic[a]))
    pg.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")

    binary = os.path.join(harness.build_dir(), "outbox-relay")
    relay_dsn = "host=127.0.0.1 port=%d dbname=postgres user=postgres" % pg_proxy.port
    starts = []

    def relayer(*args):
        addr = "127.0.0.1:%d" % harness.free_port()
        p = harness.Process([binary] + list(args) + ["--metrics-addr", addr],
                            os.path.join(logdir, "relayer-%d.log" % (len(starts) + 1)))
        p.metrics_addr = addr
        starts.append(time.monotonic())
        return p

    sup = test_chaos.Supervisor(relayer, ["--dsn", relay_dsn, "--brokers", broker.bootstrap,
                                          "--retention", "0"])
    sup.start()
    if not test_chaos.wait_streaming(pg, sup, 60):
        raise SystemExit("the relayer did not start streaming:\n" + sup.current.log_tail())

    reader = Reader(broker.bootstrap, agg_index, agg_topic)
    reader.start()

    rss = []                  # (t, pid, kB)
    rss_stop = threading.Event()

    def sample_rss():
        while not rss_stop.wait(2):
            p = sup.current
            kb = read_rss(p.pid) if p is not None and p.returncode is None else None
            if kb is not None:
                rss.append((time.monotonic() - t0, p.pid, kb))

    stop = threading.Event()
    producers = [SoakProducer(pg, n, aggs, random.Random(seed * 31 + n), stop, rate / n_prod, batch)
                 for n in range(n_prod)]
    t0 = time.monotonic()
    for p in producers:
        p.start()
    threading.Thread(target=sample_rss, daemon=True, name="rss").start()

    def elapsed():
        return time.monotonic() - t0

    def idle_until(t):
        while elapsed() < t:
            sup.check()
            if reader.error:
                raise RuntimeError("reader died: %s" % reader.error)
            time.sleep(0.2)

    def max_id():
        for _ in range(50):
            try:
                return pg.scalar("SELECT coalesce(max(id), 0) FROM public.events_outbox")
            except psycopg2.Error:
                time.sleep(0.2)
        return None

    def rows_upto(eid):
        try:
            return pg.scalar("SELECT count(*) FROM public.events_outbox WHERE id <= %s", (eid,))
        except psycopg2.Error:
            return None

    def wait_caught_up(probe, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sup.check()
            need = rows_upto(probe)
            if need is not None and reader.count_seen_upto(probe) >= need:
                return True
            time.sleep(0.5)
        return False

    def produced():
        return sum(p.events_committed for p in producers)

    faults = []               # dicts
    plan = ["kill"] + [cycle[i % len(cycle)] for i in range(max(0, duration // every))]
    rss_mark = None
    k = 0
    try:
        for k, what in enumerate(plan, start=1):
            at = k * every
            if max(at, elapsed()) > duration - 20:
                break
            if rss_from <= at and rss_mark is None:
                idle_until(rss_from)
                rss_mark = (elapsed(), sup.current.pid, read_rss(sup.current.pid))
                log("RSS at %.0f s: pid %d %s kB", rss_mark[0], rss_mark[1], rss_mark[2])
            idle_until(at)
            r = sup.current
            f = {"what": what, "start": elapsed(), "pid": r.pid, "rss_kb": read_rss(r.pid),
                 "produced": produced()}
            note = ""
            if what == "kill":
                # SIGKILL in the middle of a broker outage: the new process
                # fills its in-flight window before minute 2 (see above).
                broker.cmd("down")
                idle_until(f["start"] + outage / 3)
                sup.kill(rng)
                idle_until(f["start"] + outage)
                broker.cmd("up")
                f["held"] = elapsed() - f["start"]
                note = "restarted as pid %d" % sup.current.pid
                test_chaos.wait_streaming(pg, sup, 60)
            elif what == "pg_restart":
                pg.restart()
                f["held"] = elapsed() - f["start"]
            elif what == "broker_outage":
                broker.cmd("down")
                idle_until(f["start"] + outage)
                broker.cmd("up")
                f["held"] = elapsed() - f["start"]
            elif what == "pg_stall":
                old = (pg.slot_info(SLOT) or {}).get("active_pid")
                pg_proxy.stall("both")

                def new_walsender():
                    sup.check()
                    try:
                        info = pg.slot_info(SLOT) or {}
                    except psycopg2.Error:
                        return False
                    return info.get("active") and info.get("active_pid") != old
                try:
                    wait_until(new_walsender, 180, interval=0.5, message="a new walsender")
                    note = "walsender %s replaced by %s" % (old, (pg.slot_info(SLOT) or {}).get("active_pid"))
                except AssertionError:
                    failures.append("pg_stall at %.0f s: no new walsender within 180 s" % f["start"])
                    note = "NO new walsender within 180 s"
                pg_proxy.resume("both")
                f["held"] = elapsed() - f["start"]
            elif what == "broker_stall":
                broker.stall("both")
                last, changed, flat_seen, ok = delivered_total(r), time.monotonic(), False, False
                deadline = time.monotonic() + 180
                while time.monotonic() < deadline:
                    sup.check()
                    time.sleep(0.5)
                    v = delivered_total(r)
                    if v is None:
                        continue
                    if v != last:
                        if flat_seen:
                            ok = True
                            break
                        last, changed = v, time.monotonic()
                    elif time.monotonic() - changed >= 3:
                        flat_seen = True
                broker.resume("both")
                f["held"] = elapsed() - f["start"]
                if ok:
                    note = "deliveries resumed on new connections"
                elif not flat_seen:
                    note = "deliveries never stopped (stall had no effect?)"
                else:
                    failures.append("broker_stall at %.0f s: deliveries did not resume within 180 s"
                                    % f["start"])
                    note = "deliveries did NOT resume within 180 s"
            else:
                raise SystemExit("unknown fault %r" % what)
            probe = max_id()
            t_end = time.monotonic()
            back = probe is not None and wait_caught_up(probe, 240)
            f["caught_up"] = time.monotonic() - t_end if back else None
            f["alive"] = r.running() and sup.current is r
            if what != "kill" and not f["alive"]:
                failures.append("%s at %.0f s: the relayer pid %d did not live through it (rc %s)"
                                % (what, f["start"], r.pid, r.returncode))
            if not back:
                failures.append("%s at %.0f s: rows up to id %s not all read back within 240 s "
                                "after the fault" % (what, f["start"], probe))
            faults.append(f)
            log("fault %d %-13s at %5.1f s: held %5.1f s, all rows before its end in Kafka %s "
                "later; relayer pid %d %s, VmRSS %s kB before; %s", k, what, f["start"], f["held"],
                "%.1f s" % f["caught_up"] if back else "NOT (240 s)", r.pid,
                "alive" if r.running() else "exited rc=%s" % r.returncode, f["rss_kb"], note)
        if rss_mark is None:
            idle_until(min(rss_from, duration))
            rss_mark = (elapsed(), sup.current.pid, read_rss(sup.current.pid))
        idle_until(duration)
        rss_end = (elapsed(), sup.current.pid, read_rss(sup.current.pid))
        log("RSS at %.0f s: pid %d %s kB", rss_end[0], rss_end[1], rss_end[2])
    finally:
        stop.set()
        for p in producers:
            p.join(30)
        broker.cmd("up", check=False)
        broker.resume("both")
        pg_proxy.resume("both")
    t_produced = elapsed()
    n_produced = produced()
    log("producing stopped: %d events committed in %.1f s = %.0f events/s", n_produced, t_produced,
        n_produced / t_produced)

    # Catch up: a marker committed after everything else (test_chaos's way).
    marker_id, marker_end = test_chaos.commit_marker(pg, "soaka")

    def caught_up():
        sup.check()
        c = pg.confirmed_flush_lsn(SLOT)
        return c is not None and c >= marker_end
    try:
        wait_until(caught_up, 300, interval=0.5, message="the slot to confirm the marker")
    except AssertionError as e:
        failures.append("%s (confirmed %s, marker %s); log tail:\n%s" % (
            e, harness.int_to_lsn(pg.confirmed_flush_lsn(SLOT) or 0), harness.int_to_lsn(marker_end),
            sup.current.log_tail()))
    t_confirmed = elapsed()
    last = sup.current
    rc = last.terminate(60)
    if rc != 0:
        failures.append("the last relayer exited %s on SIGTERM" % rc)
    rss_stop.set()

    # Read up to the high watermarks.
    from confluent_kafka import Consumer, TopicPartition
    wc = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "soak-wm", "log_level": 0})
    ends = {}
    for t in TOPICS:
        for p in range(PARTITIONS):
            ends[(t, p)] = wc.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
    wc.close()

    def read_all():
        pos = reader.positions()
        return all(pos.get(k, 0) >= hi for k, hi in ends.items())
    try:
        wait_until(read_all, 300, interval=0.5, message="the reader to reach the high watermarks")
    except AssertionError as e:
        failures.append("%s: at %s of %s" % (e, reader.positions(), ends))
    reader.stop.set()
    reader.join(30)
    t_read = elapsed()

    # The table is the truth.
    n_rows = 0
    missing, mismatched = [], []
    in_table = bytearray(len(reader.seen))
    want_seq = [[] for _ in aggs]
    c2 = psycopg2.connect(pg.dsn(), connect_timeout=10)
    cur = c2.cursor(name="rows")
    cur.itersize = 50000
    cur.execute("SELECT id, aggregate_id::text, type, (payload->>'seq')::int FROM public.events_outbox ORDER BY id")
    marker_seen = False
    for eid, agg, typ, seq in cur:
        if eid == marker_id:
            marker_seen = marker_id in reader.other_ids
            continue
        n_rows += 1
        ai = agg_index.get(agg)
        want_seq[ai].append(seq)
        if eid >= len(in_table):
            in_table.extend(bytes(eid + 1 - len(in_table)))
        in_table[eid] = 1
        if eid >= len(reader.seen) or not reader.seen[eid]:
            missing.append(eid)
        elif reader.kseq[eid] != seq or reader.kagg[eid] != ai or typ != agg_topic[agg] + ".changed":
            mismatched.append((eid, reader.kseq[eid], seq))
    c2.close()
    foreign = [eid for eid in range(len(reader.seen))
               if reader.seen[eid] and (eid >= len(in_table) or not in_table[eid])]
    foreign += [eid for eid in reader.other_ids if eid != marker_id]
    if not marker_seen:
        missing.append(marker_id)
    gaps_in_table = [i for i, s in enumerate(want_seq) if sorted(s) != list(range(1, len(s) + 1))]

    # Producers' bookkeeping against the table.
    claimed = {i for p in producers for i in p.committed}
    rolled = {i for p in producers for i in p.rolled_back}
    uncertain = {i for p in producers for i in p.uncertain}

    def in_tbl(i):
        return i < len(in_table) and in_table[i]
    bk_missing = [i for i in claimed if not in_tbl(i)]
    bk_rolled = [i for i in rolled if in_tbl(i)]
    n_unclaimed = n_rows - len(claimed) - sum(1 for i in uncertain if in_tbl(i))

    # Order per aggregate: first copies in commit order; where a retriable
    # rewind was logged, the last copies (docs/failure-modes.md).
    def order_errors(which):
        errs = []
        for ai, (eids, seqs) in enumerate(reader.per_agg):
            pick = {}
            for pos, eid in enumerate(eids):
                if which == "first":
                    pick.setdefault(eid, pos)
                else:
                    pick[eid] = pos
            nums = [seqs[pos] for pos in sorted(pick.values())]
            for j in range(1, len(nums)):
                if nums[j] < nums[j - 1]:
                    errs.append("%s %s: seq %d after seq %d" % (agg_topic[aggs[ai]], aggs[ai], nums[j], nums[j - 1]))
                    break
        return errs
    first_errs = order_errors("first")
    rewinds = sup.log_count(r"\(retriable\); nothing past it is confirmed")
    last_errs = order_errors("last") if first_errs else []

    # RSS between minute 2 and the end, same process.
    reconnects = sup.log_count(r"reconnecting \(")
    t_end = elapsed()
    print()
    print("soak: seed %d; %.0f s of producing at a target of %.0f events/s: %d events committed = "
          "%.0f events/s achieved (%d transactions, %d rolled back, %d producer errors)"
          % (seed, t_produced, rate, n_produced, n_produced / t_produced,
             sum(p.tx_committed for p in producers), sum(p.tx_rolled_back for p in producers),
             sum(p.errors for p in producers)))
    print("soak: table %d rows (+ marker); Kafka %d records, %d duplicates; %d lost, %d foreign, "
          "%d mismatched, %d wrong topic, %d read gaps, %d first-copy order errors (%d rewinds logged%s)"
          % (n_rows, reader.records, reader.duplicates, len(missing), len(foreign), len(mismatched),
             len(reader.wrong_topic), len(reader.gaps), len(first_errs), rewinds,
             ", %d last-copy order errors" % len(last_errs) if first_errs else ""))
    print("soak: %d relayer processes, %d unexpected exits, %d reconnects logged; timings: "
          "catch-up after producing %.1f s, read-back %.1f s, checks %.1f s"
          % (len(sup.procs), len(sup.unexpected), reconnects, t_confirmed - t_produced,
             t_read - t_confirmed, t_end - t_read))
    print("soak: faults (start s, what, held s, all earlier rows in Kafka s after its end):")
    for f in faults:
        print("  %6.1f  %-13s held %5.1f  caught up %s" % (
            f["start"], f["what"], f["held"], "%.1f" % f["caught_up"] if f["caught_up"] is not None else "NEVER"))
    series = [(round(t), kb) for t, pid, kb in rss if pid == rss_mark[1]][::15]
    print("soak: VmRSS of pid %d every 30 s (s, kB): %s" % (rss_mark[1], series))
    growth = None
    if rss_mark[1] == rss_end[1] and rss_mark[2] and rss_end[2]:
        growth = rss_end[2] - rss_mark[2]
        print("soak: VmRSS at %.0f s %d kB, at %.0f s %d kB: growth %+d kB (limit 1024 kB)"
              % (rss_mark[0], rss_mark[2], rss_end[0], rss_end[2], growth))
    else:
        failures.append("RSS: the process at %.0f s (pid %d) is not the one at %.0f s (pid %d)"
                        % (rss_mark[0], rss_mark[1], rss_end[0], rss_end[1]))
    print("soak: logs in %s" % logdir)

    for proc in sup.procs:
        report = harness.sanitizer_findings(proc.log_path)
        if report:
            failures.append("sanitizer finding in %s:\n%s" % (proc.log_path, report))
    if sup.unexpected:
        failures.append("the relayer exited by itself:\n" + "\n\n".join("pid %d rc %s:\n%s" % u for u in sup.unexpected))
    if missing:
        failures.append("%d rows never reached Kafka, e.g. %s" % (len(missing), missing[:10]))
    if foreign:
        failures.append("%d records that are no row, e.g. %s" % (len(foreign), foreign[:10]))
    if mismatched:
        failures.append("records differ from their rows (eid, kafka seq, row seq): %s" % mismatched[:5])
    if reader.wrong_topic:
        failures.append("records on the wrong topic: %s" % reader.wrong_topic[:5])
    if reader.gaps or reader.errors:
        failures.append("the read-back is incomplete (the mock trimmed records before they were read?): "
                        "gaps %s, errors %s" % (reader.gaps[:5], reader.errors[:5]))
    if gaps_in_table:
        failures.append("the table's sequences have gaps for %d aggregates" % len(gaps_in_table))
    if bk_missing or bk_rolled or n_unclaimed > 0:
        failures.append("producer bookkeeping vs table: %d committed but missing, %d rolled back but "
                        "present, %d rows nobody committed" % (len(bk_missing), len(bk_rolled), n_unclaimed))
    if first_errs and (not rewinds or last_errs):
        failures.append("per-aggregate order broken (first copies%s):\n%s" % (
            ", and last copies" if last_errs else ", no rewind logged", "\n".join((last_errs or first_errs)[:10])))
    if growth is not None and growth >= 1024:
        failures.append("VmRSS grew by %d kB between %.0f s and %.0f s (limit 1024 kB)"
                        % (growth, rss_mark[0], rss_end[0]))
    if failures:
        print("\nsoak: FAILED:\n- " + "\n- ".join(failures))
        return 1
    print("\nsoak: PASSED")
    return 0


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        harness._cleanup_all()
    sys.exit(rc)
