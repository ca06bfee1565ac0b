-- Retention per queue (issue 30: M2 and the retention lag; ADR 0021). One
-- queue's keep_dead / keep_completed never changes what maintenance does to
-- another queue's rows, and what the readers show agrees with each queue's
-- keep whether or not the rings have turned. The clock is moved with
-- pgq.debug_clock_offset and maintenance run by hand, a pass per step.
CREATE EXTENSION pgq_cpp;

-- M2, a short keep: team B keeps its dead jobs for good (the default);
-- team A keeps them one second and has a job die every step. B's rows are
-- never rewritten (same segment, ctid and xmin) over 10 minutes of passes.
SELECT pgq.create_queue('team_b', max_attempts => 1);
SELECT pgq.create_queue('team_a', max_attempts => 1, keep_dead => '1 second');
SELECT count(pgq.cancel(pgq.enqueue('team_b', jsonb_build_object('n', g))))
  FROM generate_series(1, 50) g;
CREATE TEMP TABLE b_before AS
SELECT id, tableoid::regclass::text AS segment, ctid::text AS tid, xmin::text AS xid
  FROM pgq.dead_jobs WHERE queue = 'team_b';
\set ECHO none
\o /dev/null
SELECT format('SET pgq.debug_clock_offset = %L', (i * 15) || 's'),
       $$SELECT pgq.cancel(pgq.enqueue('team_a', '{}'))$$,
       'SELECT pgq.maintain()'
  FROM generate_series(1, 40) i \gexec
\o
\set ECHO all
SELECT count(*) AS b_rows_rewritten
  FROM b_before b
  LEFT JOIN pgq.dead_jobs d
    ON d.id = b.id AND d.tableoid::regclass::text = b.segment AND d.ctid::text = b.tid
   AND d.xmin::text = b.xid
 WHERE d.id IS NULL;
-- A's own rows leave within the bound of its class (keep + 4 periods of
-- 10 seconds, here one pass each 15 seconds): none a minute and a half old.
SELECT count(*) FILTER (WHERE died_at < pgq.clock() - interval '90 seconds') AS a_rows_too_old,
       count(*) < 10 AS a_rows_leave
  FROM pgq.dead_jobs WHERE queue = 'team_a';

-- M2, a long keep: team C keeps dead jobs 30 days, team D one minute; D's
-- rows leave the disk within its own bound (here two minutes), not C's.
-- The same for history: E keeps completed jobs 7 days, F one minute.
SELECT pgq.create_queue('team_c', keep_dead => '30 days');
SELECT pgq.create_queue('team_d', keep_dead => '1 minute');
SELECT pgq.create_queue('team_e', keep_completed => '7 days');
SELECT pgq.create_queue('team_f', keep_completed => '1 minute');
SELECT count(pgq.cancel(pgq.enqueue(q, '{}')))
  FROM unnest(ARRAY['team_c', 'team_d']) q, generate_series(1, 5);
SELECT count(pgq.enqueue(q, '{}')) FROM unnest(ARRAY['team_e', 'team_f']) q, generate_series(1, 5);
SELECT count(pgq.complete(c.id, c.attempt))
  FROM pgq.claim(ARRAY['team_e', 'team_f'], 10) c;
\set ECHO none
\o /dev/null
SELECT format('SET pgq.debug_clock_offset = %L', (600 + i * 15) || 's'),
       'SELECT pgq.maintain()'
  FROM generate_series(1, 14) i \gexec
\o
\set ECHO all
SELECT (SELECT count(*) FROM pgq.dead_jobs WHERE queue = 'team_c') AS c_dead_kept,
       (SELECT count(*) FROM pgq.dead_jobs WHERE queue = 'team_d') AS d_dead_on_disk,
       (SELECT count(*) FROM pgq.job_history h JOIN pgq.queues q USING (queue_id)
         WHERE q.name = 'team_e') AS e_done_kept,
       (SELECT count(*) FROM pgq.job_history h JOIN pgq.queues q USING (queue_id)
         WHERE q.name = 'team_f') AS f_done_on_disk;

-- B stops keeping its dead jobs for good: they leave pgq.dead_jobs_kept for
-- the ring of its new keep, then the disk once past it.
SELECT pgq.alter_queue('team_b', keep_dead => '1 hour');
SELECT 1 FROM pgq.maintain();
SELECT count(*) FILTER (WHERE tableoid = 'pgq.dead_jobs_kept'::regclass) AS b_in_kept,
       count(*) AS b_dead
  FROM pgq.dead_jobs WHERE queue = 'team_b';
SET pgq.debug_clock_offset = '2h';
SELECT dead AS b_shown FROM pgq.queue_stats WHERE queue = 'team_b';
\set ECHO none
\o /dev/null
SELECT format('SET pgq.debug_clock_offset = %L', (7200 + i * 1000) || 's'),
       'SELECT pgq.maintain()'
  FROM generate_series(1, 8) i \gexec
\o
\set ECHO all
SELECT count(*) AS b_dead_on_disk FROM pgq.dead_jobs WHERE queue = 'team_b';
RESET pgq.debug_clock_offset;

-- The retention lag: a queue keeping dead jobs 2 seconds, 3 seconds later
-- and before any maintenance. Nothing shows the job or brings it back.
SELECT pgq.create_queue('short', max_attempts => 1, keep_dead => '2 seconds',
                        keep_completed => '2 seconds');
