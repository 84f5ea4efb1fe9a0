"""test_ha.py — high availability and the zero-gap migration (issue 7).

Two or more relayers on one slot: one streams, the others wait as standbys
and take over when it dies (crash: the server notices the closed socket;
silence: --takeover-after terminates the silent walsender). --backfill
pending moves a system off a polling relayer without missing or repeating
an event. Every test checks Kafka against what PostgreSQL committed.
"""

import random
import signal
import threading
import time

import psycopg2
import pytest

import harness

# per plugin and major, one plugin on each newer major, on the shared real
# Kafka (conftest.py)
pytestmark = [pytest.mark.usefixtures("plugin", "pg_major"), pytest.mark.plugin_per_major,
              pytest.mark.real_kafka]


Producers = harness.Producers


def delivered_ids(kafka, expected, timeout=60, topic="order"):
    msgs = kafka.read(topic, expected=expected, timeout=timeout)
    return [m.headers.get("event_id") for m in msgs]


@pytest.mark.parametrize("tuning", harness.TUNINGS)
def test_standby_takes_over_after_active_is_killed(pg, broker, kafka, relayer, tuning):
    args = ["--dsn", pg.dsn(), "--brokers", broker.bootstrap] + harness.tuned(
        tuning, "--status-interval", "0.5")
    active = relayer(*args)
    active.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    standby = relayer(*args)
    standby.wait_for_log(r"waiting as a standby", timeout=30)
    standby.assert_running_for(1.5)
    assert "streaming" not in standby.log_text()

    prod = Producers(pg).start()
    time.sleep(2)
    standby.mark()
    t0 = time.monotonic()
    active.kill()
    standby.wait_for_log(r"streaming public\.events_outbox", timeout=30, since_mark=True)
    takeover = time.monotonic() - t0
    time.sleep(2)
    committed = prod.stop()

    ids = delivered_ids(kafka, None, timeout=20)
    missing = set(committed) - set(ids)
    print("takeover after SIGKILL: %.2f s; %d events committed, %d delivered, %d duplicates"
          % (takeover, len(committed), len(ids), len(ids) - len(set(ids))))
    assert not missing, "lost %d events across the takeover" % len(missing)
    assert takeover < 15, "standby took %.1f s to take over" % takeover
    assert standby.terminate() == 0


def test_takeover_after_terminates_a_silent_holder(pg, broker, kafka, relayer):
    base = ["--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--status-interval", "0.5"]
    active = relayer(*base)
    active.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    standby = relayer(*(base + ["--takeover-after", "3"]))
    standby.wait_for_log(r"waiting as a standby", timeout=30)

    # A partitioned relayer: alive, socket open, but silent.
    active.signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        standby.wait_for_log(r"terminated it to take over", timeout=30)
        standby.wait_for_log(r"streaming public\.events_outbox", timeout=30)
        takeover = time.monotonic() - t0
        print("takeover of a silent holder with --takeover-after 3: %.2f s" % takeover)
        # wal_sender_timeout in the harness is 10 s: the takeover must be
        # the relayer's doing, well before the server would time out.
        assert takeover < 9, takeover

        pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
                 "VALUES (gen_random_uuid(), 'order.after', '{}')")
        msgs = kafka.read("order", expected=1, timeout=30)
        assert [m.headers["event_type"] for m in msgs] == ["order.after"]
    finally:
        active.signal(signal.SIGCONT)
    # The old holder finds its connection gone and becomes a standby; it
    # does not exit.
    active.wait_for_log(r"waiting as a standby", timeout=30)
    active.assert_running_for(1)
    info = pg.slot_info()
    assert info["active"]


@pytest.mark.pg_majors(15)
def test_failover_slot_needs_postgresql_17(pg, broker, relayer):
    p = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--failover-slot")
    assert p.wait_exit(30) == 1
    assert "PostgreSQL 17" in p.log_text()
    assert pg.slot_info() is None


@pytest.mark.pg_majors(17, 18)
def test_failover_slot_is_created_on_17_and_later(pg, broker, kafka, relayer):
    p = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--failover-slot")
    p.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    assert pg.scalar("SELECT failover FROM pg_replication_slots WHERE slot_name = 'outbox_relay'")
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
             "VALUES (gen_random_uuid(), 'order.failover', '{}')")
    msgs = kafka.read("order", expected=1, timeout=30)
    assert [m.headers["event_type"] for m in msgs] == ["order.failover"]
    assert p.terminate() == 0


def test_takeover_after_must_exceed_status_interval(relayer):
    p = relayer("--dsn", "dbname=x", "--brokers", "b:1", "--status-interval", "5",
                 "--takeover-after", "6")
    assert p.wait_exit(10) == 2
    assert "--takeover-after" in p.log_text()


