
# Ring queues (issue 33, ADR 0028 step 2a) across an immediate shutdown (the
# rings' lanes and lease map are lost with shared memory and rebuilt from
# committed rows) and across a clean restart:
# - pending jobs are claimed exactly once after it, with attempt 1;
# - a running job keeps its (id, attempt) and its lease: completing it with
#   that pair lands, and nobody else is handed it before its lease ends
#   (then maintenance gives it back as the next attempt);
# - completed jobs never come back;
# - what was not committed at the crash never happened: a claim in an open
#   transaction (its jobs are pending, attempt 1 on their next claim) and an
#   enqueue in an open transaction (its jobs are never handed out);
# - a completion prepared at the crash holds its job's lease as closing: a
#   completion meanwhile waits for it, and its ROLLBACK PREPARED gives the
#   job back to its attempt.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $node = pgq_node('ring_restart');
$node->append_conf('postgresql.conf', "max_prepared_transactions = 4\n");
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub lines { my ($out) = @_; return $out eq '' ? () : split /\n/, $out; }
sub numerically { return sort { $a <=> $b } @_; }

# Every job that a claim of QUEUE hands out now, as "id attempt" lines in
# id order (leased for an hour: nothing claimed here expires during the test).
sub drain
{
	my ($queue) = @_;
	my @got = lines(sql("SELECT id || ' ' || attempt FROM pgq.claim('$queue', 1000, '1 hour')"));
	return sort { (split / /, $a)[0] <=> (split / /, $b)[0] } @got;
}

# Completes each "id attempt" pair; returns the results ("t"/"f"), in order.
sub complete_each
{
	my ($attempt_of, @ids) = @_;
	return map { sql("SELECT pgq.complete($_, " . $attempt_of->($_) . ")") } @ids;
}

sql(q{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('ring', lease => '10 minutes');
SELECT pgq.create_queue('short', lease => '10 minutes');
});
is(sql("SELECT string_agg(name || ' ' || (ring_id IS NOT NULL)::text, ', ' ORDER BY name) FROM pgq.queues"),
	'ring true, short true', 'both queues are ring queues');

# 30 plain jobs, in a batch and one at a time: on the ring, none in pgq.job_rows.
my @all = lines(sql("SELECT id FROM pgq.enqueue_many('ring', array_fill('{}'::jsonb, ARRAY[20])) AS id"));
push @all, lines(sql(join(";\n", map { "SELECT pgq.enqueue('ring', jsonb_build_object('n', $_))" } 1 .. 10)));
is(scalar(@all), 30, '30 jobs enqueued');
is(sql('SELECT count(*) FROM pgq.job_rows'), '0', 'none of them is a row of pgq.job_rows');

# Ten claimed (committed): four completed, six running with an hour's lease.
my @claimed = lines(sql("SELECT id || ' ' || attempt FROM pgq.claim('ring', 10, '1 hour')"));
is(scalar(@claimed), 10, 'ten jobs claimed');
is(scalar(grep { / 1$/ } @claimed), 10, 'each as attempt 1');
@claimed = map { (split / /)[0] } @claimed;
my @done    = @claimed[0 .. 3];
my @running = @claimed[4 .. 9];
is_deeply([ complete_each(sub { 1 }, @done) ], [ ('t') x 4 ], 'four of them completed');

# A claim in a transaction still open at the crash, and an enqueue likewise.
my $claimer = $node->background_psql('postgres');
$claimer->query_safe('BEGIN');
my @rolled = lines($claimer->query_safe("SELECT id FROM pgq.claim('ring', 3, '1 hour')"));
is(scalar(@rolled), 3, 'three jobs claimed in a transaction left open');
my $producer = $node->background_psql('postgres');
$producer->query_safe('BEGIN');
my @ghosts = lines($producer->query_safe(
	"SELECT id FROM pgq.enqueue_many('ring', array_fill('{}'::jsonb, ARRAY[2])) AS id"));
is(scalar(@ghosts), 2, 'two jobs enqueued in a transaction left open');

my %taken = map { $_ => 1 } @claimed, @rolled;
my @pending = grep { !$taken{$_} } @all;
is(scalar(@pending), 17, '17 jobs never claimed');

