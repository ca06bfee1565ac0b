
# A ring queue (issue 33, ADR 0028)
# across a failover: a primary with a streaming standby, jobs pending in two
# segments of a ring that has turned, running (one with an hour's lease, one
# with 10 seconds'), completed; the standby reads them while in recovery;
# the primary stops with an immediate shutdown and the standby is promoted.
# On the new primary (its lanes and lease map built from the replayed rows):
# the running job completes with its attempt before anything else; the
# pending jobs are handed out once each in enqueue order; the completed one
# never comes back; the short-lease job is handed out again, as attempt 2,
# only after its lease ended (the new primary's maintenance worker); new ids
# follow the old ones.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use PgqTap;

my $primary = pgq_node('ring_primary', allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION pgq_cpp');
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('ring_standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

sub on { my ($node, $q) = @_; return $node->safe_psql('postgres', $q); }
sub lines { my ($out) = @_; return $out eq '' ? () : split /\n/, $out; }

on($primary, q{SELECT pgq.create_queue('r', lease => '1 hour');});
my @first = lines(on($primary, "SELECT id FROM pgq.enqueue_many('r', array_fill('{}'::jsonb, ARRAY[5])) AS id"));
my ($done) = lines(on($primary, "SELECT id FROM pgq.claim('r', 1)"));
is(on($primary, "SELECT pgq.complete($done, 1)"), 't', 'primary: a job completed');
my ($running) = lines(on($primary, "SELECT id FROM pgq.claim('r', 1)"));
# A turn (made by a pass with the clock moved on, which would also end any
# short lease taken before it).
on($primary, "SET pgq.ring_turn = '1min'; SET pgq.debug_clock_offset = '2min'; SELECT pgq.maintain()");
my ($short, $short_until) = split / /,
  on($primary, "SELECT id || ' ' || extract(epoch FROM lease_until) FROM pgq.claim('r', 1, '10 seconds')");
my @second = lines(on($primary, "SELECT id FROM pgq.enqueue_many('r', array_fill('{}'::jsonb, ARRAY[3])) AS id"));
my $ledger = q{SELECT r.current || ' ' || r.generation FROM pgq.rings r JOIN pgq.queues q USING (ring_id)
  WHERE q.name = 'r'};
is(on($primary, $ledger), '1 1', 'primary: the ring turned once');
$primary->wait_for_catchup($standby);

my $states = "SELECT string_agg(id || ':' || state::text, ' ' ORDER BY id) FROM pgq.ring_jobs";
my $on_primary = on($primary, $states);
is(on($standby, 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
is(on($standby, $states), $on_primary, 'standby: the ring\'s jobs as the primary has them');

$primary->stop('immediate');
$standby->promote;
is(on($standby, 'SELECT pg_is_in_recovery()'), 'f', 'the standby is promoted');
is(on($standby, "SELECT pgq.complete($running, 1)"), 't',
	'promoted: the running job completes with its attempt, before anything else');
my @expected = (@first[ 3 .. 4 ], @second);
is_deeply([ lines(on($standby, "SELECT id FROM pgq.claim('r', 100, '1 hour')")) ], \@expected,
	'promoted: the pending jobs once each, in enqueue order across both segments');
is(on($standby, "SELECT pgq.complete($done, 1)"), 'f', 'promoted: the completed job stays completed');
my ($ok, $out) = wait_for($standby, 'postgres',
	"SELECT id || ' ' || attempt || ' ' || (extract(epoch FROM pgq.clock()) >= $short_until)::text "
	  . "FROM pgq.claim('r', 1, '1 hour')",
	qr/\S/, $LONG);
ok($ok, 'promoted: the short-lease job is handed out again');
is($out, "$short 2 true", 'promoted: as attempt 2, after its lease ended');
is(on($standby, "SELECT pgq.complete($short, 1)"), 'f', 'promoted: its first attempt is fenced out');
my ($new) = lines(on($standby, "SELECT pgq.enqueue('r', '{}')"));
cmp_ok($new, '>', $second[-1], 'promoted: new ids follow the old ones');

$standby->stop;
done_testing();
