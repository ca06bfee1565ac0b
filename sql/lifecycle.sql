-- The job lifecycle (SPEC §8): snooze, progress, complete with a result,
-- pgq.job and pgq.list_jobs, history kept and dropped by the rings' truncations,
-- purge_dead, and each function's bad input.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('export', keep_completed => '30 seconds', lease => '1 minute');
SELECT keep_completed, keep_dead FROM pgq.queues WHERE name = 'export';

-- error_of(sql): 'SQLSTATE: message' of the error the statement raises.
CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- A job's states as pgq.job shows them.
SELECT pgq.enqueue('export', '{"n": 1}') AS j1 \gset
SELECT pgq.enqueue('export', '{"n": 2}', run_at => pgq.clock() + interval '1 hour') AS j2 \gset
SELECT id = :j1 AS is_j1, queue, state, attempt, max_attempts, claimed_at, lease_until,
       finished_at, progress, result, payload
  FROM pgq.job(:j1);
SELECT state FROM pgq.job(:j2);
SELECT count(*) AS unknown FROM pgq.job(424242);

-- progress: the running job's, overwritten; fenced by attempt.
SELECT attempt FROM pgq.claim('export');
SELECT state, lease_until > claimed_at AS leased FROM pgq.job(:j1);
SELECT pgq.progress(:j1, 1, '{"pct": 10}') AS first, pgq.progress(:j1, 1, '{"pct": 40}') AS second,
       pgq.progress(:j1, 2, '{"pct": 99}') AS other_attempt;
SELECT progress FROM pgq.job(:j1);

-- snooze: pending again after the delay, the attempt not spent (its next
-- claim carries the same number), last_error untouched.
SELECT pgq.snooze(:j1, 1, '10 minutes') AS snoozed, pgq.snooze(:j1, 1, '10 minutes') AS again;
SELECT state, attempt, run_at > pgq.clock() + interval '9 minutes' AS later, last_error
  FROM pgq.job(:j1);
SELECT count(*) AS claimable_now FROM pgq.claim('export');
SET pgq.debug_clock_offset = '11min';
SELECT id = :j1 AS is_j1, attempt FROM pgq.claim('export');

-- complete with a result: kept with the job while the queue keeps history.
SELECT pgq.complete(:j1, 1, '{"rows": 1200, "url": "s3://exports/1"}') AS completed;
SELECT state, attempt, result, progress, finished_at IS NOT NULL AS finished FROM pgq.job(:j1);
SELECT count(*) AS live FROM pgq.jobs WHERE id = :j1;
RESET pgq.debug_clock_offset;

-- list_jobs: newest first, keyset pages, a state filter.
SELECT pgq.enqueue_many('export', ARRAY['{"n": 3}', '{"n": 4}', '{"n": 5}']::jsonb[]) IS NOT NULL;
SELECT string_agg(payload->>'n' || ':' || state, ' ' ORDER BY id DESC) AS page_1
  FROM pgq.list_jobs('export', max => 2);
SELECT string_agg(payload->>'n' || ':' || state, ' ' ORDER BY id DESC) AS page_2
  FROM pgq.list_jobs('export', max => 2,
                     before_id => (SELECT min(id) FROM pgq.list_jobs('export', max => 2)));
SELECT string_agg(payload->>'n', ' ' ORDER BY id DESC) AS ready FROM pgq.list_jobs('export', 'ready');
SELECT string_agg(payload->>'n', ' ' ORDER BY id DESC) AS done FROM pgq.list_jobs('export', 'done');
SELECT string_agg(payload->>'n', ' ' ORDER BY id DESC) AS scheduled
  FROM pgq.list_jobs('export', 'scheduled');

-- A queue that keeps nothing (the default) has no done rows: complete
-- costs what it did.
SELECT pgq.create_queue('plain');
SELECT pgq.enqueue('plain', '{}') AS p1 \gset
SELECT pgq.claim('plain') IS NOT NULL;
SELECT pgq.complete(:p1, 1, '{"ignored": true}');
SELECT count(*) AS no_history FROM pgq.job(:p1);

