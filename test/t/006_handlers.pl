
# In-database handlers: pgq.create_queue(..., handler => 'f(pgq.claimed_job)')
# makes the database's 'pgq handler' workers run f(job) for every job, as the
# queue's owner, in one transaction with pgq.complete: the handler's writes
# exist if and only if the job completed. An error (or running past the lease)
# rolls them back and fails the job (back-off, dead-letter when exhausted).
# Also: the checks at create time, the workers' lifecycle (pgq.handler_workers,
# no handler queue left) and the commit wake-up.
# The sections are numbered as in the brief but run in the order 1, 6, 2, 3,
# 5, 4: the wake-up is measured while only "work" is active, and 4 ends by
# removing every handler (the workers must then exit).
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use PgqTap;

my $test_start = time;

my $node = pgq_node('handlers');
# Commit timestamps measure the wake-up from the enqueuing commit (test 6).
$node->append_conf('postgresql.conf', "track_commit_timestamp = on\n");
$node->start;
my $log_start = log_size($node);

# Runs SQL as the role app (a login of its own, not SET ROLE).
sub as_app
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql, extra_params => [ '-U', 'app' ]);
}

# The SQLSTATE of the error SQL raises (as USER, or the superuser), or a
# description of what happened instead.
sub sqlstate_of
{
	my ($sql, $user) = @_;
	my ($ret, $out, $err) = $node->psql(
		'postgres',
		"\\set VERBOSITY verbose\n$sql",
		extra_params => defined $user ? [ '-U', $user ] : []);
	return $1 if $err =~ /ERROR:  ([0-9A-Z]{5}): /;
	return "no error (exit $ret, output '$out', stderr '$err')";
}

# The handler workers of the database, counted (backend_type and
# application_name are both 'pgq handler').
my $handlers =
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq handler' "
  . "AND application_name = 'pgq handler' AND datname = 'postgres'";
my $any_handler =
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq handler'";

is( $node->safe_psql(
		'postgres',
		"SELECT context || ',' || boot_val FROM pg_settings WHERE name = 'pgq.handler_workers'"
	),
	'sighup,2',
	'pgq.handler_workers is a SIGHUP setting, 2 by default');

# The role app owns its queues and its handler: it may create queues (the
# admin right on every queue) and holds every right on the queues it
# creates; it has no privilege on any pgq table.
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION pgq_cpp;
CREATE ROLE app LOGIN;
SELECT pgq.grant('app', NULL, 'admin');
GRANT CREATE ON SCHEMA public TO app;
CREATE TABLE public.handled (
    job_id  bigint NOT NULL,
    attempt integer NOT NULL,
    queue   text NOT NULL,
    who     name NOT NULL,
    tag     text,
    at      timestamptz NOT NULL DEFAULT clock_timestamp());
GRANT SELECT, INSERT ON public.handled TO app;
CREATE TABLE public.wake_sent (tag text);
GRANT SELECT, INSERT ON public.wake_sent TO app;
});
ok( wait_for(
		$node, 'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq maintenance' "
		  . "AND datname = 'postgres'",
		'1'),
	'the database has its maintenance worker');
# Ten passes and more: no handler queue, no handler worker.
is_deeply([ outputs_during($node, $any_handler, 1.5) ],
	['0'], 'no queue has a handler: no "pgq handler" backend');

# One handler for every queue of this test, owned by app. It writes its row
# first, then (by the payload) raises or sleeps: what is rolled back shows.
as_app(
	q{
CREATE FUNCTION public.handle(job pgq.claimed_job) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.handled (job_id, attempt, queue, who, tag)
    VALUES (job.id, job.attempt, job.queue, current_user, job.payload->>'tag');
    IF coalesce((job.payload->>'fail')::boolean, false) THEN
        RAISE EXCEPTION 'boom for job %', job.id;
    END IF;
    IF job.payload ? 'sleep' THEN
        PERFORM pg_sleep((job.payload->>'sleep')::float8);
    END IF;
END
$$;
});

# 1. app creates a handler queue; the workers run its jobs as app.
as_app(
	q{SELECT pgq.create_queue('work', handler => 'public.handle(pgq.claimed_job)')});
is( $node->safe_psql(
		'postgres', "SELECT owner || ' ' || handler FROM pgq.queues WHERE name = 'work'"),
	'app public.handle(pgq.claimed_job)',
	'1: the queue is owned by app, its creator, and stores the handler');
