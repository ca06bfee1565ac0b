
# Helpers shared by the TAP tests in test/t (PostgreSQL's own suites keep
# such modules next to their t/*.pl too). Every wait here has a deadline and
# reports what it last saw; nothing sleeps and hopes.
package PgqTap;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(
  $SHORT $LONG $PROMPT
  pgq_node prompt wait_for wait_for_log log_size log_since count_matches
  launcher_pid worker_pid pgq_backends crash_restart jobs_accounted
  completions_flushed
  no_lasting_worker outputs_during churn
);

# Deadlines, in seconds. The contract promises about 2 s for a worker to
# appear or to go and about 1 s for the launcher after recovery; SHORT leaves
# a wide margin for a loaded 2-core machine while keeping a broken
# implementation from stalling the suite for minutes (poll_query_until would
# wait 180 s per condition). LONG is for crash restarts and promotion.
our $SHORT = $ENV{PGQ_TAP_SHORT} // 15;
our $LONG  = $ENV{PGQ_TAP_LONG}  // 60;

# "About 2 s" (a worker appears or goes) and "about 1 s" (the launcher after
# recovery) are also asserted, as at most PROMPT seconds: the delays promised,
# with room for a loaded machine, but well short of a 10 s safety-net probe.
our $PROMPT = $ENV{PGQ_TAP_PROMPT} // 5;

# The maintenance interval of every test cluster: passes ten times a second.
our $INTERVAL_MS = 100;

# pgq_node(NAME, [init params...]): an initialised (not started) node with the
# extension preloaded and maintenance passes every 100 ms.
sub pgq_node
{
	my ($name, %params) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%params);
	$node->append_conf(
		'postgresql.conf', qq(
shared_preload_libraries = 'pgq_cpp'
pgq.maintenance_interval = '${INTERVAL_MS}ms'
lc_messages = 'C'
));
	return $node;
}

# wait_for(NODE, DB, QUERY, EXPECTED, [TIMEOUT]) runs QUERY every 100 ms until
# its output is EXPECTED (a string, or a regexp) or TIMEOUT seconds passed.
# Returns true on success; in list context (success, last output, seconds
# waited, [every distinct output seen, in order]). On a timeout it prints the
# last output and error.
sub wait_for
{
	my ($node, $db, $query, $expected, $timeout) = @_;
	$timeout //= $SHORT;
	my $start = time;
	my $deadline = $start + $timeout;
	my ($out, $err) = ('', '');
	my @seen;
	while (1)
	{
		my $ret;
		($ret, $out, $err) = $node->psql($db, $query);
		$out //= '';
		$err //= '';
		push @seen, $out if $err eq '' && (!@seen || $seen[-1] ne $out);
		my $match = ref $expected ? $out =~ $expected : $out eq $expected;
		if ($ret == 0 && $err eq '' && $match)
		{
			my $waited = time - $start;
			return wantarray ? (1, $out, $waited, \@seen) : 1;
		}
		last if time > $deadline;
		usleep(100_000);
	}
	diag(   "timed out after ${timeout}s waiting for\n  $query\n"
		  . "expected: $expected\nlast output: $out\nlast error: $err");
	return wantarray ? (0, $out, time - $start, \@seen) : 0;
}

# prompt(WHAT, SECONDS): asserts that something waited for took at most
# PROMPT seconds.
sub prompt
{
	my ($what, $seconds) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return cmp_ok(sprintf('%.1f', $seconds), '<=', $PROMPT,
		"$what within ${PROMPT}s");
}

# The server log: its size (an offset), what was written after an offset.
sub log_size
{
	my ($node) = @_;
	return -s $node->logfile;
}

sub log_since
{
	my ($node, $offset) = @_;
	return slurp_file($node->logfile, $offset);
}

sub count_matches
{
	my ($text, $regexp) = @_;
	my $n = () = $text =~ /$regexp/g;
	return $n;
}

# wait_for_log(NODE, REGEXP, OFFSET, [TIMEOUT]): waits until the log after
# OFFSET matches. Returns the offset just past the match, or undef (with a
# diagnostic) on a timeout.
sub wait_for_log
{
	my ($node, $regexp, $offset, $timeout) = @_;
	$timeout //= $SHORT;
	my $deadline = time + $timeout;
	while (1)
	{
		my $log = log_since($node, $offset);
		return $offset + $+[0] if $log =~ $regexp;
		last if time > $deadline;
		usleep(100_000);
	}
	diag("timed out after ${timeout}s waiting for $regexp in the log of "
		  . $node->name);
	return undef;
}

# The launcher's and a database's worker's pids (empty string when absent;
# several lines when there are several).
sub launcher_pid
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgq launcher' ORDER BY pid"
	);
}

sub worker_pid
{
	my ($node, $db) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgq maintenance' "
		  . "AND datname = '$db' ORDER BY pid");
}

