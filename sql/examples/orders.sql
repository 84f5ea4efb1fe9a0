-- examples/orders.sql — the outbox pattern end to end, on a toy shop.
--
-- Not loaded by the schema scripts (they are sql/*.sql only); load it after
-- them:  psql -f sql/examples/orders.sql
--
-- Producer side: place_order() writes the order and its order.placed event
-- in one transaction. outbox-relay publishes the event to the topic "order"
-- (the default topic template takes the type's prefix before the first dot).
--
-- Consumer side: outbox-consume adds the order's points to the customer's
-- balance exactly once, however often the event is delivered:
--
--   outbox-consume --brokers localhost:9092 --group loyalty --topics order \
--     --dsn 'dbname=shop' --consumer loyalty \
--     --apply "INSERT INTO loyalty_points(customer_id, points)
--              VALUES (($4->>'customer_id')::uuid, ($4->>'points')::int)
--              ON CONFLICT (customer_id)
--              DO UPDATE SET points = loyalty_points.points + EXCLUDED.points"

CREATE TABLE IF NOT EXISTS public.orders (
    id           UUID        PRIMARY KEY DEFAULT gen_random_uuid(),
    customer_id  UUID        NOT NULL,
    amount_cents INTEGER     NOT NULL CHECK (amount_cents > 0),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS public.loyalty_points (
    customer_id UUID   PRIMARY KEY,
    points      BIGINT NOT NULL
);

-- One point per whole currency unit. Runs inside the caller's transaction:
-- if the caller rolls back, neither the order nor the event exists.
CREATE OR REPLACE FUNCTION public.place_order(customer_id uuid, amount_cents integer)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    order_id uuid;
BEGIN
    INSERT INTO public.orders (customer_id, amount_cents)
    VALUES (place_order.customer_id, place_order.amount_cents)
    RETURNING id INTO order_id;

    PERFORM public.outbox_emit(
        order_id,
        'order.placed',
        jsonb_build_object('order_id', order_id,
                           'customer_id', place_order.customer_id,
                           'amount_cents', place_order.amount_cents,
                           'points', place_order.amount_cents / 100));
    RETURN order_id;
END
$$;

-- The same by hand, in psql:
--
--   BEGIN;
--   INSERT INTO orders (id, customer_id, amount_cents)
--       VALUES ('0b7e…', 'c1d2…', 2500);
--   SELECT outbox_emit('0b7e…', 'order.placed',
--       '{"order_id": "0b7e…", "customer_id": "c1d2…", "amount_cents": 2500, "points": 25}');
--   COMMIT;
--
-- or, table-less (nothing written to events_outbox):
--
--   SELECT outbox_emit_message('0b7e…', 'order.placed', '{…}');
