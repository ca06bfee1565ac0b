
# Crashes: kill -9 of a client in the middle of a claim (uncommitted, then
# committed), kill -9 of the maintenance worker, and an immediate shutdown.
# After each, the postmaster restarts, the launcher and the worker come back,
# leases still expire through the worker, and no job is lost.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $node = pgq_node('crash');
# Cluster.pm turns crash restarts off; the postmaster's own recovery is what
# is under test here.
$node->append_conf('postgresql.conf', 'restart_after_crash = on');
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('work', max_attempts => 5);
SELECT pgq.create_queue('ballast');
SELECT count(*) FROM pgq.enqueue_many('ballast', array_fill('{}'::jsonb, ARRAY[20]));
});
my $jobs = 20;    # every committed enqueue; checked after each crash

my $launcher_query =
  "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq launcher'";
my $worker_query =
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq maintenance' "
  . "AND datname = 'postgres'";

# Waits for the launcher and the worker, and returns their pids.
# Right after a restart (RESTARTED true), how long each took is asserted too:
# the launcher comes back about 1 s after recovery, and starts the worker at
# once.
sub workers_up
{
	my ($name, $restarted) = @_;
	my $timeout = $restarted ? $LONG : $SHORT;
	my ($ok, undef, $waited) = wait_for($node, 'postgres', $launcher_query, '1', $timeout);
	ok($ok, "$name: the launcher is running");
	prompt("$name: the launcher is back", $waited) if $ok && $restarted;
	($ok, undef, $waited) = wait_for($node, 'postgres', $worker_query, '1', $timeout);
	ok($ok, "$name: the maintenance worker is running");
	prompt("$name: and the worker", $waited) if $ok && $restarted;
	return (launcher_pid($node), worker_pid($node, 'postgres'));
}

# A job claimed with a one-second lease comes back through the worker.
sub lease_expires
{
	my ($name) = @_;
	my $id = $node->safe_psql('postgres', "SELECT pgq.enqueue('work', '{}')");
	$jobs++;
	my $claimed =
	  $node->safe_psql('postgres', "SELECT id FROM pgq.claim('work', 1, '1 second')");
	is($claimed, $id, "$name: a new job is claimed with a one-second lease");
	ok( wait_for(
			$node, 'postgres',
			"SELECT state::text || ' ' || attempt || ' ' || coalesce(last_error, '') "
			  . "FROM pgq.jobs WHERE id = $id",
			'p 1 lease expired'),
		"$name: the worker expires that lease");
	$node->safe_psql('postgres',
		"SELECT pgq.complete(id, attempt) FROM pgq.claim('work', 1, '10 minutes')");
}

# A psql session whose backend pid we know.
sub session
{
	my $psql = $node->background_psql('postgres');
	my $pid = $psql->query_safe('SELECT pg_backend_pid()');
	return ($psql, $pid);
}

sub close_session
{
	my ($psql) = @_;
	# Its backend is gone; psql itself only leaves on \q.
	eval { $psql->quit; };
}

my ($launcher, $worker) = workers_up('start');
is(jobs_accounted($node, $jobs), $jobs, 'start: every job is accounted for');

# (a) A claim inside an open transaction, its backend killed: the claim never
# committed, so after the crash restart the job is pending with attempt 0.
my $job_a = $node->safe_psql('postgres', "SELECT pgq.enqueue('work', '{\"case\": \"a\"}')");
$jobs++;
{
	my ($psql, $pid) = session();
	$psql->query_safe('BEGIN');
	is($psql->query_safe("SELECT id FROM pgq.claim('work', 1, '10 minutes')"),
		$job_a, '(a) the job is claimed inside an open transaction');
	ok(completions_flushed($node), '(a) completions so far are in pgq.finished');
	crash_restart($node, '(a) kill -9 of the claiming backend',
		sub { kill 'KILL', $pid or die "kill $pid: $!"; });
	close_session($psql);
}
my ($launcher_a) = workers_up('(a) after the restart', 1);
isnt($launcher_a, $launcher, '(a) the launcher is a new process after the crash restart');
is( $node->safe_psql(
		'postgres', "SELECT state::text || ' ' || attempt FROM pgq.jobs WHERE id = $job_a"),
	'p 0',
	'(a) after the restart the job is pending with attempt 0');
is( $node->safe_psql(
		'postgres',
		"SELECT id || ' ' || attempt FROM pgq.claim('work', 1, '10 minutes')"),
	"$job_a 1",
	'(a) and it is claimed again as attempt 1');