# A job of queue "short" running with a six-second lease at the crash.
my $short = sql("SELECT pgq.enqueue('short', '{}')");
my ($short_id, $short_attempt, $short_until) = split / /,
  sql("SELECT id || ' ' || attempt || ' ' || extract(epoch FROM lease_until) "
	  . "FROM pgq.claim('short', 1, '6 seconds')");
is("$short_id $short_attempt", "$short 1", 'the short job is claimed with a six-second lease');
is(sql("SELECT count(*) FROM pgq.claim('short')"), '0', 'and not handed out again while it runs');

# The crash.
$node->stop('immediate');
for my $psql ($claimer, $producer) { eval { $psql->quit; }; }
$node->start;
ok(wait_for($node, 'postgres', 'SELECT 1', '1', $LONG), 'crash: the server is back');

# Before any claim or enqueue of the queue since the start (nothing has built
# its lane yet): complete_many finds a running job's lease, and so does an
# extension.
is(sql("SELECT pgq.complete_many(ARRAY[$running[5]]::bigint[], ARRAY[1])"), '1',
	'crash: complete_many completes a running job with its attempt, before anything else');
is(sql("SELECT pgq.extend($running[0], 1, '1 hour') IS NOT NULL"),
	't', 'crash: a running job\'s lease is held by its attempt (extend)');

# Exactly the pending jobs and the rolled-back claim's, once each, attempt 1:
# no running or completed job, no job of the uncommitted enqueue.
my @expected = map { "$_ 1" } numerically(@pending, @rolled);
my @got = drain('ring');
is_deeply(\@got, \@expected,
	'crash: the pending jobs and those of the uncommitted claim are handed out, once each, as attempt 1');
is_deeply([ drain('ring') ], [], 'crash: and nothing more');

# Running jobs keep (id, attempt) and their lease.
is_deeply([ complete_each(sub { 2 }, @running) ], [ ('f') x 6 ],
	'crash: a running job cannot be completed as another attempt');
is_deeply([ complete_each(sub { 1 }, @running[ 0 .. 4 ]) ], [ ('t') x 5 ],
	'crash: each running job is completed with its (id, attempt)');
is_deeply([ complete_each(sub { 1 }, @running, @done) ], [ ('f') x 10 ],
	'crash: completed jobs stay completed');
is_deeply([ complete_each(sub { 1 }, @pending, @rolled) ], [ ('t') x 20 ],
	'crash: the jobs handed out after the restart are completed');

# The short job: handed out again only after its lease ended, by the
# maintenance worker's expiry, as attempt 2. Each poll claims; the first row
# any poll gets is the answer. The claim's lease (an hour) says when it was
# claimed.
my ($ok, $out) = wait_for(
	$node, 'postgres',
	"SELECT id || ' ' || attempt || ' ' "
	  . "|| (lease_until - interval '1 hour' >= to_timestamp($short_until))::text "
	  . "FROM pgq.claim('short', 1, '1 hour')",
	qr/\S/, $LONG);
ok($ok, 'crash: the short job is handed out again');
is($out, "$short 2 true", 'crash: as attempt 2, not before its lease ended');
is(sql("SELECT pgq.complete($short, 1)"), 'f', 'crash: its first attempt is fenced out');
is(sql("SELECT pgq.complete($short, 2)"), 't', 'crash: its second attempt completes it');
# Maintenance has run since the restart (it expired the short job): nothing
# else came back.
is_deeply([ drain('ring') ], [], 'crash: after maintenance passes, nothing of the ring comes back');
is_deeply([ drain('short') ], [], 'crash: nor of the short queue');

# A clean restart: ten jobs, four claimed, two of those completed.
my @all2 = lines(sql("SELECT id FROM pgq.enqueue_many('ring', array_fill('{}'::jsonb, ARRAY[10])) AS id"));
my @claimed2 = lines(sql("SELECT id FROM pgq.claim('ring', 4, '1 hour')"));
is(scalar(@claimed2), 4, 'restart: four jobs claimed');
my @done2    = @claimed2[0 .. 1];
my @running2 = @claimed2[2 .. 3];
is_deeply([ complete_each(sub { 1 }, @done2) ], [ ('t') x 2 ], 'restart: two of them completed');
my %taken2 = map { $_ => 1 } @claimed2;
my @pending2 = grep { !$taken2{$_} } @all2;

$node->restart;

is_deeply([ drain('ring') ], [ map { "$_ 1" } numerically(@pending2) ],
	'restart: the pending jobs are handed out, once each, as attempt 1');
