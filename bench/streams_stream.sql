-- Helper of bench/streams.sh in the database bench (pgq_cpp streams).
--
-- bench_stream_prefill(events, per_tx): a backlog of `events` events on
-- stream 'bench', one pgq.append_many of `per_tx` events per transaction:
-- the same transactions as bench_sky_prefill's (bench/streams_skytools.sql).
CREATE OR REPLACE PROCEDURE bench_stream_prefill(events integer, per_tx integer)
LANGUAGE plpgsql AS $$
DECLARE
    left_ integer := events;
    k     integer;
BEGIN
    WHILE left_ > 0 LOOP
        k := least(per_tx, left_);
        PERFORM count(*) FROM pgq.append_many('bench', array_fill('{"k":1}'::jsonb, ARRAY[k]));
        COMMIT;
        left_ := left_ - k;
    END LOOP;
END $$;
