-- 007_partition_guard.sql — OPTIONAL: refuse DDL that would take rows away
-- from a partitioned outbox before the relayer has confirmed them.
--
-- Loading this file only defines things; nothing changes until you install
-- the guard for an outbox (as a superuser: event triggers need one):
--     SELECT public.outbox_relay_install_partition_guard('public.events_outbox',
--                                                        'outbox_relay', 30);
-- and to remove it:
--     DROP EVENT TRIGGER IF EXISTS outbox_relay_partition_guard;
--     DELETE FROM public.outbox_relay_partition_guard;
--
-- Why: the relayer decides whether a table's rows belong to the outbox as
-- of when they were written (src/pg/partition.c). A partition DETACHed,
-- RENAMEd or DROPped while it holds rows the relayer has not decoded yet
-- (relayer stopped or behind), or a table written standalone and then
-- ATTACHed before the relayer got to those writes, leaves it unable to tell,
-- and it stops (docs/failure-modes.md, "Partitioned outbox"). With the guard
-- such an ALTER TABLE / DROP TABLE waits until the slot has confirmed every
-- row written before it, and fails with a message if that does not happen
-- within wait_seconds. The relayer's own check stays: the guard only makes
-- the stop rarer.
--
-- The rule is the reaper's (include/outbox_relay/ops/reaper.h), run at
-- ddl_command_start, before the command itself touches the catalogs:
--   1. the tables the command names are found: leaf partitions of the
--      outbox, and tables of the outbox's schema that have its columns (an
--      ATTACH candidate); the outbox itself named by a DROP TABLE means all
--      of its leaves. Names are matched as whole words in the command text,
--      so a command built by dynamic SQL inside a function is not seen (the
--      relayer's check still catches what it does);
--   2. the outbox and those tables are locked IN SHARE MODE: it conflicts
--      with the ROW EXCLUSIVE lock every inserting transaction holds until
--      it ends, so none is in progress and none can start (the outbox first,
--      in the order inserts take them, so no deadlock with an insert);
--   3. W0 = pg_current_wal_insert_lsn(): every row of those tables was
--      committed before W0;
--   4. it waits (polling every 100 ms, up to wait_seconds) until the slot's
--      confirmed_flush_lsn >= W0, i.e. the relayer has had a delivery report
--      for every one of them; otherwise it raises an error and the command
--      is rolled back.
-- Costs: while it waits, inserts into the outbox wait too (a DETACH or
-- DROP would block them anyway). On an idle server the WAL up to W0 may be
-- flushed — and so confirmable — only by the next background snapshot,
-- every 15 s, so expect up to that long. The reaper's own DROP of an
-- expired partition passes through the guard too (it has waited for the
-- same thing already; the second wait is short).

-- outbox is the table's qualified name as text (a regclass column would
-- keep pg_upgrade from running).
CREATE TABLE IF NOT EXISTS public.outbox_relay_partition_guard (
    outbox       TEXT     PRIMARY KEY,
    slot_name    NAME     NOT NULL DEFAULT 'outbox_relay',
    wait_seconds FLOAT8   NOT NULL DEFAULT 30 CHECK (wait_seconds >= 0)
);
GRANT SELECT ON public.outbox_relay_partition_guard TO PUBLIC;

-- What the guard let through: the command's transaction, each table it
-- named, and W0. No insert into those tables can commit between W0 and the
-- command's commit (step 2's locks), so a row of such a table decoded past
-- W0 was written after the command: the relayer takes the catalog as it is
-- now for it instead of stopping (src/pg/partition.c). A handful of rows per
-- DDL; older than two billion transactions they are ignored. It lives in a
-- schema of its own: a row it writes in the outbox's schema would make the
-- DDL's transaction look like one with rows to the relayer, which then
-- keeps its cached "is a partition" answers (src/pg/partition.c).
CREATE SCHEMA IF NOT EXISTS outbox_relay_guard;
GRANT USAGE ON SCHEMA outbox_relay_guard TO PUBLIC;
CREATE TABLE IF NOT EXISTS outbox_relay_guard.log (
    xid     XID8        NOT NULL,
    relid   OID         NOT NULL,
    w0      PG_LSN      NOT NULL,
    at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (xid, relid)
);
GRANT SELECT, INSERT ON outbox_relay_guard.log TO PUBLIC;

CREATE OR REPLACE FUNCTION public.outbox_relay_partition_guard_check()
RETURNS event_trigger
LANGUAGE plpgsql
AS $$
DECLARE
    g         record;
    q         text := lower(current_query());
    nsp       oid;
    ob        regclass;
    targets   regclass[];
    t         regclass;
    w0        pg_lsn;
    confirmed pg_lsn;
    deadline  timestamptz;
    old_lt    text := current_setting('lock_timeout');