is_deeply([ drain('ring') ], [], 'restart: and nothing more');
is_deeply([ complete_each(sub { 1 }, @running2) ], [ ('t') x 2 ],
	'restart: the running jobs are completed with their (id, attempt)');
is_deeply([ complete_each(sub { 1 }, @running2, @done2) ], [ ('f') x 4 ],
	'restart: completed jobs stay completed');
is_deeply([ complete_each(sub { 1 }, @pending2) ], [ ('t') x 6 ],
	'restart: the jobs handed out after the restart are completed');
is(sql('SELECT count(*) FROM pgq.maintain()'), '1', 'restart: a maintenance pass');
is_deeply([ drain('ring') ], [], 'restart: after it, nothing comes back');

# Across turns of the ring (ADR 0028 "Reclaiming"): jobs pending in two
# segments and one running in the older; an immediate shutdown. The lane is
# rebuilt in ring order: the older segment's jobs are handed out first, in
# the order they were enqueued, then the newer one's, once each, as attempt
# 1; the running job keeps its attempt. The older segment is truncated only
# once all its jobs are done. The turns are made by passes run with the
# clock moved on (pgq.debug_clock_offset; a turn is 1 minute).
sub turn
{
	my ($offset) = @_;
	sql("SET pgq.debug_clock_offset = '$offset'; SELECT count(*) FROM pgq.maintain()");
}
# A truncation never waits for a lock: a pass that meets the maintenance
# worker's own pass reading the segment (a share lock, let go at once)
# leaves it to the next pass. Passes until the ledger reads `want` (50 at
# most); the ledger as it then is.
sub turn_until
{
	my ($offset, $want) = @_;
	for (1 .. 50)
	{
		turn($offset);
		return $want if ledger() eq $want;
	}
	return ledger();
}
sub ledger
{
	return sql(q{
SELECT r.current || ' ' || string_agg(CASE WHEN s.empty THEN 'empty' ELSE 'rows' END, ' ' ORDER BY s.segment)
  FROM pgq.queues q JOIN pgq.rings r USING (ring_id) JOIN pgq.ring_segments s USING (ring_id)
 WHERE q.name = 'turning' GROUP BY r.current});
}
sub claim_in_order
{
	return lines(sql("SELECT id || ' ' || attempt FROM pgq.claim('turning', 1000, '1 hour')"));
}
sql(q{SELECT pgq.create_queue('turning', lease => '1 hour');});
my @older = lines(sql("SELECT id FROM pgq.enqueue_many('turning', array_fill('{}'::jsonb, ARRAY[5])) AS id"));
my ($older_running) = lines(sql("SELECT id FROM pgq.claim('turning', 1, '1 hour')"));
is($older_running, $older[0], 'turns: the first job runs');
turn('2min');
is(ledger(), '1 rows rows empty empty', 'turns: the ring turned onto segment 1');
my @newer = lines(sql("SELECT id FROM pgq.enqueue_many('turning', array_fill('{}'::jsonb, ARRAY[5])) AS id"));
is(sql(qq{SELECT string_agg(DISTINCT segment::text, ',') FROM pgq.job_log WHERE id IN (@{[join(',', @newer)]})}),
	'1', 'turns: the newer jobs are in segment 1');
$node->stop('immediate');
$node->start;
# A completion first, before any claim or enqueue of the queue has built its
# lane since the start: the lease is found all the same.
is(sql("SELECT pgq.complete($older_running, 1)"), 't',
	'turns, crash: the running job keeps its attempt, completed before anything else');
is_deeply([ claim_in_order() ], [ map { "$_ 1" } @older[ 1 .. 4 ], @newer ],
	'turns, crash: the older segment first, then the newer, each job once, in enqueue order');
is_deeply([ claim_in_order() ], [], 'turns, crash: and nothing more');
is_deeply([ complete_each(sub { 1 }, @older[ 1 .. 3 ]) ], [ ('t') x 3 ], 'turns: three more done');
turn('4min');
is(ledger(), '2 rows rows rows empty', 'turns: segment 0 is kept while one of its jobs runs');
is_deeply([ complete_each(sub { 1 }, $older[4], @newer) ], [ ('t') x 6 ], 'turns: the rest done');
is(turn_until('4min', '2 empty empty rows empty'), '2 empty empty rows empty',
	'turns: then segments 0 and 1 are truncated');
