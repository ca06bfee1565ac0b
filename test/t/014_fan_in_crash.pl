
# A crash in the middle of a fan-in loses nothing (issue 18, enqueue's
# after): 300 parents, one child after all of them, a grandchild after the
# child. Three sessions complete the parents, each in a loop of its own
# transactions (claim, commit, complete, commit), while five parents are
# held by a committed claim with a long lease; at about the middle a
# completing backend is killed with -9 and the postmaster goes through a
# crash restart. Then the held leases are expired through pgq.maintain()
# under a shifted clock (pgq.debug_clock_offset), the rest is completed one
# transaction at a time, and an immediate shutdown follows the last parent.
#
# At every check point (while the sessions run, after each restart, during
# the finish) the child's open_parents, its rows in pgq.job_dependencies and
# the parents still in pgq.jobs are the same number, and the child waits
# (state 'b') while it is not 0; every completion a session was told about
# (a NOTICE after the COMMIT) is gone after the crash. The child becomes
# ready when the last parent completes, not before, and is claimed exactly
# once; then the grandchild. Nothing is dead-lettered, no dependency row is
# left, and pgq.jobs counts the same through its heap and its primary key.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use PgqTap;

my $PARENTS  = 300;
my $HELD     = 5;     # parents claimed with a long lease before the crash
my $SESSIONS = 3;     # completing sessions

my $node = pgq_node('fan_in_crash');
# Cluster.pm turns crash restarts off; the postmaster's own recovery is what
# is under test here.
$node->append_conf('postgresql.conf', 'restart_after_crash = on');
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('parents');
SELECT pgq.create_queue('children');
});

my @parents = split /\n/,
  $node->safe_psql('postgres',
	"SELECT pgq.enqueue_many('parents', array_fill('{}'::jsonb, ARRAY[$PARENTS]))");
is(scalar @parents, $PARENTS, "$PARENTS parents enqueued");
my $parent_array = "'{" . join(',', @parents) . "}'::bigint[]";
my $child = $node->safe_psql('postgres',
	"SELECT pgq.enqueue('children', '{\"child\": true}', after => $parent_array)");
my $grandchild = $node->safe_psql('postgres',
	"SELECT pgq.enqueue('children', '{\"grandchild\": true}', after => ARRAY[$child]::bigint[])"
);
like($child,      qr/^\d+$/, 'the child is enqueued after every parent');
like($grandchild, qr/^\d+$/, 'the grandchild after the child');

# The fan-in as one snapshot sees it: the child's state, open_parents, its
# dependency rows, the parents still live, dead jobs, the grandchild's
# state, open_parents and dependency rows.
my $fan_in_query = qq{
SELECT coalesce((SELECT state::text FROM pgq.jobs WHERE id = $child), 'gone'),
       coalesce((SELECT open_parents FROM pgq.jobs WHERE id = $child), 0),
       (SELECT count(*) FROM pgq.job_dependencies WHERE child_id = $child),
       (SELECT count(*) FROM pgq.jobs WHERE id = ANY ($parent_array)),
       (SELECT count(*) FROM pgq.dead_jobs),
       coalesce((SELECT state::text || ' ' || coalesce(open_parents, 0) FROM pgq.jobs
                  WHERE id = $grandchild), 'gone'),
       (SELECT count(*) FROM pgq.job_dependencies WHERE child_id = $grandchild)};

# fan_in(NAME): asserts the invariant at a check point; returns the number
# of parents still live.
sub fan_in
{
	my ($name) = @_;
	my ($state, $open, $rows, $live, $dead, $grand, $grand_rows) = split /\|/,
	  $node->safe_psql('postgres', $fan_in_query);
	is($open, $live, "$name: the child's open_parents ($open) = parents not yet completed ($live)");
	is($rows, $live, "$name: the child's dependency rows ($rows) = parents not yet completed");
	is($state, $live > 0 ? 'b' : 'p',
		"$name: the child " . ($live > 0 ? 'waits' : 'is ready'));
	is($grand,      'b 1', "$name: the grandchild waits for the child");
	is($grand_rows, 1,     "$name: the grandchild has its one dependency row");
	is($dead,       0,     "$name: nothing is dead-lettered");
	return $live;
}

