"""test_plugin_choice.py — the output plugin on today's PostgreSQL: the
November 2026 minors (15.19+, every major) refuse output plugins that
output_plugin_libraries does not name, and its default names only pgoutput
and test_decoding. Every test here runs a server left at that default
(settings={"output_plugin_libraries": None}) unless it says otherwise.

  test_default_on_a_default_server_relays_with_pgoutput
      no --plugin, a new slot, a server nobody configured: the relayer makes
      the slot with pgoutput, says why and how to have wal2json, and relays
  test_default_uses_wal2json_where_allowed
      no --plugin on a server that names wal2json (as docs/operations.md
      says to configure it): a new slot gets wal2json; an existing pgoutput
      slot keeps pgoutput
  test_refused_wal2json_waits_with_the_fix_that_works
      --plugin wal2json on a default server: the relayer does not exit; the
      log, /readyz and outbox_relay_output_plugin_refused say why with the
      ALTER SYSTEM statement; the one-literal form a user would type first
      still refuses; the printed statement, run as printed, lets the
      relayer stream without a restart, and nothing committed meanwhile is
      lost
  test_existing_wal2json_slot_after_the_minor_update
      a wal2json slot made while wal2json was allowed, then the server
      restarted with the new default: the refusal carries the server's
      message (never an empty reason), status says UNHEALTHY with the fix,
      and after the fix every event committed meanwhile arrives
  test_check_fails_on_a_refused_plugin
      check: FAIL (exit 1) for --plugin wal2json and for an existing wal2json
      slot, with the statement; without --plugin on a fresh server it
      PASSes, naming pgoutput and why; it names the server's major
"""

import re

import pytest

import harness
from harness import wait_until
from test_operations import http_get, metric, scrape

pytestmark = pytest.mark.usefixtures("pg_major")


DEFAULTS = {"output_plugin_libraries": None}
FIX = ("ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'test_decoding', 'wal2json'; "
       "SELECT pg_reload_conf();")


def insert(pg, n, typ="order.placed"):
    """n events in one transaction; their ids."""
    rows = pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
                    "SELECT gen_random_uuid(), %s, jsonb_build_object('i', g) "
                    "FROM generate_series(1, %s) g RETURNING id", (typ, n))
    return sorted(r[0] for r in rows)


def run_sql(pg, stmt):
    """One statement outside a transaction block (ALTER SYSTEM)."""
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute(stmt)
    conn.close()


def allow_wal2json(pg):
    run_sql(pg, "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'test_decoding', "
                "'wal2json'")
    run_sql(pg, "SELECT pg_reload_conf()")


def ids_of(messages):
    return sorted(int(m.headers["event_id"]) for m in messages)


def start_with_metrics(relayer, pg, broker, *extra):
    port = harness.free_port()
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap,
                "--metrics-addr", "127.0.0.1:%d" % port, *extra)
    r.wait_for_log(r"serving /metrics", timeout=20)
    return r, port


def test_default_on_a_default_server_relays_with_pgoutput(pg_factory, broker, kafka, relayer):
    pg = pg_factory(settings=DEFAULTS)
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap)
    r.wait_for_log(r"streaming public\.events_outbox to Kafka \(pgoutput", timeout=30)
    log = r.log_text()
    assert "does not name wal2json, so the new slot uses PostgreSQL's built-in pgoutput" in log, log
    assert FIX.replace(" SELECT pg_reload_conf();", "") in log, log
    assert pg.slot_info()["plugin"] == "pgoutput"
    ids = insert(pg, 3)
    assert ids_of(kafka.read("order", expected=3, timeout=60)) == ids
    assert r.terminate() == 0
    # A second start keeps the slot's plugin, whatever the server allows.
    allow_wal2json(pg)
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap)
    r.wait_for_log(r"streaming public\.events_outbox to Kafka \(pgoutput", timeout=30)
    assert "exists with the pgoutput output plugin, which it keeps" in r.log_text()
    ids += insert(pg, 2)
    assert ids_of(kafka.read("order", expected=5, timeout=60)) == ids
    assert r.terminate() == 0


def test_default_uses_wal2json_where_allowed(pg, broker, kafka, relayer):
    assert "wal2json" in pg.scalar("SHOW output_plugin_libraries")
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap)
    r.wait_for_log(r"streaming public\.events_outbox to Kafka \(wal2json", timeout=30)
    assert pg.slot_info()["plugin"] == "wal2json"
    ids = insert(pg, 2)
    assert ids_of(kafka.read("order", expected=2, timeout=60)) == ids
    assert r.terminate() == 0


