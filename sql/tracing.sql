-- W3C Trace Context on every path a job or an event takes (issue 35, SPEC
-- §13, docs/adr/0030-trace-context.md): taken from the arguments, else
-- from the setting pgq.trace_context, else none; refused with 22023 when
-- malformed; kept across retries, snoozes, releases, lease expiries,
-- dead-letter and history; handed out by claim_traced and
-- next_batch_traced; copied to every subscriber of a publish; a firing's
-- own; the parents' traceparents as a child's links.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('mail');
SELECT pgq.create_queue('billing');
SELECT pgq.create_queue('retry', keep_completed => '1 hour', max_attempts => 2,
                        backoff_base => '1 second', backoff_max => '1 second');

CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

\set tp '''00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'''
\set tp2 '''00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'''

-- Capture: the argument; the setting (transaction-local, gone at COMMIT);
-- the argument over the setting; '' opts out; none at all.
SELECT pgq.enqueue('mail', '{"n": 1}', traceparent => :tp, tracestate => 'congo=t61rcWkgMzE') AS by_arg \gset
BEGIN;
SELECT set_config('pgq.trace_context', :tp2 || ';rojo=00f067aa0ba902b7', true) IS NOT NULL AS set;
SELECT pgq.enqueue('mail', '{"n": 2}') AS by_setting \gset
SELECT pgq.enqueue('mail', '{"n": 3}', traceparent => :tp) AS arg_wins \gset
COMMIT;
SHOW pgq.trace_context;
SELECT pgq.enqueue('mail', '{"n": 4}') AS untraced \gset
BEGIN;
SELECT set_config('pgq.trace_context', '', true) = '' AS opted_out;
SELECT pgq.enqueue('mail', '{"n": 5}') AS opted_out_job \gset
COMMIT;
-- A later version's traceparent is stored as version 00 (what a
-- propagator sends on); the flags are kept.
SELECT pgq.enqueue('mail', '{"n": 6}',
                   traceparent => '01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-future')
    AS later_version \gset
SELECT id = :by_arg AS by_arg, id = :by_setting AS by_setting, id = :arg_wins AS arg_wins,
       trace_id, trace_context
  FROM pgq.job(:by_arg) UNION ALL SELECT false, true, false, trace_id, trace_context FROM pgq.job(:by_setting)
 UNION ALL SELECT false, false, true, trace_id, trace_context FROM pgq.job(:arg_wins);
SELECT trace_id IS NULL AS untraced, trace_context IS NULL AS no_context FROM pgq.job(:untraced)
UNION ALL SELECT trace_id IS NULL, trace_context IS NULL FROM pgq.job(:opted_out_job);
SELECT trace_context FROM pgq.job(:later_version);
-- On the ring (no row of pgq.job_rows) and as rows alike.
SELECT count(*) AS rows_of_ring_jobs FROM pgq.job_rows WHERE id IN (:by_arg, :by_setting, :untraced);

