
# Workers run only on a primary: a streaming hot standby (with the library
# preloaded too) has no launcher and no worker, and replays what the
# primary's worker did; once promoted, it starts them and handles leases.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use PgqTap;

my $pgq_query =
  "SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('pgq launcher', 'pgq maintenance')";
my $launcher_query =
  "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq launcher' "
  . "AND application_name = 'pgq launcher' AND datname IS NULL";
my $worker_query =
  "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq maintenance' "
  . "AND application_name = 'pgq maintenance' AND datname = 'postgres'";

my $primary = pgq_node('primary', allows_streaming => 1);
$primary->start;
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('q', max_attempts => 5);
SELECT pgq.create_queue('failover', max_attempts => 5);
SELECT pgq.enqueue('q', '{}');
SELECT pgq.enqueue('failover', '{}');
});
ok(wait_for($primary, 'postgres', $launcher_query, '1'), 'primary: the launcher runs');
ok(wait_for($primary, 'postgres', $worker_query, '1'), 'primary: the worker runs');

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
my $standby_log = log_size($standby);

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'the standby is in recovery');
is($standby->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'pgq_cpp', 'the standby preloads pgq_cpp too');
is($standby->safe_psql('postgres', 'SHOW pgq.maintenance_interval'),
	'100ms', 'and has the same pgq settings');

# The standby must start no launcher. It would at postmaster start, and the
# worker about 2 s later; sample pg_stat_activity for 3 s, while the primary
# does a maintenance pass that the standby replays.
my $id = $primary->safe_psql('postgres', "SELECT id FROM pgq.claim('q', 1, '1 second')");
ok( wait_for(
		$primary, 'postgres',
		"SELECT state::text || ' ' || attempt || ' ' || last_error FROM pgq.jobs WHERE id = $id",
		'p 1 lease expired'),
	'primary: the worker expires a lease');
my $seen = 0;
my $deadline = time + 3;
while (time < $deadline)
{
	$seen += $standby->safe_psql('postgres', $pgq_query);
	usleep(100_000);
}
is($seen, 0, 'standby: no pgq launcher and no pgq maintenance backend, ever');
$primary->wait_for_catchup($standby);
is( $standby->safe_psql(
		'postgres',
		"SELECT state::text || ' ' || attempt || ' ' || last_error FROM pgq.jobs WHERE id = $id"),
	'p 1 lease expired',
	'standby: the expiry done on the primary is replicated');
unlike(
	log_since($standby, $standby_log),
	qr/pgq maintenance in database/,
	'standby: no maintenance pass in its log');

# Failover: a lease runs out after the primary is gone; the promoted standby
# starts the launcher and the worker, and they expire it. The lease (6 s)
# outlasts the primary's shutdown, as the check on the standby confirms.
my $lost =
  $primary->safe_psql('postgres', "SELECT id FROM pgq.claim('failover', 1, '6 seconds')");
$primary->wait_for_catchup($standby);
$primary->stop('fast');
is( $standby->safe_psql(
		'postgres',
		"SELECT state::text || ' ' || attempt || ' ' || coalesce(last_error, '-') FROM pgq.jobs WHERE id = $lost"
	),
	'r 1 -',
	'standby: the last claim on the primary is replicated, its lease running');
is($standby->safe_psql('postgres', $pgq_query),
	'0', 'standby: still no pgq backend after the primary stopped');

my $offset = log_size($standby);
$standby->promote;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	'f', 'the standby is promoted');
ok(wait_for($standby, 'postgres', $launcher_query, '1'),
	'promoted: the launcher starts');
ok(wait_for($standby, 'postgres', $worker_query, '1'),
	'promoted: the worker for postgres starts');
ok( wait_for(
		$standby, 'postgres',
		"SELECT state::text || ' ' || attempt || ' ' || last_error FROM pgq.jobs WHERE id = $lost",
		'p 1 lease expired', $LONG),
	'promoted: the lease claimed on the old primary expires');
ok( defined wait_for_log(
		$standby,
		qr/LOG:  pgq maintenance in database "postgres": 1 expired leases requeued, 0 dead-lettered, 0 finished rows dropped, 0 schedules fired$/m,
		$offset),
	'promoted: its own worker did it (its log has the pass)');
is( $standby->safe_psql(
		'postgres',
		"SELECT (SELECT attempt FROM pgq.claim('q', 10, '10 minutes')) || ' ' "
		  . "|| (SELECT attempt FROM pgq.claim('failover', 10, '10 minutes'))"),
	'2 2',
	'promoted: both jobs are there and claimable, as their second attempt');

$standby->stop;
done_testing();
