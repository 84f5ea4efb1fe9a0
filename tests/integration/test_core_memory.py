"""test_core_memory.py — bounded memory: one transaction of a million
rows through --max-inflight 10000 under 64 MiB of RSS.

Like every test_core_*.py (end-to-end tests of the core relay: the real
build/outbox-relay between a throwaway PostgreSQL and the mock Kafka
cluster, once with each output plugin, conftest.py's `plugin`), each test
states the guarantee it checks and is built so that it fails when that
guarantee breaks: absence is only asserted after a later marker event has
arrived, LSN checks use the exact end of the commit record (found with
pg_walinspect), and waits are bounded. Shared helpers: core_helpers.py.
"""

import os
import re
import subprocess
import threading
import time

import pytest

from core_helpers import start_relay

# per plugin and major, on the shared real Kafka (conftest.py)
pytestmark = [pytest.mark.usefixtures("plugin", "pg_major"), pytest.mark.real_kafka]


# --------------------------------------------------------------------------
# bounded memory
# --------------------------------------------------------------------------

BULK_ROWS = int(os.environ.get("OUTBOX_RELAY_BULK_ROWS", "1000000"))


@pytest.mark.mock_kafka(
    "its subject is the relayer's memory; 1,000,000 events per plugin and "
    "major would load the cluster every test shares"
)
def test_bounded_memory_one_huge_transaction(pg, broker, kafka, relayer):
    """One transaction of 1,000,000 outbox rows with --max-inflight 10000
    is delivered completely while peak RSS stays under 64 MiB."""
    r = start_relay(relayer, pg, broker, "--max-inflight", "10000")
    # librdkafka's mock cluster keeps only the newest part of each partition
    # (older message sets are dropped, the low watermark moves), so the
    # read-back must keep up while the relayer produces: kcat (a C consumer)
    # reads from the start, before the transaction is even committed.
    broker.create_topic("bulk", 64)  # 64 x the mock's 5 MiB per partition
    ids = []
    proc = subprocess.Popen(["kcat", "-C", "-u", "-b", broker.bootstrap, "-t", "bulk", "-o",
                             "beginning", "-q", "-f", "%h\n"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def read():
        for line in proc.stdout:
            m = re.search(rb"event_id=(\d+)", line)
            if m is not None:
                ids.append(int(m.group(1)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    t0 = time.monotonic()
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
             "SELECT md5((g %% 1000)::text)::uuid, 'bulk.row', "
             "       jsonb_build_object('n', g, 'pad', repeat('x', 40)) "
             "FROM generate_series(1, %s) g", (BULK_ROWS,))
    lo, hi = pg.query("SELECT min(id), max(id) FROM events_outbox")[0]
    t_insert = time.monotonic() - t0
    # Everything up to here is the one transaction: once the slot is
    # confirmed past this position, the relayer has a successful delivery
    # report for every event of it.
    after = pg.current_wal_lsn()
    try:
        deadline = time.monotonic() + 300
        while (pg.confirmed_flush_lsn() or 0) < after:
            assert r.running(), r.log_tail()
            assert time.monotonic() < deadline, (
                "slot not confirmed past the transaction after 300 s; log:\n%s" % r.log_tail())
            r.rss_peak_kb()
            time.sleep(0.5)
        t_done = time.monotonic() - t0
        deadline = time.monotonic() + 120
        while len(ids) < BULK_ROWS and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        proc.kill()
        proc.wait(10)
        reader.join(10)
    seen = bytearray(hi - lo + 1)
    dups = 0
    for i in ids:
        if seen[i - lo]:
            dups += 1
        seen[i - lo] = 1
    delivered = sum(seen)
    peak = r.rss_peak_kb()
    print("\nbulk: %d rows, insert %.1fs, confirmed after %.1fs (%.0f ev/s), "
          "peak RSS %.1f MiB, %d duplicates"
          % (BULK_ROWS, t_insert, t_done, BULK_ROWS / max(t_done, 1e-9), peak / 1024.0, dups))
    assert delivered == BULK_ROWS, "%d of %d delivered (%d messages read); log:\n%s" % (
        delivered, BULK_ROWS, len(ids), r.log_tail())
    assert peak < 64 * 1024, "peak RSS %.1f MiB >= 64 MiB" % (peak / 1024.0)
    assert r.terminate(timeout=60) == 0