# Every pgq backend, one line each: backend_type|application_name|datname.
sub pgq_backends
{
	my ($node, $where) = @_;
	$where //= 'true';
	return $node->safe_psql('postgres',
		    "SELECT backend_type || '|' || coalesce(application_name, '<null>') || '|' "
		  . "|| coalesce(datname, '<null>') FROM pg_stat_activity "
		  . "WHERE backend_type LIKE 'pgq%' AND ($where) ORDER BY 1");
}

# crash_restart(NODE, NAME, CODE): runs CODE (which kills something), then
# asserts that the postmaster went through a crash restart and accepts
# connections again. Returns true when it did.
# Waits until the maintenance worker has written every completion counted in
# shared memory to pgq.finished: a crash loses the counts not yet written
# (done_recent is a statistic; docs/operations.md), so tests that account for
# every job call this before they inject a crash.
sub completions_flushed
{
	my ($node, $db) = @_;
	return wait_for($node, $db // 'postgres',
		'SELECT coalesce(sum(pgq.unflushed_completions(queue_id)), 0) FROM pgq.queues',
		'0', $LONG);
}

sub crash_restart
{
	my ($node, $name, $code) = @_;
	my $offset = log_size($node);
	$code->();
	my $reinit =
	  wait_for_log($node, qr/all server processes terminated; reinitializing/,
		$offset, $LONG);
	ok(defined $reinit, "$name: the postmaster reinitialises after the crash");
	return 0 unless defined $reinit;
	my $ready =
	  wait_for_log($node, qr/database system is ready to accept connections/,
		$reinit, $LONG);
	ok(defined $ready, "$name: the server accepts connections again");
	return 0 unless defined $ready;
	# Connections are accepted once the log says so; wait for a real one.
	return wait_for($node, 'postgres', 'SELECT 1', '1', $LONG);
}

# Every job the node was given and still accounts for: live jobs, dead-letter
# rows and completions (queue_stats.done_recent: pgq.finished plus the
# completions still counted in shared memory).
# jobs_accounted(NODE, EXPECTED, [DB]): live + dead + done_recent, once it
# reads EXPECTED (or the last reading after a few seconds): done_recent is a
# statistic that a reader racing a maintenance flush's commit can see off by
# the flushed count for that instant (docs/reference.md).
sub jobs_accounted
{
	my ($node, $expected, $db) = @_;
	my (undef, $out) = wait_for($node, $db // 'postgres',
		    "SELECT (SELECT count(*) FROM pgq.jobs) + (SELECT count(*) FROM pgq.dead_jobs) "
		  . "+ (SELECT coalesce(sum(done_recent), 0) FROM pgq.queue_stats)",
		$expected);
	return $out;
}

# churn(NODE, SECONDS, NAME, SCRIPT, WHAT): four pgbench clients (two
# threads) run SCRIPT (a pgbench script, named NAME) for SECONDS; the test
# WHAT passes when some transactions were processed and no client ended
# with an error (a failed statement, such as a second completion's
# duplicate key in a table of completions, aborts its client).
sub churn
{
	my ($node, $seconds, $name, $script, $what) = @_;
	$node->pgbench("--no-vacuum --client=4 --jobs=2 --time=$seconds",
		0, [qr/processed: [1-9]/], [qr/^$/], $what, { $name => $script });
	return;
}

# no_lasting_worker(NODE, [DB...], SECONDS): samples pg_stat_activity every
# 100 ms for SECONDS and returns how long (in seconds) the longest-lived pgq
# backend connected to one of the DBs was seen. A short-lived probe of a
# database without the extension is allowed by the contract; a worker that
# stays is not.
# outputs_during(NODE, QUERY, SECONDS) samples QUERY (in database postgres)
# every 100 ms for SECONDS; returns every distinct output seen, in order of
# first appearance. For "this never happens in N passes" checks.
sub outputs_during
{
	my ($node, $query, $seconds) = @_;
	my (@seen, %seen);
	my $deadline = time + $seconds;
	while (time < $deadline)
	{
		my $out = $node->safe_psql('postgres', $query);
		push @seen, $out unless $seen{$out}++;
		usleep(100_000);
	}
	return @seen;
}

sub no_lasting_worker
{
	my ($node, $dbs, $seconds) = @_;
	my $list = join(', ', map { "'$_'" } @$dbs);
	my %first;
	my %last;
	my $deadline = time + $seconds;
	while (time < $deadline)
	{
		my $pids = $node->safe_psql('postgres',
			    "SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'pgq%' "
			  . "AND datname IN ($list)");
		my $now = time;
		for my $pid (split /\n/, $pids)
		{
			$first{$pid} //= $now;
			$last{$pid} = $now;
		}
		usleep(100_000);
	}
	my $longest = 0;
	for my $pid (keys %first)
	{
		my $lived = $last{$pid} - $first{$pid};
		$longest = $lived if $lived > $longest;
	}
	return $longest;
}

1;