-- Bad input: 22023, with the rule in the detail; nothing is stored.
SELECT pg_temp.error_of($$SELECT pgq.enqueue('mail', '{}', traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0')$$);
SELECT pg_temp.error_of($$SELECT pgq.enqueue('mail', '{}', traceparent => '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01')$$);
SELECT pg_temp.error_of($$SELECT pgq.enqueue('mail', '{}', traceparent => '00-00000000000000000000000000000000-00f067aa0ba902b7-01')$$);
SELECT pg_temp.error_of($$SELECT pgq.enqueue('mail', '{}', traceparent => 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')$$);
SELECT pg_temp.error_of($$SELECT pgq.enqueue('mail', '{}', tracestate => 'a=1')$$);
SELECT pg_temp.error_of(format($$SELECT pgq.enqueue('mail', '{}', traceparent => %L, tracestate => %L)$$,
                               :tp, 'k=' || repeat('v', 511)));
SELECT pg_temp.error_of(format($$SELECT pgq.enqueue('mail', '{}', traceparent => %L, tracestate => %L)$$,
                               :tp, (SELECT string_agg('k' || i || '=v', ',') FROM generate_series(1, 33) i)));
SELECT pg_temp.error_of(format($$SELECT pgq.enqueue('mail', '{}', traceparent => %L, tracestate => %L)$$,
                               :tp, 'Bad=1'));
SELECT pg_temp.error_of($$SELECT set_config('pgq.trace_context', 'not a traceparent', true)$$);
SELECT pg_temp.error_of(format($$SELECT set_config('pgq.trace_context', %L, true)$$, :tp || ';a=1,a=2'));
SELECT pg_temp.error_of(format($$SELECT pgq.publish('t', '{}', traceparent => %L)$$, 'x'));
SELECT pg_temp.error_of(format($$SELECT pgq.append('s', '{}', traceparent => %L)$$, 'x'));
SELECT pg_temp.error_of(format($$SELECT pgq.enqueue_many('mail', ARRAY['{}']::jsonb[], traceparent => %L)$$, 'x'));
SELECT count(*) AS jobs FROM pgq.list_jobs('mail');

-- Hand-off: claim keeps its type (an untraced job's row IS NOT NULL);
-- claim_traced adds traceparent, tracestate and links.
SELECT id = :by_arg AS first, traceparent, tracestate, links FROM pgq.claim_traced('mail', 1);
SELECT pgq.claim('mail', 1) IS NOT NULL AS claimed_row_is_not_null;
SELECT id = :arg_wins AS third, traceparent, tracestate FROM pgq.claim_traced(ARRAY['mail'], 1);

-- A failure retries in the same trace (a ring job becomes a row), and the
-- dead-letter keeps it, and retry_dead brings it back with it, and the
-- history keeps it once the job completes.
SELECT pgq.enqueue('retry', '{"n": 1}', traceparent => :tp, tracestate => 'congo=t61rcWkgMzE') AS flaky \gset
SELECT id = :flaky AS claimed, traceparent FROM pgq.claim_traced('retry', 1);
SELECT pgq.fail(:flaky, 1, 'smtp down') AS first_failure;
SELECT count(*) AS now_a_row FROM pgq.job_rows WHERE id = :flaky;
SET pgq.debug_clock_offset = '5s';
SELECT id = :flaky AS retried, attempt, traceparent, tracestate
  FROM pgq.claim_traced('retry', 1);
SELECT pgq.fail(:flaky, 2, 'smtp down again') AS second_failure;
SELECT state, trace_id FROM pgq.job(:flaky);
SELECT trace_context FROM pgq.dead_jobs WHERE id = :flaky;
SELECT pgq.retry_dead(:flaky) AS revived;
SELECT state, trace_context FROM pgq.job(:flaky);
SELECT id = :flaky AS revived_claimed, traceparent FROM pgq.claim_traced('retry', 1);
SELECT pgq.complete(:flaky, 1, '{"sent": true}') AS completed;
SELECT state, trace_context FROM pgq.job(:flaky);
SELECT trace_context FROM pgq.job_history WHERE id = :flaky;
-- A ring job's completion keeps it in the history too.
SELECT pgq.enqueue('retry', '{"n": 2}', traceparent => :tp2) AS quick \gset
SELECT pgq.complete(id, attempt) AS completed FROM pgq.claim('retry', 1);
SELECT state, trace_id FROM pgq.job(:quick);
RESET pgq.debug_clock_offset;

-- Snooze and release keep it; a lease that expires keeps it.
SELECT count(*) AS drained FROM pgq.claim('billing', 100) c, LATERAL pgq.complete(c.id, c.attempt) done;
SELECT pgq.enqueue('billing', '{"n": 1}', traceparent => :tp2) AS bill \gset
SELECT attempt FROM pgq.claim('billing', 1);
SELECT pgq.snooze(:bill, 1, '1 second') AS snoozed;
SET pgq.debug_clock_offset = '2s';
SELECT id = :bill AS after_snooze, traceparent FROM pgq.claim_traced('billing', 1);
SELECT pgq.release(:bill, 1) AS released;
SELECT id = :bill AS after_release, traceparent FROM pgq.claim_traced('billing', 1, lease => '1 second');
SET pgq.debug_clock_offset = '1h';
-- (the four jobs claimed above and not finished: mail's three and this one)
SELECT expired_requeued FROM pgq.maintain();
SELECT id = :bill AS after_expiry, attempt, traceparent FROM pgq.claim_traced('billing', 1);
RESET pgq.debug_clock_offset;

-- A row job (scheduled, another priority, grouped, keyed) keeps it through
-- its claim too, and dedupe's replace brings the new work's context.
SELECT pgq.enqueue('billing', '{"later": 1}', run_at => pgq.clock() - interval '1 second',
                   priority => 5, group_key => 'acme', dedupe_key => 'inv-1', traceparent => :tp)
    AS keyed \gset
SELECT pgq.enqueue('billing', '{"later": 2}', dedupe_key => 'inv-1', on_duplicate => 'replace',
                   traceparent => :tp2) = :keyed AS replaced;
SELECT payload, trace_context FROM pgq.job(:keyed);
SELECT id = :keyed AS keyed_claimed, traceparent FROM pgq.claim_traced('billing', 1);
-- A follower behind a running holder brings its own.
SELECT pgq.enqueue('billing', '{"follower": 1}', dedupe_key => 'inv-1', on_duplicate => 'replace',
                   traceparent => :tp) AS follower \gset
SELECT state, trace_id FROM pgq.job(:follower);
SELECT pgq.complete(:keyed, 1) AS holder_done;
SELECT id = :follower AS follower_claimed, traceparent FROM pgq.claim_traced('billing', 1);
SELECT pgq.complete(:follower, 1) AS follower_done;

-- enqueue_many: one context for every job (on the ring, as rows with
-- keys, and waiting for parents).
SELECT count(*) AS traced FROM pgq.enqueue_many('billing', ARRAY['{"m": 1}', '{"m": 2}']::jsonb[],
                                                traceparent => :tp) AS m(id)
  JOIN LATERAL pgq.job(m.id) j ON j.trace_id = '4bf92f3577b34da6a3ce929d0e0e4736';
SELECT count(*) AS traced FROM pgq.enqueue_many('billing', ARRAY['{"m": 3}', '{"m": 4}']::jsonb[],
                                                group_keys => ARRAY['a', 'b'], traceparent => :tp2) AS m(id)
  JOIN LATERAL pgq.job(m.id) j ON j.trace_id = '0af7651916cd43dd8448eb211c80319c';
SELECT count(*) AS drained FROM pgq.claim('billing', 10) c, LATERAL pgq.complete(c.id, c.attempt) done;

-- Dependencies: a child's links are its traced parents' traceparents
-- (distinct, sorted), its own context its enqueuer's; an untraced parent
-- gives none. A child with links is claimed as a row.
SELECT pgq.enqueue('billing', '{"p": 1}', traceparent => :tp) AS p1 \gset
SELECT pgq.enqueue('billing', '{"p": 2}', run_at => pgq.clock() + interval '1 hour',
                   traceparent => :tp2) AS p2 \gset
SELECT pgq.enqueue('billing', '{"p": 3}') AS p3 \gset
SELECT count(*) AS p1_on_ring, (SELECT count(*) FROM pgq.job_rows WHERE id = :p2) AS p2_a_row
  FROM pgq.job_rows WHERE id = :p1;
SELECT pgq.enqueue('billing', '{"child": 1}', after => ARRAY[:p1, :p2, :p3, :p1]) AS child \gset
SELECT pgq.enqueue('billing', '{"child": 2}', after => ARRAY[:p3]) AS untraced_child \gset
SELECT trace_links, trace_context IS NULL AS own_untraced FROM pgq.job_rows WHERE id = :child;
SELECT trace_links FROM pgq.job_rows WHERE id = :untraced_child;
SELECT array_agg(id) AS many_children
  FROM pgq.enqueue_many('billing', ARRAY['{"c": 1}', '{"c": 2}']::jsonb[], after => ARRAY[:p1],
                        traceparent => :tp2) AS m(id) \gset
SELECT count(*) AS children FROM pgq.job_rows j
 WHERE j.id = ANY (:'many_children') AND j.trace_links = ARRAY[:tp]::text[]
   AND j.trace_context = :tp2;
SELECT id = :p1 AS p1 FROM pgq.claim('billing', 1) c, LATERAL pgq.complete(c.id, c.attempt);
SELECT id = :p3 AS p3 FROM pgq.claim('billing', 1) c, LATERAL pgq.complete(c.id, c.attempt);
SELECT pgq.cancel(:p2) AS p2_cancelled;

-- publish: the event, every subscriber's job (grouped or not) and every
-- subscribed stream's event carry the publisher's context.
SELECT pgq.create_topic('signup');
SELECT pgq.subscribe('signup', 'mail');
SELECT pgq.subscribe('signup', 'billing');
SELECT pgq.create_stream('audit');
SELECT pgq.subscribe('signup', stream => 'audit');
SELECT pgq.register_consumer('audit', 'reader');
SELECT pgq.publish('signup', '{"user": 7}', traceparent => :tp, tracestate => 'vendor=x') AS event \gset
SELECT pgq.publish('signup', '{"user": 8}', group_key => 'u8', traceparent => :tp2) AS grouped_event \gset
SELECT trace_context FROM pgq.events WHERE id IN (:event, :grouped_event) ORDER BY id;
SELECT queue, payload->>'event_id' = :'event' AS first_event, traceparent, tracestate
  FROM pgq.claim_traced(ARRAY['mail', 'billing'], 10) ORDER BY queue, first_event DESC;
SELECT event_id > 0 AS appended, payload->'payload' AS payload, traceparent, tracestate
  FROM pgq.next_batch_traced('audit', 'reader');
-- next_batch's columns are as they were (callers number them).
SELECT b.n, b.payload->'payload' AS payload
  FROM pgq.next_batch('audit', 'reader') WITH ORDINALITY AS b(batch_id, event_id, payload, appended_at, n)
 ORDER BY b.n;
SELECT pgq.finish_batch(batch_id) FROM pgq.next_batch('audit', 'reader') LIMIT 1;

-- append and append_many: the argument, else the setting.
SELECT pgq.append('audit', '{"a": 1}', traceparent => :tp) > 0 AS appended;
BEGIN;
SELECT set_config('pgq.trace_context', :tp2, true) IS NOT NULL AS set;
SELECT count(*) AS appended FROM pgq.append_many('audit', ARRAY['{"a": 2}', '{"a": 3}']::jsonb[]);
COMMIT;
SELECT payload, traceparent FROM pgq.next_batch_traced('audit', 'reader');

-- A schedule's firing starts a trace of its own, each firing another,
-- whatever the caller's setting.
SELECT pgq.create_queue('tle', keep_completed => '1 hour');
SELECT pgq.schedule('refresh', 'tle', '@every 1 minute', '{"what": "tle"}');
BEGIN;
SELECT set_config('pgq.trace_context', :tp, true) IS NOT NULL AS set;
SET LOCAL pgq.debug_clock_offset = '2min';
SELECT schedules_fired FROM pgq.maintain();
COMMIT;
SET pgq.debug_clock_offset = '2min';
SELECT traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-01$' AS fresh,
       traceparent NOT LIKE '%4bf92f3577b34da6a3ce929d0e0e4736%' AS not_the_callers,
       pgq.complete(id, attempt) AS done
  FROM pgq.claim_traced('tle', 1);
SET pgq.debug_clock_offset = '3min';
SELECT schedules_fired AS rearmed FROM pgq.maintain();
SET pgq.debug_clock_offset = '5min';
SELECT schedules_fired FROM pgq.maintain();
SELECT traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-01$' AS fresh FROM pgq.claim_traced('tle', 1);
RESET pgq.debug_clock_offset;
SELECT count(DISTINCT trace_id) AS two_traces, count(*) AS firings FROM pgq.list_jobs('tle');

-- The admin right alone sees the trace id, not the context (tracestate is
-- vendor data, withheld with the payload).
CREATE ROLE trace_admin;
SELECT pgq.grant('trace_admin', 'billing', 'admin');
SELECT pgq.enqueue('billing', '{"secret": 1}', traceparent => :tp, tracestate => 'vendor=secret') AS secret \gset
SET ROLE trace_admin;
SELECT trace_id, trace_context, payload FROM pgq.job(:secret);
RESET ROLE;
SELECT pgq.cancel(:secret);
DROP OWNED BY trace_admin;
DROP ROLE trace_admin;
