#!/usr/bin/env python3
"""consume_watch.py — the consume phase's clock and profile (bench/run.sh).

  consume_watch.py DSN COUNT SINCE_US TIMEOUT_S APP

Waits until processed_events holds COUNT rows, looking every 50 ms or
every 1 % of the time since SINCE_US (Unix µs), whichever is longer, and
meanwhile samples every 10 ms the state and wait event of every client
session of application APP (outbox-consume's; "" for the seed consumer):
where the consumer's PostgreSQL sessions spend their time. Prints two
lines: the Unix µs at which it saw every row (empty on timeout), then the
samples summed up ("CPU 41 %, WALSync 30 %, ..."; CPU is a session running
a statement with no wait event: on a core or waiting for one).

Each look is its own autocommit statement. (A plpgsql loop, function or
procedure, kept its session's xmin for the whole run, so that no row
version the consumers' upserts left behind could be pruned: measured while
working on issue 29.)
"""
import collections
import sys
import time

import psycopg2

dsn, count, since_us, timeout_s, app = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), sys.argv[5]
conn = psycopg2.connect(dsn)
conn.autocommit = True
cur = conn.cursor()
samples = collections.Counter()
done = ""
next_look = 0.0
while True:
    now = time.time()
    now_us = int(now * 1e6)
    if now >= next_look:
        cur.execute("SELECT count(*) FROM processed_events")
        if cur.fetchone()[0] >= count:
            done = str(now_us)
            break
        next_look = now + max(0.05, (now_us - since_us) / 1e8)
    if now_us - since_us > timeout_s * 1e6:
        break
    cur.execute("SELECT state, wait_event FROM pg_stat_activity WHERE application_name = %s "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()", (app,))
    for state, wait in cur.fetchall():
        samples["idle" if state == "idle" else (wait or "CPU")] += 1
    time.sleep(0.01)
total = sum(samples.values()) or 1
print(done)
print(", ".join("%s %d %%" % (k, round(100.0 * v / total)) for k, v in samples.most_common(6)))
