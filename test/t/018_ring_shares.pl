
# The queues' rings share the server's shared memory (ADR 0028 "Shares of
# the server"): lanes (one per ring queue in use, pgq.max_ring_queues) and
# the lease map (one entry per running ring job, pgq.max_running_ring_jobs),
# each with a share per database (pgq.max_ring_queues_per_database,
# pgq.max_running_ring_jobs_per_database), so that one database cannot take
# what another needs (lanes and leases short are never a refusal: a queue
# without a lane works from pgq.job_rows, a claim past the leases runs its
# jobs as rows of it). Lanes come back when their database drops pgq_cpp or
# is dropped. Run on a cluster with 3 lanes (2 per database) and 64 leases (40
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

# Ring queues in a database, used once
# (a lane is taken at a queue's first use).
sub ring_queues
{
	my ($db, @names) = @_;
	sql($db, 'CREATE EXTENSION IF NOT EXISTS pgq_cpp');
	sql($db, join(";\n",
		map { "SELECT pgq.create_queue('$_', lease => '1 hour')" } @names));
}
# An enqueue that needs the queue's lane: 'ok' when its job went on the
# ring; an error 53400 (the enqueue rolled back) when it went to
# pgq.job_rows, as an enqueue into a queue that can have no lane does.
sub use_queue
{
	my ($db, $queue) = @_;
	return error_of($db,
		"DO \$\$ DECLARE j bigint := pgq.enqueue('$queue', '{}'); "
		  . "BEGIN IF EXISTS (SELECT 1 FROM pgq.job_rows WHERE id = j) "
		  . "THEN RAISE EXCEPTION 'no lane: the job went to pgq.job_rows' USING ERRCODE = '53400'; "
		  . "END IF; END \$\$");
}

sql('postgres', 'CREATE DATABASE a');
sql('postgres', 'CREATE DATABASE b');
ring_queues('a', 'a1', 'a2', 'a3');
ring_queues('b', 'b1', 'b2');

# Lanes: a database's share, then the server's. A lane is held while its
# queue has running jobs or a transaction in progress uses it; an idle one
# (the least recently used) is taken back by the next queue that needs a
# lane, and built again from the ring's rows at its queue's next use.
sub claim_one
{
	my ($db, $queue) = @_;
	return sql($db, "SELECT id || ' ' || attempt FROM pgq.claim('$queue', 1)");
}
sub complete_one
{
	my ($db, $job) = @_;
	my ($id, $attempt) = split / /, $job;
	return sql($db, "SELECT pgq.complete($id, $attempt)");
}
is(use_queue('a', 'a1'), 'ok', 'a: a first ring queue in use');
is(use_queue('a', 'a2'), 'ok', 'a: a second one');
is(use_queue('a', 'a3'), 'ok', 'a: a third, past its share, takes back an idle lane');
is(use_queue('a', 'a1'), 'ok', 'a: and the first, whose lane went, takes one back in turn');
my $a1_job = claim_one('a', 'a1');
my $a2_job = claim_one('a', 'a2');
isnt($a2_job, '', 'a: a job of a1 and one of a2 running');
is(use_queue('a', 'a3'), 'psql:<stdin>:2: ERROR:  53400',
	'a: a third is refused while the two lanes have running jobs (53400)');
is(sql('a', "SELECT count(*) FROM pgq.claim('a3', 1)"), '0',
	'a: a claim of a3 takes nothing (not an error): its ring\'s job waits for a lane');
is(use_queue('a', 'a1'), 'ok', 'a: its queues in use go on');

# A transaction in progress that enqueued into a queue does not hold its
# lane: the lane built again passes its entries until it commits, and hands
# each out once.
is(complete_one('a', $a2_job), 't', 'a: a2 has no running job left');
my $open = $node->background_psql('a');
$open->query_safe('BEGIN');
$open->query_safe("SELECT pgq.enqueue_many('a2', array_fill('{}'::jsonb, ARRAY[3]))");
is(use_queue('a', 'a3'), 'ok', 'a: a2\'s lane is taken back while a transaction that enqueued is open');
is(sql('a', "SELECT count(*) FROM pgq.claim('a2', 10, '1 hour')"), '0',
	'a: a2 takes a lane again (a3\'s), and its uncommitted jobs are not handed out');
$open->query_safe('COMMIT');
is(sql('a', "SELECT count(*) FROM pgq.claim('a2', 10, '1 hour')"), '3',
	'a: once they commit, all three are handed out');
