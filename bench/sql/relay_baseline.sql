-- bench/relay.sh's baseline: what pgq-relay does without a broker, a claim
-- of :n jobs of to_broker, then their completion in one statement, each its
-- own transaction (pgbench's autocommit), as the relay's two connections do. The
-- arrays go as parameters: run with -M extended.
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(attempt), '{}') AS atts
  FROM pgq.claim('to_broker', :n) \gset
SELECT pgq.complete_many(:ids::bigint[], :atts::integer[]);
