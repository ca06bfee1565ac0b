
# The queues' rings share the server's shared memory (ADR 0028 "Shares of
# the server"): lanes (one per ring queue in use, pgq.max_ring_queues) and
# the lease map (one entry per running ring job, pgq.max_running_ring_jobs),
# each with a share per database (pgq.max_ring_queues_per_database,
# pgq.max_running_ring_jobs_per_database), so that one database cannot take
# what another needs. Lanes come back when their database drops pgq_cpp or is
# dropped. Run on a cluster with 3 lanes (2 per database) and 64 leases (40
# per database).
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $node = pgq_node('ring_shares');
$node->append_conf(
	'postgresql.conf', q(
pgq.max_ring_queues = 3
pgq.max_ring_queues_per_database = 2
pgq.max_running_ring_jobs = 64
pgq.max_running_ring_jobs_per_database = 40
));
$node->start;

sub sql { my ($db, $q) = @_; return $node->safe_psql($db, $q); }

# The SQLSTATE and message of a statement that fails, or 'ok'.
sub error_of
{
	my ($db, $q) = @_;
	my ($rc, $out, $err) = $node->psql($db, "\\set VERBOSITY sqlstate\n$q");
	return 'ok' if $rc == 0;
	$err =~ s/\s+$//;
	return $err;
}
sub message_of
{
	my ($db, $q) = @_;
	my ($rc, $out, $err) = $node->psql($db, $q);
	return 'ok' if $rc == 0;
	my ($message) = $err =~ /ERROR:\s+(.*)/;
	return $message;
}

# Ring queues in a database: made with the development setting, used once
# (a lane is taken at a queue's first use).
sub ring_queues
{
	my ($db, @names) = @_;
	sql($db, 'CREATE EXTENSION IF NOT EXISTS pgq_cpp');
	sql($db, join(";\n", 'SET pgq.ring_queues = on',
		map { "SELECT pgq.create_queue('$_', lease => '1 hour')" } @names));
}
sub use_queue
{
	my ($db, $queue) = @_;
	return error_of($db, "SELECT pgq.enqueue('$queue', '{}')");
}

sql('postgres', 'CREATE DATABASE a');
sql('postgres', 'CREATE DATABASE b');
ring_queues('a', 'a1', 'a2', 'a3');
ring_queues('b', 'b1', 'b2');

# Lanes: a database's share, then the server's.
is(use_queue('a', 'a1'), 'ok', 'a: a first ring queue in use');
is(use_queue('a', 'a2'), 'ok', 'a: a second one');
is(use_queue('a', 'a3'), 'psql:<stdin>:2: ERROR:  53400', 'a: a third is past its share (53400)');
is(message_of('a', "SELECT pgq.enqueue('a3', '{}')"), 'database has too many queues on rings in use',
	'a: the refusal says why');
is(use_queue('a', 'a1'), 'ok', 'a: its queues in use go on');
is(use_queue('b', 'b1'), 'ok', 'b: the third lane of the server');
is(message_of('b', "SELECT pgq.enqueue('b2', '{}')"), 'no room for one more queue on a ring',
	'b: a fourth is past the server\'s lanes');

# Leases: a claim takes at most what is left of its database's share.
sql('a', "SELECT pgq.enqueue_many('a1', array_fill('{}'::jsonb, ARRAY[100]))");
sql('b', "SELECT pgq.enqueue_many('b1', array_fill('{}'::jsonb, ARRAY[100]))");
is(sql('a', "SELECT count(*) FROM pgq.claim('a1', 30)"), '30', 'a: 30 jobs claimed');
is(sql('a', "SELECT count(*) FROM pgq.claim('a1', 30)"), '10', 'a: then only the 10 left of its 40');
is(message_of('a', "SELECT pgq.claim('a1', 1)"), 'too many ring jobs of this database are running',
	'a: then a claim is refused');
is(error_of('a', "SELECT pgq.claim('a1', 1)"), 'psql:<stdin>:2: ERROR:  53400', 'a: with 53400');
is(sql('b', "SELECT count(*) FROM pgq.claim('b1', 20)"), '20', 'b: claims beside it');
is(sql('b', "SELECT count(*) FROM pgq.claim('b1', 10)"), '4',
	'b: then the 4 the server\'s map (64) has left, below b\'s share');
is(message_of('b', "SELECT pgq.claim('b1', 1)"), 'too many ring jobs are running',
	'b: then a claim is refused: the map is full');
# Completions give the room back.
sql('a', "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM
  (SELECT l.id, max(l.attempt) AS attempt FROM pgq.job_log l WHERE l.kind = 'r' GROUP BY l.id LIMIT 25) r");
is(sql('b', "SELECT count(*) FROM pgq.claim('b1', 30)"), '16', 'b: up to its share (40) once a completed 25');
is(sql('a', "SELECT count(*) FROM pgq.claim('a1', 30)"), '9', 'a: and a what the map has left (64 - 55)');

# DROP EXTENSION gives a database's lanes and leases back.
sql('a', 'DROP EXTENSION pgq_cpp');
is(use_queue('b', 'b2'), 'ok', 'b: a lane of a, dropped, is free again');
is(message_of('b', "SELECT pgq.claim('b1', 1)"), 'too many ring jobs of this database are running',
	'b: its own share is used up');
sql('b', "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM
  (SELECT l.id, max(l.attempt) AS attempt FROM pgq.job_log l WHERE l.kind = 'r' GROUP BY l.id) r");
is(sql('b', "SELECT count(*) FROM pgq.claim('b1', 64)"), '40', 'b: once its jobs are done, its share again');

# CREATE EXTENSION again: the new install's queue ids are new lanes.
ring_queues('a', 'n1', 'n2');
is(use_queue('a', 'n1'), 'ok', 'a, created again: a ring queue in use');
is(message_of('a', "SELECT pgq.enqueue('n2', '{}')"), 'no room for one more queue on a ring',
	'a: b holds the other two lanes');

# DROP DATABASE gives its lanes back too.
sql('postgres', 'DROP DATABASE b');
is(use_queue('a', 'n2'), 'ok', 'a: a lane of b, dropped, is free again');

$node->stop;
done_testing();
