"""test_majors.py — what one PostgreSQL major changes for the relayer, on
that major (the tests/tools/pgtrees.sh trees for 17 and 18).

  test_idle_slot_invalidated_on_18
      idle_replication_slot_timeout (18) invalidates the slot of a stopped
      relayer at a checkpoint, leaving wal_status as it may be: the next
      start refuses it naming invalidation_reason idle_timeout and the fix;
      status and check say the same; nothing is created silently in its
      place
  test_check_and_status_name_the_major
      check's server line and status's name the major and what it implies
      (decoding on a standby from 16, failover slots from 17)
"""

import re
import subprocess
import uuid

import pytest

import harness
from harness import wait_until

pytestmark = pytest.mark.usefixtures("pg_major")


def run(binary, *args):
    return subprocess.run([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin"})


@pytest.mark.pg_majors(18)
def test_idle_slot_invalidated_on_18(pg_factory, broker, kafka, relayer, relayer_binary):
    pg = pg_factory(settings={"idle_replication_slot_timeout": "2s"})
    args = ["--dsn", pg.dsn(), "--brokers", broker.bootstrap]
    r = relayer(*args)
    r.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
             "VALUES (%s, 'order.placed', '{}')", (str(uuid.uuid4()),))
    assert len(kafka.read("order", expected=1, timeout=60)) == 1
    assert r.terminate() == 0

    def invalidated():
        pg.query("CHECKPOINT")
        return pg.scalar("SELECT invalidation_reason FROM pg_replication_slots "
                         "WHERE slot_name = 'outbox_relay'") == "idle_timeout"
    wait_until(invalidated, 150, interval=1, message="the idle slot to be invalidated")

    r = relayer(*args)
    assert r.wait_exit(timeout=60) == 1
    log = r.log_text()
    assert "invalidation_reason = idle_timeout" in log, log
    assert "idle_replication_slot_timeout" in log and "--recreate-slot" in log, log
    assert pg.scalar("SELECT count(*) FROM pg_replication_slots") == 1  # not replaced

    st = run(relayer_binary, "status", "--dsn", pg.dsn())
    assert st.returncode == 1, st.stdout
    assert "invalidated by the server (invalidation_reason idle_timeout)" in st.stdout, st.stdout
    assert re.search(r"^inactive_since\s+\d{4}-", st.stdout, re.M), st.stdout
    ck = run(relayer_binary, "check", *args)
    assert ck.returncode == 1, ck.stdout
    assert re.search(r"^FAIL slot .*invalidation_reason idle_timeout", ck.stdout, re.M), ck.stdout


def test_check_and_status_name_the_major(pg, broker, relayer_binary, pg_major):
    ck = run(relayer_binary, "check", "--dsn", pg.dsn(), "--brokers", broker.bootstrap)
    line = re.search(r"^PASS server\s+PostgreSQL (\d+)\.\d+.*$", ck.stdout, re.M)
    assert line and int(line.group(1)) == pg_major, ck.stdout
    assert ("failover slots (--failover-slot) possible" in line.group(0)) == (pg_major >= 17)
    assert ("logical decoding on a standby possible" in line.group(0)) == (pg_major >= 16)
    st = run(relayer_binary, "status", "--dsn", pg.dsn())
    assert re.search(r"^server\s+PostgreSQL %d\.\d+ .*\(major %d\)" % (pg_major, pg_major),
                     st.stdout, re.M), st.stdout