# pgq.jobs counted through its heap and through its primary key, and the
# dependency rows through theirs: the same after each recovery.
sub counts_agree
{
	my ($name, $expected) = @_;
	my $out = $node->safe_psql(
		'postgres', q{
SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = off;
SELECT (SELECT count(*) FROM pgq.jobs) || ' ' || (SELECT count(*) FROM pgq.job_dependencies);
RESET enable_indexscan; RESET enable_indexonlyscan; RESET enable_bitmapscan;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT (SELECT count(*) FROM pgq.jobs WHERE id > 0) || ' '
    || (SELECT count(*) FROM pgq.job_dependencies WHERE parent_id > 0);
EXPLAIN (COSTS OFF) SELECT count(*) FROM pgq.jobs WHERE id > 0;
});
	my ($heap, $index, @plan) = split /\n/, $out;
	is($heap, $index, "$name: pgq.jobs and pgq.job_dependencies count the same by heap and by index ($heap)");
	like(join(' ', @plan), qr/Index/, "$name: (the second count did use an index)");
	is((split / /, $heap)[0], $expected, "$name: pgq.jobs holds $expected jobs");
}

is(fan_in('enqueued'), $PARENTS, 'enqueued: every parent is live');
is( $node->safe_psql('postgres',
		"SELECT ready || ' ' || awaiting_parents FROM pgq.queue_stats WHERE queue = 'children'"),
	'0 2',
	'enqueued: queue_stats shows the child and the grandchild awaiting parents');

# Five parents held by a committed claim that the crash cuts off.
my @held = split /\n/,
  $node->safe_psql('postgres', "SELECT id FROM pgq.claim('parents', $HELD, lease => '1 hour')");
is(scalar @held, $HELD, "$HELD parents are claimed with a one-hour lease and held");

# The completing sessions: each runs one DO block that loops claim, COMMIT,
# complete, COMMIT, NOTICE, until no parent is pending. A NOTICE reaches
# psql's stderr as it is raised, after its completion committed.
my $loop = q{DO $$
DECLARE j record;
BEGIN
  LOOP
    SELECT id, attempt INTO j FROM pgq.claim('parents', 1, lease => '1 hour');
    EXIT WHEN NOT FOUND;
    COMMIT;
    PERFORM pg_sleep(0.01);
    IF NOT pgq.complete(j.id, j.attempt) THEN
      RAISE EXCEPTION 'the completion of parent % was refused', j.id;
    END IF;
    COMMIT;
    RAISE NOTICE 'completed parent %', j.id;
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$;
};
my (@sessions, @pids);
for my $i (1 .. $SESSIONS)
{
	my $psql = $node->background_psql('postgres', on_error_stop => 0);
	push @pids, $psql->query_safe('SELECT pg_backend_pid()');
	$psql->query_until(qr/looping/, "\\echo looping\n$loop");
	push @sessions, $psql;
}

# Watch the fan-in while they run; at about the middle, crash.
my $live = $PARENTS;
my $mid_checks = 0;
my $deadline = time + $LONG;
while ($live > $PARENTS / 2 && time < $deadline)
{
	$live = $node->safe_psql('postgres',
		"SELECT count(*) FROM pgq.jobs WHERE id = ANY ($parent_array)");
	# Two check points while the sessions run (a snapshot sees each
	# completion whole: the parent gone, its row gone, the count down).
	if ($mid_checks < 2 && $live < $PARENTS * (0.8 - 0.15 * $mid_checks))
	{
		fan_in('while the sessions complete parents (' . ++$mid_checks . ')');
	}
	usleep(20_000);
}
cmp_ok($live, '<=', $PARENTS / 2, 'about half the parents are completed before the crash');

ok( crash_restart(
		$node,
		'kill -9 of a completing backend in the middle of the fan-in',
		sub { kill 'KILL', $pids[0] or die "kill $pids[0]: $!"; }),
	'the server is back after the crash');

# The sessions lost their connections and their psql ended; what they were
# told is in their stderr, which BackgroundPsql's IPC::Run harness collects
# when finished (quit would first write \q to a psql that is gone).
my %acknowledged;
for my $psql (@sessions)
{
	eval { $psql->{run}->finish; };
	$acknowledged{$1} = 1 while $psql->{stderr} =~ /completed parent (\d+)/g;
}
note('completions acknowledged before the crash: ' . scalar(keys %acknowledged));
cmp_ok(scalar(keys %acknowledged), '>', 0, 'the sessions had completed parents');
is( $node->safe_psql('postgres',
		'SELECT count(*) FROM pgq.jobs WHERE id = ANY (\'{'
		  . join(',', sort keys %acknowledged)
		  . '}\'::bigint[])'),
	'0',
	'after the crash: no acknowledged completion is undone');

$live = fan_in('after the crash restart');
cmp_ok($live, '>', 0,        'after the crash: parents are left');
cmp_ok($live, '<', $PARENTS, 'after the crash: parents were completed');
cmp_ok($live, '<=', $PARENTS - scalar(keys %acknowledged),
	'after the crash: at most the parents not acknowledged are live');
