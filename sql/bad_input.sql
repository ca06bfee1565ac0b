-- Bad input: every case gets the right SQLSTATE and a PostgreSQL-style
-- message, nothing is half-written, and the connection stays usable.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('q');
SELECT pgq.enqueue('q', '{"keep": true}') AS kept \gset

-- error_of(sql): 'SQLSTATE: message' of the error the statement raises.
CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- One full error, to show the hint a user sees.
SELECT pgq.enqueue('missing', '{}');

SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  -- queue names
  ($$SELECT pgq.create_queue(NULL)$$),
  ($$SELECT pgq.create_queue('')$$),
  ($$SELECT pgq.create_queue('Upper')$$),
  ($$SELECT pgq.create_queue('_x')$$),
  ($$SELECT pgq.create_queue('a b')$$),
  ($$SELECT pgq.create_queue('x;drop table pgq.jobs')$$),
  ($$SELECT pgq.create_queue(repeat('a', 63))$$),
  ($$SELECT pgq.create_queue(repeat('a', 64))$$),
  ($$SELECT pgq.enqueue('Q', '{}')$$),
  ($$SELECT pgq.claim('', 1)$$),
  -- queue settings
  ($$SELECT pgq.create_queue('s1', max_attempts => 0)$$),
  ($$SELECT pgq.create_queue('s2', max_attempts => NULL)$$),
  ($$SELECT pgq.create_queue('s3', lease => '0')$$),
  ($$SELECT pgq.create_queue('s4', lease => '-1 second')$$),
  ($$SELECT pgq.create_queue('s5', lease => '2 days')$$),
  ($$SELECT pgq.create_queue('s6', lease => NULL)$$),
  ($$SELECT pgq.create_queue('s7', backoff_base => '-1 second')$$),
  ($$SELECT pgq.create_queue('s8', backoff_base => '1 hour', backoff_max => '1 minute')$$),
  ($$SELECT pgq.create_queue('s9', retention => '-1 day')$$),
  ($$SELECT pgq.create_queue('s10', notify => NULL)$$),
  ($$SELECT pgq.create_queue('s11', lease => '100000000 years')$$),
  ($$SELECT pgq.alter_queue('q', lease => '0')$$),
  ($$SELECT pgq.alter_queue('q', max_attempts => -1)$$),
  -- intervals that would take maintenance out of the timestamp range
  ($$SELECT pgq.create_queue('s12', retention => '101 years')$$),
  ($$SELECT pgq.create_queue('s13', backoff_max => '200000 years')$$),
  ($$SELECT pgq.alter_queue('q', retention => '200000 years')$$),
  -- unknown queues
  ($$SELECT pgq.enqueue('missing', '{}')$$),
  ($$SELECT pgq.enqueue_many('missing', ARRAY['{}']::jsonb[])$$),
  ($$SELECT pgq.claim('missing')$$),
  ($$SELECT pgq.drop_queue('missing')$$),
  ($$SELECT pgq.pause('missing')$$),
  ($$SELECT pgq.retry_dead('missing', 1)$$),
  -- enqueue
  ($$SELECT pgq.enqueue('q', NULL)$$),
  ($$SELECT pgq.enqueue('q', '{}', max_attempts => 0)$$),
  ($$SELECT pgq.enqueue('q', '{}', group_key => '')$$),
  ($$SELECT pgq.enqueue('q', '{}', group_key => repeat('g', 513))$$),
  ($$SELECT pgq.enqueue('q', '{}', priority => -2147483648)$$),
  ($$SELECT pgq.enqueue_many('q', ARRAY['{}'::jsonb], priority => -2147483648)$$),
  -- a hand-written row with that priority: the ready index cannot negate it
  ($$INSERT INTO pgq.job_rows (id, queue_id, state, priority, run_at, attempt, max_attempts, enqueued_at, payload) VALUES (-1, 1, 'p', -2147483648, now(), 0, 1, now(), '{}')$$),
  ($$SELECT pgq.create_queue('r', rate_limit => 0)$$),
  ($$SELECT pgq.create_queue('r', rate_limit => -1)$$),
  ($$SELECT pgq.create_queue('r', rate_limit => 'NaN')$$),
  ($$SELECT pgq.create_queue('r', rate_limit => 'Infinity')$$),
  ($$SELECT pgq.alter_queue('q', rate_limit => -0.5)$$),
  ($$SELECT pgq.alter_queue('q', rate_limit => 'Infinity')$$),
  ($$SELECT pgq.enqueue('q', '{}', dedupe_key => '')$$),
  ($$SELECT pgq.enqueue('q', '{}', dedupe_key => repeat('k', 513))$$),
  ($$SELECT pgq.enqueue_many('q', NULL)$$),
  ($$SELECT pgq.enqueue_many('q', ARRAY['{}', NULL]::jsonb[])$$),
  ($$SELECT pgq.enqueue_many('q', ARRAY[['{}'], ['{}']]::jsonb[])$$),
  -- enqueue_many's keys: one for all or one per payload, each 1 to 512 bytes
  ($$SELECT pgq.enqueue_many('q', ARRAY['{}', '{}', '{}']::jsonb[], group_keys => ARRAY['a', 'b'])$$),
  ($$SELECT pgq.enqueue_many('q', ARRAY['{}']::jsonb[], group_keys => '{}')$$),
  ($$SELECT pgq.enqueue_many('q', ARRAY['{}', '{}']::jsonb[], dedupe_keys => ARRAY['k', ''])$$),
  ($$SELECT pgq.enqueue_many('q', ARRAY['{}']::jsonb[], group_keys => ARRAY[repeat('g', 513)])$$),
  ($$SELECT pgq.enqueue_many('q', ARRAY['{}']::jsonb[], dedupe_keys => ARRAY[['k'], ['l']])$$),
  -- infinite times mean nothing for a job
  ($$SELECT pgq.enqueue('q', '{}', run_at => '-infinity')$$),
  ($$SELECT pgq.enqueue('q', '{}', run_at => 'infinity')$$),
  ($$SELECT pgq.enqueue_many('q', ARRAY['{}'::jsonb], run_at => '-infinity')$$),
  -- schedules: long specs, long @every, time zones outside pg_timezone_names
  ($$SELECT pgq.schedule('s', 'q', repeat('1,', 100) || '1 * * * *')$$),
  ($$SELECT pgq.schedule('s', 'q', '@every 101 years')$$),
  ($$SELECT pgq.schedule('s', 'q', '@daily', timezone => 'garbage5')$$),
  ($$SELECT pgq.schedule('s', 'q', '@daily', timezone => '+01:00')$$),
  ($$SELECT pgq.schedule('s', 'q', '@daily', timezone => 'Mars/Olympus')$$),
  -- claim
  ($$SELECT pgq.claim('q', 0)$$),
  ($$SELECT pgq.claim('q', -1)$$),
  ($$SELECT pgq.claim('q', 10001)$$),
  ($$SELECT pgq.claim('q', NULL)$$),
  ($$SELECT pgq.claim('q', 1, lease => '0')$$),
  ($$SELECT pgq.claim('q', 1, lease => '-5 minutes')$$),
  ($$SELECT pgq.claim('q', 1, lease => '1 day 1 second')$$),
  ($$SELECT pgq.claim('q', 1, wait => '-1 second')$$),
  -- finishing
  ($$SELECT pgq.complete(NULL, 1)$$),
  ($$SELECT pgq.complete(1, NULL)$$),
  ($$SELECT pgq.complete_many(NULL, '{}')$$),
  ($$SELECT pgq.complete_many('{1,2}', '{1}')$$),
  ($$SELECT pgq.complete_many('{1,NULL}', '{1,1}')$$),
  ($$SELECT pgq.fail(NULL, 1)$$),
  ($$SELECT pgq.fail(1, 1, 'x', '-1 second')$$),
  ($$SELECT pgq.fail(1, 1, 'x', '300000 years')$$),
  ($$SELECT pgq.extend(1, 1, NULL)$$),
  ($$SELECT pgq.extend(1, 1, '0')$$),
  ($$SELECT pgq.extend(1, 1, '2 days')$$),
  ($$SELECT pgq.release(NULL, 1)$$),
  ($$SELECT pgq.cancel(NULL)$$),
  ($$SELECT pgq.retry_dead(NULL::bigint)$$),
  ($$SELECT pgq.retry_dead('q', 0)$$)
) AS t(s);