BEGIN
    FOR g IN SELECT * FROM public.outbox_relay_partition_guard LOOP
        ob := to_regclass(g.outbox);
        SELECT relnamespace INTO nsp FROM pg_class WHERE oid = ob;
        IF nsp IS NULL THEN
            CONTINUE;
        END IF;
        WITH RECURSIVE tree(relid) AS (
            SELECT ob::oid
            UNION ALL
            SELECT i.inhrelid FROM pg_inherits i JOIN tree ON i.inhparent = tree.relid),
        named AS (
            SELECT c.oid, c.relkind, c.oid IN (SELECT relid FROM tree) AS in_tree
              FROM pg_class c
             WHERE c.relkind IN ('r', 'p')
               AND q ~ ('\m' || regexp_replace(lower(c.relname), '([^a-z0-9_])', '\\\1', 'g')
                        || '\M'))
        SELECT array_agg(DISTINCT x.oid::regclass) INTO targets FROM (
            -- leaves of the outbox named in the command
            SELECT n.oid FROM named n WHERE n.in_tree AND n.relkind = 'r'
            UNION ALL
            -- every leaf, when the outbox (or a partitioned part of it) is dropped
            SELECT tr.relid FROM tree tr JOIN pg_class c ON c.oid = tr.relid
             WHERE c.relkind = 'r' AND tg_tag = 'DROP TABLE'
               AND EXISTS (SELECT 1 FROM named n WHERE n.in_tree AND n.relkind = 'p')
            UNION ALL
            -- tables of the outbox's schema with its columns (ATTACH candidates)
            SELECT n.oid FROM named n JOIN pg_class c ON c.oid = n.oid
             WHERE NOT n.in_tree AND n.relkind = 'r' AND c.relnamespace = nsp
               AND (SELECT count(*) FROM pg_attribute a
                     WHERE a.attrelid = n.oid AND a.attnum > 0 AND NOT a.attisdropped
                       AND a.attname IN ('id', 'aggregate_id', 'type', 'payload', 'created_at')) = 5
        ) x;
        IF targets IS NULL THEN
            CONTINUE;
        END IF;

        PERFORM set_config('lock_timeout', '5s', true);
        EXECUTE format('LOCK TABLE %s IN SHARE MODE', ob);
        FOREACH t IN ARRAY targets LOOP
            EXECUTE format('LOCK TABLE %s IN SHARE MODE', t);
        END LOOP;
        PERFORM set_config('lock_timeout', old_lt, true);
        w0 := pg_current_wal_insert_lsn();
        deadline := clock_timestamp() + make_interval(secs => g.wait_seconds);
        LOOP
            SELECT s.confirmed_flush_lsn INTO confirmed
              FROM pg_replication_slots s WHERE s.slot_name = g.slot_name;
            IF confirmed IS NOT NULL AND confirmed >= w0 THEN
                FOREACH t IN ARRAY targets LOOP
                    INSERT INTO outbox_relay_guard.log (xid, relid, w0)
                    VALUES (pg_current_xact_id(), t::regclass::oid, w0)
                    ON CONFLICT DO NOTHING;
                END LOOP;
                EXIT;
            END IF;
            IF clock_timestamp() >= deadline THEN
                RAISE EXCEPTION 'outbox-relay partition guard: % would change which tables of the partitioned outbox % hold rows the relayer has not confirmed yet (slot % confirmed %, the rows go up to %)',
                        tg_tag, ob, g.slot_name, coalesce(confirmed::text, 'nothing: no such slot'), w0
                    USING HINT = 'Wait until the relayer has caught up (outbox-relay status, '
                                 'outbox_relay_slot_lag_bytes) and run it again; see '
                                 'docs/failure-modes.md, "Partitioned outbox".',
                          ERRCODE = 'object_in_use';
            END IF;
            PERFORM pg_sleep(0.1);
        END LOOP;
    END LOOP;
END
$$;

-- Installs the guard for `outbox`, confirmed by `slot`, waiting at most
-- wait_seconds per command. Idempotent.
CREATE OR REPLACE FUNCTION public.outbox_relay_install_partition_guard(outbox regclass,
                                                                       slot name DEFAULT 'outbox_relay',
                                                                       wait_seconds float8 DEFAULT 30)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO public.outbox_relay_partition_guard AS g (outbox, slot_name, wait_seconds)
    SELECT format('%I.%I', n.nspname, c.relname), slot, wait_seconds
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = outbox
    ON CONFLICT ON CONSTRAINT outbox_relay_partition_guard_pkey
    DO UPDATE SET slot_name = EXCLUDED.slot_name, wait_seconds = EXCLUDED.wait_seconds;
    IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'outbox_relay_partition_guard') THEN
        CREATE EVENT TRIGGER outbox_relay_partition_guard ON ddl_command_start
            WHEN TAG IN ('ALTER TABLE', 'DROP TABLE')
            EXECUTE FUNCTION public.outbox_relay_partition_guard_check();
    END IF;
END
$$;
