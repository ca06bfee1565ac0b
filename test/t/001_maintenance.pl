
# The launcher and the maintenance worker: visible in pg_stat_activity, and
# every pgq.maintenance_interval they do what pgq.maintain() does, logging one
# line per pass that did work and nothing for an idle pass. Nobody calls
# pgq.maintain() here; the test checks that no client statement did.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use PgqTap;

my $node = pgq_node('main');
$node->start;
my $log_start = log_size($node);

# Settings: both reloadable, the interval defaults to 1 s and is 100 ms here.
is( $node->safe_psql(
		'postgres',
		"SELECT name || '=' || context || ',' || boot_val || coalesce(unit, '') "
		  . "FROM pg_settings WHERE name IN ('pgq.maintenance_interval', 'pgq.databases') "
		  . "ORDER BY name"),
	"pgq.databases=sighup,\npgq.maintenance_interval=sighup,1000ms",
	'pgq.databases and pgq.maintenance_interval are SIGHUP settings with the documented defaults'
);
is($node->safe_psql('postgres', 'SHOW pgq.maintenance_interval'),
	'100ms', 'the test interval is in effect');

# The launcher runs from the start, in no database.
ok( wait_for(
		$node, 'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq launcher' "
		  . "AND application_name = 'pgq launcher' AND datname IS NULL",
		'1'),
	'one launcher: backend_type and application_name "pgq launcher", no database');

$node->safe_psql('postgres', 'CREATE EXTENSION pgq_cpp');
my $worker_query =
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq maintenance' "
  . "AND application_name = 'pgq maintenance' AND datname = 'postgres'";
my ($ok, undef, $waited) = wait_for($node, 'postgres', $worker_query, '1');
ok($ok, 'one maintenance worker for the database with the extension');
prompt('the worker appears after CREATE EXTENSION', $waited) if $ok;
is( pgq_backends($node, "backend_type = 'pgq launcher' OR datname = 'postgres'"),
	"pgq launcher|pgq launcher|<null>\npgq maintenance|pgq maintenance|postgres",
	'exactly the launcher and one worker, with their names');
my $worker = worker_pid($node, 'postgres');

# 1. Expired leases go back to pending, all three in one pass: they were
# claimed by one statement, so they share lease_until and expire together.
$node->safe_psql(
	'postgres', q{
SELECT pgq.create_queue('mail', max_attempts => 5);
SELECT pgq.enqueue_many('mail', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);
});
my $offset = log_size($node);
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) || ' ' || min(attempt) || ' ' || count(DISTINCT lease_until) "
		  . "FROM pgq.claim('mail', 3, '1 second')"),
	'3 1 1',
	'three jobs claimed with a one-second lease');
ok( wait_for(
		$node, 'postgres',
		"SELECT count(*) FROM pgq.jobs WHERE state = 'p' AND attempt = 1 "
		  . "AND last_error = 'lease expired' AND lease_until <= pgq.clock()",
		'3'),
	'the expired leases are pending again, attempt kept, last_error "lease expired"');
my $line = qr/^.*LOG:  pgq maintenance in database "postgres": .*$/m;
ok( defined wait_for_log(
		$node,
		qr/LOG:  pgq maintenance in database "postgres": 3 expired leases requeued, 0 dead-lettered, 0 finished rows dropped, 0 schedules fired$/m,
		$offset),
	'the pass logs "3 expired leases requeued, 0 dead-lettered, 0 finished rows dropped, 0 schedules fired"');
is(count_matches(log_since($node, $offset), $line),
	1, 'that pass logged exactly one line');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(attempt::text, ',') FROM pgq.claim('mail', 3, '10 minutes')"),
	'2,2,2',
	'the requeued jobs can be claimed again, as their second attempt');
$node->safe_psql('postgres',
	"SELECT pgq.complete(id, attempt) FROM pgq.jobs WHERE state = 'r'");

# 2. An expired lease with no attempt left is dead-lettered as 'expired'.
$node->safe_psql(
	'postgres', q{
SELECT pgq.create_queue('once', max_attempts => 1);
SELECT pgq.enqueue('once', '{"n": 4}');
});
$offset = log_size($node);
my $dead_id = $node->safe_psql('postgres',
	"SELECT id FROM pgq.claim('once', 1, '1 second')");
