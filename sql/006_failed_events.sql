-- 006_failed_events.sql — where outbox-consume --on-error failed puts the
-- events whose apply failed with a data error.
--
-- The row is written in the same transaction that records the event in
-- processed_events, so a failed event is neither retried forever nor lost:
-- fix the cause, apply the row by hand (or re-publish it), then delete it.
-- key and payload are the Kafka message's key and value as text (NULL when
-- absent, or when they are not valid text in the database encoding).

CREATE TABLE IF NOT EXISTS public.failed_events (
    consumer    TEXT        NOT NULL,
    event_id    TEXT        NOT NULL,
    topic       TEXT        NOT NULL,
    "partition" INTEGER     NOT NULL,
    "offset"    BIGINT      NOT NULL,
    key         TEXT        NULL,
    event_type  TEXT        NULL,
    payload     TEXT        NULL,
    error       TEXT        NOT NULL,
    sqlstate    TEXT        NULL,
    failed_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
