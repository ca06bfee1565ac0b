
# Streams across pg_dump / pg_restore into another cluster (issue 21): the
# source cluster has handed out thousands more transaction ids than the
# target, so the restored events and consumer snapshots carry ids the target
# has not reached. The first use of the stream rebases it: each consumer
# goes on from its first unfinished event (nothing it had not finished is
# lost; what it finished after that one may come again), and events
# appended after the restore are delivered to every consumer (without the
# rebase they would look finished and be skipped for ever).
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $src = pgq_node('src');
$src->start;
$src->safe_psql('postgres', 'CREATE EXTENSION pgq_cpp');
# Thousands of transaction ids the target cluster will not have reached.
$src->safe_psql('postgres', join("\n", ('SELECT txid_current();') x 3000));
$src->safe_psql(
	'postgres', q{
SELECT pgq.create_stream('orders');
SELECT pgq.register_consumer('orders', c) FROM unnest(ARRAY['caught_up', 'halfway', 'open_batch', 'idle']) c;
SELECT count(*) FROM pgq.append_many('orders',
       (SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series(1, 10) g));
SELECT pgq.finish_batch((SELECT batch_id FROM pgq.next_batch('orders', 'caught_up') LIMIT 1));
SELECT pgq.finish_batch((SELECT batch_id FROM pgq.next_batch('orders', 'halfway', 4) LIMIT 1));
SELECT count(*) FROM pgq.next_batch('orders', 'open_batch', 3);
});
my $src_xid = $src->safe_psql('postgres', 'SELECT txid_current()');

my $dump = $PostgreSQL::Test::Utils::tmp_check . '/streams.dump';
$src->command_ok(
	[ 'pg_dump', '-Fc', '-f', $dump, '-d', $src->connstr('postgres') ],
	'pg_dump of a database with a stream');

my $dst = pgq_node('dst');
$dst->start;
$dst->safe_psql('postgres', 'CREATE DATABASE restored');
my $dst_xid = $dst->safe_psql('postgres', 'SELECT txid_current()');
cmp_ok($dst_xid + 2000, '<', $src_xid, "the target cluster is behind ($dst_xid < $src_xid)");
$dst->command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', $dst->connstr('restored'), $dump ],
	'pg_restore into the other cluster, without an error');

is($dst->safe_psql('restored', 'SELECT count(*) FROM pgq.stream_events'),
	'10', 'every event is restored');

# The first use rebases the stream; the append after it must reach all.
$dst->safe_psql('restored', q{SELECT pgq.append('orders', '{"n": 11}')});
is( $dst->safe_psql(
		'restored',
		"SELECT count(*) FROM pgq.stream_events WHERE txid::text::bigint > $dst_xid + 2000"),
	'0', 'no stored transaction id is beyond the target cluster any more');

sub drain
{
	my ($consumer) = @_;
	my @seen;
	for (1 .. 10)
	{
		my $rows = $dst->safe_psql('restored',
			"SELECT batch_id, payload->>'n' FROM pgq.next_batch('orders', '$consumer')");
		last if $rows eq '';
		my @lines = split /\n/, $rows;
		push @seen, map { (split /\|/)[1] } @lines;
		my ($batch) = split /\|/, $lines[0];
		$dst->safe_psql('restored', "SELECT pgq.finish_batch($batch)");
	}
	return join(',', @seen);
}

is(drain('caught_up'), '11', 'a consumer that had finished everything gets the new event only');
is(drain('halfway'), '5,6,7,8,9,10,11', 'one that had finished 1-4 goes on at 5');
is(drain('open_batch'), '1,2,3,4,5,6,7,8,9,10,11',
	'one with an open batch gets it again, and the rest');
is(drain('idle'), '1,2,3,4,5,6,7,8,9,10,11', 'one that had read nothing gets everything');

# And the stream goes on normally: another append, another batch.
$dst->safe_psql('restored', q{SELECT pgq.append('orders', '{"n": 12}')});
is(drain('halfway'), '12', 'after the rebase, appends are delivered once');

# The source is not rebased (nothing there is beyond its own counter).
is(drain_src(), '5,6,7,8,9,10', 'the source cluster itself goes on where it was');

sub drain_src
{
	my $rows = $src->safe_psql('postgres',
		"SELECT string_agg(payload->>'n', ',' ORDER BY event_id) FROM pgq.next_batch('orders', 'halfway')");
	return $rows;
}

$src->stop;
$dst->stop;
done_testing();
