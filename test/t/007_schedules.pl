
# Recurring jobs and the outbox, through the maintenance worker: an @every
# schedule keeps firing across a fast and an immediate restart, never with two
# of its jobs at once; an hourly schedule whose slots were missed while the
# server was down (pgq.debug_clock_offset moved five hours on) fires once, not
# five times; a publish that rolls back leaves neither event nor job, one that
# commits leaves one event and one job per subscribed queue. Nobody calls
# pgq.maintain() here: every firing is the worker's.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use List::Util qw(sum0);
use PgqTap;

my $test_start = time;

my $node = pgq_node('schedules');
$node->start;
my $log_start = log_size($node);

$node->safe_psql('postgres', 'CREATE EXTENSION pgq_cpp');
my $worker_query =
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq maintenance' "
  . "AND datname = 'postgres'";
ok(wait_for($node, 'postgres', $worker_query, '1'),
	'the database has its maintenance worker');

# Jobs of a queue in pgq.jobs (pending or running).
sub jobs_in
{
	my ($queue) = @_;
	return "SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) "
	  . "WHERE q.name = '$queue'";
}

# The sum of N over the worker's "N schedules fired" lines in LOG.
sub fired_in_log
{
	my ($log) = @_;
	return sum0($log =~
		  /LOG:  pgq maintenance in database "postgres": .* (\d+) schedules fired$/mg);
}

# ---------------------------------------------------------------------------
# 1. '@every 1 second' into queue q, across a fast and an immediate restart.

$node->safe_psql(
	'postgres', q{
SELECT pgq.create_queue('q');
SELECT pgq.schedule('tick', 'q', '@every 1 second', '{"what": "tick"}');
});
is( $node->safe_psql(
		'postgres',
		"SELECT queue || ' ' || spec || ' ' || timezone || ' ' || payload::text || ' ' "
		  . "|| (next_run_at > pgq.clock() AND next_run_at <= pgq.clock() + interval '1 second') "
		  . "FROM pgq.schedules WHERE name = 'tick'"),
	'q @every 1 second UTC {"what": "tick"} true',
	'1: the schedule is listed, its first run within one second');

my %completed;       # job id => 1, every job of q the consumer completed
my $max_jobs = 0;    # the most jobs of q ever seen in pgq.jobs at once
my @job_samples;     # every sample of that count

