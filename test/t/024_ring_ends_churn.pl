
# The ends of ring jobs under load (issue 33, ADR 0028 "The ends of a ring
# job on the ring"): four pgbench clients enqueue onto four ring queues and
# claim, and end each job they claim one way or another — complete, fail
# (retried at once, dead on its third attempt), release, snooze, cancel, or
# leave it to its lease (one second) — while some transactions roll back
# and the maintenance expires leases. A job's ends run on its ring (a
# closure, and the row it goes on as or dies as), so they race each other,
# claims, completions and expiries. A completion is recorded in the
# transaction that made it, in a table whose key is the job id (a second
# completion of a job fails its client). At the end every job produced was
# completed once or is dead, never both, and none is left. The jobs have
# five priorities: four served on rings once the maintenance gives them
# theirs (ADR 0028, "Priorities: a ring per priority served"), the fifth as
# rows, so that claims merge several rings and the table, and the rings
# are made while the clients run.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $SECONDS = $ENV{PGQ_ENDS_CHURN_SECONDS} // 8;

my $node = pgq_node('ends_churn');
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(join(";\n",
	'CREATE EXTENSION pgq_cpp',
	'CREATE TABLE produced (id bigint PRIMARY KEY)',
	'CREATE TABLE done (id bigint PRIMARY KEY)',
	map { "SELECT pgq.create_queue('q$_', lease => '1 second', max_attempts => 3)" } 1 .. 4));

my $script = q{
\set q random(1, 4)
\set n random(1, 10)
\set p random(-1, 3)
BEGIN;
INSERT INTO produced SELECT pgq.enqueue_many('q' || :q, array_fill('{}'::jsonb, ARRAY[:n]), priority => :p);
COMMIT;
\set q random(1, 4)
\set fate random(0, 6)
\set rollback random(1, 10)
BEGIN;
INSERT INTO done SELECT c.id FROM pgq.claim('q' || :q, 8) c
 WHERE CASE (c.id + :fate) % 7
         WHEN 0 THEN pgq.fail(c.id, c.attempt, 'boom', retry_in => '0 seconds') IS NULL
         WHEN 1 THEN pgq.release(c.id, c.attempt) IS NULL
         WHEN 2 THEN pgq.snooze(c.id, c.attempt, '0 seconds') IS NULL
         WHEN 3 THEN pgq.cancel(c.id) IS NULL
         WHEN 4 THEN false
         ELSE pgq.complete(c.id, c.attempt) END;
\if :rollback = 1
ROLLBACK;
\else
COMMIT;
\endif
\if :fate = 0
SELECT count(*) FROM pgq.maintain();
\endif
};
churn($node, $SECONDS, '024_ends', $script,
	'four clients claim and end ring jobs every way at once');

is(sql("SELECT count(DISTINCT l.outcome) FROM pgq.job_log l WHERE l.kind = 'c' AND l.outcome IN ('d', 'f', 'r', 's', 'x', 'e')"),
	'6', 'every end was written on the rings: done, failed, released, snoozed, cancelled, expired');
is(sql("SELECT count(*) FROM pgq.priority_rings"), '12',
	'each queue serves four priorities on rings, three of them on rings made while it ran');

# What is left: leases run out (the clock moved on), then claimed and
# completed by one session, until nothing is left.
for my $round (1 .. 6)
{
	sql("SET pgq.debug_clock_offset = '${round}min'; SELECT count(*) FROM pgq.maintain()");
	for my $q (1 .. 4)
	{
		sql("INSERT INTO done SELECT id FROM pgq.claim('q$q', 10000) c
		      WHERE pgq.complete(c.id, c.attempt)");
	}
}
my ($produced, $done, $dead) = split /\|/, sql(
	"SELECT (SELECT count(*) FROM produced), (SELECT count(*) FROM done),
	        (SELECT count(*) FROM pgq.dead_jobs d JOIN produced p USING (id))");
cmp_ok($produced, '>', 1000, 'more than a thousand jobs produced');
cmp_ok($dead, '>', 0, 'some died (cancelled, or out of attempts)');
is($done + $dead, $produced, 'every job produced was completed once or died');
is(sql("SELECT count(*) FROM done d JOIN pgq.dead_jobs x USING (id)"), '0', 'none both');
is(sql("SELECT count(*) FROM produced p WHERE NOT EXISTS (SELECT 1 FROM done d WHERE d.id = p.id)
          AND NOT EXISTS (SELECT 1 FROM pgq.dead_jobs x WHERE x.id = p.id)"), '0',
	'none missing');
is(sql("SELECT count(*) FROM pgq.dead_jobs GROUP BY id HAVING count(*) > 1"), '', 'none died twice');
is(sql("SELECT count(*) FROM pgq.jobs"), '0', 'nothing is left');

$node->stop;
done_testing();
