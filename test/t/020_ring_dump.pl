
# pg_dump / pg_restore of a database whose queue keeps its jobs on a ring
# (issue 33, ADR 0028): the ring's
# tables come back with their rows and the ledger with its turn, and the
# restored queue carries on: pending jobs are handed out once each, in the
# order they were enqueued across the ring's two segments; a job running at
# the dump completes with its (id, attempt) (its lease rebuilt from its
# receipt) and no claim hands it out while that lease lasts; a completed one
# never comes back; new ids follow the old ones; the ring turns and its
# finished segments are truncated. The source is left as it was.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $node = pgq_node('ring_dump');
# No maintenance worker in either database (it would turn the rings).
$node->append_conf('postgresql.conf', "pgq.databases = 'postgres'");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE src');

sub sql { my ($db, $q) = @_; return $node->safe_psql($db, $q); }
sub lines { my ($out) = @_; return $out eq '' ? () : split /\n/, $out; }

sql('src', q{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('r', lease => '1 hour');
SELECT pgq.create_queue('gq', lease => '1 hour');
});
# A FIFO group's head on the ring, running, held in pgq.group_holds; its
# next job waiting as a row (ADR 0028 "Groups on the rings").
my $ghead = sql('src', "SELECT pgq.enqueue('gq', '{}', group_key => 'g')");
my $gnext = sql('src', "SELECT pgq.enqueue('gq', '{}', group_key => 'g')");
is(sql('src', "SELECT id FROM pgq.claim('gq', 10)"), $ghead, 'src: a group\'s head runs, its next job waits');
my @first = lines(sql('src', "SELECT id FROM pgq.enqueue_many('r', array_fill('{}'::jsonb, ARRAY[4])) AS id"));
my ($done) = lines(sql('src', "SELECT id FROM pgq.claim('r', 1)"));
is(sql('src', "SELECT pgq.complete($done, 1)"), 't', 'src: the first job completed');
my ($running, $running2) = lines(sql('src', "SELECT id FROM pgq.claim('r', 2)"));
# A turn: the next jobs go to segment 1.
sql('src', "SET pgq.ring_turn = '1min'; SET pgq.debug_clock_offset = '2min'; SELECT pgq.maintain()");
# These three with a trace context (issue 35): their entries carry it.
my @second = lines(sql('src', "SELECT id FROM pgq.enqueue_many('r', array_fill('{}'::jsonb, ARRAY[3]), "
	  . "traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01') AS id"));
my $ledger = q{SELECT r.current || ' ' || r.generation FROM pgq.rings r JOIN pgq.queues q USING (ring_id)
  WHERE q.name = 'r'};
is(sql('src', $ledger), '1 1', 'src: the ring turned once');
my $rows = "SELECT count(*) FROM pgq.job_log";
my $src_rows = sql('src', $rows);

my $dump = $node->basedir . '/src.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', $dump ], 'pg_dump -Fc');
sql('postgres', 'CREATE DATABASE dst');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('dst'), $dump ],
	'pg_restore into a fresh database, without an error');

is(sql('dst', $rows), $src_rows, 'dst: the ring\'s rows, every one');
is(sql('dst', "SELECT count(*) FROM pgq.list_jobs('r') WHERE trace_id = '4bf92f3577b34da6a3ce929d0e0e4736'"),
	'3', 'dst: the traced jobs keep their trace context');
# The source completes its two running jobs: no lease is left in the
# server's map, so nothing of the source's makes dst's look at the map.
is(sql('src', "SELECT pgq.complete_many(ARRAY[$running, $running2]::bigint[], ARRAY[1, 1])"), '2',
	'src: its running jobs completed after the dump');
is(sql('dst', $ledger), '1 1', 'dst: the ledger where it was');
# What keeps line pointers dead on the segments (ADR 0028): the storage
# option and the index that holds no row.
my $keep = q{SELECT count(*) FILTER (WHERE 'vacuum_index_cleanup=off' = ANY (c.reloptions)) || ' '
  || count(*) FILTER (WHERE EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid))
  FROM pg_class c JOIN pg_inherits h ON h.inhrelid = c.oid
  JOIN pgq.queues q ON h.inhparent = ('pgq.job_log_' || q.ring_id)::regclass WHERE q.name = 'r'};
is(sql('src', $keep), '4 4', 'src: four segments, each with the option and the index');
is(sql('dst', $keep), '4 4', 'dst: the same');
# No worker runs here (pgq.databases): nothing has built the ring's lane when
# the completions come, the first thing done in the restored database.
is(sql('dst', "SELECT pgq.complete_many(ARRAY[$running, $running2]::bigint[], ARRAY[1, 1])"), '2',
	'dst: the jobs running at the dump complete with their attempts (complete_many), before anything else');
is(sql('dst', "SELECT pgq.complete($running, 1)"), 'f', 'dst: once');
my @expected = ($first[3], @second);
is_deeply([ lines(sql('dst', "SELECT id FROM pgq.claim('r', 100)")) ], \@expected,
	'dst: the pending jobs once each, in enqueue order across both segments');
