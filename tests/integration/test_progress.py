"""test_progress.py — long work shows progress (issue 15): the backfill and
the reaper log rows done, total, rate and time left every few seconds and
set gauges in /metrics; `status` prints human units beside the exact
figures. Against a real PostgreSQL 15 (wal2json) and the mock Kafka
cluster; the relayer runs with its defaults (no progress flag exists: the
interval is PROGRESS_INTERVAL, 5 s).

  test_backfill_reports_progress
      60,000 pending rows, the broker's round trip slowed to 2 s (the
      10,000-event window makes that 12 s or more): a start line, at least
      two lines with rows done between, done never decreasing nor above the
      total, a final line with every row; the backfill gauges while it runs
      and once it is done
  test_reap_command_reports_progress
      `outbox-relay reap` with default flags (cron) on a large expired
      backlog: at least two progress lines and the final one, matching
      what was deleted; the total is the planner's estimate (more rows than
      are counted exactly), the backfill's an exact count
  test_daemon_reaper_gauges
      the daemon's reaper run: the gauges while it runs and once it ended
  test_status_human_units
      lag, safe WAL, confirm lag and the oldest row's age in human units,
      the exact figures unchanged
"""

import re
import time

import harness
from harness import wait_until
from test_operations import SLOT, TOPIC, cli, insert, outbox_ids, start_with_metrics, metric, \
    scrape, wait_metric
import test_backfill

EXPIRED = "8 days"   # past the default --retention of 7 days
ROWCOUNT_MAX = 100000  # include/outbox_relay/pg/rowcount.h: rows counted exactly
REAP_ROWS = 600000   # batches of 5,000 every 0.1 s at most (the defaults): 12 s or more

_LINE = re.compile(r"(?P<what>backfill|reaper): (?P<done>[\d,]+) (?:of (?P<about>about )?"
                   r"(?P<total>[\d,]+) rows \((?P<pct>[\d.]+) %\)|rows, more than the "
                   r"(?P<over>[\d,]+) (?:counted|estimated) at the start), (?P<tail>.*)$")
_FINAL = re.compile(r"(?P<what>backfill|reaper): finished: (?P<done>[\d,]+) rows in "
                    r"(?P<took>[^(]+) \((?P<rate>[\d,]+) rows/s\)")


def num(text):
    return int(text.replace(",", ""))


def progress_lines(log, what):
    """The progress lines of `what` in log order, as dicts, and the final
    lines."""
    lines, finals = [], []
    for line in log.splitlines():
        m = _LINE.search(line)
        if m and m.group("what") == what:
            lines.append(dict(done=num(m.group("done")),
                              total=num(m.group("total") or m.group("over")),
                              pct=float(m.group("pct")) if m.group("pct") else None,
                              tail=m.group("tail"), line=line))
        m = _FINAL.search(line)
        if m and m.group("what") == what:
            finals.append(num(m.group("done")))
    return lines, finals


def check_consistent(lines, final_total):
    """done never decreases nor passes the final count; the percentages are
    done / total; every line after the first names a rate."""
    dones = [x["done"] for x in lines]
    assert dones == sorted(dones), "done went backwards: %s" % dones
    assert all(d <= final_total for d in dones), (dones, final_total)
    for x in lines:
        if x["pct"] is not None and x["total"] > 0:
            assert abs(x["pct"] - 100.0 * x["done"] / x["total"]) < 0.06, x["line"]
    for x in lines[1:]:
        assert re.search(r"[\d,]+ rows/s|rate not known yet", x["tail"]), x["line"]


