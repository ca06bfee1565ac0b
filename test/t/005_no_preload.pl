
# Without shared_preload_libraries (managed PostgreSQL services): the
# extension installs and every function works, no background process of ours
# runs, nothing expires a lease by itself, pgq.maintain() does, and claim's
# wait falls back to polling and still sees a commit promptly.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use PgqTap;

my $node = PostgreSQL::Test::Cluster->new('plain');
$node->init;
$node->append_conf('postgresql.conf', "lc_messages = 'C'\n");
$node->start;

is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'', 'the library is not preloaded');
$node->safe_psql('postgres', 'CREATE EXTENSION pgq_cpp');
$node->safe_psql('postgres',
	"SELECT pgq.create_queue('q', max_attempts => 3, lease => '1 second')");

is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'pgq%'"),
	'0',
	'no launcher and no maintenance worker');

# A lease that expired stays expired: nobody but pgq.maintain() returns it.
my $id = $node->safe_psql('postgres', "SELECT pgq.enqueue('q', '{}')");
# The queue has its ring (ADR 0028), but without shared memory for its lane
# the job is a row of pgq.job_rows.
is( $node->safe_psql(
		'postgres',
		"SELECT (SELECT ring_id IS NOT NULL FROM pgq.queues WHERE name = 'q') || ' '"
		  . " || (SELECT count(*) FROM pgq.job_rows WHERE id = $id)"),
	'true 1',
	'the queue has a ring, and its job is a row of pgq.job_rows');
is($node->safe_psql('postgres', "SELECT id || ' ' || attempt FROM pgq.claim('q', 1)"),
	"$id 1", 'a job is claimed with a 1 s lease');
# Two seconds past the lease: a worker with the default 1 s interval would
# have returned it by then.
ok( wait_for(
		$node, 'postgres',
		"SELECT lease_until + interval '2 seconds' < now() FROM pgq.jobs WHERE id = $id",
		't', 30),
	'the lease expired two seconds ago');
is($node->safe_psql('postgres', "SELECT state FROM pgq.jobs WHERE id = $id"),
	'r', 'and the job is still running: no worker expired it');
is( $node->safe_psql(
		'postgres',
		'SELECT expired_requeued || \' \' || expired_dead FROM pgq.maintain()'),
	'1 0',
	'pgq.maintain() returns it');
is( $node->safe_psql(
		'postgres', "SELECT state::text || ' ' || last_error FROM pgq.jobs WHERE id = $id"),
	'p lease expired',
	'the job is pending again');
$node->safe_psql('postgres',
	"SELECT pgq.complete(id, attempt) FROM pgq.claim('q', 1, '1 minute')");

# claim(wait) polls: a waiting session gets a job committed by another one.
my $waiter = $node->background_psql('postgres');
$waiter->query_until(qr/waiting/, q{
\echo waiting
SELECT id FROM pgq.claim('q', 1, wait => '20 seconds');
});
ok( wait_for(
		$node, 'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pgq.claim(''q'', 1, wait%' "
		  . "AND state = 'active' AND pid <> pg_backend_pid()",
		'1'),
	'a claim is waiting on the empty queue');
my $committed_at = time;
my $job = $node->safe_psql('postgres', "SELECT pgq.enqueue('q', '{\"w\": 1}')");
# Queued behind the claim: returns once the claim has, with both outputs.
my $got = $waiter->query_safe('SELECT 1');
my $took = time - $committed_at;
like($got, qr/\A$job\n1\z/, 'the waiting claim got the committed job');
# The poll interval is 10 ms; a claim that never looked again would only
# return after its 20 s wait.
cmp_ok($took, '<', 5, 'within a poll or two of the commit, not at the end of the wait');
note(sprintf('the waiting claim returned %.3f s after the enqueue committed', $took));
$waiter->quit;

# Monitoring without shared memory: the depths are there, the counters and
# the workers are not (NULL in queue_metrics, absent from the text).
is( $node->safe_psql(
		'postgres',
		"SELECT ready || ' ' || running || ' ' || coalesce(claims::text, 'null') "
		  . "|| ' ' || coalesce(completions::text, 'null') FROM pgq.queue_metrics() WHERE queue = 'q'"),
	'0 1 null null',
	'queue_metrics(): depths read (the waiter\'s job runs), counters NULL without preload');
my $metrics = $node->safe_psql('postgres', 'SELECT pgq.metrics()');
like($metrics, qr/^pgq_jobs\{database="postgres",queue="q",state="ready"\} 0$/m,
	'metrics(): the jobs by state');
unlike($metrics, qr/_total|pgq_workers/, 'metrics(): no counters, no workers');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pgq.workers'),
	'0', 'pgq.workers: none');

$node->stop;
done_testing();