my ($ok, undef, $waited) = wait_for($node, 'postgres', $handlers, '2');
ok($ok, '1: two "pgq handler" workers (backend_type and application_name) by default');
prompt('1: the handler workers appear after the handler queue is created', $waited)
  if $ok;

my @work_ids = split /\n/,
  as_app(
	q{SELECT pgq.enqueue_many('work', ARRAY['{"tag": "w1"}', '{"tag": "w2"}', '{"tag": "w3"}',
	                                      '{"tag": "w4"}', '{"tag": "w5"}']::jsonb[])});
is(scalar @work_ids, 5, '1: five jobs enqueued by app');
my $work_list = join(',', @work_ids);
ok( wait_for(
		$node, 'postgres',
		"SELECT count(*) FROM public.handled WHERE job_id IN ($work_list)",
		'5'),
	'1: the handler wrote a row for every job');
ok( wait_for(
		$node, 'postgres',
		"SELECT (SELECT count(*) FROM pgq.jobs WHERE id IN ($work_list)) || ' ' "
		  . "|| (SELECT done_recent FROM pgq.queue_stats WHERE queue = 'work')",
		'0 5'),
	'1: every job completed: gone from pgq.jobs, done_recent = 5');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(job_id || ':' || attempt || ':' || queue || ':' || who || ':' || tag, ',' "
		  . "ORDER BY job_id) FROM public.handled WHERE job_id IN ($work_list)"),
	join(',',
		map { "$work_ids[$_]:1:work:app:w" . ($_ + 1) } 0 .. $#work_ids),
	'1: one row per job, first attempt, its own payload, written as current_user app');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM public.handled WHERE who <> 'app'"),
	'0', '1: no handler ran as anyone but app (never the superuser)');
is($node->safe_psql('postgres', "SELECT count(*) FROM pgq.dead_jobs"),
	'0', '1: nothing was dead-lettered');

# 6. The wake-up: idle handler workers are woken by the commit of an enqueue;
# without it they look every second. Measured in the database, from the
# commit's timestamp (track_commit_timestamp) to the handler's row. A broken
# wake-up (1 s polling by two workers) would often miss 0.5 s; five trials
# make a lucky pass unlikely.
my @latencies;
for my $trial (1 .. 5)
{
	ok(wait_for($node, 'postgres', "$handlers AND state = 'idle'", '2'),
		"6: trial $trial: both handler workers are idle")
	  or last;
	as_app(
		qq{BEGIN;
INSERT INTO public.wake_sent VALUES ('wake$trial');
SELECT pgq.enqueue('work', '{"tag": "wake$trial"}');
COMMIT;});
	ok( wait_for(
			$node, 'postgres',
			"SELECT count(*) FROM public.handled WHERE tag = 'wake$trial'", '1'),
		"6: trial $trial: the job is handled")
	  or last;
	my $latency = $node->safe_psql(
		'postgres', qq{
SELECT extract(epoch FROM h.at - pg_xact_commit_timestamp(s.xmin))
  FROM public.handled h, public.wake_sent s
 WHERE h.tag = 'wake$trial' AND s.tag = 'wake$trial'});
	push @latencies, sprintf('%.3f', $latency);
	cmp_ok($latency, '<', 0.5,
		"6: trial $trial: handled less than 0.5 s after the enqueue committed");
}
note('6: commit-to-handler latencies (s): ' . join(', ', @latencies));

# 2. Exactly-once effect: a failing handler's row is rolled back with it; the
# job is retried, then dead-lettered as exhausted with the handler's error.
as_app(
	q{SELECT pgq.create_queue('flaky', max_attempts => 3, backoff_base => '10 ms',
	                           backoff_max => '50 ms',
	                           handler => 'public.handle(pgq.claimed_job)')});
my $offset = log_size($node);
my @flaky_ids = split /\n/,
  as_app(
	q{SELECT pgq.enqueue_many('flaky', ARRAY['{"tag": "ok1"}', '{"tag": "bad1", "fail": true}',
	                                       '{"tag": "ok2"}', '{"tag": "bad2", "fail": true}']::jsonb[])}
  );