# The consumer: every 100 ms, samples how many jobs of q exist, then claims
# and completes them, until QUERY (run in the same psql call) prints
# EXPECTED or TIMEOUT seconds passed. Returns true when it did.
sub consume_until
{
	my ($query, $expected, $timeout) = @_;
	$timeout //= $SHORT;
	my $deadline = time + $timeout;
	my $out = '';
	while (1)
	{
		my @lines = split /\n/,
		  $node->safe_psql(
			'postgres', jobs_in('q') . ";\n" . qq{
SELECT coalesce(string_agg(c.id::text, ','), '-')
  FROM pgq.claim('q', 10, '1 minute') c WHERE pgq.complete(c.id, c.attempt);
$query});
		my ($jobs, $ids);
		($jobs, $ids, $out) = @lines;
		push @job_samples, $jobs;
		$max_jobs = $jobs if $jobs > $max_jobs;
		$completed{$_} = 1 for grep { $_ ne '-' } split /,/, $ids;
		return 1 if defined $out && $out eq $expected;
		last if time > $deadline;
		usleep(100_000);
	}
	diag("timed out after ${timeout}s consuming q until\n  $query\n"
		  . "expected: $expected\nlast output: " . ($out // '<none>'));
	return 0;
}

my $runs = "SELECT count(*) FROM pgq.schedule_runs WHERE name = 'tick'";
# Firings after the postmaster started (fired_at is pgq's clock, which is
# the wall clock here: no offset yet).
my $runs_since_start =
  "SELECT count(*) FROM pgq.schedule_runs WHERE name = 'tick' "
  . "AND fired_at > pg_postmaster_start_time()";

ok(consume_until("SELECT ($runs) >= 3", 't'),
	'1: before any restart, it fires again and again while its jobs are completed');
my $before_fast = $node->safe_psql('postgres', $runs);
note("1: $before_fast firings before the fast restart");

# At most one job at once: while its job stays pending (nobody consumes for
# 2 s, twenty passes and two intervals) the schedule does not fire again.
ok(wait_for($node, 'postgres', jobs_in('q'), '1'),
	'1: with nobody consuming, a job of the schedule is pending');
my $held_runs = $node->safe_psql('postgres', $runs);
is_deeply(
	[
		outputs_during($node,
			"SELECT (" . jobs_in('q') . ") || ' ' || ($runs) || ' ' "
			  . "|| (SELECT running FROM pgq.schedules WHERE name = 'tick')",
			2)
	],
	["1 $held_runs true"],
	'1: for 2 s while that job is pending: still one job, no new firing, running = true');

# Fast restart.
$node->restart;
ok(wait_for($node, 'postgres', $worker_query, '1', $LONG),
	'1: after the fast restart the worker is back');
cmp_ok($node->safe_psql('postgres', $runs), '>=', $before_fast,
	'1: the firings before the fast restart are still recorded');
ok(consume_until("SELECT ($runs_since_start) >= 2", 't'),
	'1: after the fast restart it fires again (two firings with fired_at after the start)');
my $before_immediate = $node->safe_psql('postgres', $runs);
note("1: $before_immediate firings before the immediate restart");

# Immediate restart (no shutdown checkpoint: crash recovery at start).
$node->stop('immediate');
$node->start;
ok(wait_for($node, 'postgres', $worker_query, '1', $LONG),
	'1: after the immediate restart the worker is back');
cmp_ok($node->safe_psql('postgres', $runs), '>=', $before_immediate,
	'1: the firings before the immediate restart are still recorded');
ok(consume_until("SELECT ($runs_since_start) >= 2", 't'),
	'1: after the immediate restart it fires again (two firings with fired_at after the start)');

# Stop consuming once a job is pending (then nothing can fire), take the
# history, unschedule, and complete what is left.
ok(wait_for($node, 'postgres', jobs_in('q'), '1'), '1: a last job is pending');
my @history = map { [ split /\|/ ] } split /\n/,
  $node->safe_psql('postgres',
	    "SELECT job_id, extract(epoch FROM fired_at) FROM pgq.schedule_runs "
	  . "WHERE name = 'tick' ORDER BY fired_at");
is($node->safe_psql('postgres', "SELECT pgq.unschedule('tick')"),
	't', '1: unscheduled');
ok(consume_until(jobs_in('q'), '0'), '1: the last job is completed: q is empty');
note('1: ' . scalar(@history) . ' firings in all; jobs of q sampled '
	  . scalar(@job_samples) . ' times');
is($max_jobs, 1,
	'1: never two jobs of the schedule in pgq.jobs at once (max sampled: '
	  . "$max_jobs over " . scalar(@job_samples) . ' samples)');
my @run_jobs = sort { $a <=> $b } map { $_->[0] } @history;
is_deeply(\@run_jobs, [ sort { $a <=> $b } keys %completed ],
	'1: one job per firing: the firings\' jobs are exactly the jobs of q completed');
# A fixed delay: each run starts at least one interval after the previous
# one (which had to finish first).
my @gaps = map { $history[$_]->[1] - $history[ $_ - 1 ]->[1] } 1 .. $#history;
my @short = grep { $_ < 1 } @gaps;
is(scalar @short, 0,
	'1: consecutive firings at least 1 s apart (gaps: '
	  . join(', ', map { sprintf '%.2f', $_ } @gaps) . ')');

# ---------------------------------------------------------------------------
# 2. Missed slots fire once. An hourly schedule fires once (pgq's clock moved
# one hour on by a reload) and its job is completed; with the server down the
# clock moves five more hours on, so five slots are missed; at the start the
# worker fires one job, and once that is done, nothing more.
#
# Every offset keeps pgq's clock near half past an hour, so no top of the
# hour (a real slot) can pass while a step runs, whatever the wall clock:
# first to half past the next hour (A seconds ahead, 30 to 90 minutes), where
# the schedule is created; then one hour more (B = A + 1 h), where its first
# slot is due; then, with the server down, five hours more (C = B + 5 h).

# Writes pgq.debug_clock_offset = SECONDS into postgresql.conf (a later line
# wins over an earlier one).
sub set_offset
{
	my ($seconds) = @_;
	$node->append_conf('postgresql.conf', "pgq.debug_clock_offset = '${seconds}s'\n");
}
my $clock_ahead = "SELECT round(extract(epoch FROM pgq.clock() - clock_timestamp()))";
my $half_past = "SELECT extract(minute FROM pgq.clock()) BETWEEN 29 AND 31";

my $off_a = $node->safe_psql('postgres',
	    "SELECT ceil(extract(epoch FROM date_trunc('hour', clock_timestamp()) "
	  . "+ interval '90 minutes' - clock_timestamp()))::int");
set_offset($off_a);
$node->reload;
ok(wait_for($node, 'postgres', $clock_ahead, $off_a),
	"2: after a reload pgq's clock is $off_a s ahead");
is($node->safe_psql('postgres', $half_past), 't', '2: at half past an hour');

$node->safe_psql(
	'postgres', q{
SELECT pgq.create_queue('hq');
SELECT pgq.schedule('hourly', 'hq', '0 * * * *', '{"what": "hourly"}');
});
my $hruns = "SELECT count(*) FROM pgq.schedule_runs WHERE name = 'hourly'";
is( $node->safe_psql(
		'postgres',
		"SELECT next_run_at = date_trunc('hour', pgq.clock()) + interval '1 hour' "
		  . "FROM pgq.schedules WHERE name = 'hourly'"),
	't', '2: the next run is the next top of the hour');
is($node->safe_psql('postgres', $hruns), '0', '2: it has not fired');

my $off_b = $off_a + 3600;
set_offset($off_b);
$node->reload;
ok(wait_for($node, 'postgres', $clock_ahead, $off_b),
	"2: after a reload pgq's clock is one hour further ahead ($off_b s)");
ok(wait_for($node, 'postgres', $hruns, '1'),
	'2: the worker, on the shifted clock, fires the slot that passed');
is( $node->safe_psql(
		'postgres',
		"SELECT pgq.complete(id, attempt) FROM pgq.claim('hq', 10, '1 minute')"),
	't', '2: its job is claimed and completed');
is( $node->safe_psql(
		'postgres',
		"SELECT running || ' ' || (next_run_at > pgq.clock()) || ' ' || ($hruns) "
		  . "FROM pgq.schedules WHERE name = 'hourly'"),
	'false true 1',
	'2: no run pending, next slot in the future, one firing');
my $slot_before = $node->safe_psql('postgres',
	"SELECT next_run_at FROM pgq.schedules WHERE name = 'hourly'");

$node->stop;
my $off_c = $off_b + 5 * 3600;
set_offset($off_c);
my $offset = log_size($node);
$node->start;
is($node->safe_psql('postgres', $clock_ahead),
	$off_c, "2: after the start pgq's clock is five hours further ahead ($off_c s)");
is($node->safe_psql('postgres', $half_past), 't', '2: at half past an hour');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM generate_series('$slot_before'::timestamptz, pgq.clock(), "
		  . "interval '1 hour')"),
	'5', '2: five hourly slots passed while the server was down');
ok(wait_for($node, 'postgres', $hruns, '2', $LONG),
	'2: the worker fires the schedule after the start');
ok( defined wait_for_log(
		$node,
		qr/LOG:  pgq maintenance in database "postgres": .* 1 schedules fired$/m,
		$offset),
	'2: the pass logs "1 schedules fired"');
# Which missed slot the run records is not part of the contract: noted only.
note('2: the run records slot '
	  . $node->safe_psql(
		'postgres',
		"SELECT slot || ' (first missed: $slot_before), fired at ' || fired_at "
		  . "FROM pgq.schedule_runs WHERE name = 'hourly' ORDER BY fired_at DESC LIMIT 1"));
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(payload::text, ',') FROM pgq.claim('hq', 10, '1 minute') c "
		  . "WHERE pgq.complete(c.id, c.attempt)"),
	'{"what": "hourly"}',
	'2: one job, with the schedule\'s payload; completed');

