"""test_harness.py — proves the fixtures themselves work, so a red feature
test means the relayer, not the harness."""

import os
import shutil
import signal
import subprocess
import sys
import time

import psycopg2
import pytest

import harness


@pytest.mark.usefixtures("pg_major")
def test_pg_logical_with_wal2json_and_schema(pg):
    assert pg.scalar("SHOW wal_level") == "logical"
    assert pg.scalar("SELECT to_regclass('public.events_outbox')::text") == "events_outbox"
    assert pg.scalar("SELECT rolreplication FROM pg_roles WHERE rolname = 'outbox_relay'") is True

    start = pg.create_slot("harness_probe", "wal2json")
    assert start > 0
    info = pg.slot_info("harness_probe")
    assert info["plugin"] == "wal2json" and info["slot_type"] == "logical"
    assert pg.confirmed_flush_lsn("harness_probe") == start

    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
             "VALUES ('9b2f7c1e-0000-4000-8000-000000000001', 'probe.one', '{\"a\": 1}')")
    changes = pg.query("SELECT data FROM pg_logical_slot_peek_changes('harness_probe', NULL, NULL)")
    text = "\n".join(r[0] for r in changes)
    assert "events_outbox" in text and "probe.one" in text
    assert pg.current_wal_lsn() >= start

    pg.drop_slot("harness_probe")
    assert pg.slot_info("harness_probe") is None


@pytest.mark.usefixtures("pg_major")
def test_pg_factory_other_settings(pg_factory, libdir_without):
    replica = pg_factory(settings={"wal_level": "replica"}, name="replica")
    assert replica.scalar("SHOW wal_level") == "replica"
    with pytest.raises(psycopg2.Error, match="wal_level"):
        replica.create_slot("x", "wal2json")

    nolib = pg_factory(settings={"dynamic_library_path": libdir_without("wal2json")},
                       name="nolib")
    with pytest.raises(psycopg2.Error, match="wal2json"):
        nolib.create_slot("x", "wal2json")
    # Every other module is still found (plpgsql, used by sql/003), so the
    # schema loaded.
    assert nolib.scalar("SELECT to_regclass('public.events_outbox')::text") == "events_outbox"


@pytest.mark.usefixtures("pg_major")
def test_pg_restart_stop_and_cleanup(pg_factory):
    pg = pg_factory()
    pg.query("CREATE TABLE keep (x int); INSERT INTO keep VALUES (42)")
    pg.restart(settings={"wal_sender_timeout": "20s"})
    assert pg.scalar("SELECT x FROM keep") == 42
    assert pg.scalar("SHOW wal_sender_timeout") == "20s"
    pg.stop()
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(pg.dsn(), connect_timeout=3)
    pg.start()
    assert pg.scalar("SELECT 1") == 1
    d = pg.dir
    pg.cleanup()
    assert not os.path.exists(d)


@pytest.mark.usefixtures("pg_major")
def test_pg_major_and_its_tools(pg):
    """The server and the tools run_tool starts are of the test's major
    (inside its tree for 17+), and the tools see the data dir where the
    server does."""
    assert int(pg.scalar("SHOW server_version_num")) // 10000 == pg.major
    assert ("PostgreSQL) %d." % pg.major) in pg.run_tool("pg_ctl", "--version").stdout
    out = pg.run_tool("pg_controldata", "-D", pg.server_path(pg.datadir)).stdout
    assert "in production" in out, out