-- A time zone is matched as PostgreSQL matches names, in any case, and
-- stored in its canonical spelling.
SELECT pgq.schedule('zoned', 'q', '0 12 * * *', timezone => 'europe/madrid');
SELECT timezone FROM pgq.schedules WHERE name = 'zoned';
SELECT pgq.unschedule('zoned');

-- An error text is kept up to 8192 bytes, cut at a character boundary with a
-- marker; a short one is kept whole.
SELECT pgq.create_queue('errq', backoff_base => '0', backoff_max => '0');
SELECT pgq.enqueue('errq', '{}') AS err_job \gset
SELECT attempt FROM pgq.claim('errq');
SELECT pgq.fail(:err_job, 1, repeat('ñ', 5000000));
SELECT octet_length(last_error) AS bytes, right(last_error, 16) AS ending
  FROM pgq.jobs WHERE id = :err_job;
SELECT attempt FROM pgq.claim('errq');
SELECT pgq.fail(:err_job, 2, 'short');
SELECT last_error FROM pgq.jobs WHERE id = :err_job;

-- A row stored before 1.2 with an infinite run_at (written here by hand)
-- blinds no monitoring function.
INSERT INTO pgq.job_rows (id, queue_id, state, priority, run_at, attempt, max_attempts, enqueued_at, payload)
SELECT -2, queue_id, 'p', 0, '-infinity', 0, 1, now(), '{}' FROM pgq.queues WHERE name = 'errq';
SELECT queue, ready, oldest_ready_age IS NOT NULL AS has_age FROM pgq.queue_stats WHERE queue = 'errq';
SELECT queue, ready FROM pgq.queue_metrics() WHERE queue = 'errq';
SELECT pgq.metrics() LIKE '%pgq_oldest_ready_age_seconds{%queue="errq"}%' AS metrics_ok;
SELECT pgq.drop_queue('errq', force => true);

-- Nothing was half-written, and the session still works.
SELECT name FROM pgq.queues ORDER BY name;
SELECT id = :kept AS kept_job_intact, state, attempt, payload FROM pgq.jobs;
SELECT count(*) AS dead FROM pgq.dead_jobs;
SELECT id = :kept AS still_claimable FROM pgq.claim('q');

DROP EXTENSION pgq_cpp;