my ($ok1, $bad1, $ok2, $bad2) = @flaky_ids;
ok( wait_for(
		$node, 'postgres',
		"SELECT (SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) "
		  . "WHERE q.name = 'flaky') || ' ' || (SELECT count(*) FROM pgq.dead_jobs WHERE queue = 'flaky')",
		'0 2'),
	'2: every job of "flaky" is finished: two dead-lettered');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(id || ':' || reason || ':' || attempts || ':' || last_error, ',' ORDER BY id) "
		  . "FROM pgq.dead_jobs WHERE queue = 'flaky'"),
	"$bad1:exhausted:3:boom for job $bad1,$bad2:exhausted:3:boom for job $bad2",
	'2: the failing jobs are dead: reason exhausted, 3 attempts, last_error the raised message');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(job_id || ':' || attempt || ':' || tag, ',' ORDER BY job_id) "
		  . "FROM public.handled WHERE queue = 'flaky'"),
	"$ok1:1:ok1,$ok2:1:ok2",
	'2: rows only for the jobs that completed, once each; none left by the 6 failed attempts');
is( $node->safe_psql(
		'postgres', "SELECT done_recent FROM pgq.queue_stats WHERE queue = 'flaky'"),
	'2', '2: done_recent counts the two completions');
# The log: every failed attempt's ERROR with the handler's CONTEXT, then the
# outcome. The CONTEXT line is the last of the error's context lines.
ok( defined wait_for_log(
		$node,
		qr/failed for job $bad2 \(attempt 3\) of queue "flaky": .*dead-lettered$/m,
		$offset),
	'2: the last failure is logged');
my $log = log_since($node, $offset);
for my $id ($bad1, $bad2)
{
	for my $attempt (1 .. 3)
	{
		like(
			$log,
			qr/ERROR:  boom for job $id\n(?:.*\n)*?.*pgq handler public\.handle\(pgq\.claimed_job\) for job $id \(attempt $attempt\) of queue "flaky"$/m,
			"2: job $id attempt $attempt: ERROR with the CONTEXT line naming handler, job, attempt and queue"
		);
		my $outcome =
		  $attempt < 3
		  ? 'retried after its back-off'
		  : 'dead-lettered';
		is( count_matches(
				$log,
				qr/LOG:  pgq handler public\.handle\(pgq\.claimed_job\) failed for job $id \(attempt $attempt\) of queue "flaky": boom for job $id; the job is \Q$outcome\E$/m
			),
			1,
			"2: job $id attempt $attempt: one LOG line, \"the job is $outcome\"");
	}
}
is(count_matches($log, qr/failed for job ($ok1|$ok2) /),
	0, '2: no failure logged for the jobs that completed');

# 3. A handler running past its lease is cancelled by the statement timeout;
# its row goes with it, the job retries, then dead-letters.
as_app(
	q{SELECT pgq.create_queue('slow', max_attempts => 2, lease => '1 second',
	                           backoff_base => '10 ms', backoff_max => '10 ms',
	                           handler => 'public.handle(pgq.claimed_job)')});
$offset = log_size($node);
my $start = time;
my $slow = as_app(q{SELECT pgq.enqueue('slow', '{"tag": "slow", "sleep": 3}')});
my ($dead_ok, $dead) = wait_for(
	$node, 'postgres',
	"SELECT reason || ':' || attempts || ':' || last_error FROM pgq.dead_jobs WHERE id = $slow",
	qr/^(exhausted|expired):2:/);
my $took = time - $start;
ok($dead_ok, '3: the job that sleeps past its lease is dead-lettered after its 2 attempts');
note(sprintf('3: dead-lettered after %.1f s as "%s"', $took, $dead));
# The handler's timeout is the lease: maintenance may expire the lease in the
# few milliseconds between the cancellation and the worker's pgq.fail.
like(
	$dead,
	qr/^(exhausted:2:canceling statement due to statement timeout|expired:2:lease expired)$/,
	'3: as exhausted with the timeout as last_error (or, racing maintenance, as an expired lease)'
);
note("3: the lease expiry raced the handler's own failure: $dead")
  if $dead =~ /^expired/;
# Two 1 s attempts, plus up to 1 s for the retry to be seen (a back-off that
# ends wakes nobody: idle workers look every second); two uncut 3 s sleeps
# would take 6 s.
cmp_ok($took, '<', 5,
	'3: both attempts were cut at the 1 s lease, not left to sleep their 3 s');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM public.handled WHERE job_id = $slow"),
	'0',
	'3: the rows the handler wrote before sleeping were rolled back');
