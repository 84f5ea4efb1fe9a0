"""test_publication_filter.py — a row filter put on the publication while a
pgoutput relayer runs.

  test_row_filter_added_while_streaming
      ALTER PUBLICATION … SET TABLE … WHERE (type <> 'order.skip') under a
      running relayer: the rows it filters out never reach Kafka and the
      slot moves past them (the server's doing, and the owner's choice), so
      the running relayer says so at once: a warning naming the filter and
      what it means, outbox_relay_publication_row_filter 1 on /metrics,
      `check` WARNs with the filter; the reaper goes on (filtered rows are
      not pending). Removing the filter is said too, and the gauge is 0.
"""

import os
import re
import uuid

import harness
from harness import wait_until
from test_check import expect, run_check
from test_pgoutput import http_get, insert, start

SLOT = "outbox_relay"
GAUGE = "outbox_relay_publication_row_filter"


def gauge(port):
    m = re.search(r"^%s (\d+)$" % GAUGE, http_get(port, "/metrics")[1], re.M)
    return int(m.group(1)) if m else None


def test_row_filter_added_while_streaming(pg, broker, kafka, relayer, relayer_binary):
    port = harness.free_port()
    r = start(relayer, pg, broker, "--plugin", "pgoutput", "--metrics-addr",
              "127.0.0.1:%d" % port)
    first = insert(pg, [(uuid.uuid4(), "order.placed", "{}") for _ in range(2)])
    assert sorted(int(m.headers["event_id"]) for m in kafka.read("order", expected=2,
                                                                  timeout=60)) == first
    wait_until(lambda: gauge(port) == 0, 15, message="%s 0" % GAUGE)
    assert "row filter" not in r.log_text()

    pg.query("ALTER PUBLICATION outbox_relay SET TABLE events_outbox "
             "WHERE (type <> 'order.skip')")
    ids = insert(pg, [(uuid.uuid4(), "order.skip", "{}"), (uuid.uuid4(), "order.placed", "{}"),
                      (uuid.uuid4(), "order.skip", "{}")])
    kept = [ids[1]]
    lsn = pg.current_wal_lsn()

    # said while it runs: the log, /metrics
    wait_until(lambda: re.search(r"warn .*row filter.*type <> 'order\.skip'", r.log_text()), 15,
               message="a warning naming the row filter")
    line = [l for l in r.log_text().splitlines() if "row filter" in l and " warn " in l][-1]
    assert "never reach Kafka" in line and "ALTER PUBLICATION" in line, line
    wait_until(lambda: gauge(port) == 1, 15, message="%s 1" % GAUGE)
    assert "outbox_relay_publication_ok 1" in http_get(port, "/metrics")[1]
    assert http_get(port, "/readyz")[0] == 200  # the owner's choice, not a broken setup

    # what the filter does: only the kept row arrives, the slot moves past the others
    got = kafka.read("order", expected=3, timeout=30)
    assert sorted(int(m.headers["event_id"]) for m in got) == sorted(first + kept)
    wait_until(lambda: (pg.confirmed_flush_lsn(SLOT) or 0) >= lsn, 60,
               message="the slot past the filtered rows")

    # check says it too
    c = run_check(relayer_binary, "--dsn", pg.dsn(), "--plugin", "pgoutput",
                  env={"OUTBOX_RELAY_PLUGIN": "pgoutput"})
    expect(c, "publication", "WARN", detail="type <> 'order.skip'")

    # said once, not at every poll
    n = len(re.findall(r"warn .*row filter", r.log_text()))
    wait_until(lambda: gauge(port) == 1, 5)
    import time
    time.sleep(5)  # two more polls (every 2 s)
    assert len(re.findall(r"warn .*row filter", r.log_text())) == n

    pg.query("ALTER PUBLICATION outbox_relay SET TABLE events_outbox")
    wait_until(lambda: gauge(port) == 0, 15, message="%s 0 after the filter is gone" % GAUGE)
    assert re.search(r"info .*no row filter", r.log_text()), r.log_tail()
    assert r.running()
    assert r.terminate() == 0