counts_agree('after the crash', $live + 2);
my $running = $node->safe_psql('postgres',
	"SELECT count(*) FROM pgq.jobs WHERE id = ANY ($parent_array) AND state = 'r'");
note("parents running after the crash: $running ($HELD held, the rest cut between claim and complete)");
cmp_ok($running, '>=', $HELD, "after the crash: the $HELD held claims (at least) still run");
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pgq.jobs WHERE id = ANY ('{" . join(',', @held) . "}'::bigint[]) "
		  . "AND state = 'r' AND attempt = 1"),
	$HELD,
	'after the crash: the held parents are still claimed, attempt 1');

# Their leases end two hours from now on pgq's clock: maintain() puts them
# back (run_at unchanged: claimable at once on the real clock).
is( $node->safe_psql(
		'postgres', q{
SET pgq.debug_clock_offset = '2h';
SELECT expired_requeued FROM pgq.maintain();
}),
	$running,
	'maintain() under a clock two hours ahead requeues every cut lease');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pgq.jobs WHERE id = ANY ($parent_array) AND state <> 'p'"),
	'0',
	'every live parent is pending again');
fan_in('after the leases expired');

# The rest, one transaction each, but the last; check points on the way.
my $session = $node->background_psql('postgres');
my $refused = 0;
while ($live > 1)
{
	my $done = $session->query_safe(
		"SELECT pgq.complete(id, attempt) FROM pgq.claim('parents', 1, lease => '1 minute')");
	$refused++ if $done ne 't';
	$live--;
	fan_in("$live parents left") if $live % 50 == 0 || $live == 1;
}
is($refused, 0, 'every completion after the restart was accepted');
is($node->safe_psql('postgres', "SELECT count(*) FROM pgq.claim('children', 10)"),
	'0', 'with one parent left, no child is claimable');

my $last = $node->safe_psql('postgres',
	"SELECT id FROM pgq.jobs WHERE id = ANY ($parent_array)");
is( $session->query_safe(
		"SELECT pgq.complete(id, attempt) FROM pgq.claim('parents', 1, lease => '1 minute')"),
	't',
	"the last parent ($last) is completed");
$session->quit;
is(fan_in('the last parent completed'), 0, 'no parent is left');
is( $node->safe_psql('postgres', "SELECT state || ' ' || coalesce(open_parents, 0) FROM pgq.job($child)"),
	'ready 0',
	'pgq.job shows the child ready');

# The child's readiness is durable: an immediate shutdown and a start.
$node->stop('immediate');
$node->start;
fan_in('after an immediate shutdown');
counts_agree('after the immediate shutdown', 2);

is($node->safe_psql('postgres', "SELECT id || ' ' || attempt FROM pgq.claim('children', 10)"),
	"$child 1", 'the child is claimed, once, as attempt 1');
is($node->safe_psql('postgres', "SELECT count(*) FROM pgq.claim('children', 10)"),
	'0', 'nothing else is claimable (the grandchild waits)');
is($node->safe_psql('postgres', "SELECT pgq.complete($child, 1)"), 't', 'the child is completed');
is( $node->safe_psql('postgres',
		"SELECT state::text || ' ' || coalesce(open_parents, 0) FROM pgq.jobs WHERE id = $grandchild"),
	'p 0',
	'the grandchild is ready');
is( $node->safe_psql('postgres',
		"SELECT string_agg(id || ' ' || attempt, ',') FROM pgq.claim('children', 10)"),
	"$grandchild 1",
	'the grandchild is claimed, once');
is($node->safe_psql('postgres', "SELECT pgq.complete($grandchild, 1)"),
	't', 'the grandchild is completed');

is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT count(*) FROM pgq.jobs) || ' ' || (SELECT count(*) FROM pgq.dead_jobs) || ' '
    || (SELECT count(*) FROM pgq.job_dependencies) || ' '
    || (SELECT count(*) FROM pgq.dependency_failures)}),
	'0 0 0 0',
	'at the end: no job live, none dead, no dependency row, no failure pending');
counts_agree('at the end', 0);
is( $node->safe_psql('postgres',
		"SELECT sum(awaiting_parents) || ' ' || sum(dead) FROM pgq.queue_stats"),
	'0 0',
	'at the end: queue_stats shows none awaiting parents, none dead');

my $log = slurp_file($node->logfile);
is(count_matches($log, qr/PANIC|TRAP:/), 0, 'the server log shows no PANIC or assertion failure');

$node->stop;
done_testing();
