-- Helpers of bench/streams.sh in the database skytools (Skytools PgQ).
--
-- bench_sky_prefill(events, per_tick): a backlog of `events` events on queue
-- 'bench', one transaction per `per_tick` events, each followed by a tick in
-- a transaction of its own: every tick, and so every batch a consumer gets
-- from next_batch, holds exactly `per_tick` events (the last may hold fewer).
-- The caller sets ticker_max_count to 1 first, so pgq.ticker('bench') ticks
-- whenever there is any new event. The payload is bench/sql's '{"k":1}'.
CREATE OR REPLACE PROCEDURE bench_sky_prefill(events integer, per_tick integer)
LANGUAGE plpgsql AS $$
DECLARE
    left_ integer := events;
    k     integer;
BEGIN
    WHILE left_ > 0 LOOP
        k := least(per_tick, left_);
        PERFORM count(pgq.insert_event('bench', 'ev', '{"k":1}')) FROM generate_series(1, k);
        COMMIT;
        PERFORM pgq.ticker('bench');
        COMMIT;
        left_ := left_ - k;
    END LOOP;
END $$;

-- Events on queue 'bench' that consumer 'c' has not finished yet: those whose
-- transaction is not visible in the snapshot of its last finished tick (the
-- ev_txid index of each event table finds them).
CREATE OR REPLACE FUNCTION bench_sky_unfinished() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    tbl  text;
    snap txid_snapshot;
    n    bigint;
BEGIN
    SELECT q.queue_data_pfx, t.tick_snapshot INTO tbl, snap
      FROM pgq.queue q
      JOIN pgq.consumer c ON c.co_name = 'c'
      JOIN pgq.subscription s ON s.sub_queue = q.queue_id AND s.sub_consumer = c.co_id
      JOIN pgq.tick t ON t.tick_queue = q.queue_id AND t.tick_id = s.sub_last_tick
     WHERE q.queue_name = 'bench';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer c is not registered on queue bench';
    END IF;
    EXECUTE format('SELECT count(*) FROM %s WHERE ev_txid >= $1 AND NOT txid_visible_in_snapshot(ev_txid, $2)', tbl)
       INTO n USING txid_snapshot_xmin(snap), snap;
    RETURN n;
END $$;
