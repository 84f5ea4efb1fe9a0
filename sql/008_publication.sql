-- 008_publication.sql — the publication outbox-relay reads with
-- --plugin pgoutput, and an OPTIONAL guard that keeps it whole.
--
-- Run as the owner of the outbox table (CREATE PUBLICATION ... FOR TABLE
-- needs the table's ownership and CREATE on the database). The relayer
-- creates the same publication itself when its role may; a least-privilege
-- role (sql/003_relay_role.sql) may not, and the relayer then stops with
-- this statement in its message. Nothing here is needed for wal2json.
--
--   publish = 'insert'                 the relayer relays inserts only
--   publish_via_partition_root = true  a partitioned outbox's rows arrive
--                                      under the root table, decided by the
--                                      catalog as of each change
--
-- Another outbox table or publication name (--table, --publication): change
-- both below. Create the publication BEFORE the relayer first creates its
-- slot: pgoutput cannot decode changes written before the publication
-- existed (the relayer refuses an existing slot without its publication).

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'outbox_relay') THEN
        CREATE PUBLICATION outbox_relay FOR TABLE public.events_outbox
            WITH (publish = 'insert', publish_via_partition_root = true);
    END IF;
END
$$;

-- The guard (optional; as a superuser: event triggers need one):
--     SELECT public.outbox_relay_install_publication_guard('outbox_relay',
--                                                          'public.events_outbox');
-- and to remove it:
--     DROP EVENT TRIGGER IF EXISTS outbox_relay_publication_guard;
--
-- Why: pgoutput sends only what the publication names as of each change.
-- An ALTER PUBLICATION that drops the outbox table, stops publishing
-- inserts, turns publish_via_partition_root off or sets a column list,
-- and a DROP PUBLICATION, make the server skip outbox rows from then on,
-- while keepalives move the slot past them: those events would never reach
-- Kafka, and the reaper would later delete them as delivered. The relayer
-- checks the publication whenever it (re)connects and stops on a broken
-- one, but rows written between the DDL and that check are already skipped.
-- With the guard, such DDL fails instead.

CREATE TABLE IF NOT EXISTS public.outbox_relay_publication_guard (
    pubname     NAME     PRIMARY KEY,
    outbox      REGCLASS NOT NULL
);

CREATE OR REPLACE FUNCTION public.outbox_relay_publication_broken(p_pubname NAME,
                                                                  p_outbox REGCLASS)
RETURNS TEXT LANGUAGE plpgsql STABLE AS $$
DECLARE
    pub RECORD;
    covered BOOLEAN;
    cols NAME[];
BEGIN
    SELECT * INTO pub FROM pg_publication WHERE pubname = p_pubname;
    IF NOT FOUND THEN
        RETURN format('publication %I would no longer exist', p_pubname);
    END IF;
    IF NOT pub.pubinsert THEN
        RETURN format('publication %I would no longer publish inserts', p_pubname);
    END IF;
    IF (SELECT relkind FROM pg_class WHERE oid = p_outbox) = 'p' AND NOT pub.pubviaroot THEN
        RETURN format('publication %I would publish the partitions of %s under their own names '
                      '(publish_via_partition_root = false)', p_pubname, p_outbox);
    END IF;
    SELECT true, t.attnames INTO covered, cols
      FROM pg_publication_tables t JOIN pg_class c ON c.relname = t.tablename
      JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = t.schemaname
     WHERE t.pubname = p_pubname AND c.oid = p_outbox;
    IF covered IS NULL THEN
        RETURN format('publication %I would no longer publish %s', p_pubname, p_outbox);
    END IF;
    IF cols IS NOT NULL AND NOT cols @> ARRAY['id', 'aggregate_id', 'type', 'payload',
                                             'created_at']::NAME[] THEN
        RETURN format('publication %I would leave columns of %s out (column list %s)',
                      p_pubname, p_outbox, cols);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION public.outbox_relay_publication_guard_check()
RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE
    g RECORD;
    why TEXT;
BEGIN
    FOR g IN SELECT pubname, outbox FROM public.outbox_relay_publication_guard LOOP
        why := public.outbox_relay_publication_broken(g.pubname, g.outbox);
        IF why IS NOT NULL THEN
            RAISE EXCEPTION 'outbox-relay: % (outbox-relay reads it with --plugin pgoutput; '
                            'outbox rows written after this would never reach Kafka)', why
                USING HINT = 'Remove the guard first if this is intended: DELETE FROM '
                             'public.outbox_relay_publication_guard WHERE pubname = '
                             || quote_literal(g.pubname);
        END IF;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION public.outbox_relay_install_publication_guard(
    p_pubname NAME DEFAULT 'outbox_relay', p_outbox REGCLASS DEFAULT 'public.events_outbox')
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    why TEXT := public.outbox_relay_publication_broken(p_pubname, p_outbox);
BEGIN
    IF why IS NOT NULL THEN
        RAISE EXCEPTION 'outbox-relay: cannot guard publication %: %', p_pubname,
            replace(why, ' would ', ' does ');
    END IF;
    INSERT INTO public.outbox_relay_publication_guard VALUES (p_pubname, p_outbox)
        ON CONFLICT (pubname) DO UPDATE SET outbox = EXCLUDED.outbox;
    IF NOT EXISTS (SELECT 1 FROM pg_event_trigger
                    WHERE evtname = 'outbox_relay_publication_guard') THEN
        CREATE EVENT TRIGGER outbox_relay_publication_guard ON ddl_command_end
            WHEN TAG IN ('ALTER PUBLICATION', 'DROP PUBLICATION')
            EXECUTE FUNCTION public.outbox_relay_publication_guard_check();
    END IF;
END
$$;
