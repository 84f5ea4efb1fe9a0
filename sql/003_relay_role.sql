-- 003_relay_role.sql — a least-privilege role for outbox-relay.
--
-- REPLICATION lets it create and read its logical slot; SELECT and DELETE on
-- the outbox are all the reaper and the status command need (plus its own
-- bookkeeping tables below). It is not a
-- superuser and cannot write business tables. Set its password separately:
--   ALTER ROLE outbox_relay PASSWORD '...';
-- and allow it in pg_hba.conf for the database that holds the outbox: a
-- logical replication connection is matched by its database name, so no
-- "replication" line is needed (that one would also allow pg_basebackup,
-- i.e. reading every file of the cluster).

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_relay') THEN
        CREATE ROLE outbox_relay WITH LOGIN REPLICATION;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO outbox_relay;
GRANT SELECT, DELETE ON public.events_outbox TO outbox_relay;

-- The slots outbox-relay has created. A relayer that finds its slot gone
-- checks here: if it created that slot before, the slot was dropped or
-- lost and events may have been skipped, so it refuses to create a new one
-- silently (start it once with --recreate-slot to acknowledge).
CREATE TABLE IF NOT EXISTS public.outbox_relay_slots (
    slot_name   TEXT        PRIMARY KEY,
    created_lsn PG_LSN      NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE ON public.outbox_relay_slots TO outbox_relay;

-- The backfill marker (--backfill pending, see docs/migration.md): written
-- before the slot is created and set to 'done' only once every backfilled
-- row is acknowledged by Kafka. A slot whose backfill_state is 'creating' or
-- 'running' is never streamed: the next start resumes the backfill first,
-- and the reaper deletes nothing meanwhile.
--   backfill_max_id   largest pending id in the slot's snapshot (NULL: none)
--   backfill_done_id  every backfilled row up to this id is acknowledged
ALTER TABLE public.outbox_relay_slots
    ADD COLUMN IF NOT EXISTS backfill_state      TEXT
        CHECK (backfill_state IN ('creating', 'running', 'done')),
    ADD COLUMN IF NOT EXISTS backfill_max_id     TEXT,
    ADD COLUMN IF NOT EXISTS backfill_done_id    TEXT,
    ADD COLUMN IF NOT EXISTS backfill_rows       BIGINT,
    ADD COLUMN IF NOT EXISTS backfill_updated_at TIMESTAMPTZ;

-- The reaper's marks (docs/operations.md, "The rule: marks"): snapshots
-- taken with the WAL insert position they were taken at. Once the slot has
-- confirmed a mark's insert_lsn, every row inserted by a transaction id
-- below its snapshot_xmin is delivered and may be reaped, however far the
-- slot is behind the head. A handful of rows per slot; the reaper prunes
-- it.
CREATE TABLE IF NOT EXISTS public.outbox_relay_reaper_marks (
    slot_name     TEXT        NOT NULL,
    insert_lsn    PG_LSN      NOT NULL,
    snapshot_xmin XID8        NOT NULL,
    taken_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (slot_name, insert_lsn)
);
GRANT SELECT, INSERT, DELETE ON public.outbox_relay_reaper_marks TO outbox_relay;
