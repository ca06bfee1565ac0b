-- Recurring jobs: pgq.schedule, pgq.unschedule, the pgq.schedules view, and
-- firing by maintenance. The clock is moved with pgq.debug_clock_offset
-- instead of sleeping; the background worker runs only once an hour here
-- (test/pgq_test.conf) and on the real clock, so it never fires these.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('refresh', retention => '1 hour');

CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- Moves pgq's clock to `seconds` past the given instant.
CREATE FUNCTION pg_temp.jump_past(t timestamptz, seconds int DEFAULT 1) RETURNS void
LANGUAGE sql AS $$
  SELECT set_config('pgq.debug_clock_offset',
                    (ceil(extract(epoch FROM t - now())) + seconds)::bigint || 's', false);
$$;

-- A cron schedule: every two hours, on the hour, in UTC.
SELECT pgq.schedule('tle', 'refresh', '0 */2 * * *', '{"what": "tle"}');
SELECT name, queue, spec, timezone, payload, last_run_at, last_job_id, running,
       next_run_at > pgq.clock() AS in_future,
       next_run_at <= pgq.clock() + interval '2 hours' AS within_two_hours,
       extract(minute FROM next_run_at AT TIME ZONE 'UTC') = 0 AS on_the_hour,
       extract(hour FROM next_run_at AT TIME ZONE 'UTC')::int % 2 = 0 AS even_hour
  FROM pgq.schedules;

-- Not due yet: nothing fires.
SELECT schedules_fired FROM pgq.maintain();

-- Due: it fires once, into its queue, with its payload.
SELECT next_run_at AS slot1 FROM pgq.schedules WHERE name = 'tle' \gset
SELECT pg_temp.jump_past(:'slot1');
SELECT schedules_fired FROM pgq.maintain();
SELECT schedules_fired AS fired_again FROM pgq.maintain();
SELECT running, last_job_id IS NOT NULL AS has_job, last_run_at >= :'slot1' AS ran_after_slot,
       next_run_at = :'slot1'::timestamptz + interval '2 hours' AS next_slot
  FROM pgq.schedules WHERE name = 'tle';
SELECT j.payload, j.state FROM pgq.jobs j JOIN pgq.schedules s ON s.last_job_id = j.id;

-- Slots pass while that job is still pending: none fires (at most one job
-- of a schedule at once) ...
SELECT pg_temp.jump_past(:'slot1', 3 * 7200);
SELECT schedules_fired AS while_pending FROM pgq.maintain();
-- ... and once it is done, the missed slots fire once, not three times.
SELECT pgq.complete(id, attempt) FROM pgq.claim('refresh', 1);
SELECT schedules_fired AS after_done FROM pgq.maintain();
SELECT schedules_fired AS and_no_more FROM pgq.maintain();
SELECT count(*) AS runs_recorded FROM pgq.schedule_runs WHERE name = 'tle';
SELECT next_run_at > pgq.clock() AS next_in_future FROM pgq.schedules WHERE name = 'tle';
SELECT pgq.complete(id, attempt) FROM pgq.claim('refresh', 1);
SELECT pgq.unschedule('tle');

-- Time zones: a Madrid schedule fires at 02:30 Madrid time (03:00 on the
-- night the clocks skip 02:00-03:00).
SELECT pgq.schedule('madrid', 'refresh', '30 2 * * *', timezone => 'Europe/Madrid');
SELECT (next_run_at AT TIME ZONE 'Europe/Madrid')::time IN ('02:30', '03:00') AS madrid_0230
  FROM pgq.schedules WHERE name = 'madrid';
SELECT pgq.unschedule('madrid');

-- @every: a fixed delay, counted from the end of the previous run.
SELECT pgq.schedule('every', 'refresh', '@every 1 hour', '{"what": "every"}');
SELECT next_run_at > pgq.clock() + interval '59 minutes'
       AND next_run_at <= pgq.clock() + interval '1 hour' AS first_in_one_hour
  FROM pgq.schedules WHERE name = 'every';
SELECT next_run_at AS slot2 FROM pgq.schedules WHERE name = 'every' \gset
SELECT pg_temp.jump_past(:'slot2');
SELECT schedules_fired FROM pgq.maintain();
-- While the run is pending there is no next slot, however long it takes.
SELECT next_run_at IS NULL AS no_next_slot, running FROM pgq.schedules WHERE name = 'every';
SELECT pg_temp.jump_past(:'slot2', 5 * 3600);
SELECT schedules_fired AS while_running FROM pgq.maintain();
SELECT pgq.complete(id, attempt) FROM pgq.claim('refresh', 1);
SELECT schedules_fired AS rearmed_not_fired FROM pgq.maintain();
SELECT next_run_at > pgq.clock() + interval '59 minutes'
       AND next_run_at <= pgq.clock() + interval '1 hour' AS next_one_hour_after_done,
       running
  FROM pgq.schedules WHERE name = 'every';

-- Replacing a schedule keeps one row, with the new spec and payload.
SELECT pgq.schedule('every', 'refresh', '@every 30 minutes', '{"what": "every", "v": 2}');
SELECT name, spec, payload FROM pgq.schedules ORDER BY name;

-- Run history is kept for the queue's retention (1 hour here).
SELECT count(*) > 0 AS has_history FROM pgq.schedule_runs;
SELECT pg_temp.jump_past(pgq.clock() + interval '2 hours');
SELECT count(*) FROM pgq.maintain();
SELECT count(*) AS history_after_retention FROM pgq.schedule_runs
 WHERE fired_at < pgq.clock() - interval '1 hour';

-- unschedule says whether it existed.
SELECT pgq.unschedule('every') AS existed, pgq.unschedule('every') AS again;

-- Bad input is refused when scheduling, not when firing.
SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  ($$SELECT pgq.schedule(NULL, 'refresh', '* * * * *')$$),
  ($$SELECT pgq.schedule('x', NULL, '* * * * *')$$),
  ($$SELECT pgq.schedule('x', 'refresh', NULL)$$),
  ($$SELECT pgq.schedule('x', 'missing', '* * * * *')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '* * * *')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '61 * * * *')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '*/0 * * * *')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '5-1 * * * *')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '@fortnightly')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '0 0 30 2 *')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '@every')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '@every banana')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '@every 500 milliseconds')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '@every -1 hour')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '* * * * *', timezone => 'Mars/Olympus')$$),
  ($$SELECT pgq.schedule('x', 'refresh', '* * * * *', timezone => NULL)$$),
  ($$SELECT pgq.schedule('x', 'refresh', '* * * * *', NULL)$$),
  ($$SELECT pgq.unschedule(NULL)$$)
) AS t(s);
SELECT count(*) AS schedules_left FROM pgq.schedules;

-- Dropping the queue drops its schedules.
SELECT pgq.schedule('tle', 'refresh', '@daily');
SELECT pgq.drop_queue('refresh', force => true);
SELECT count(*) AS schedules_after_drop FROM pgq.recurring;

DROP EXTENSION pgq_cpp;
