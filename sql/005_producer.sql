-- 005_producer.sql — helpers for services that produce outbox events.
--
-- Call one of them in the SAME transaction as the business rows it
-- describes; the event then exists exactly when the business change does.
--
--   outbox_emit(aggregate_id, type, payload) -> bigint
--       inserts a row into public.events_outbox and returns its id (which
--       becomes the event's event_id, in decimal). The row stays until the
--       reaper deletes it.
--
--   outbox_emit_message(aggregate_id, type, payload [, prefix]) -> pg_lsn
--       table-less mode: writes the event only to the WAL, as a transactional
--       logical message (pg_logical_emit_message(true, prefix, envelope)).
--       No table, no index, no bloat, no reaper. Rolled back with the
--       transaction like a row would be. The relayer (--message-prefix,
--       default "outbox") routes it like a table event; its event_id is
--       "m-" followed by the returned LSN as 16 hex digits, the same on every
--       redelivery. The envelope is
--         {"aggregate_id": "<uuid>", "type": "<type>", "payload": <payload>}
--
-- Both modes can be used at once, even in one transaction: the relayer
-- publishes events in commit order, and within a transaction in the order
-- they were written.

CREATE OR REPLACE FUNCTION public.outbox_emit(aggregate_id uuid, type text, payload jsonb)
RETURNS bigint
LANGUAGE sql
VOLATILE
AS $$
    INSERT INTO public.events_outbox (aggregate_id, type, payload)
    VALUES (outbox_emit.aggregate_id, outbox_emit.type, outbox_emit.payload)
    RETURNING id;
$$;

COMMENT ON FUNCTION public.outbox_emit(uuid, text, jsonb) IS
    'Insert an outbox event in the current transaction; returns its id (the event_id).';

CREATE OR REPLACE FUNCTION public.outbox_emit_message(aggregate_id uuid, type text, payload jsonb,
                                                      prefix text DEFAULT 'outbox')
RETURNS pg_lsn
LANGUAGE sql
VOLATILE
AS $$
    -- json_build_object keeps the jsonb payload as JSON (not a string) and
    -- escapes the type; a NULL aggregate_id becomes JSON null.
    SELECT pg_logical_emit_message(
        true,
        outbox_emit_message.prefix,
        json_build_object('aggregate_id', outbox_emit_message.aggregate_id,
                          'type', outbox_emit_message.type,
                          'payload', outbox_emit_message.payload)::text);
$$;

COMMENT ON FUNCTION public.outbox_emit_message(uuid, text, jsonb, text) IS
    'Emit an outbox event as a transactional logical message (table-less mode); '
    'returns its LSN: event_id is ''m-'' || lpad(hex of the LSN, 16, ''0'').';