ok( wait_for(
		$node, 'postgres',
		"SELECT reason || ' ' || attempts || ' ' || last_error || ' ' "
		  . "|| NOT EXISTS (SELECT FROM pgq.jobs WHERE id = $dead_id) "
		  . "FROM pgq.dead_jobs WHERE id = $dead_id",
		'expired 1 lease expired true'),
	'the exhausted job is in pgq.dead_jobs with reason "expired", no longer in pgq.jobs');
ok( defined wait_for_log(
		$node,
		qr/LOG:  pgq maintenance in database "postgres": 0 expired leases requeued, 1 dead-lettered, 0 finished rows dropped, 0 schedules fired$/m,
		$offset),
	'the pass logs "0 expired leases requeued, 1 dead-lettered, 0 finished rows dropped, 0 schedules fired"');
is(count_matches(log_since($node, $offset), $line),
	1, 'that pass logged exactly one line');

# 3. Completions past the queue's retention are dropped (retention 0: at the
# next pass).
$node->safe_psql(
	'postgres', q{
SELECT pgq.create_queue('brief', retention => '0');
SELECT pgq.enqueue('brief', '{"n": 5}');
});
$offset = log_size($node);
is( $node->safe_psql(
		'postgres',
		"SELECT pgq.complete(id, attempt) FROM pgq.claim('brief', 1, '10 minutes')"),
	't',
	'a job of a queue without retention is completed');
ok( wait_for(
		$node, 'postgres',
		"SELECT count(*) FROM pgq.finished f JOIN pgq.queues q USING (queue_id) "
		  . "WHERE q.name = 'brief'",
		'0'),
	'its completion is dropped from pgq.finished');
ok( defined wait_for_log(
		$node,
		qr/LOG:  pgq maintenance in database "postgres": 0 expired leases requeued, 0 dead-lettered, 1 finished rows dropped, 0 schedules fired$/m,
		$offset),
	'the pass logs "0 expired leases requeued, 0 dead-lettered, 1 finished rows dropped, 0 schedules fired"');
is(count_matches(log_since($node, $offset), $line),
	1, 'that pass logged exactly one line');

# 4. Idle passes log nothing. Nothing is left to do: no running job, and the
# completions of 'mail' are within its one-day retention. For the silence to
# mean something, the same worker must have been running for the whole window
# (its pid is unchanged at both ends; a crash would also show in the log), and
# it must still log when there is work (checked right after). A window of 2 s
# is 20 intervals of 100 ms, so at least about 19 passes ran in it.
is($node->safe_psql('postgres', 'SELECT count(*) FROM pgq.jobs'),
	'0', 'no job is left, so the next passes are idle');
my $idle_from = log_size($node);
my $window_start = time;
is(worker_pid($node, 'postgres'),
	$worker, 'the worker at the start of the idle window is the first one');
usleep(100_000) while time - $window_start < 2.0;
is(worker_pid($node, 'postgres'),
	$worker, 'the same worker is still running at the end of the window');
my $idle_log = log_since($node, $idle_from);
is(count_matches($idle_log, $line),
	0, 'twenty idle intervals: no maintenance line in the log');

$node->safe_psql('postgres', "SELECT pgq.enqueue('mail', '{\"n\": 6}')");
$offset = log_size($node);
$node->safe_psql('postgres', "SELECT id FROM pgq.claim('mail', 1, '1 second')");
ok( defined wait_for_log(
		$node,
		qr/LOG:  pgq maintenance in database "postgres": 1 expired leases requeued, 0 dead-lettered, 0 finished rows dropped, 0 schedules fired$/m,
		$offset),
	'the worker that was silent while idle logs again when there is work');

# Nothing above came from a client calling pgq.maintain() (log_statement is
# 'all', so every client statement is in the log), and nothing crashed.
my $all = log_since($node, $log_start);
unlike($all, qr/statement: .*pgq\.maintain/, 'no client called pgq.maintain()');
unlike(
	$all,
	qr/terminating any other active server processes|was terminated by signal/,
	'no server process crashed');

$node->stop;
done_testing();
