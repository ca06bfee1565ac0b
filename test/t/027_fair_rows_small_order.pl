
# A fair queue's due rows of pgq.job_rows take their keys' turns (ADR 0029
# "Rows"): each scan of the table files the first due rows of a bounded
# number of keys (pgq.fair_offers / 16; 4 here), and the next scan goes on
# after the last key the previous one named, so that keys past the limit
# are not left waiting behind the first ones. Ten tenants capped at one job
# each (their backlogs wait in the table, let in one job at each
# completion): after the ring's first job of each, every tenant is served
# within the next rounds, every job once, each tenant's in its order.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $node = pgq_node('fair_rows_small_order');
$node->append_conf('postgresql.conf', qq(
pgq.fair_offers = 64
pgq.fair_keys = 16
));
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('capped', lease => '1 hour', group_concurrency => 1, fairness => 'group');
CREATE TABLE seen (n serial PRIMARY KEY, id bigint NOT NULL, k text NOT NULL, i int NOT NULL);
});
for my $t (1 .. 10)
{
	my $k = sprintf('t%02d', $t);
	sql(qq{SELECT count(*) FROM pgq.enqueue_many('capped',
	  (SELECT array_agg(jsonb_build_object('k', '$k', 'i', i) ORDER BY i) FROM generate_series(1, 6) i),
	  group_keys => ARRAY['$k'])});
}
sql(q{
DO $$ DECLARE r record; BEGIN
  FOR round IN 1 .. 80 LOOP
    FOR r IN SELECT * FROM pgq.claim('capped', 1) LOOP
      INSERT INTO seen (id, k, i) VALUES (r.id, r.payload->>'k', (r.payload->>'i')::int);
      PERFORM pgq.complete(r.id, r.attempt);
    END LOOP;
  END LOOP;
END $$;
});

is(sql(q{SELECT count(*), count(DISTINCT id) FROM seen}), '60|60', 'every job once');
is(sql(q{SELECT count(*) FROM pgq.jobs}), '0', 'nothing left');
is( sql(q{SELECT count(*) FROM (SELECT k, bool_and(i = r) AS in_order
            FROM (SELECT k, i, row_number() OVER (PARTITION BY k ORDER BY n) AS r FROM seen) z
           GROUP BY k) o WHERE in_order}),
	'10', "each tenant's jobs in their order");
# The first ten claims take each tenant's job on the ring; from then on all
# ready jobs are rows, four keys a scan: in the next 30 claims every tenant
# is served at least twice (the first four keys alone, scan after scan,
# would take them all).
my $next = sql(q{SELECT string_agg(k, ' ' ORDER BY n) FROM seen WHERE n BETWEEN 11 AND 40});
is( sql(q{SELECT count(*) FROM (SELECT k FROM seen WHERE n BETWEEN 11 AND 40
                                GROUP BY k HAVING count(*) >= 2) s}),
	'10', "every tenant served within the next rounds: $next");

$node->stop;
done_testing();