is($node->safe_psql('postgres', "SELECT pgq.complete($job_a, 1)"),
	't', '(a) and completed');
is(jobs_accounted($node, $jobs), $jobs, '(a) every job is accounted for');

# (b) A committed claim, its claimer killed: the claim holds until its lease
# expires, then the worker puts the job back. Never earlier: each poll below
# also checks that the job is not pending while its lease still runs.
my $job_b = $node->safe_psql('postgres', "SELECT pgq.enqueue('work', '{\"case\": \"b\"}')");
$jobs++;
{
	my ($psql, $pid) = session();
	is($psql->query_safe("SELECT id FROM pgq.claim('work', 1, '4 seconds')"),
		$job_b, '(b) the job is claimed with a four-second lease, committed');
	ok(completions_flushed($node), '(b) completions so far are in pgq.finished');
	crash_restart($node, '(b) kill -9 of the backend that claimed it',
		sub { kill 'KILL', $pid or die "kill $pid: $!"; });
	close_session($psql);
}
workers_up('(b) after the restart', 1);
my ($ok, undef, undef, $seen) = wait_for(
	$node, 'postgres',
	"SELECT CASE WHEN state = 'r' AND lease_until > pgq.clock() THEN 'leased' "
	  . "WHEN state = 'p' AND lease_until > pgq.clock() THEN 'released early' "
	  . "ELSE state::text || ' ' || attempt || ' ' || coalesce(last_error, '') END "
	  . "FROM pgq.jobs WHERE id = $job_b",
	'p 1 lease expired', $LONG);
ok($ok, '(b) after its lease the worker puts the job back to pending');
ok(!grep({ $_ eq 'released early' } @$seen),
	'(b) not before its lease expired (seen: ' . join(', ', @$seen) . ')');
is( $node->safe_psql(
		'postgres',
		"SELECT pgq.complete(id, attempt) FROM pgq.claim('work', 1, '10 minutes') "
		  . "WHERE id = $job_b AND attempt = 2"),
	't',
	'(b) it is claimed again as attempt 2 and completed');
is(jobs_accounted($node, $jobs), $jobs, '(b) every job is accounted for');

# (c) kill -9 of the maintenance worker: a crash restart like any backend's;
# the launcher and the worker come back and leases still expire.
($launcher, $worker) = workers_up('(c) before');
if ($worker =~ /^\d+$/)
{
	ok(completions_flushed($node), '(c) completions so far are in pgq.finished');
	crash_restart($node, '(c) kill -9 of the maintenance worker',
		sub { kill 'KILL', $worker or die "kill $worker: $!"; });
	my ($launcher_c, $worker_c) = workers_up('(c) after the restart', 1);
	isnt($worker_c, $worker, '(c) the worker is a new process');
	isnt($launcher_c, $launcher, '(c) the launcher is a new process');
}
else
{
	fail('(c) kill -9 of the maintenance worker: there is no worker to kill');
}
lease_expires('(c)');
is(jobs_accounted($node, $jobs), $jobs, '(c) every job is accounted for');

# (d) An immediate shutdown with a lease running, then a start: the worker
# comes back and catches up with the lease that expired meanwhile.
my $job_d = $node->safe_psql('postgres', "SELECT pgq.enqueue('work', '{\"case\": \"d\"}')");
$jobs++;
is( $node->safe_psql(
		'postgres',
		"SELECT id || ' ' || attempt FROM pgq.claim('work', 1, '2 seconds')"),
	"$job_d 1",
	'(d) the job is claimed with a two-second lease');
ok(completions_flushed($node), '(d) completions so far are in pgq.finished');
$node->stop('immediate');
$node->start;
workers_up('(d) after the restart', 1);
ok( wait_for(
		$node, 'postgres',
		"SELECT state::text || ' ' || attempt || ' ' || coalesce(last_error, '') "
		  . "FROM pgq.jobs WHERE id = $job_d",
		'p 1 lease expired', $SHORT),
	'(d) the worker puts the job back after the restart');
is( $node->safe_psql(
		'postgres',
		"SELECT pgq.complete(id, attempt) FROM pgq.claim('work', 1, '10 minutes') "
		  . "WHERE id = $job_d AND attempt = 2"),
	't',
	'(d) it is claimed again as attempt 2 and completed');
lease_expires('(d)');
is(jobs_accounted($node, $jobs), $jobs, '(d) every job is accounted for');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = 'ballast' AND state = 'p' AND attempt = 0"),
	'20',
	'the untouched jobs are all still there, untouched');

$node->stop;
done_testing();