is(sql('a', "SELECT count(*) FROM pgq.claim('a2', 10, '1 hour')"), '0', 'a: each once');
# A claim in progress holds its lane; rolled back, it gives the job back.
sql('a', "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.running_jobs WHERE queue = 'a2'");
$open->query_safe('BEGIN');
is($open->query_safe("SELECT count(*) FROM pgq.claim('a3', 1)"), '1',
	'a: a transaction left open claims a job of a3 (taking back a2\'s lane)');
is(use_queue('a', 'a2'), 'psql:<stdin>:2: ERROR:  53400',
	'a: a2 finds no lane: a1 runs a job, a3\'s claim is open');
$open->query_safe('ROLLBACK');
$open->quit;
is(sql('a', "SELECT count(*) FROM pgq.claim('a3', 10)"), '2',
	'a: rolled back, a3\'s job is handed out again with the other');
sql('a', "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.running_jobs WHERE queue = 'a3'");

# A lane taken back keeps the note that its jobs have children waiting.
sql('a', "SELECT pgq.create_queue('plain')");
my $parent = sql('a', "SELECT pgq.enqueue('a3', '{}')");
sql('a', "SELECT pgq.enqueue('plain', '{}', after => ARRAY[$parent]::bigint[])");
is(use_queue('a', 'a2'), 'ok', 'a: a2 has a lane (a1 runs a job)');
my $a2_again = claim_one('a', 'a2');
is(use_queue('a', 'a3'), 'psql:<stdin>:2: ERROR:  53400', 'a: a3\'s lane is taken back (a2 runs a job)');
is(complete_one('a', $a1_job), 't', 'a: a1 has no running job left');
my $p_job = claim_one('a', 'a3');
is((split / /, $p_job)[0], $parent, 'a: the parent is claimed on a3\'s lane built again');
is(complete_one('a', $p_job), 't', 'a: and completed');
is(sql('a', "SELECT count(*) FROM pgq.claim('plain', 10)"), '1',
	'a: its child, enqueued before the lane went, is released');
sql('a', "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.running_jobs WHERE queue = 'plain'");
is(complete_one('a', $a2_again), 't', 'a: nothing of a runs');
is(sql('a', "SELECT count(*) FROM pgq.claim('a1', 10)"), '2', 'a: a1\'s jobs are all there');
sql('a', "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.running_jobs WHERE queue = 'a1'");

# The server's lanes: a database takes back another's idle lane, not one
# with running jobs.
my $a1_busy = claim_one('a', 'a1') || do { sql('a', "SELECT pgq.enqueue('a1', '{}')"); claim_one('a', 'a1') };
my $a3_busy = do { sql('a', "SELECT pgq.enqueue('a3', '{}')"); claim_one('a', 'a3') };
is(use_queue('b', 'b1'), 'ok', 'b: the third lane of the server');
my $b1_busy = claim_one('b', 'b1');
is(use_queue('b', 'b2'), 'psql:<stdin>:2: ERROR:  53400',
	'b: a fourth is past the server\'s lanes while each has a running job');
is(complete_one('a', $a3_busy), 't', 'a: a3 has no running job left');
is(use_queue('b', 'b2'), 'ok', 'b: then b takes back a\'s idle lane');
is(complete_one('a', $a1_busy), 't', 'a: nothing of a runs');
is(complete_one('b', $b1_busy), 't', 'b: nor of b');