-- History past keep_completed is not shown, and leaves in bulk: the first
-- pass adopts the class-0 ring (pgq.rings, ring -1; ADR 0026), a pass
-- whose ring period has passed (here 10 seconds) turns it, and a later one
-- empties the sealed segment that held the job with a TRUNCATE once every
-- row in it is past its keep. (The job finished at the clock's 11 minutes.)
SELECT count(*) AS kept_rows FROM pgq.job_history;
SET pgq.debug_clock_offset = '12min';
SELECT count(*) AS shown_after_keep FROM pgq.job(:j1);
SELECT 1 FROM pgq.maintain();
SELECT r.current, count(*) AS rows_left FROM pgq.rings r, pgq.job_history
 WHERE r.ring_id = -1 GROUP BY r.current;
SET pgq.debug_clock_offset = '13min';
SELECT 1 FROM pgq.maintain();
SET pgq.debug_clock_offset = '14min';
SELECT 1 FROM pgq.maintain();
SET pgq.debug_clock_offset = '15min';
SELECT 1 FROM pgq.maintain();
SELECT r.current, r.generation, (SELECT count(*) FROM pgq.job_history) AS rows_left
  FROM pgq.rings r WHERE r.ring_id = -1;
RESET pgq.debug_clock_offset;

-- A row is never copied or rewritten while its ring turns: a1 keeps its
-- segment, ctid and xmin. A keep raised into a longer class applies to the
-- rows written after it; the rows written before stay in their ring, shown
-- for the new keep while they are on disk, and leave with their ring once
-- past its class's longest keep (2 minutes for class 0; sql/retention.sql).
SELECT pgq.create_queue('audit', keep_completed => '90 seconds');
SET pgq.debug_clock_offset = '16min';
SELECT pgq.enqueue('audit', '{"a": 1}') AS a1 \gset
SELECT pgq.claim('audit') IS NOT NULL;
SELECT pgq.complete(:a1, 1, '"ok"');
CREATE TEMP TABLE a1_row AS
SELECT tableoid::regclass::text AS leaf, ctid::text AS tid, xmin::text AS xid
  FROM pgq.job_history WHERE id = :a1;
SELECT generation AS generation_before FROM pgq.rings WHERE ring_id = -1 \gset
SET pgq.debug_clock_offset = '975s';
SELECT 1 FROM pgq.maintain();
SET pgq.debug_clock_offset = '990s';
SELECT 1 FROM pgq.maintain();
SET pgq.debug_clock_offset = '1005s';
SELECT 1 FROM pgq.maintain();
SELECT pgq.alter_queue('audit', keep_completed => '1 day');
SET pgq.debug_clock_offset = '1065s';
SELECT 1 FROM pgq.maintain();
SELECT r.generation > :generation_before AS ring_turned,
       (SELECT count(*) FROM pgq.job_history h JOIN a1_row b
           ON h.tableoid::regclass::text = b.leaf AND h.ctid::text = b.tid AND h.xmin::text = b.xid
         WHERE h.id = :a1) AS a1_untouched
  FROM pgq.rings r WHERE r.ring_id = -1;
SELECT state, result FROM pgq.job(:a1);
SET pgq.debug_clock_offset = '48h';
SELECT count(*) AS after_a_day FROM pgq.job(:a1);
RESET pgq.debug_clock_offset;

-- keep_dead: dead jobs older than it leave by the same turning; purge_dead
-- deletes a queue's dead jobs on request.
SELECT pgq.create_queue('hooks', max_attempts => 1, keep_dead => '1 minute');
SELECT pgq.enqueue('hooks', '{"h": 1}') AS h1 \gset
SELECT pgq.enqueue('hooks', '{"h": 2}') AS h2 \gset
SELECT pgq.cancel(:h1);
SELECT pgq.claim('hooks') IS NOT NULL;
SELECT pgq.fail(:h2, 1, 'HTTP 500');
SELECT string_agg(payload->>'h' || ':' || state || ':' || coalesce(last_error, '-'), ' '
                  ORDER BY id) AS dead
  FROM pgq.list_jobs('hooks');
SET pgq.debug_clock_offset = '2min';
SELECT count(*) AS shown_after_keep FROM pgq.list_jobs('hooks');
SELECT 1 FROM pgq.maintain();
SET pgq.debug_clock_offset = '3min';
SELECT 1 FROM pgq.maintain();
SET pgq.debug_clock_offset = '4min';
SELECT 1 FROM pgq.maintain();
SET pgq.debug_clock_offset = '5min';
SELECT 1 FROM pgq.maintain();
SELECT count(*) AS dead_rows_left FROM pgq.dead_jobs WHERE queue = 'hooks';
RESET pgq.debug_clock_offset;
SELECT pgq.create_queue('mail', max_attempts => 1);
SELECT pgq.enqueue('mail', '{}') AS m1 \gset
SELECT pgq.enqueue('mail', '{}') AS m2 \gset
SELECT pgq.cancel(:m1), pgq.cancel(:m2);
SELECT pgq.purge_dead('mail', '1 hour') AS none_that_old, pgq.purge_dead('mail') AS purged,
       pgq.purge_dead('mail') AS again;

-- An admin without produce or consume sees jobs without payload, progress
-- and result; a role with no right on the queue sees none.
CREATE ROLE pgq_regress_ops;
CREATE ROLE pgq_regress_nobody;
SELECT pgq.grant('pgq_regress_ops', 'audit', 'admin');
SET ROLE pgq_regress_ops;
SELECT state, payload, result, last_error FROM pgq.job(:a1);
SELECT count(*) AS listed, count(payload) AS with_payload FROM pgq.list_jobs('audit');
SELECT count(*) AS other_queue FROM pgq.job(:j2);
RESET ROLE;
SELECT pgq.grant('pgq_regress_nobody', 'export', 'produce');
SELECT pgq.revoke('pgq_regress_nobody', 'export', 'produce');
SET ROLE pgq_regress_nobody;
SELECT pg_temp.error_of($$SELECT * FROM pgq.job(1)$$);
SELECT pg_temp.error_of($$SELECT * FROM pgq.list_jobs('export')$$);
SELECT pg_temp.error_of($$SELECT pgq.purge_dead('export')$$);
RESET ROLE;

-- Bad input.
SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  ($$SELECT pgq.snooze(1, 1, NULL)$$),
  ($$SELECT pgq.snooze(1, 1, '-1 second')$$),
  ($$SELECT pgq.snooze(1, 1, '101 years')$$),
  ($$SELECT pgq.snooze(NULL, 1, '1 second')$$),
  ($$SELECT pgq.progress(1, 1, NULL)$$),
  ($$SELECT pgq.progress(1, NULL, '{}')$$),
  ($$SELECT pgq.complete(1, 1, jsonb_build_object('x', repeat('x', 2000000)))$$),
  ($$SELECT pgq.progress(1, 1, jsonb_build_object('x', repeat('x', 2000000)))$$),
  ($$SELECT * FROM pgq.job(NULL)$$),
  ($$SELECT * FROM pgq.list_jobs('export', 'finished')$$),
  ($$SELECT * FROM pgq.list_jobs('export', max => 0)$$),
  ($$SELECT * FROM pgq.list_jobs('export', max => 10001)$$),
  ($$SELECT * FROM pgq.list_jobs('nope')$$),
  ($$SELECT * FROM pgq.list_jobs(NULL)$$),
  ($$SELECT pgq.purge_dead('export', '-1 day')$$),
  ($$SELECT pgq.purge_dead('nope')$$),
  ($$SELECT pgq.create_queue('x1', keep_completed => '-1 second')$$),
  ($$SELECT pgq.create_queue('x2', keep_dead => '-1 second')$$),
  ($$SELECT pgq.create_queue('x3', keep_completed => '101 years')$$),
  ($$SELECT pgq.alter_queue('export', keep_dead => '-1 day')$$),
  ($$SELECT pgq.alter_queue('export', keep_completed => '200 years')$$)
) AS t(s);
SELECT count(*) AS no_half_created FROM pgq.queues WHERE name LIKE 'x_';
SELECT keep_completed, keep_dead FROM pgq.queues WHERE name = 'export';
SELECT pgq.alter_queue('export', keep_dead => '7 days');
SELECT keep_completed, keep_dead FROM pgq.queues WHERE name = 'export';

