
# A queue with fairness => 'group' (issue 34, ADR 0029) across an immediate
# shutdown: its lane's fair order is lost with shared memory, and the
# rebuild files each key's pending entries again from the rows. A fair ring
# is handed out out of ring order (a quiet tenant's job at the end of the
# ring runs before a noisy tenant's backlog ahead of it), so the rebuild
# cannot put its cursor after the last job claimed and give back what lies
# before it (more than the given-back list holds: 4,096); it must
# - hand out every pending job exactly once after the start, never a job
#   completed or running before it, each key's jobs in their order;
# - be fair again within one round: the first claims after the start take
#   each key with jobs in turn;
# - keep a job cancelled before the crash from ever being handed out, among
#   the filed jobs and past what the lane kept filed of a key.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $node = pgq_node('fair_restart');
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

# The keys of n claims of one job each, each completed: "A B C ...".
sub take
{
	my ($n) = @_;
	return sql(qq{
DO \$\$ DECLARE r record; BEGIN
  FOR round IN 1 .. $n LOOP
    FOR r IN SELECT * FROM pgq.claim('fair', 1, '1 hour') LOOP
      INSERT INTO seen (id, k, i) VALUES (r.id, r.payload->>'k', (r.payload->>'i')::int);
      PERFORM pgq.complete(r.id, r.attempt);
    END LOOP;
  END LOOP;
END \$\$;
SELECT string_agg(k, ' ' ORDER BY n) FROM (SELECT * FROM seen ORDER BY n DESC LIMIT $n) s;
});
}

sql(q{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('fair', lease => '1 hour', group_concurrency => 10000, fairness => 'group');
CREATE TABLE seen (n serial PRIMARY KEY, id bigint NOT NULL, k text NOT NULL, i int NOT NULL);
});
# A's import of 6,000 jobs first, then 20 each of B and C.
for my $key (['A', 6000], ['B', 20], ['C', 20])
{
	my ($k, $size) = @$key;
	sql(qq{SELECT count(*) FROM pgq.enqueue_many('fair',
	  (SELECT array_agg(jsonb_build_object('k', '$k', 'i', i) ORDER BY i) FROM generate_series(1, $size) i),
	  group_keys => ARRAY['$k'])});
}
is(take(9), 'A B C A B C A B C', 'before the crash: the keys in turn');
# One job left running at the crash (A's fourth, the next turn), A's 10th
# (among its filed jobs) and 5,000th (past what the lane keeps of A)
# cancelled.
my $running = sql("SELECT id FROM pgq.claim('fair', 1, '1 hour')");
is(sql("SELECT payload->>'k' || (payload->>'i') FROM pgq.jobs WHERE id = $running"), 'A4',
	'the next turn is A\'s');
is(sql(q{SELECT string_agg(pgq.cancel(id)::text, ' ' ORDER BY id) FROM pgq.jobs
          WHERE group_key = 'A' AND (payload->>'i')::int IN (10, 5000)}), 'true true',
	'two of A\'s pending jobs cancelled');

$node->stop('immediate');
$node->start;

# 6,040 jobs - 9 done - 1 running - 2 cancelled = 6,028 pending, 4,020 of
# them behind the last job claimed (C3), far ahead in the ring.
is(sql("SELECT count(*) FROM pgq.jobs WHERE state = 'pending'"), '6028', 'pending after the start');
# The turns start again, each key from its first pending job, in the order
# their jobs lie in the ring.
is(take(6), 'A B C A B C', 'fair again within one round');
# The running job keeps its attempt: completing it lands, nobody got it.
is(sql("SELECT pgq.complete($running, 1)"), 't', 'the job running at the crash completes');
# Every pending job once: drained in claims of 100, a transaction each (a
# transaction's claims of ring jobs stop at what its rollback could give
# back: 4,096).
sql(q{
DO $$ DECLARE c bigint; BEGIN
  LOOP
    WITH claimed AS (SELECT * FROM pgq.claim('fair', 100, '1 hour')),
         noted AS (INSERT INTO seen (id, k, i)
                   SELECT id, payload->>'k', (payload->>'i')::int FROM claimed)
    SELECT count(pgq.complete(id, attempt)) INTO c FROM claimed;
    COMMIT;
    EXIT WHEN c = 0;
  END LOOP;
END $$;
});
is(sql("SELECT count(*) FROM pgq.jobs"), '0', 'nothing left');
is(sql("SELECT count(*) || ' ' || count(DISTINCT id) FROM seen"), '6037 6037',
	'every job handed out once (6,040 less the running one and the two cancelled)');
is(sql("SELECT count(*) FROM seen WHERE k = 'A' AND i IN (10, 5000)"), '0',
	'the cancelled jobs were never handed out');
is(sql(q{SELECT string_agg(k, ',' ORDER BY k) FROM (
           SELECT k, bool_and(i > prev) AS ordered FROM (
             SELECT k, i, lag(i) OVER (PARTITION BY k ORDER BY n) AS prev FROM seen) s
            WHERE prev IS NOT NULL GROUP BY k) o WHERE ordered}), 'A,B,C',
	'each key\'s jobs in their order');

done_testing();