$log = log_since($node, $offset);
for my $attempt (1 .. 2)
{
	like(
		$log,
		qr/ERROR:  canceling statement due to statement timeout\n(?:.*\n)*?.*pgq handler public\.handle\(pgq\.claimed_job\) for job $slow \(attempt $attempt\) of queue "slow"$/m,
		"3: attempt $attempt: the statement timeout is logged with the handler's CONTEXT");
}
like(
	$log,
	qr/LOG:  pgq handler public\.handle\(pgq\.claimed_job\) failed for job $slow \(attempt 1\) of queue "slow": canceling statement due to statement timeout; the job is /m,
	'3: the failure of attempt 1 is logged');
if ($dead =~ /^exhausted/)
{
	like(
		$log,
		qr/LOG:  pgq handler public\.handle\(pgq\.claimed_job\) failed for job $slow \(attempt 2\) of queue "slow": canceling statement due to statement timeout; the job is dead-lettered$/m,
		'3: attempt 2 is logged as dead-lettered');
}

# 5. pgq.handler_workers on reload: 1 worker, then none (jobs wait), then the
# default again (the waiting job is handled).
$node->safe_psql('postgres', 'ALTER SYSTEM SET pgq.handler_workers = 1');
$node->reload;
($ok, undef, $waited) = wait_for($node, 'postgres', $handlers, '1');
ok($ok, '5: pgq.handler_workers = 1: one handler worker');
prompt('5: the extra worker exits after the reload', $waited) if $ok;
is_deeply([ outputs_during($node, $any_handler, 1) ],
	['1'], '5: and never more than one over ten passes');

$node->safe_psql('postgres', 'ALTER SYSTEM SET pgq.handler_workers = 0');
$node->reload;
($ok, undef, $waited) = wait_for($node, 'postgres', $any_handler, '0');
ok($ok, '5: pgq.handler_workers = 0: no handler worker');
prompt('5: the last worker exits after the reload', $waited) if $ok;
my $held = as_app(q{SELECT pgq.enqueue('work', '{"tag": "held"}')});
is_deeply(
	[
		outputs_during($node,
			"SELECT ($any_handler)::text || ' ' || (SELECT state::text || attempt FROM pgq.jobs WHERE id = $held)",
			1.5)
	],
	['0 p0'],
	'5: for 1.5 s no handler worker comes, and the job stays pending, never claimed');

$node->safe_psql('postgres', 'ALTER SYSTEM RESET pgq.handler_workers');
$node->reload;
ok(wait_for($node, 'postgres', $handlers, '2'),
	'5: pgq.handler_workers reset: two handler workers again');
ok( wait_for(
		$node, 'postgres',
		"SELECT count(*) FROM public.handled WHERE job_id = $held AND who = 'app'", '1'),
	'5: and the job that waited is handled');

# 4. What create_queue and alter_queue check, against the queue's owner.
$node->safe_psql(
	'postgres', q{
CREATE FUNCTION public.not_a_handler(n integer) RETURNS void LANGUAGE sql AS 'SELECT';
CREATE FUNCTION public.two_args(job pgq.claimed_job, n integer) RETURNS void LANGUAGE sql AS 'SELECT';
CREATE FUNCTION public.secret(job pgq.claimed_job) RETURNS void LANGUAGE sql AS 'SELECT';
REVOKE EXECUTE ON FUNCTION public.secret(pgq.claimed_job) FROM PUBLIC;
});
is( sqlstate_of(
		q{SELECT pgq.create_queue('wrong', handler => 'public.not_a_handler(integer)')}, 'app'),
	'42P17',
	'4: a handler taking an integer: 42P17');
is( sqlstate_of(
		q{SELECT pgq.create_queue('wrong', handler => 'public.two_args(pgq.claimed_job, integer)')},
		'app'),
	'42P17',
	'4: a handler taking a second argument: 42P17');
is( sqlstate_of(
		q{SELECT pgq.create_queue('wrong', handler => 'public.secret(pgq.claimed_job)')}, 'app'),
	'42501',
	'4: a handler app may not execute (EXECUTE revoked from PUBLIC): 42501 for app');
is($node->safe_psql('postgres', "SELECT count(*) FROM pgq.queues WHERE name = 'wrong'"),
	'0', '4: none of the refused queues exists');
is( sqlstate_of(
		q{SELECT pgq.alter_queue('work', handler => 'public.secret(pgq.claimed_job)')}, 'app'),
	'42501',
	'4: app may not set it on its queue with alter_queue either');