turn('6min');
is(ledger(), '2 empty empty rows empty', 'turns: an idle ring stays where it is');
is(sql(q{SELECT count(*) FROM pgq.job_log l JOIN pgq.queues q ON q.ring_id = l.ring WHERE q.name = 'turning'}), '0',
	'turns: nothing of the jobs is left on the ring');

# Completions prepared (PREPARE TRANSACTION) at a crash: the rebuild finds
# their closures in progress and enters the leases as closing by them (ADR
# 0028 "Closing leases"): a completion meanwhile waits (here, until its lock
# timeout). ROLLBACK PREPARED: the lease holds again and its attempt
# completes the job; COMMIT PREPARED: the job is done. Before, the rebuild
# took a prepared closure for a committed one: the rolled-back job was left
# without a lease until the next start.
sql(q{SELECT pgq.create_queue('prepared', lease => '1 hour');});
my @prepared = lines(sql("SELECT id FROM pgq.enqueue_many('prepared', array_fill('{}'::jsonb, ARRAY[2])) AS id"));
is(scalar(lines(sql("SELECT id FROM pgq.claim('prepared', 2, '1 hour')"))), 2, 'prepared: two jobs claimed');
sql("BEGIN; SELECT pgq.complete($prepared[0], 1); PREPARE TRANSACTION 'undone'");
sql("BEGIN; SELECT pgq.complete($prepared[1], 1); PREPARE TRANSACTION 'done'");
$node->stop('immediate');
$node->start;
my ($status, $stdout, $stderr) =
  $node->psql('postgres', "SET lock_timeout = '300ms'; SELECT pgq.complete($prepared[0], 1)");
like($stderr, qr/lock timeout/, 'prepared, crash: a completion waits for the prepared one');
sql("ROLLBACK PREPARED 'undone'");
sql("COMMIT PREPARED 'done'");
is(sql("SELECT pgq.complete($prepared[0], 1)"), 't',
	'prepared, crash: after ROLLBACK PREPARED the attempt completes its job');
is(sql("SELECT pgq.complete($prepared[1], 1)"), 'f', 'prepared, crash: after COMMIT PREPARED the job is done');
is(sql("SELECT count(*) FROM pgq.claim('prepared', 10)"), '0', 'prepared, crash: neither is handed out again');

# A grouped job on the ring running at a crash (ADR 0028 "Groups on the
# rings"): the rebuild enters its lease as grouped, read from its entry, so
# that its completion after the start drops its hold and lets its group's
# next job go. Without it the group would wait for ever.
sql(q{SELECT pgq.create_queue('grouped', lease => '1 hour');});
my $head = sql("SELECT pgq.enqueue('grouped', '{}', group_key => 'g')");
my $next = sql("SELECT pgq.enqueue('grouped', '{}', group_key => 'g')");
is(sql("SELECT count(*) FROM pgq.group_holds WHERE job_id = $head"), '1',
	'grouped: the head is on the ring, held');
is(sql("SELECT id || ' ' || attempt FROM pgq.claim('grouped', 10, '1 hour')"), "$head 1",
	'grouped: only the head is handed out');
$node->stop('immediate');
$node->start;
is(sql("SELECT count(*) FROM pgq.claim('grouped', 10)"), '0',
	'grouped, crash: the next job still waits behind the running head');
is(sql("SELECT pgq.complete($head, 1)"), 't', 'grouped, crash: the head completes with its attempt');
is(sql("SELECT count(*) FROM pgq.group_holds"), '0', 'grouped, crash: its hold went with it');
is(sql("SELECT id FROM pgq.claim('grouped', 10)"), $next, 'grouped, crash: and the next job is handed out');

# A job with a dedupe key on the ring running at a crash (ADR 0028 "Dedupe
# keys on the rings"), with a follower behind it: the rebuild enters its
# lease as keyed, read from its entry, so that its completion after the
# start lets the key go to the follower. Without it the key would stay
# taken by a finished job and the follower would wait for the maintenance.
sql(q{SELECT pgq.create_queue('keyed', lease => '1 hour');});
my $holder = sql("SELECT pgq.enqueue('keyed', '{}', dedupe_key => 'k')");
is(sql("SELECT count(*) FROM pgq.job_rows WHERE id = $holder"), '0', 'keyed: the holder is on the ring');
is(sql("SELECT id || ' ' || attempt FROM pgq.claim('keyed', 10, '1 hour')"), "$holder 1",
	'keyed: the holder is handed out');