@pytest.mark.pg_majors(15, 17, 18)  # starts its servers in a child, not by pg_factory
def test_pg_dies_with_the_test_process(pg_major):
    """A postmaster (chrooted for 17+) gets SIGKILL when the process that
    started it dies by SIGKILL: a killed pytest leaves no server behind."""
    script = ("import sys, time; sys.path.insert(0, %r); import harness; "
              "c = harness.PgCluster(major=%d, load_schema=False); "
              "print(c.proc.pid, c.dir, flush=True); time.sleep(120)"
              % (os.path.dirname(os.path.abspath(__file__)), pg_major))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid, d = child.stdout.readline().split()
        pid = int(pid)
        os.kill(pid, 0)
        child.kill()
        child.wait(10)
        harness.wait_until(lambda: not os.path.exists("/proc/%d" % pid), 15,
                           message="postmaster %d to die with its parent" % pid)
    finally:
        child.kill()
        child.wait(10)
        if "d" in locals():
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("method", ["md5", "scram-sha-256"])
def test_password_auth_and_roles(pg_factory, method):
    pg = pg_factory(password_auth=method)
    pg.create_role("relay_pw", replication=True, password="s3cret-Pa55")
    pg.create_role("norepl", replication=False, password="other")
    with pytest.raises(psycopg2.OperationalError, match="password"):
        psycopg2.connect(pg.dsn(user="relay_pw"), connect_timeout=5)
    with pytest.raises(psycopg2.OperationalError, match="password"):
        psycopg2.connect(pg.dsn(user="relay_pw", password="wrong"), connect_timeout=5)
    conn = pg.connect(user="relay_pw", password="s3cret-Pa55")
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM events_outbox")
        assert cur.fetchone()[0] == 0
    stored = pg.scalar("SELECT rolpassword FROM pg_authid WHERE rolname = 'relay_pw'")
    assert stored.startswith("md5" if method == "md5" else "SCRAM-SHA-256$")
    assert pg.scalar("SELECT rolreplication FROM pg_roles WHERE rolname = 'norepl'") is False


def test_slot_holder_keeps_slot_active(pg):
    pg.create_slot("held", "wal2json")
    h = pg.hold_slot("held")
    # Longer than nothing but shorter than wal_sender_timeout would allow a
    # silent holder: the keepalives must keep it active past 10 s.
    time.sleep(11)
    info = pg.slot_info("held")
    assert info["active"], "holder lost the slot"
    assert h.error is None
    h.release()
    assert not pg.slot_info("held")["active"]


def test_broker_round_trip_with_headers(broker, kafka):
    assert broker.bootstrap.startswith("127.0.0.1:")
    broker.cmd("topic rt 3")
    assert broker.cmd("topic rt 3", check=False).startswith("err ")
    assert broker.cmd("no-such-command", check=False).startswith("err ")
    msgs = [(b"k%d" % i, ('{"i": %d, "s": "\\u00e9\\"x"}' % i).encode(),
             [("event_id", str(i).encode()), ("event_type", b"rt.test")]) for i in range(20)]
    assert kafka.produce("rt", msgs) == []
    got = kafka.read("rt", expected=20, timeout=20)
    assert len(got) == 20
    assert kafka.partitions("rt") == [0, 1, 2]
    by_key = {m.key: m for m in got}
    assert by_key["k7"].value == '{"i": 7, "s": "\\u00e9\\"x"}'
    assert by_key["k7"].headers == {"event_id": "7", "event_type": "rt.test"}
    assert "rt" in kafka.topics()


def test_read_does_not_create_topics(broker, kafka):
    assert kafka.read("never-produced", timeout=2) == []
    assert "never-produced" not in kafka.topics()


def test_broker_down_then_up(broker, kafka):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0,
                  "reconnect.backoff.max.ms": 500})
    reports = []
    p.produce("du", key=b"a", value=b"before", on_delivery=lambda e, m: reports.append(e))
    assert p.flush(20) == 0 and reports == [None]

    broker.cmd("down")
    p.produce("du", key=b"a", value=b"while-down", on_delivery=lambda e, m: reports.append(e))
    assert p.flush(3) == 1, "delivered although the broker is down"
    assert len(reports) == 1

    broker.cmd("up")
    assert p.flush(30) == 0
    assert reports == [None, None]
    got = kafka.read("du", expected=2, timeout=20)
    assert sorted(m.value for m in got) == ["before", "while-down"]