def test_backfill_reports_progress(pg, broker, kafka, relayer):
    pending = test_backfill.seed(pg)
    broker.cmd("rtt -1 2000")
    p, port = start_with_metrics(relayer, ["--dsn", pg.dsn(), "--brokers", broker.bootstrap],
                                 "--backfill", "pending")
    # While it runs: the gauges move.
    s = wait_metric(port, lambda s: (metric(s, "outbox_relay_backfill_active") == 1 and
                                     (metric(s, "outbox_relay_backfill_rows_done") or 0) > 0),
                    120, "the backfill gauges while it runs")
    assert metric(s, "outbox_relay_backfill_rows_expected") == len(pending)
    assert metric(s, "outbox_relay_backfill_rows_done") <= len(pending)
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_backfill_rows_per_second") is not None
                    or metric(s, "outbox_relay_backfill_active") == 0, 60, "a backfill rate")
    p.wait_for_log(r"backfill: finished", timeout=240)
    broker.cmd("rtt -1 0")
    p.wait_for_log(r"streaming public\.events_outbox", timeout=60)

    lines, finals = progress_lines(p.log_text(), "backfill")
    print("\n".join(x["line"] for x in lines))
    assert finals == [len(pending)], finals
    assert lines[0]["done"] == 0 and lines[0]["total"] == len(pending), lines[0]
    assert "starting" in lines[0]["tail"], lines[0]
    between = [x for x in lines[1:] if 0 < x["done"]]
    assert len(between) >= 2, "fewer than two progress lines while backfilling: %s" % lines
    assert any("left" in x["tail"] for x in between), lines
    check_consistent(lines, len(pending))
    assert all(x["total"] == len(pending) and "of about" not in x["line"]
               for x in lines)  # an exact count, taken once

    s = scrape(port)
    assert metric(s, "outbox_relay_backfill_active") == 0
    assert metric(s, "outbox_relay_backfill_rows_done") == len(pending)
    assert metric(s, "outbox_relay_backfill_rows_expected") == len(pending)
    assert metric(s, "outbox_relay_backfill_seconds_left") == 0
    assert metric(s, "outbox_relay_backfill_rows_per_second") > 0
    test_backfill.count_in_kafka(kafka, len(pending), timeout=120)
    assert p.terminate() == 0


def seed_expired(pg, n):
    """n rows committed before the slot exists, EXPIRED old: the slot starts
    past them, so they count as delivered and the reaper may take them
    without relaying them first."""
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload, created_at) "
             "SELECT gen_random_uuid(), 'order.created', jsonb_build_object('i', g), "
             "now() - %s::interval FROM generate_series(1, %s) g", (EXPIRED, n))


def test_reap_command_reports_progress(pg, broker, kafka, relayer, relay_args, relayer_binary):
    seed_expired(pg, REAP_ROWS)
    # More rows than ROWCOUNT_MAX (100,000): the total is the planner's
    # estimate, as good as the statistics (autovacuum's ANALYZE on a live
    # table).
    pg.query("ANALYZE events_outbox")
    p = relayer(*relay_args, "--retention", "0")  # a daemon without its reaper: the cron layout
    p.wait_for_log("streaming", timeout=60)
    young = insert(pg, 3)
    kafka.read(TOPIC, expected=3, timeout=30)

    t0 = time.monotonic()
    r = cli(relayer_binary, "reap", "--dsn", pg.dsn(), timeout=300)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    print("reap took %.1f s" % took)
    assert "deleted %d rows" % REAP_ROWS in r.stderr, r.stderr[-3000:]
    assert outbox_ids(pg) == set(young)

    lines, finals = progress_lines(r.stderr, "reaper")
    print("\n".join(x["line"] for x in lines))
    assert finals == [REAP_ROWS], r.stderr[-3000:]
    # Quiet start: the first line comes once the run has lasted 5 s, so
    # every line already has rows done and a rate.
    assert len(lines) >= 2, "fewer than two progress lines in a %.1f s run:\n%s" % (
        took, r.stderr[-3000:])
    assert all(x["done"] > 0 for x in lines), lines
    assert len({x["total"] for x in lines}) == 1, lines  # estimated once
    assert abs(lines[0]["total"] - REAP_ROWS) <= REAP_ROWS // 10, lines
    assert all("of about" in x["line"] or "estimated at the start" in x["line"]
               for x in lines), lines
    assert all(re.search(r"[\d,]+ rows/s", x["tail"]) for x in lines), lines
    check_consistent(lines, REAP_ROWS)
    assert p.terminate() == 0