my $follower = sql("SELECT pgq.enqueue('keyed', '{\"v\": 2}', dedupe_key => 'k', on_duplicate => 'replace')");
isnt($follower, $holder, 'keyed: a replace behind the running holder follows it');
$node->stop('immediate');
$node->start;
is(sql("SELECT pgq.enqueue('keyed', '{}', dedupe_key => 'k')"), $holder,
	'keyed, crash: the running holder still holds its key');
is(sql("SELECT pgq.complete($holder, 1)"), 't', 'keyed, crash: the holder completes with its attempt');
is(sql("SELECT job_id FROM pgq.dedupe_holds WHERE dedupe_key = 'k' AND held_until IS NULL"), $follower,
	'keyed, crash: its completion gave the key to the follower');
is(sql("SELECT id FROM pgq.claim('keyed', 10)"), $follower, 'keyed, crash: which is handed out');

# Rows of pgq.job_rows claimed onto the ring (ADR 0028 "Rows claimed onto
# the rings") at a crash: a committed claim's entry 'a' runs after the
# start (the rebuild enters its lease from the entry itself and never
# takes it for pending: the cursor hands out 'e' only), its completion
# lands once; an extension's receipt names it and gives the lease; a claim
# still open at the crash never happened (its row is pending, claimed again
# as the same attempt; a grouped retry, which stays a row, lets its group
# go at its completion). The retried jobs sit behind a pending entry on the
# ring, which the rebuild neither hands out twice nor skips.
sql(q{SELECT pgq.create_queue('retried', lease => '1 hour');});
my @tries = lines(sql("SELECT id FROM pgq.enqueue_many('retried', array_fill('{}'::jsonb, ARRAY[2])) AS id"));
my $grouped_try = sql("SELECT pgq.enqueue('retried', '{}', group_key => 'rg')");
my $behind = sql("SELECT pgq.enqueue('retried', '{}', group_key => 'rg')");
is(sql("SELECT count(*) FROM pgq.claim('retried', 3, '1 hour')"), '3', 'claimed rows: three claimed');
for my $id (@tries, $grouped_try) {
	is(sql("SELECT pgq.fail($id, 1, 'try again', retry_in => '0 seconds')"), 'retry',
		"claimed rows: $id failed once");
}
my $pending_entry = sql("SELECT pgq.enqueue('retried', '{}')");
is(sql("SELECT string_agg(id || ' ' || attempt, ',' ORDER BY id) FROM pgq.claim('retried', 2, '1 hour')"),
	"$tries[0] 2,$tries[1] 2", 'claimed rows: two retries claimed again, as attempt 2');
is(sql("SELECT count(*) FROM pgq.job_rows WHERE id IN ($tries[0], $tries[1])"), '0',
	'claimed rows: they left pgq.job_rows');
is(sql("SELECT string_agg(kind::text, '' ORDER BY kind) FROM pgq.job_log l JOIN pgq.queues q ON q.ring_id = l.ring "
	  . "WHERE q.name = 'retried' AND l.id = $tries[0]"), 'acer',
	'claimed rows: an entry, its receipt and failure, and its entry claimed as it was written');
ok(defined sql("SELECT pgq.extend($tries[1], 2, '2 hours')"), 'claimed rows: one lease extended');
my $open_claim = $node->background_psql('postgres');
$open_claim->query_safe('BEGIN');
is($open_claim->query_safe("SELECT id || ' ' || attempt FROM pgq.claim('retried', 1, '1 hour')"),
	"$grouped_try 2", 'claimed rows: the grouped retry claimed in a transaction left open');
$node->stop('immediate');
eval { $open_claim->quit; };
$node->start;
is(sql("SELECT string_agg(id || ' ' || attempt, ',' ORDER BY id) FROM pgq.claim('retried', 10, '1 hour')"),
	"$grouped_try 2,$pending_entry 1",
	'claimed rows, crash: the open claim never happened and the pending entry is handed out; the running ones are not');
is(sql(q{SELECT string_agg(state::text || ' ' || attempt, ',' ORDER BY id) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = 'retried'}),
	'r 2,r 2,r 2,w 0,r 1', 'claimed rows, crash: every job where it was');
