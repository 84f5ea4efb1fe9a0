-- 004_outbox_partitioned.sql — the outbox range-partitioned on created_at,
-- so that the reaper drops whole expired partitions instead of deleting rows
-- (no dead tuples, no vacuum work, the space goes back to the OS at once).
--
-- Use it INSTEAD of 001_outbox.sql, on a database where public.events_outbox
-- does not exist yet. Where 001 already created the plain table, this file
-- only (re)defines the helper function below and changes nothing else, so
-- running sql/*.sql in order stays harmless. To move an existing plain
-- outbox, create this layout under another name and swap in a maintenance
-- window; the relayer does not care how the rows got there.
--
-- Relaying: wal2json reports each change under the name of the partition
-- that holds the row (public.events_outbox_2026_11), not the parent's. The
-- relayer notices that --table is partitioned, asks the server for every
-- table of its schema and relays the INSERTs of the tables that were leaf
-- partitions of the outbox when the row was written (src/pg/partition.c).
-- Detach, rename or drop a partition only once the slot has confirmed past
-- its last write: a relayer that later meets rows of a table the catalog no
-- longer places in the outbox stops rather than guess (docs/failure-modes.md,
-- "Partitioned outbox"). The reaper's partition drop waits for that itself;
-- sql/007_partition_guard.sql makes other DDL wait for it too (optional).
--
-- Layout
--   * one partition per month (or per day: see outbox_create_partitions),
--     named <table>_YYYY_MM (or <table>_YYYY_MM_DD), bounds in UTC;
--   * a DEFAULT partition that catches rows no partition covers (if the
--     upcoming partitions were not created in time). The reaper deletes
--     expired rows there row by row, and a partition cannot be created for a
--     range while the DEFAULT partition holds rows of that range, so create
--     partitions AHEAD of time;
--   * the primary key must contain the partition key: (id, created_at).
--     id stays unique in practice (one sequence for all partitions).
--
-- What the reaper does with it (see include/outbox_relay/ops/reaper.h): a
-- partition whose upper bound is at or before now() - retention is locked
-- ACCESS EXCLUSIVE, then the reaper waits until the slot has confirmed
-- everything committed before that moment, then drops it. Rows therefore
-- live between `retention` and `retention + one partition`: with monthly
-- partitions and --retention '7 days', up to about 38 days. Use daily
-- partitions when that matters.
--
-- Privileges: DROP TABLE needs ownership, and LOCK / DELETE on a partition
-- need privileges on the partition itself (grants on the parent do not
-- reach partitions accessed by name). Either run the reaper as the table's
-- owner, or make the relayer's role a member of the owning role:
--     GRANT outbox_owner TO outbox_relay;
--
-- Creating upcoming partitions: call the function daily (cron, pg_cron,
-- or your migration tool); it only creates what is missing:
--     SELECT public.outbox_create_partitions('public.events_outbox', 'month', 2);
--     -- with pg_cron:
--     SELECT cron.schedule('outbox-partitions', '17 3 * * *',
--         $$SELECT public.outbox_create_partitions('public.events_outbox', 'month', 2)$$);
-- Use one unit per table: daily ranges overlap an existing monthly one. For
-- daily partitions, change 'month' to 'day' in the DO block at the end
-- before running this file.

CREATE TABLE IF NOT EXISTS public.events_outbox (
    id            BIGSERIAL,
    aggregate_id  UUID        NOT NULL,
    type          TEXT        NOT NULL,
    payload       JSONB       NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    dispatched_at TIMESTAMPTZ NULL,
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);

-- Creates the partitions of `parent` for the current period and the next
-- `ahead` ones (unit 'month' or 'day', bounds at UTC midnight). Returns how
-- many it created. Idempotent.
CREATE OR REPLACE FUNCTION public.outbox_create_partitions(parent regclass,
                                                           unit text DEFAULT 'month',
                                                           ahead int DEFAULT 2)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    nsp     name;
    rel     name;
    step    interval;
    fmt     text;
    first   timestamp;
    lo      timestamp;
    created int := 0;
BEGIN
    IF unit NOT IN ('month', 'day') THEN
        RAISE EXCEPTION 'unit must be month or day, not %', unit;
    END IF;
    SELECT n.nspname, c.relname INTO nsp, rel
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = parent AND c.relkind = 'p';
    IF rel IS NULL THEN
        RAISE EXCEPTION '% is not a partitioned table', parent;
    END IF;
    step  := CASE unit WHEN 'month' THEN interval '1 month' ELSE interval '1 day' END;
    fmt   := CASE unit WHEN 'month' THEN 'YYYY_MM' ELSE 'YYYY_MM_DD' END;
    first := date_trunc(unit, now() AT TIME ZONE 'UTC');
    FOR i IN 0 .. ahead LOOP
        lo := first + step * i;
        IF to_regclass(format('%I.%I', nsp, rel || '_' || to_char(lo, fmt))) IS NULL THEN
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)',
                           nsp, rel || '_' || to_char(lo, fmt), parent,
                           lo AT TIME ZONE 'UTC', (lo + step) AT TIME ZONE 'UTC');
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;

COMMENT ON FUNCTION public.outbox_create_partitions(regclass, text, int) IS
    'Create the current and the next `ahead` monthly/daily partitions of a partitioned outbox.';

-- The rest only applies when the table above is the partitioned one (not
-- the plain table of 001_outbox.sql).
DO $$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'public.events_outbox'::regclass) = 'p' THEN
        -- What a polling relayer scans, and what the reaper and `status`
        -- scan (oldest first); created on every partition.
        CREATE INDEX IF NOT EXISTS events_outbox_pending_idx
            ON public.events_outbox (id) WHERE dispatched_at IS NULL;
        CREATE INDEX IF NOT EXISTS events_outbox_created_at_idx
            ON public.events_outbox (created_at);
        CREATE TABLE IF NOT EXISTS public.events_outbox_default
            PARTITION OF public.events_outbox DEFAULT;
        PERFORM public.outbox_create_partitions('public.events_outbox', 'month', 2);
    END IF;
END
$$;