SELECT pgq.enqueue('short', '{"s": 1}') AS s1 \gset
SELECT pgq.enqueue('short', '{"s": 2}') AS s2 \gset
SELECT pgq.enqueue('short', '{"s": 3}') AS s3 \gset
SELECT pgq.cancel(:s1), pgq.cancel(:s2);
SELECT pgq.complete(c.id, c.attempt) FROM pgq.claim('short') c;
SELECT (SELECT dead FROM pgq.queue_stats WHERE queue = 'short') AS dead_before,
       (SELECT count(*) FROM pgq.list_jobs('short')) AS listed_before;
SET pgq.debug_clock_offset = '3s';
SELECT (SELECT dead FROM pgq.queue_stats WHERE queue = 'short') AS stats_dead,
       (SELECT dead FROM pgq.queue_metrics() WHERE queue = 'short') AS metrics_dead,
       (SELECT dead FROM pgq.queue_overview() WHERE queue = 'short') AS overview_dead,
       (SELECT count(*) FROM pgq.list_jobs('short')) AS listed,
       (SELECT count(*) FROM pgq.job(:s1)) AS job_s1,
       (SELECT count(*) FROM pgq.job(:s3)) AS job_s3;
SELECT line FROM unnest(string_to_array(pgq.metrics(), E'\n')) line
 WHERE line ~ '^pgq_jobs\{.*queue="short",state="dead"';
SELECT pgq.retry_dead(:s1) AS retried_one, pgq.retry_dead('short') AS retried_queue;
SELECT count(*) AS live FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = 'short';
RESET pgq.debug_clock_offset;

-- One ring layer (issue 32, ADR 0026): the rings are src/pg/segments rings,
-- in pgq.rings, and no row is copied or rewritten when they turn. Team G
-- keeps history an hour (class 3: segments 10-12, turned every 16
-- minutes); its rows keep their segment, ctid and xmin through passes over
-- two hours that turn its ring, and leave by TRUNCATE once past the hour.
SELECT pgq.create_queue('team_g', keep_completed => '1 hour');
SET pgq.debug_clock_offset = '10h';
SELECT count(pgq.enqueue('team_g', '{}')) FROM generate_series(1, 5);
SELECT count(pgq.complete(c.id, c.attempt)) FROM pgq.claim('team_g', 5) c;
CREATE TEMP TABLE g_before AS
SELECT id, tableoid::regclass::text AS segment, ctid::text AS tid, xmin::text AS xid
  FROM pgq.job_history h WHERE h.queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'team_g');
SELECT generation AS g_generation FROM pgq.rings WHERE ring_id = -4 \gset
\set ECHO none
\o /dev/null
SELECT format('SET pgq.debug_clock_offset = %L', (36000 + i * 300) || 's'),
       $$SELECT count(pgq.complete(c.id, c.attempt))
           FROM pgq.claim('team_g', 1) c, pgq.enqueue('team_g', '{}') e$$,
       'SELECT pgq.maintain()'
  FROM generate_series(1, 11) i \gexec
\o
\set ECHO all
SELECT (SELECT generation - :g_generation FROM pgq.rings WHERE ring_id = -4) >= 2 AS g_ring_turned,
       count(*) AS g_rows, count(h.id) AS g_rows_untouched
  FROM g_before b
  LEFT JOIN pgq.job_history h
    ON h.id = b.id AND h.tableoid::regclass::text = b.segment AND h.ctid::text = b.tid
   AND h.xmin::text = b.xid;
SELECT count(*) AS g_history_rows, count(DISTINCT id) AS g_distinct_jobs
  FROM pgq.job_history h WHERE h.queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'team_g');
\set ECHO none
\o /dev/null
SELECT format('SET pgq.debug_clock_offset = %L', (39300 + i * 600) || 's'),
       'SELECT pgq.maintain()'
  FROM generate_series(1, 12) i \gexec
\o
\set ECHO all
SELECT count(*) AS g_first_rows_on_disk FROM g_before b JOIN pgq.job_history h ON h.id = b.id;

-- A keep raised into a longer class applies to the rows written after it:
-- team H's row, written under a one-minute keep (class 0), is shown for the
-- new day while it is on disk and leaves with its ring within the longest
-- keep of class 0 (2 minutes). Its ring waits for nobody else's keep.
SELECT pgq.create_queue('team_h', keep_completed => '1 minute');
SET pgq.debug_clock_offset = '20h';
SELECT pgq.enqueue('team_h', '{}') AS h1 \gset
SELECT pgq.complete(c.id, c.attempt) FROM pgq.claim('team_h') c;
SELECT pgq.alter_queue('team_h', keep_completed => '1 day');
SET pgq.debug_clock_offset = '72090s';
SELECT 1 FROM pgq.maintain();
SELECT state FROM pgq.job(:h1);
\set ECHO none
\o /dev/null
SELECT format('SET pgq.debug_clock_offset = %L', (72090 + i * 15) || 's'),
       'SELECT pgq.maintain()'
  FROM generate_series(1, 10) i \gexec
\o
\set ECHO all
SELECT count(*) AS h1_on_disk FROM pgq.job_history WHERE id = :h1;
RESET pgq.debug_clock_offset;
DROP EXTENSION pgq_cpp;