class Poller:
    """The seed's polling relayer, faithfully: lock a batch of undispatched
    rows, produce them keyed by aggregate, flush, mark them dispatched,
    commit. Stopped between batches."""

    def __init__(self, pg, bootstrap):
        from confluent_kafka import Producer
        self.conn = psycopg2.connect(pg.dsn(), connect_timeout=10)
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "log_level": 3})
        self.stop_flag = threading.Event()
        self.dispatched = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error = None

    def _run(self):
        try:
            cur = self.conn.cursor()
            while not self.stop_flag.is_set():
                cur.execute("SELECT id, aggregate_id::text, type, payload::text, "
                            "created_at::text FROM events_outbox WHERE dispatched_at IS NULL "
                            "ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED")
                rows = cur.fetchall()
                for eid, agg, typ, payload, created in rows:
                    self.producer.produce(harness.topic(typ.split(".")[0]), key=agg, value=payload,
                                          headers={"event_id": str(eid), "event_type": typ,
                                                   "created_at": created, "by": "poller"})
                assert self.producer.flush(30) == 0
                if rows:
                    cur.execute("UPDATE events_outbox SET dispatched_at = now() "
                                "WHERE id = ANY(%s)", ([r[0] for r in rows],))
                self.conn.commit()
                self.dispatched += len(rows)
                time.sleep(0.05)
        except Exception as e:
            self.error = e

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_flag.set()
        self.thread.join(60)
        self.conn.close()
        assert self.error is None, self.error


@pytest.mark.parametrize("tuning", harness.TUNINGS)
def test_backfill_migration_from_a_polling_relayer(pg, broker, kafka, relayer, tuning):
    # Rows committed before anything ran: the poller takes some of them.
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
             "SELECT gen_random_uuid(), 'order.placed', json_build_object('pre', g)::jsonb "
             "FROM generate_series(1, 300) g")
    prod = Producers(pg, rate=80).start()
    poller = Poller(pg, broker.bootstrap).start()
    time.sleep(random.uniform(2.0, 4.0))  # an arbitrary moment
    poller.stop()
    by_poller = poller.dispatched
    assert by_poller > 0

    p = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--backfill", "pending",
                *harness.tuned(tuning, "--status-interval", "0.5"))
    p.wait_for_log(r"backfill: \d+ rows published", timeout=60)
    p.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    time.sleep(2)
    prod.stop()

    all_ids = [str(r[0]) for r in pg.query("SELECT id FROM events_outbox ORDER BY id")]
    dispatched = {str(r[0]) for r in pg.query(
        "SELECT id FROM events_outbox WHERE dispatched_at IS NOT NULL")}
    msgs = kafka.read("order", expected=len(all_ids), timeout=60)
    ids = [m.headers.get("event_id") for m in msgs]
    from_relayer = [m.headers.get("event_id") for m in msgs if m.headers.get("by") != "poller"]
    dup = len(ids) - len(set(ids))
    print("poller dispatched %d, relayer published %d, total %d events, %d duplicates"
          % (len(dispatched), len(from_relayer), len(all_ids), dup))
    assert set(all_ids) - set(ids) == set(), "events missed across the cutover"
    assert dispatched.isdisjoint(from_relayer), "the relayer resent events the poller dispatched"
    assert dup == 0, "events published twice across the cutover"
    assert p.terminate() == 0


@pytest.mark.mock_kafka("every broker down mid-backfill: the mock's \"down\"")
def test_backfill_interrupted_is_redone(pg, broker, relayer):
    """A backfill that cannot finish (Kafka down, then SIGTERM) drops the new
    slot, so the next start backfills again instead of skipping the rows."""
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
             "SELECT gen_random_uuid(), 'order.placed', '{}' FROM generate_series(1, 50)")
    broker.cmd("down")
    p = relayer("--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--backfill", "pending",
                "--shutdown-timeout", "1")
    p.wait_for_log(r"backfill: publishing", timeout=30)
    time.sleep(1)
    assert p.terminate() == 0
    assert pg.slot_info() is None, "an unfinished backfill must not leave its slot behind"


def test_recreate_slot_is_an_explicit_choice(pg, broker, kafka, relayer):
    """A slot outbox-relay created and that is gone is not recreated by a
    plain restart; --recreate-slot --backfill pending recreates it and
    republishes the rows still in the table, so the gap is covered."""
    args = ["--dsn", pg.dsn(), "--brokers", broker.bootstrap, "--status-interval", "0.5"]
    p = relayer(*args)
    p.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    pg.query("INSERT INTO events_outbox (aggregate_id, type, payload) "
             "VALUES (gen_random_uuid(), 'order.before', '{}')")
    assert len(kafka.read("order", expected=1, timeout=30)) == 1
    assert p.terminate() == 0
    pg.drop_slot()
    gap = str(pg.scalar("INSERT INTO events_outbox (aggregate_id, type, payload) "
                        "VALUES (gen_random_uuid(), 'order.gap', '{}') RETURNING id"))

    p = relayer(*args)
    assert p.wait_exit(30) == 1
    assert "--recreate-slot" in p.log_text()
    assert pg.slot_info() is None

    p = relayer(*(args + ["--recreate-slot", "--backfill", "pending"]))
    p.wait_for_log(r"streaming public\.events_outbox", timeout=30)
    ids = [m.headers["event_id"] for m in kafka.read("order", expected=3, timeout=30)]
    assert gap in ids
    assert p.terminate() == 0
