-- schema.sql — the benchmark's business table and event generator, loaded
-- after sql/*.sql into the benchmark's own throwaway PostgreSQL.
--
-- Every event of every phase (backlog, steady state, huge transaction,
-- primary load) is built by bench_payload(): an order document of about
-- 340 bytes of jsonb text with nested objects, an array, numbers, a quoted
-- name and non-ASCII text, so wal2json's output carries the escapes
-- (\" inside the payload string, UTF-8) a real outbox carries.

CREATE TABLE IF NOT EXISTS bench_orders (
    id          BIGSERIAL PRIMARY KEY,
    customer_id BIGINT      NOT NULL,
    total       NUMERIC(12, 2) NOT NULL,
    status      TEXT        NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE OR REPLACE FUNCTION bench_payload(n BIGINT, order_id BIGINT) RETURNS JSONB
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT jsonb_build_object(
    'order_id', order_id,
    'customer', jsonb_build_object(
        'id', 100000 + n % 50000,
        'name', (ARRAY['Jörg Müller', 'Ana "Ani" Souza', 'Li Wei', 'Zoë O''Brien'])[1 + n % 4],
        'tier', (ARRAY['basic', 'gold'])[1 + n % 2]),
    'items', jsonb_build_array(
        jsonb_build_object('sku', 'SKU-' || lpad((n % 9973)::text, 5, '0'),
                           'qty', 1 + n % 3, 'unit_price', round((n % 5000) / 100.0 + 1, 2)),
        jsonb_build_object('sku', 'SKU-' || lpad((n * 7 % 9973)::text, 5, '0'),
                           'qty', 1 + n % 2, 'unit_price', 4.99)),
    'total', round((n % 20000) / 100.0 + 9.98, 2),
    'currency', 'EUR',
    'shipping', jsonb_build_object('street', 'Hauptstraße ' || (1 + n % 200), 'city', 'Berlin',
                                   'zip', '10115', 'country', 'DE'),
    'placed_at', '2024-05-01T12:00:00Z')
$$;

CREATE OR REPLACE FUNCTION bench_type(n BIGINT) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT (ARRAY['order.created', 'order.paid', 'shipment.dispatched'])[1 + n % 3]
$$;

-- 1,000 ready-made events (type, payload) for the bulk phases, so that
-- generating 100,000 or 1,000,000 rows does not spend a minute building
-- jsonb: what the server decodes is the same either way.
CREATE TABLE IF NOT EXISTS bench_events (
    k       INT PRIMARY KEY,
    type    TEXT  NOT NULL,
    payload JSONB NOT NULL
);
INSERT INTO bench_events
SELECT k, bench_type(k), bench_payload(k * 7919, k) FROM generate_series(0, 999) AS k
ON CONFLICT DO NOTHING;

-- The backlog: n_events outbox rows, half of them in one-event
-- transactions and half in transactions of 2..20 events (cycling, mean 11),
-- interleaved; each transaction also inserts its business row. One COMMIT
-- per transaction (a procedure may commit), so the WAL holds exactly these
-- transactions. Deterministic: the same n_events gives the same rows.
-- small: payloads of a few bytes ({"order": …, "n": …}) in place of the
-- ready-made ~370-byte documents, the same transactions otherwise.
CREATE OR REPLACE PROCEDURE bench_backlog(n_events INT, small BOOLEAN DEFAULT false)
LANGUAGE plpgsql AS $$
DECLARE
    single_done INT := 0;
    multi_done  INT := 0;
    multi_tx    INT := 0;
    k           INT;
    oid         BIGINT;
BEGIN
    WHILE single_done + multi_done < n_events LOOP
        IF single_done <= multi_done THEN
            k := 1;
        ELSE
            k := 2 + multi_tx % 19;
            multi_tx := multi_tx + 1;
        END IF;
        k := least(k, n_events - single_done - multi_done);
        INSERT INTO bench_orders (customer_id, total, status)
        VALUES (100000 + (single_done + multi_done) % 50000, 42.50, 'created')
        RETURNING id INTO oid;
        INSERT INTO events_outbox (aggregate_id, type, payload)
        SELECT md5(oid::text)::uuid, e.type,
               CASE WHEN small THEN jsonb_build_object('order', oid, 'n', g) ELSE e.payload END
        FROM generate_series(1, k) AS g JOIN bench_events AS e ON e.k = (oid * 31 + g) % 1000;
        IF k = 1 THEN
            single_done := single_done + 1;
        ELSE
            multi_done := multi_done + k;
        END IF;
        COMMIT;
    END LOOP;
END
$$;

-- The wall-clock time (unix µs) at which SLOT's confirmed position reached
-- LSN: the relayer has every event before LSN acknowledged by the broker
-- and has said so to the server. NULL after timeout_s. Looks every 2 ms, in
-- one session, so that timing costs no process spawns.
CREATE OR REPLACE FUNCTION bench_wait_confirmed(slot TEXT, lsn PG_LSN, timeout_s FLOAT8)
RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    t0 TIMESTAMPTZ := clock_timestamp();
BEGIN
    LOOP
        IF (SELECT confirmed_flush_lsn FROM pg_replication_slots
            WHERE slot_name = slot) >= lsn THEN
            RETURN (extract(epoch FROM clock_timestamp()) * 1e6)::BIGINT;
        END IF;
        IF clock_timestamp() - t0 > timeout_s * interval '1 second' THEN
            RETURN NULL;
        END IF;
        PERFORM pg_sleep(0.002);
    END LOOP;
END
$$;