def test_daemon_reaper_gauges(pg, broker, kafka, relayer, relay_args):
    seed_expired(pg, REAP_ROWS)
    # --reap-interval: the first run 5 s after the start instead of 60 s.
    p, port = start_with_metrics(relayer, relay_args, "--reap-interval", "5")
    s = scrape(port)
    assert metric(s, "outbox_relay_reaper_run_active") is None  # no run yet: no series
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_reaper_run_active") == 1 and
                    (metric(s, "outbox_relay_reaper_run_rows_done") or 0) > 0, 120,
                    "a reaper run in progress")
    # Not analyzed yet: the planner guesses, but never below the ROWCOUNT_MAX
    # + 1 rows the bounded count saw.
    assert metric(s, "outbox_relay_reaper_run_rows_expected") > ROWCOUNT_MAX
    assert 0 < metric(s, "outbox_relay_reaper_run_rows_done") < REAP_ROWS
    s = wait_metric(port, lambda s: metric(s, "outbox_relay_reaper_run_active") == 0, 180,
                    "the reaper run ended")
    assert metric(s, "outbox_relay_reaper_run_rows_done") == REAP_ROWS
    assert metric(s, "outbox_relay_reaper_run_rows_expected") == REAP_ROWS
    assert metric(s, "outbox_relay_reaper_run_seconds_left") == 0
    assert metric(s, "outbox_relay_reaper_rows_deleted_total") == REAP_ROWS
    p.wait_for_log(r"reaper: finished: %s rows" % format(REAP_ROWS, ","), timeout=10)
    lines, _ = progress_lines(p.log_text(), "reaper")
    assert lines, "no progress line from a run that lasted: %s" % p.log_tail()
    check_consistent(lines, REAP_ROWS)
    assert p.terminate() == 0


def human_bytes(n):
    """human_bytes() of src/base/human.c, for the check."""
    if abs(n) < 1024:
        return "%d B" % n
    v, units = abs(n) / 1024.0, ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    u = 0
    while v >= 1023.95 and u + 1 < len(units):
        v /= 1024.0
        u += 1
    return "%s%.1f %s" % ("-" if n < 0 else "", v, units[u])


def test_status_human_units(pg_factory, broker, kafka, relayer, relayer_binary):
    pg = pg_factory(settings={"max_slot_wal_keep_size": "1GB"})  # a safe_wal_size to print
    insert(pg, 2, age="93 seconds")
    p = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--status-interval", "0.5")
    p.wait_for_log("streaming", timeout=30)
    kafka.read(TOPIC, expected=2, timeout=30)
    broker.cmd("down")
    insert(pg, 200)
    time.sleep(1.5)

    # The walsender's flush_lag needs a timing sample: one status reply
    # after WAL it sent, which a loaded machine may take a while to give.
    def status():
        r = cli(relayer_binary, "status", "--dsn", pg.dsn())
        return r, dict(line.split(None, 1) for line in r.stdout.splitlines() if " " in line)
    deadline = time.monotonic() + 20
    r, out = status()
    while out.get("confirm_lag", "").startswith("unknown") and time.monotonic() < deadline:
        time.sleep(0.5)
        r, out = status()
    print(r.stdout)
    # The exact figures, unchanged: scripts read them.
    assert out["lag_bytes"].isdigit(), out
    assert out["safe_wal_size"].isdigit(), out
    # Beside them, human units.
    assert out["lag"] == human_bytes(int(out["lag_bytes"])), out
    assert out["safe_wal"] == human_bytes(int(out["safe_wal_size"])), out
    assert re.fullmatch(r"[\d.]+ s = [\d.]+ (ms|s) \(pg_stat_replication.flush_lag\)|"
                        r"[\d.]+ s = \d+ (s|min)( \d+ s)? \(pg_stat_replication.flush_lag\)",
                        out["confirm_lag"]), out
    age = re.search(r"\(age (\d+) s = (.+)\)$", out["oldest_row"])
    assert age, out
    secs = int(age.group(1))
    assert secs >= 93 and age.group(2) == "%d min%s" % (
        secs // 60, " %d s" % (secs % 60) if secs % 60 else ""), out
    r = cli(relayer_binary, "status", "--dsn", pg.dsn(), "--max-lag-bytes", "1")
    assert r.returncode == 1
    assert re.search(r"UNHEALTHY: lag_bytes \d+ > --max-lag-bytes 1 \(\S+ \S+ > 1 B\)",
                     r.stdout), r.stdout
    broker.cmd("up")
    assert p.terminate() == 0