def test_refused_wal2json_waits_with_the_fix_that_works(pg_factory, broker, kafka, relayer):
    pg = pg_factory(settings=DEFAULTS)
    r, port = start_with_metrics(relayer, pg, broker, "--plugin", "wal2json")
    r.wait_for_log(r"refuses the wal2json output plugin", timeout=30)
    log = r.log_text()
    assert "output_plugin_libraries (currently 'pgoutput, test_decoding')" in log, log
    assert FIX in log, log
    assert "--plugin pgoutput" in log, log
    status, body, _ = http_get(port, "/readyz")
    assert status == 503 and "output_plugin_libraries" in body, body
    assert metric(scrape(port), "outbox_relay_output_plugin_refused") == 1
    r.assert_running_for(6)  # waits; a supervisor would not see a crash loop
    assert pg.slot_info() is None

    # What a user types first stores one quoted element: still refused, and
    # the relayer's statement stays the one that works.
    run_sql(pg, "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput, test_decoding, wal2json'")
    run_sql(pg, "SELECT pg_reload_conf()")
    assert not pg.query("SELECT 1 FROM pg_settings WHERE name = 'output_plugin_libraries' "
                        "AND setting ~ '^pgoutput, test_decoding, wal2json$'")
    def readyz_names_the_split_fix():
        status, body, _ = http_get(port, "/readyz")
        return status == 503 and "\"pgoutput, test_decoding, wal2json\"" in body and FIX in body
    wait_until(readyz_names_the_split_fix, 30, message="/readyz with the quoted value and the fix")
    assert pg.slot_info() is None and r.running()

    # The printed statement, as printed.
    printed = re.search(r"As a superuser run: (ALTER SYSTEM SET .*?; SELECT pg_reload_conf\(\);)",
                        r.log_text()).group(1)
    for stmt in printed.split(";"):
        if stmt.strip():
            run_sql(pg, stmt)
    r.wait_for_log(r"streaming public\.events_outbox to Kafka \(wal2json", timeout=60)
    assert pg.slot_info()["plugin"] == "wal2json"
    wait_until(lambda: metric(scrape(port), "outbox_relay_output_plugin_refused") == 0, 30,
               message="the refusal gauge back at 0")
    ids = insert(pg, 4)
    assert ids_of(kafka.read("order", expected=4, timeout=60)) == ids
    assert r.terminate() == 0


def test_existing_wal2json_slot_after_the_minor_update(pg, broker, kafka, relayer,
                                                      relayer_binary):
    # Made while wal2json was allowed (as before the update) ...
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--plugin", "wal2json")
    r.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    ids = insert(pg, 2)
    assert ids_of(kafka.read("order", expected=2, timeout=60)) == ids
    assert r.terminate() == 0
    # ... then the server restarted on the new default, events committed.
    pg.restart(settings=DEFAULTS)
    ids += insert(pg, 3)
    port = harness.free_port()
    r = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap,
                "--metrics-addr", "127.0.0.1:%d" % port)
    r.wait_for_log(r"refuses the wal2json output plugin", timeout=30)
    log = r.log_text()
    assert 'server said: ERROR:  library "wal2json" may not be used as an output plugin' in log, log
    assert "switch it at an LSN" in log, log
    assert not re.search(r"failed:\s*$", log, re.M), log
    st = harness._run([relayer_binary, "status", "--dsn", pg.dsn()], check=False)
    assert st.returncode == 1, st.stdout
    assert "UNHEALTHY: not streaming: the server refuses the wal2json output plugin" in st.stdout
    assert FIX in st.stdout, st.stdout
    assert re.search(r"^server\s+PostgreSQL %d\." % pg.major, st.stdout, re.M), st.stdout
    status, body, _ = http_get(port, "/readyz")
    assert status == 503 and "refuses the wal2json output plugin" in body, body

    allow_wal2json(pg)
    r.wait_for_log(r"streaming public\.events_outbox to Kafka \(wal2json", timeout=60)
    # The first two may come again: before PostgreSQL 17 a shutdown
    # checkpoint does not write a logical slot whose confirmed position alone
    # moved (17 does), so the restarted server may stream from where the
    # slot was last saved (at-least-once). The three committed after the
    # restart come once each.
    got = ids_of(kafka.read_until_ids("order", ids, timeout=60))
    assert set(got) == set(ids), got
    assert [got.count(i) for i in ids[2:]] == [1, 1, 1], got
    assert r.terminate() == 0


def run_check(relayer_binary, pg, broker, *extra):
    return harness._run([relayer_binary, "check", "--dsn", pg.dsn(), "--brokers",
                         broker.bootstrap, *extra], check=False, timeout=120)


def test_check_fails_on_a_refused_plugin(pg_factory, broker, relayer_binary):
    pg = pg_factory(settings=DEFAULTS)
    out = run_check(relayer_binary, pg, broker, "--plugin", "wal2json")
    assert out.returncode == 1, out.stdout
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("FAIL plugin")]
    assert line and "does not name it" in line[0] and FIX in line[0], out.stdout
    assert re.search(r"PASS server\s+PostgreSQL %d\.\d+.*output_plugin_libraries restricts"
                     % pg.major, out.stdout), out.stdout

    # Without --plugin on the same fresh server: pgoutput, and why.
    out = run_check(relayer_binary, pg, broker)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith(("PASS plugin", "FAIL plugin"))]
    assert line and line[0].startswith("PASS plugin"), out.stdout
    assert "does not name wal2json, so the new slot uses PostgreSQL's built-in pgoutput" in line[0]

    # An existing wal2json slot on that server: FAIL, and the way round.
    allow_wal2json(pg)
    pg.create_slot(plugin="wal2json")
    run_sql(pg, "ALTER SYSTEM RESET output_plugin_libraries")
    run_sql(pg, "SELECT pg_reload_conf()")
    out = run_check(relayer_binary, pg, broker)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("FAIL plugin")]
    assert out.returncode == 1 and line, out.stdout
    assert "the existing slot cannot stream" in line[0] and "switch it at an LSN" in line[0]
