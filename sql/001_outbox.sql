-- 001_outbox.sql — the transactional outbox table.
--
-- Services insert one row here in the same transaction as their business
-- rows. outbox-relay reads the INSERTs from the WAL through a logical
-- replication slot (wal2json), so nothing ever UPDATEs these rows; the
-- reaper deletes them once they are old and delivered.
--
-- dispatched_at and the partial index are kept for compatibility with
-- polling relayers (and for the zero-gap migration from one): outbox-relay
-- itself never writes them.

CREATE TABLE IF NOT EXISTS public.events_outbox (
    id            BIGSERIAL PRIMARY KEY,
    aggregate_id  UUID        NOT NULL,
    type          TEXT        NOT NULL,
    payload       JSONB       NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    dispatched_at TIMESTAMPTZ NULL
);

-- What a polling relayer scans: rows not yet dispatched, in id order.
CREATE INDEX IF NOT EXISTS events_outbox_pending_idx
    ON public.events_outbox (id) WHERE dispatched_at IS NULL;

-- What the reaper scans: the oldest rows first.
CREATE INDEX IF NOT EXISTS events_outbox_created_at_idx
    ON public.events_outbox (created_at);
