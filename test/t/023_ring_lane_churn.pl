
# Lanes taken back under load (issue 33, ADR 0028 "Shares of the server"):
# eight ring queues share a database's four lanes, so nearly every use of a
# queue takes back another's idle lane and the queue's next use builds its
# lane again from the ring's rows. Four pgbench clients enqueue, claim and
# complete (some claims rolled back, some completions left to a later
# claim) on random queues at once; every outcome is written in the
# transaction that made it to a table whose primary key is the job id. At
# the end every job produced was completed exactly once (a second
# completion is a duplicate-key error, which aborts its client) and none is
# left. With four clients there are at most four transactions holding a
# lane at once, so no use is refused. The lease map is small too (30 for
# the database): claims of up to 25 by four clients pass it all the time,
# and the jobs past the room spill into pgq.job_rows (ADR 0028 "A claim
# past the lease map's room"), rolled back with their claims or completed
# from there, each once like the others.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $QUEUES   = 8;
my $SECONDS  = $ENV{PGQ_LANE_CHURN_SECONDS} // 8;

my $node = pgq_node('lane_churn');
$node->append_conf(
	'postgresql.conf', q(
pgq.max_ring_queues = 6
pgq.max_ring_queues_per_database = 4
pgq.max_running_ring_jobs = 64
pgq.max_running_ring_jobs_per_database = 30
));
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(join(";\n",
	'CREATE EXTENSION pgq_cpp',
	'CREATE TABLE produced (id bigint PRIMARY KEY)',
	'CREATE TABLE done (id bigint PRIMARY KEY)',
	map { "SELECT pgq.create_queue('q$_', lease => '1 hour')" } 1 .. $QUEUES));
is(sql("SELECT count(*) FROM pgq.queues WHERE ring_id IS NOT NULL"), $QUEUES,
	"$QUEUES queues on rings");

my $script = q{
\set q random(1, 8)
\set n random(1, 20)
\set fate random(1, 10)
BEGIN;
INSERT INTO produced SELECT pgq.enqueue_many('q' || :q, array_fill('{}'::jsonb, ARRAY[:n]));
COMMIT;
\set q random(1, 8)
BEGIN;
\if :fate = 1
SELECT count(*) FROM pgq.claim('q' || :q, 20);
ROLLBACK;
\else
INSERT INTO done SELECT id FROM pgq.claim('q' || :q, 25) c WHERE pgq.complete(c.id, c.attempt);
COMMIT;
\endif
};
churn($node, $SECONDS, '023_churn', $script,
	'four clients enqueue, claim and complete on eight queues sharing four lanes');

cmp_ok(sql("SELECT count(*) FROM pgq.job_log WHERE kind = 'c' AND outcome = 'm'"), '>', 100,
	'more than a hundred claimed jobs spilled past the leases');

# What is left, claimed and completed by one session (its lanes taken back
# from the idle queues one after another).
for my $round (1 .. 3)
{
	for my $q (1 .. $QUEUES)
	{
		sql("INSERT INTO done SELECT id FROM pgq.claim('q$q', 10000) c
		      WHERE pgq.complete(c.id, c.attempt)");
	}
}
my ($produced, $done) = split /\|/, sql("SELECT (SELECT count(*) FROM produced), (SELECT count(*) FROM done)");
cmp_ok($produced, '>', 1000, 'more than a thousand jobs produced');
is($done, $produced, 'every job produced was completed, once (done has the id as its key)');
is(sql("SELECT count(*) FROM produced p WHERE NOT EXISTS (SELECT 1 FROM done d WHERE d.id = p.id)"), '0',
	'no produced job is missing from done');
is(sql("SELECT count(*) FROM pgq.jobs"), '0', 'nothing is left');
is(sql("SELECT count(*) FROM pgq.dead_jobs"), '0', 'nothing died');

$node->stop;
done_testing();
