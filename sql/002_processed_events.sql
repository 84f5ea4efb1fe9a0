-- 002_processed_events.sql — the consumer side's idempotency table.
--
-- Delivery is at-least-once. A consumer that records (consumer, event_id)
-- in the same transaction as its side effect applies each event exactly
-- once: a redelivered event hits the primary key and is skipped.
-- event_id is text: the row id in decimal for table events, "m-<lsn>" for
-- events emitted as logical messages.

CREATE TABLE IF NOT EXISTS public.processed_events (
    consumer     TEXT        NOT NULL,
    event_id     TEXT        NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