-- The rings' ledger rows deleted by hand: writers use the first segment of
-- their class's ring (audit keeps a day: class 5, segments 16-18), and the
-- next pass adopts each ring again at its first segment (ADR 0026).
DELETE FROM pgq.rings WHERE ring_id BETWEEN -11 AND -1;
SELECT pgq.enqueue('audit', '{"a": 2}') AS a2 \gset
SELECT pgq.claim('audit') IS NOT NULL;
SELECT pgq.complete(:a2, 1, '"ok"') AS completed_without_ring;
SELECT segment FROM pgq.job_history WHERE id = :a2;
SELECT 1 FROM pgq.maintain();
SELECT r.ring_id, r.segments, r.current,
       string_agg(s.segment || ':' || CASE WHEN s.empty THEN 'empty' ELSE 'rows' END, ' '
                  ORDER BY s.segment) AS segments
  FROM pgq.rings r JOIN pgq.ring_segments s USING (ring_id)
 WHERE r.ring_id < 0 GROUP BY r.ring_id ORDER BY r.ring_id DESC;

-- An idle pass takes no transaction id: the rings are read without a lock
-- until one is due (a row lock would take one, every pass, in every
-- database).
SELECT 1 FROM pgq.maintain();
BEGIN;
SELECT 1 FROM pgq.maintain();
SELECT pg_current_xact_id_if_assigned() IS NULL AS idle_pass_took_no_xid;
COMMIT;

DROP EXTENSION pgq_cpp;
DROP ROLE pgq_regress_ops;
DROP ROLE pgq_regress_nobody;