is(sql('dst', "SELECT count(*) FROM pgq.claim('r', 100)"), '0', 'dst: and nothing more');
is(sql('dst', "SELECT pgq.complete($done, 1)"), 'f', 'dst: the completed job stays completed');
my ($new) = lines(sql('dst', "SELECT pgq.enqueue('r', '{}')"));
cmp_ok($new, '>', $second[-1], 'dst: new ids follow the old ones');
is(sql('dst', "SELECT pgq.complete_many(array_agg(id), array_agg(1)) FROM pgq.claim('r', 100)"), '1',
	'dst: the new job is claimed and completed');
is(sql('dst', "SELECT pgq.complete_many(ARRAY[" . join(',', @expected) . "], array_fill(1, ARRAY["
		  . scalar(@expected) . "]))"), scalar(@expected), 'dst: the restored jobs completed');
# Two turns later every sealed segment has been truncated.
sql('dst', "SET pgq.ring_turn = '1min'; SET pgq.debug_clock_offset = '4min'; SELECT pgq.maintain()");
sql('dst', "SET pgq.ring_turn = '1min'; SET pgq.debug_clock_offset = '6min'; SELECT pgq.maintain()");
is(sql('dst', q{SELECT count(*) FROM pgq.ring_segments s JOIN pgq.rings r USING (ring_id)
  JOIN pgq.queues q USING (ring_id) WHERE q.name = 'r' AND s.segment <> r.current AND NOT s.empty}),
	'0', 'dst: the ring turned and its finished segments were truncated');
is(sql('src', $rows), $src_rows + 2, 'src: as it was, with the two closures');
is(sql('src', "SELECT count(*) FROM pgq.claim('r', 100)"), '4', 'src: its pending jobs are still its own');

# The group in the restored database: its next job waits for the head's
# completion, which lets it go (the hold came with the dump).
is(sql('dst', "SELECT count(*) FROM pgq.claim('gq', 10)"), '0', 'dst: the group\'s next job still waits');
is(sql('dst', "SELECT pgq.complete($ghead, 1)"), 't', 'dst: the group\'s head completes');
is(sql('dst', "SELECT id FROM pgq.claim('gq', 10)"), $gnext, 'dst: then its next job is handed out');

# Rows claimed onto the ring (entries 'a', ADR 0028 "Rows claimed onto the
# rings") through a dump: a restore writes the rows again, densely (a
# rolled-back claim's dead row leaves no place behind), so an entry 'a' and
# its receipts and closure are tied by the claim's number they carry, not
# by a place. A retry completed before the dump stays completed, one
# running at the dump completes with its attempt once, one pending is
# handed out once.
sql('src', q{SELECT pgq.create_queue('cr', lease => '1 hour');});
my @retries = lines(sql('src', "SELECT id FROM pgq.enqueue_many('cr', array_fill('{}'::jsonb, ARRAY[3])) AS id"));
is(sql('src', "SELECT count(*) FROM pgq.claim('cr', 3)"), '3', 'claimed rows: three claimed');
is(sql('src', "SELECT string_agg(pgq.fail(id, 1, 'again', retry_in => '0 seconds')::text, ',' ORDER BY id) "
	  . "FROM unnest(ARRAY[" . join(',', @retries) . "]::bigint[]) id"), 'retry,retry,retry',
	'claimed rows: each failed once, a retry waiting as a row');
sql('src', "BEGIN; SELECT count(*) FROM pgq.claim('cr', 3); ROLLBACK");
my ($cr_done, $cr_running) = lines(sql('src', "SELECT id FROM pgq.claim('cr', 2) ORDER BY id"));
is(sql('src', "SELECT pgq.complete($cr_done, 2)"), 't', 'claimed rows: one retry completed');
is(sql('src', "SELECT count(*) FROM pgq.job_log WHERE kind = 'a' AND id IN ($cr_done, $cr_running)"), '2',
	'claimed rows: both are entries claimed as written');
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', $dump ], 'claimed rows: pg_dump -Fc');
sql('postgres', 'CREATE DATABASE dst2');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('dst2'), $dump ],
	'claimed rows: pg_restore');
is(sql('src', "SELECT pgq.complete($cr_running, 2)"), 't', 'claimed rows: src completes its running one');
is(sql('dst2', "SELECT string_agg(id::text, ',') FROM pgq.jobs WHERE id IN ($cr_done, $cr_running)"),
	$cr_running, 'claimed rows, dst: the completed one is not unfinished, the running one is');
is(sql('dst2', "SELECT id || ' ' || attempt FROM pgq.claim('cr', 10)"), "$retries[2] 2",
	'claimed rows, dst: only the pending retry is handed out');
is(sql('dst2', "SELECT pgq.complete($cr_done, 2)"), 'f', 'claimed rows, dst: the completed one stays completed');
is(sql('dst2', "SELECT pgq.complete($cr_running, 2)"), 't', 'claimed rows, dst: the running one completes');
is(sql('dst2', "SELECT pgq.complete($cr_running, 2)"), 'f', 'claimed rows, dst: once');

$node->stop;
done_testing();