# Now nothing holds the next slot back: a schedule that fired once per missed
# slot would fire again now. Over 2 s (twenty passes of the same worker):
# nothing more fires, no job appears, and the next slot is the first top of
# the hour after the firing, still in the future of pgq's clock.
my $worker = worker_pid($node, 'postgres');
my $window_start = time;
my @seen = outputs_during($node,
	"SELECT ($hruns) || ' ' || (" . jobs_in('hq') . ") || ' ' "
	  . "|| (s.next_run_at > pgq.clock()) || ' ' "
	  . "|| (s.next_run_at = date_trunc('hour', r.fired_at) + interval '1 hour') "
	  . "FROM pgq.schedules s, pgq.schedule_runs r WHERE s.name = 'hourly' "
	  . "AND r.name = 'hourly' AND r.job_id = s.last_job_id",
	2);
my $window = time - $window_start;
is_deeply(\@seen, ['2 0 true true'],
	sprintf(
		'2: for %.1f s: still exactly one firing since the start, no job, '
		  . 'next_run_at the first slot after the firing and in the future',
		$window));
is(worker_pid($node, 'postgres'),
	$worker, '2: the same worker ran through the window (twenty passes)');
is(fired_in_log(log_since($node, $offset)),
	1, '2: the worker\'s log lines since the start count one schedule fired in all');

