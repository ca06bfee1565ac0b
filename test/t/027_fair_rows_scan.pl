
# A fair queue's due rows of pgq.job_rows take their keys' turns (ADR 0029
# "Rows"): each scan of the table reads due rows in claim order up to a
# limit (8,192) and files a few of each key; a scan cut short there goes on
# after the last row it read, so that keys whose rows lie past the first
# 8,192 are not left waiting behind them. 9,000 scheduled jobs without a
# group key (one key: none) come due first, then ten tenants' two each:
# after the first scans, every tenant is served within a few rounds, every
# job once, each tenant's in its order.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $node = pgq_node('fair_rows_scan');
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

# Scheduled jobs wait in pgq.job_rows (not on the ring) until due: the
# 9,000 ("A") due two seconds from now, the tenants' a little later.
sql(q{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('sched', lease => '1 hour', group_concurrency => 10000, fairness => 'group');
CREATE TABLE seen (n serial PRIMARY KEY, id bigint NOT NULL, k text NOT NULL, i int NOT NULL);
SELECT count(*) FROM pgq.enqueue_many('sched',
  (SELECT array_agg(jsonb_build_object('k', 'A', 'i', i) ORDER BY i) FROM generate_series(1, 9000) i),
  run_at => now() + interval '2 seconds');
});
for my $t (1 .. 10)
{
	my $k = sprintf('t%02d', $t);
	sql(qq{SELECT count(*) FROM pgq.enqueue_many('sched',
	  (SELECT array_agg(jsonb_build_object('k', '$k', 'i', i) ORDER BY i) FROM generate_series(1, 2) i),
	  group_keys => ARRAY['$k'], run_at => now() + interval '2.5 seconds')});
}
is(sql(q{SELECT count(*) FROM pgq.job_rows WHERE state = 'p'}), '9020', 'all of them wait in the table');
ok(wait_for($node, 'postgres', q{SELECT count(*) FROM pgq.jobs WHERE run_at > now()}, '0'),
	'all of them due');
sql(q{
DO $$ DECLARE r record; BEGIN
  FOR round IN 1 .. 300 LOOP
    FOR r IN SELECT * FROM pgq.claim('sched', 1) LOOP
      INSERT INTO seen (id, k, i) VALUES (r.id, r.payload->>'k', (r.payload->>'i')::int);
      PERFORM pgq.complete(r.id, r.attempt);
    END LOOP;
  END LOOP;
END $$;
});
# A's rows fill the first scan (8,192 rows read, two of A filed; claims
# meanwhile take A's rows in claim order, the order holding nothing else);
# the next scan, a claim per 64 rows read later (128 claims), goes on after
# them and finds the others: in the first 300 claims each of the ten
# tenants got both of its jobs, in turn with A's (a scan from the first row
# each time would read A's rows only, and the tenants would wait for about
# 800 more of A's).
my $order = sql(q{SELECT string_agg(k, ' ' ORDER BY n) FROM seen WHERE k <> 'A' OR n > 120});
is(sql(q{SELECT count(*) FROM (SELECT k FROM seen WHERE k <> 'A' GROUP BY k HAVING count(*) = 2) s}),
	'10', "every tenant served within the first 300 claims: $order");
is(sql(q{SELECT count(*) FROM (SELECT k, bool_and(i = r) AS in_order
            FROM (SELECT k, i, row_number() OVER (PARTITION BY k ORDER BY n) AS r FROM seen) z
           GROUP BY k) o WHERE in_order}),
	'11', "each tenant's jobs in their order");
# The rest, every job once (a transaction each 1,000: one transaction
# claims at most 4,096 jobs of a ring before it commits).
sql(q{
DO $$ DECLARE r record; got int; BEGIN
  LOOP
    got := 0;
    FOR r IN SELECT * FROM pgq.claim('sched', 1000) LOOP
      INSERT INTO seen (id, k, i) VALUES (r.id, r.payload->>'k', (r.payload->>'i')::int);
      PERFORM pgq.complete(r.id, r.attempt);
      got := got + 1;
    END LOOP;
    EXIT WHEN got = 0;
    COMMIT;
  END LOOP;
END $$;
});
is(sql(q{SELECT count(*), count(DISTINCT id) FROM seen}), '9020|9020', 'every job once');
is(sql(q{SELECT count(*) FROM pgq.jobs}), '0', 'nothing left');

$node->stop;
done_testing();
