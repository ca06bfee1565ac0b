
# A queue's max_pending (issue 34, ADR 0029 "Backpressure, as built")
# across an immediate shutdown: the count of its unfinished jobs lives in
# shared memory and is lost with it; after the start it is counted again
# from the tables (by the first maintenance pass, or by the first producer
# that needs it), exactly: jobs on the ring, rows not due yet, jobs waiting
# for their group, running jobs, and none of a transaction the crash ended.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $node = pgq_node('backpressure_restart');
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('bp', lease => '1 hour', max_pending => 100);
-- 60 on the ring, 20 not due yet (rows), 10 of one group (9 waiting).
SELECT count(*) FROM pgq.enqueue_many('bp', (SELECT array_agg(jsonb_build_object('i', i)) FROM generate_series(1, 60) i));
SELECT count(*) FROM pgq.enqueue_many('bp', (SELECT array_agg(jsonb_build_object('i', i)) FROM generate_series(1, 20) i),
                                      run_at => now() + interval '1 day');
SELECT count(*) FROM pgq.enqueue_many('bp', (SELECT array_agg(jsonb_build_object('g', i)) FROM generate_series(1, 10) i),
                                      group_keys => ARRAY['g']);
});
# 10 running, 5 completed.
sql(q{
DO $$ DECLARE r record; n int := 0; BEGIN
  FOR r IN SELECT * FROM pgq.claim('bp', 15, '1 hour') LOOP
    n := n + 1;
    IF n > 10 THEN PERFORM pgq.complete(r.id, r.attempt); END IF;
  END LOOP;
END $$;
});
is(sql(q{SELECT format('%s %s', kept, found) FROM pgq.check_pending('bp')}), '85 85',
	'85 unfinished before the crash');

# A producer in flight at the crash: its 10 jobs reserved, never committed.
my $open = $node->background_psql('postgres');
$open->query_safe(q{BEGIN});
$open->query_safe(q{SELECT count(*) FROM pgq.enqueue_many('bp', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 10)))});
is(sql(q{SELECT pgq.wait_for_room('bp', '0')}), 'f', 'no room below the low-water mark with the reservation');

$node->stop('immediate');
eval { $open->quit; };
$node->start;

# Counted again by the maintenance, with no producer asking.
ok( wait_for(
		$node, 'postgres',
		q{SELECT line FROM regexp_split_to_table(pgq.metrics(), E'\n') line WHERE line LIKE 'pgq_queue_unfinished{%queue="bp"}%'},
		qr/ 85$/),
	'the maintenance counted 85 after the start');
is(sql(q{SELECT format('%s %s', kept, found) FROM pgq.check_pending('bp')}), '85 85',
	'kept and found agree after the start');
# The reservation of the crashed producer is gone: 15 fit, the 16th does not.
is(sql(q{SELECT count(*) FROM pgq.enqueue_many('bp', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 15)))}),
	'15', '15 more fit');
my ($ret, $out, $err) = $node->psql('postgres', q{SELECT pgq.enqueue('bp', '{}')});
isnt($ret, 0, 'the 101st is refused');
like($err, qr/queue "bp" is full/, 'refused as full');

# A queue given a max_pending after the start is counted by its first
# producer (the maintenance may not have passed yet), exactly.
sql(q{SELECT pgq.create_queue('late', lease => '1 hour')});
sql(q{SELECT count(*) FROM pgq.enqueue_many('late', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 7)))});
$node->stop('immediate');
$node->start;
sql(q{SELECT pgq.alter_queue('late', max_pending => 8)});
is(sql(q{SELECT pgq.enqueue('late', '{}') > 0}), 't', 'the 8th fits');
($ret, $out, $err) = $node->psql('postgres', q{SELECT pgq.enqueue('late', '{}')});
like($err, qr/queue "late" is full/, 'the 9th is refused');
is(sql(q{SELECT format('%s %s', kept, found) FROM pgq.check_pending('late')}), '8 8',
	'counted once, exactly');

# A count whose backend ends with a FATAL (terminated mid-count: no
# unwinding closes its window) is given up by the next one who needs the
# count; without that, every producer of the queue would wait for ever.
sql(q{SELECT pgq.create_queue('deepq', lease => '1 hour', max_pending => 10000000)});
sql(q{DO $$ BEGIN
  FOR s IN 1 .. 60 LOOP
    PERFORM count(*) FROM pgq.enqueue_many('deepq', array_fill('{}'::jsonb, ARRAY[10000]));
    COMMIT;
  END LOOP;
END $$});
my $counter = $node->background_psql('postgres', on_error_stop => 0);
my $pid = $counter->query_safe(q{SELECT pg_backend_pid()});
$counter->query_until(qr/counting/, qq{\\echo counting\nSELECT * FROM pgq.check_pending('deepq');\n});
ok( wait_for(
		$node, 'postgres',
		qq{SELECT state = 'active' AND now() - query_start > interval '150 ms' FROM pg_stat_activity WHERE pid = $pid},
		't'),
	'a count of 600,000 jobs in progress');
sql(qq{SELECT pg_terminate_backend($pid)});
eval { $counter->quit; };
is(sql(q{SELECT pgq.enqueue('deepq', '{}') > 0}), 't',
	'a producer goes on meanwhile (the count is known: the dead one was a check)');
# The next count finds the dead backend's window open: it gives it up and
# counts (planted: without TakeOverDeadCount it waits for ever, checked).
is(sql(q{SELECT format('%s %s', kept, found) FROM pgq.check_pending('deepq')}), '600001 600001',
	'the next count gives the dead window up and is exact');

$node->stop;
done_testing();