# ---------------------------------------------------------------------------
# 3. The outbox: a publish rolled back leaves nothing, a committed one leaves
# one event and one job per subscribed queue.

$node->safe_psql(
	'postgres', q{
SELECT pgq.create_queue('passes');
SELECT pgq.create_queue('alerts');
SELECT pgq.create_topic('orbit.changed');
SELECT pgq.subscribe('orbit.changed', 'passes');
SELECT pgq.subscribe('orbit.changed', 'alerts');
});
my $outbox =
	"SELECT (SELECT count(*) FROM pgq.events) || ' ' || ("
  . jobs_in('passes') . ") || ' ' || (" . jobs_in('alerts') . ")";
my ($ret, $out, $err) = $node->psql(
	'postgres', qq{BEGIN;
SELECT pgq.publish('orbit.changed', '{"norad_id": 25544}') IS NOT NULL;
$outbox;
ROLLBACK;});
is($ret, 0, '3: BEGIN; publish; ROLLBACK runs without error') or diag($err);
is($out, "t\n1 1 1",
	'3: inside the transaction the publish returned an id, the event and a job per queue exist'
);
is($node->safe_psql('postgres', $outbox),
	'0 0 0', '3: after the ROLLBACK: no event, no job in either queue');

my $event = $node->safe_psql('postgres',
	q{SELECT pgq.publish('orbit.changed', '{"norad_id": 25544}')});
like($event, qr/^\d+$/, '3: a committed publish returns an event id');
is($node->safe_psql('postgres', $outbox),
	'1 1 1', '3: after the commit: one event, one job in each subscribed queue');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(q.name || ':' || (j.payload->>'event_id') || ':' "
		  . "|| (j.payload->>'topic') || ':' || (j.payload->'payload')::text, ',' ORDER BY q.name) "
		  . "FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name IN ('passes', 'alerts')"
	),
	"alerts:$event:orbit.changed:{\"norad_id\": 25544},"
	  . "passes:$event:orbit.changed:{\"norad_id\": 25544}",
	'3: each job carries the event id, the topic and the payload');
is( $node->safe_psql(
		'postgres', "SELECT id || ' ' || topic || ' ' || payload::text FROM pgq.events"),
	"$event orbit.changed {\"norad_id\": 25544}",
	'3: the event is the committed one');

# ---------------------------------------------------------------------------

my $all = log_since($node, $log_start);
unlike($all, qr/statement: .*pgq\.maintain/, 'no client called pgq.maintain()');
unlike(
	$all,
	qr/terminating any other active server processes|was terminated by signal|PANIC/,
	'no server process crashed');

$node->stop;
note(sprintf('007_schedules.pl ran for %.1f s', time - $test_start));
done_testing();
