
# The worker follows the extension and the database: DROP EXTENSION stops it,
# CREATE EXTENSION brings it back, DROP DATABASE and CREATE DATABASE ...
# TEMPLATE succeed while it runs (PostgreSQL would otherwise wait 5 s for it
# and fail), a copied database gets its own worker, databases without the
# extension get none, and pgq.databases limits the workers on reload.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use PgqTap;

my $node = pgq_node('life');
$node->start;
my $log_start = log_size($node);

# Exactly one worker in DB ('1'), or none ('0').
sub workers_in
{
	my ($db) = @_;
	return
	    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq maintenance' "
	  . "AND application_name = 'pgq maintenance' AND datname = '$db'";
}

ok( wait_for(
		$node, 'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq launcher'",
		'1'),
	'the launcher is running');

# CREATE EXTENSION in a new database: its worker appears.
$node->safe_psql('postgres', 'CREATE DATABASE app1');
$node->safe_psql('app1', 'CREATE EXTENSION pgq_cpp');
my ($ok, undef, $waited) = wait_for($node, 'postgres', workers_in('app1'), '1');
ok($ok, 'CREATE EXTENSION: a worker for app1');
prompt('the worker appears after CREATE EXTENSION', $waited) if $ok;

# Databases without the extension get no lasting worker. The launcher has
# looked at the databases (it started app1's worker); sample 4 s: a probe may
# come and go, but none may stay 2 s (the contract's delay for a worker).
my $longest = no_lasting_worker($node, [ 'postgres', 'template1' ], 4);
cmp_ok($longest, '<', 2,
	'postgres and template1 (no extension) have no lasting pgq backend');

# DROP EXTENSION: the worker leaves; CREATE EXTENSION: it comes back.
my $first = worker_pid($node, 'app1');
$node->safe_psql('app1', 'DROP EXTENSION pgq_cpp');
($ok, undef, $waited) = wait_for($node, 'postgres', workers_in('app1'), '0');
ok($ok, 'DROP EXTENSION: the worker of app1 exits');
prompt('the worker exits after DROP EXTENSION', $waited) if $ok;
$longest = no_lasting_worker($node, ['app1'], 3);
cmp_ok($longest, '<', 2, 'and no worker stays in app1 without the extension');

$node->safe_psql('app1', 'CREATE EXTENSION pgq_cpp');
($ok, undef, $waited) = wait_for($node, 'postgres', workers_in('app1'), '1');
ok($ok, 'CREATE EXTENSION again: the worker is back');
prompt('the worker is back after CREATE EXTENSION', $waited) if $ok;
isnt(worker_pid($node, 'app1'), $first, 'as a new process');
# and it works: a short lease expires in app1.
$node->safe_psql(
	'app1', q{
SELECT pgq.create_queue('q');
SELECT pgq.enqueue('q', '{}');
SELECT id FROM pgq.claim('q', 1, '1 second');
});
ok( wait_for(
		$node, 'app1',
		"SELECT state::text || ' ' || last_error FROM pgq.jobs",
		'p lease expired'),
	'the new worker expires leases in app1');

# DROP DATABASE without FORCE while the worker runs.
my $launcher = launcher_pid($node);
my $oid = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'app1'");
my $start = time;
my ($ret, $out, $err) = $node->psql('postgres', 'DROP DATABASE app1');
my $took = time - $start;
is($ret, 0, 'DROP DATABASE app1 (no FORCE) succeeds while it has a worker')
  or diag("DROP DATABASE failed after ${took}s: $err");
note(sprintf('DROP DATABASE took %.2f s (PostgreSQL gives up after 5 s)', $took));
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'pgq%' AND datid = $oid"),
	'0',
	'no pgq backend is left in the dropped database');

# CREATE DATABASE ... TEMPLATE a database whose worker runs.
$node->safe_psql('postgres', 'CREATE DATABASE app2');
$node->safe_psql(
	'app2', q{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('q');
SELECT pgq.enqueue('q', '{"from": "app2"}');
});
ok(wait_for($node, 'postgres', workers_in('app2'), '1'), 'a worker for app2');
$start = time;
($ret, $out, $err) = $node->psql('postgres', 'CREATE DATABASE app3 TEMPLATE app2');
$took = time - $start;
is($ret, 0, 'CREATE DATABASE app3 TEMPLATE app2 succeeds while app2 has a worker')
  or diag("CREATE DATABASE failed after ${took}s: $err");
note(sprintf('CREATE DATABASE ... TEMPLATE took %.2f s', $took));
($ok, undef, $waited) = wait_for($node, 'postgres', workers_in('app3'), '1');
ok($ok, 'the copy has its own worker (the extension was copied)');
prompt('the copy gets its worker after CREATE DATABASE', $waited) if $ok;
ok(wait_for($node, 'postgres', workers_in('app2'), '1'),
	'and app2 has its worker');
is($node->safe_psql('app3', "SELECT payload->>'from' FROM pgq.jobs"),
	'app2', 'the copy holds the copied job');
$node->safe_psql('app3', "SELECT id FROM pgq.claim('q', 1, '1 second')");
ok( wait_for(
		$node, 'app3',
		"SELECT state::text || ' ' || last_error FROM pgq.jobs",
		'p lease expired'),
	'the worker of the copy expires its leases');
is($node->safe_psql('app2', "SELECT state::text || ' ' || attempt FROM pgq.jobs"),
	'p 0', 'and app2, the original, is untouched');

# pgq.databases: only the listed databases keep a worker, after a reload.
$node->safe_psql('postgres', "ALTER SYSTEM SET pgq.databases = 'app2'");
$node->reload;
($ok, undef, $waited) = wait_for($node, 'postgres', workers_in('app3'), '0');
ok($ok, 'pgq.databases = app2: the worker of app3 exits');
prompt('the unlisted worker exits after the reload', $waited) if $ok;
is($node->safe_psql('postgres', workers_in('app2')),
	'1', 'and app2 keeps its worker');

$node->safe_psql('postgres', "ALTER SYSTEM SET pgq.databases = 'app3'");
$node->reload;
ok(wait_for($node, 'postgres', workers_in('app2'), '0'),
	'pgq.databases = app3: the worker of app2 exits');
($ok, undef, $waited) = wait_for($node, 'postgres', workers_in('app3'), '1');
ok($ok, 'and app3 has a worker again');
prompt('the newly listed database gets its worker after the reload', $waited) if $ok;

$node->safe_psql('postgres', "ALTER SYSTEM SET pgq.databases = 'app2,app3'");
$node->reload;
ok(wait_for($node, 'postgres', workers_in('app2'), '1'),
	'pgq.databases = app2,app3: app2 has a worker again');
is($node->safe_psql('postgres', workers_in('app3')),
	'1', 'and app3 keeps its worker');

$node->safe_psql('postgres', 'ALTER SYSTEM RESET pgq.databases');
$node->reload;
$node->safe_psql('postgres', 'CREATE DATABASE app4');
$node->safe_psql('app4', 'CREATE EXTENSION pgq_cpp');
ok(wait_for($node, 'postgres', workers_in('app4'), '1'),
	'pgq.databases reset: a new database with the extension gets a worker');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_stat_activity "
		  . "WHERE backend_type = 'pgq maintenance' AND datname IN ('app2', 'app3', 'app4')"),
	'app2,app3,app4',
	'and every database with the extension has one worker');

# The launcher lived through all of it, and nothing crashed.
is(launcher_pid($node), $launcher, 'the launcher is the same process throughout');
unlike(
	log_since($node, $log_start),
	qr/terminating any other active server processes|was terminated by signal/,
	'no server process crashed');

$node->stop;
done_testing();