def test_broker_request_errors(broker, kafka):
    from confluent_kafka import Producer
    broker.cmd("topic re 1")
    # Retriable error on the next 2 produce requests: the client retries.
    broker.cmd("error 0 NOT_LEADER_FOR_PARTITION 2")
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "retry.backoff.ms": 50})
    reports = []
    p.produce("re", value=b"x", on_delivery=lambda e, m: reports.append(e))
    assert p.flush(30) == 0 and reports == [None]
    # Non-retriable error: the delivery report carries it.
    broker.cmd("error 0 INVALID_RECORD 1")
    p.produce("re", value=b"y", on_delivery=lambda e, m: reports.append(e))
    assert p.flush(30) == 0
    assert reports[1] is not None and reports[1].name() == "INVALID_RECORD"
    broker.cmd("clear-errors 0")
    broker.cmd("rtt -1 0")


def test_broker_stops_on_eof_and_sigterm(broker_factory):
    b = broker_factory()
    b.proc.stdin.close()
    assert b.proc.wait(10) == 0
    b2 = broker_factory()
    b2.proc.send_signal(signal.SIGTERM)
    assert b2.proc.wait(10) == 0


def test_process_helper(tmp_path):
    """The relayer fixture's Process class, on a stand-in daemon."""
    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
              "buf = bytearray(20 * 1024 * 1024)\n"
              "sys.stderr.write('Ready: created replication slot\\n'); sys.stderr.flush()\n"
              "time.sleep(60)\n")
    p = harness.Process([sys.executable, "-c", script], str(tmp_path / "p.log"),
                        env={"OUTBOX_RELAY_X": "1"})
    m = p.wait_for_log(r"created replication (\w+)", timeout=20)
    assert m.group(1) == "slot"
    assert p.rss_peak_kb() > 20 * 1024
    with pytest.raises(AssertionError, match="no /never/"):
        p.wait_for_log("never", timeout=0.5)
    p.assert_running_for(0.3)
    assert p.terminate(10) == 0
    assert p.rss_peak_kb() > 20 * 1024

    p2 = harness.Process(["sleep", "60"], str(tmp_path / "p2.log"))
    assert p2.kill() == -signal.SIGKILL

    p3 = harness.Process(["sh", "-c", "echo bye >&2; exit 3"], str(tmp_path / "p3.log"))
    with pytest.raises(AssertionError, match="exited"):
        p3.wait_for_log("never", timeout=10)
    assert p3.wait_exit(5) == 3


def test_sanitizer_findings_are_seen(tmp_path):
    """The sanitizer pass (tests/run.sh) relies on harness.sanitizer_findings
    spotting a report in a program's log: prove it on a real ASan binary
    that leaks and one that does not."""
    src = tmp_path / "leak.c"
    src.write_text("#include <stdlib.h>\n#include <string.h>\n"
                   "int main(int argc, char **argv) {\n"
                   "  char *p = malloc(64); strcpy(p, \"kept\");\n"
                   "  if (argc > 1) free(p); else p = 0;\n  return 0; }\n")
    exe = tmp_path / "leak"
    import subprocess
    subprocess.run(["cc", "-fsanitize=address", "-g", "-o", str(exe), str(src)], check=True)
    env = {"ASAN_OPTIONS": "detect_leaks=1"}
    leaky = harness.Process([str(exe)], str(tmp_path / "leaky.log"), env=env)
    clean = harness.Process([str(exe), "free"], str(tmp_path / "clean.log"), env=env)
    assert leaky.wait_exit(30) != 0 and clean.wait_exit(30) == 0
    report = harness.sanitizer_findings(leaky.log_path)
    assert report and "LeakSanitizer" in report, leaky.log_text()
    assert harness.sanitizer_findings(clean.log_path) is None
    # Undo the autouse check for this test's deliberate leak.
    harness._process_logs.remove(leaky.log_path)