# Leases: a claim takes a lease for what is left of its database's share
# (and of the server's map); past it, its jobs are not refused but spill:
# they run as rows of pgq.job_rows (a closure 'm' on the ring, the claim's
# lease on the row), so that no team's running jobs make another team's
# claims fail (before, a claim past the share was refused with 53400).
sub spilled
{
	my ($db, $queue) = @_;
	return sql($db,
		"SELECT count(*) FROM pgq.job_rows j JOIN pgq.queues q USING (queue_id) "
		  . "WHERE q.name = '$queue' AND j.state = 'r'");
}
# Completes every running job of the database: how many, then how many a
# second complete_many of the same (id, attempt) pairs completed.
sub complete_all
{
	my ($db) = @_;
	return sql($db,
		"CREATE TEMP TABLE held AS SELECT id, attempt FROM pgq.running_jobs; "
		  . "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) || ' ' || "
		  . "(SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM held) FROM held");
}
sql('a', "SELECT pgq.enqueue_many('a1', array_fill('{}'::jsonb, ARRAY[100]))");
sql('b', "SELECT pgq.enqueue_many('b1', array_fill('{}'::jsonb, ARRAY[100]))");
is(sql('a', "SELECT count(*) FROM pgq.claim('a1', 30)"), '30', 'a: 30 jobs claimed');
is(spilled('a', 'a1'), '0', 'a: each with a lease');
my $log_offset = log_size($node);
is(sql('a', "SELECT count(*) FROM pgq.claim('a1', 30)"), '30', 'a: 30 more claimed');
is(spilled('a', 'a1'), '20', 'a: the 10 left of its 40 with leases, 20 spilled');
is(error_of('a', "SELECT pgq.claim('a1', 1)"), 'ok', 'a: a claim past its share is not refused');
is(spilled('a', 'a1'), '21', 'a: its job spilled');
is(sql('b', "SELECT count(*) FROM pgq.claim('b1', 20)"), '20', 'b: claims beside it');
is(spilled('b', 'b1'), '0', 'b: with leases, from its own share');
is(sql('b', "SELECT count(*) FROM pgq.claim('b1', 10)"), '10', 'b: 10 more claimed');
is(spilled('b', 'b1'), '6', 'b: the 4 the server\'s map (64) has left with leases, 6 spilled');
# The operator is told, once a minute at most (the claims are not refused,
# so nothing else would tell): three claims spilled, one line.
is(count_matches(log_since($node, $log_offset),
		qr/LOG:  pgq: a claim of queue \d+ ran 20 of its jobs as rows of pgq\.job_rows/), 1,
	'the first spill is logged, with how many jobs');
is(count_matches(log_since($node, $log_offset), qr/ran \d+ of its jobs as rows/), 1,
	'and no other within the minute');
like(log_since($node, $log_offset),
	qr/DETAIL:  Spills of any queue in the next minute are not logged\.\n.*HINT:  Raise pgq\.max_running_ring_jobs_per_database/,
	'saying that others in the minute are not, with the setting to raise');
is(sql('a', "SELECT count(*) FROM pgq.running_jobs"), '61', 'a: every running job shown, leased or spilled');
# Completions: every job once, with or without its lease.
is(complete_all('a'), '61 0', 'a: all 61 completed, none twice');
is(spilled('a', 'a1'), '0', 'a: no spilled job left');
is(sql('a', "SELECT count(*) FROM pgq.jobs WHERE state = 'r'"), '0', 'a: nothing running');
is(sql('b', "SELECT count(*) FROM pgq.claim('b1', 30)"), '30', 'b: 30 more claimed once a completed');
is(spilled('b', 'b1'), '20', 'b: up to its share (40) with leases, 14 more spilled');

# DROP EXTENSION gives a database's lanes and leases back.
sql('a', 'DROP EXTENSION pgq_cpp');
is(use_queue('b', 'b2'), 'ok', 'b: a lane of a, dropped, is free again');
is(complete_all('b'), '60 0', 'b: its 60 running jobs completed');
isnt(claim_one('b', 'b2'), '', 'b: b2 runs one');
is(sql('b', "SELECT count(*) FROM pgq.claim('b1', 64)"), '40', 'b: and b1 its last 40');
is(spilled('b', 'b1'), '1', 'b: 39 with leases, what is left of its share, 1 spilled');

# CREATE EXTENSION again: the new install's queue ids are new lanes.
ring_queues('a', 'n1', 'n2');
is(use_queue('a', 'n1'), 'ok', 'a, created again: a ring queue in use');
isnt(claim_one('a', 'n1'), '', 'a: with a running job');
is(use_queue('a', 'n2'), 'psql:<stdin>:2: ERROR:  53400',
	'a: b\'s running jobs hold the other two lanes');

# DROP DATABASE gives its lanes back too.
sql('postgres', 'DROP DATABASE b');
is(use_queue('a', 'n2'), 'ok', 'a: a lane of b, dropped, is free again');

# Enqueues that found no lane (their jobs went to pgq.job_rows) were told to
# the operator once a minute at most, with the settings to raise: this run
# took well under a minute and had four of them.
my $log = slurp_file($node->logfile);
is(count_matches($log, qr/LOG:  pgq: queue \d+ found no lane free/), 1,
	'an enqueue without a lane is logged once in the minute');
like($log,
	qr/found no lane free.*\n.*DETAIL:  Queues finding no lane in the next minute are not logged\.\n.*HINT:  Raise pgq\.max_ring_queues_per_database/,
	'saying that others in the minute are not, with the setting to raise');

$node->stop;
done_testing();