is( sqlstate_of(
		q{SELECT pgq.alter_queue('work', handler => 'public.secret(pgq.claimed_job)')}),
	'42501',
	'4: nor may the superuser on app\'s queue: the check is against the owner, app');
is( $node->safe_psql(
		'postgres', "SELECT handler FROM pgq.queues WHERE name = 'work'"),
	'public.handle(pgq.claimed_job)',
	'4: the handler of "work" is unchanged');
$node->safe_psql('postgres',
	'GRANT EXECUTE ON FUNCTION public.secret(pgq.claimed_job) TO app');
as_app(q{SELECT pgq.create_queue('granted', handler => 'public.secret(pgq.claimed_job)')});
is( $node->safe_psql(
		'postgres', "SELECT owner || ' ' || handler FROM pgq.queues WHERE name = 'granted'"),
	'app public.secret(pgq.claimed_job)',
	'4: once EXECUTE is granted to app, app may create the queue with it');
as_app(q{SELECT pgq.drop_queue('granted')});

# 5. A handler never has more rights than its queue's owner: app's handler
# can neither read pgq's tables nor enqueue into a queue app may not produce
# into, although the worker that calls it is a superuser.
$node->safe_psql('postgres', q{SELECT pgq.create_queue('foreign')});
as_app(
	q{
CREATE FUNCTION public.overreach(job pgq.claimed_job) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF job.payload->>'do' = 'read' THEN
        PERFORM count(*) FROM pgq.jobs;
    ELSE
        PERFORM pgq.enqueue('foreign', '{"from": "handler"}');
    END IF;
END
$$;
SELECT pgq.create_queue('reach', max_attempts => 1,
                        handler => 'public.overreach(pgq.claimed_job)');
SELECT pgq.enqueue_many('reach', ARRAY['{"do": "read"}', '{"do": "enqueue"}']::jsonb[]);
});
ok( wait_for(
		$node, 'postgres',
		"SELECT count(*) FROM pgq.dead_jobs WHERE queue = 'reach' AND last_error LIKE 'permission denied%'",
		'2'),
	'5: both overreaching jobs fail with permission denied and are dead-lettered');
like(
	$node->safe_psql(
		'postgres',
		"SELECT string_agg(payload->>'do' || ': ' || last_error, E'\n' ORDER BY id) FROM pgq.dead_jobs WHERE queue = 'reach'"),
	qr/^read: permission denied for view jobs\nenqueue: permission denied for queue "foreign"/,
	'5: one could not read pgq.jobs, the other could not enqueue into "foreign", both as app');
$node->safe_psql('postgres', q{SELECT pgq.grant('app', 'foreign', 'produce')});
as_app(q{SELECT pgq.enqueue('reach', '{"do": "enqueue"}')});
ok( wait_for(
		$node, 'postgres', "SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) "
		  . "WHERE q.name = 'foreign' AND j.payload->>'from' = 'handler'", '1'),
	'5: once app may produce into "foreign", the same handler enqueues there');
as_app(q{SELECT pgq.drop_queue('reach', force => true)});

# Removing every handler: the workers exit and do not come back.
as_app(
	q{SELECT pgq.alter_queue(q, handler => 0::regprocedure) FROM unnest(ARRAY['work', 'flaky', 'slow']) AS q}
);
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM pgq.queues WHERE handler IS NOT NULL"),
	'0',
	'4: alter_queue(handler => 0::regprocedure) removed the handlers');
($ok, undef, $waited) = wait_for($node, 'postgres', $any_handler, '0');
ok($ok, '4: with no handler queue left, the handler workers exit');
prompt('4: the handler workers exit after the handlers are removed', $waited) if $ok;
is_deeply([ outputs_during($node, $any_handler, 2) ],
	['0'], '4: and none comes back in 2 s (twenty passes)');
my $plain = as_app(q{SELECT pgq.enqueue('work', '{"tag": "plain"}')});
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pgq.claim('work', 1) WHERE id = $plain AND attempt = 1"),
	'1',
	'4: the queue without a handler is an ordinary queue again: its job waits for a claim');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM public.handled WHERE job_id = $plain"),
	'0', '4: and no handler ran it');

unlike(
	log_since($node, $log_start),
	qr/terminating any other active server processes|was terminated by signal|PANIC/,
	'no server process crashed');

$node->stop;
note(sprintf('006_handlers.pl ran for %.1f s', time - $test_start));
done_testing();