ok(sql("SELECT lease_until > now() + interval '90 minutes' FROM pgq.jobs WHERE id = $tries[1]") eq 't',
	'claimed rows, crash: the extension\'s receipt gave the lease');
is(sql("SELECT pgq.complete($tries[0], 1)"), 'f', 'claimed rows, crash: the attempt before is fenced');
is(sql("SELECT pgq.complete_many(ARRAY[$tries[0], $tries[1]], ARRAY[2, 2])"), '2',
	'claimed rows, crash: both complete with their attempt');
is(sql("SELECT pgq.complete($tries[0], 2)"), 'f', 'claimed rows, crash: once');
is(sql("SELECT pgq.complete($grouped_try, 2)"), 't', 'claimed rows, crash: the grouped one too');
is(sql("SELECT id FROM pgq.claim('retried', 10)"), $behind,
	'claimed rows, crash: and its group lets the next job go');

# A retry's row claimed onto the ring (an entry 'a') by a prepared
# transaction at a crash: the rebuild enters its lease with the prepared
# claim as claimer, marked prepared, and it fills the queue's one running
# place; after ROLLBACK PREPARED (which no callback of ours sees) the
# maintenance's pass gives the claim up, and the row, pending again, is
# handed out (before 3.1 the lease stayed and the queue was stuck).
sql(q{SELECT pgq.create_queue('prepclaim', lease => '1 hour', max_running => 1);});
my $prepared_job = sql("SELECT pgq.enqueue('prepclaim', '{}')");
is(sql("SELECT id || ' ' || attempt FROM pgq.claim('prepclaim')"), "$prepared_job 1",
	'prepared claim: claimed');
is(sql("SELECT pgq.fail($prepared_job, 1, 'again', retry_in => '0 seconds')"), 'retry',
	'prepared claim: failed once, a row again');
sql("BEGIN; SELECT count(*) FROM pgq.claim('prepclaim'); PREPARE TRANSACTION 'claim_a'");
$node->stop('immediate');
$node->start;
is(sql("SELECT count(*) FROM pgq.claim('prepclaim')"), '0',
	'prepared claim, crash: the prepared claim holds the job');
sql("ROLLBACK PREPARED 'claim_a'");
sql("SELECT count(*) FROM pgq.maintain()");
is(sql("SELECT id || ' ' || attempt FROM pgq.claim('prepclaim')"), "$prepared_job 2",
	'prepared claim, crash, rolled back: given up by the pass, the job is handed out again');
is(sql("SELECT pgq.complete($prepared_job, 2)"), 't', 'prepared claim: and completes');

# Issue 35 (ADR 0030): a job's trace context lives in its entry's row, so
# the lanes rebuilt after a crash hand it out with it: a pending entry
# ('e'), and a retry's row claimed onto the ring (an 'a', running).
sql(q{SELECT pgq.create_queue('traced', lease => '1 hour');});
my $tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
my $retried = sql("SELECT pgq.enqueue('traced', '{}', traceparent => '$tp')");
is(sql("SELECT id || ' ' || traceparent FROM pgq.claim_traced('traced')"), "$retried $tp",
	'traced: claimed with its context');
sql("SELECT pgq.fail($retried, 1, 'again', retry_in => '0 seconds')");
my $pending = sql("SELECT pgq.enqueue('traced', '{}', traceparent => '$tp', tracestate => 'k=v')");
is(sql("SELECT id || ' ' || attempt || ' ' || traceparent FROM pgq.claim_traced('traced')"),
	"$retried 2 $tp", 'traced: its retry claimed onto the ring with its context');
is(sql("SELECT count(*) FROM pgq.job_rows WHERE id = $retried"), '0', 'traced: not a row any more');
$node->stop('immediate');
$node->start;
is(sql("SELECT id || ' ' || traceparent || ' ' || tracestate FROM pgq.claim_traced('traced')"),
	"$pending $tp k=v", 'traced, crash: the pending entry is handed out with its context');
is(sql("SELECT state || ' ' || trace_id FROM pgq.job($retried)"),
	'running 4bf92f3577b34da6a3ce929d0e0e4736', 'traced, crash: the running one keeps it');
is(sql("SELECT pgq.complete($retried, 2)"), 't', 'traced, crash: and completes');

$node->stop;
done_testing();
