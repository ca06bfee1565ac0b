-- bench/relay.sh's paced producer: one event per transaction, a random
-- customer's group key.
\set key random(1, :keys)
SELECT pgq.publish('orders.created', jsonb_build_object('order', :key, 'total', 99.5), NULL,
                   'customer-' || :key);
