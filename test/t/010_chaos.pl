
# Crash chaos (issue 7): 8 workers drain 10,000 jobs while the test injects
# faults -- kill -9 of a worker's backend paused between claim and complete,
# kill -9 of the 'pgq maintenance' background worker, pg_terminate_backend of
# half the workers at once, kill -9 of a backend picked from the ledger with a
# running job, an immediate shutdown and restart, and a second paused kill --
# and then checks, from a ledger the workers write in their own transactions:
#
#  - 0 jobs lost: every job enqueued has exactly one completion row
#    (chaos_done's primary key is the job id: a second accepted completion is
#    a hard error in the worker) and pgq.jobs and pgq.dead_jobs are empty;
#  - every committed claim is in the ledger (same transaction), so each job's
#    ledger attempts are exactly 1..n, never one twice;
#  - every second (third, ...) delivery is explained: the previous claimer's
#    backend was killed or terminated by this test, or lost in a crash
#    restart, before the job was claimed again -- or it was the probe that
#    stalls on purpose (below) -- and the new claim came after the previous
#    lease_until (claimed_at = pgq.clock() in the claim's transaction);
#  - 0 late completions from a superseded claimer accepted: every accepted
#    completion carries the job's last claimed attempt; every refused one had
#    a newer claim (or was the claimer's own completion whose commit it did
#    not see). A probe claims, stalls with its connection alive until a worker
#    re-claimed its job, then completes with its old attempt: refused, always,
#    at least once. Workers that lost their connection complete what they held
#    late too (ADR 0003 accepts those that nobody re-claimed meanwhile);
#  - no job left running past its lease plus two maintenance passes: a
#    monitor samples every 200 ms (skipping samples while the server is down)
#    the running job with the oldest lease; it is overdue by
#    pgq.clock() - greatest(lease_until, the maintenance worker's
#    backend_start), and must never be overdue by more than
#    2 passes (2 x 100 ms) + PGQ_CHAOS_SLACK (default 1 s). The slack is what
#    a loaded 2-core machine adds: a pass that starts late or runs long behind
#    8 workers, crash recovery and the test's own psql (the worst seen on the
#    project's machine: 0.07-0.19 s in the default profile, 0.39 s in the
#    long one). The time the worker takes to come back after a restart is
#    not in the slack: leases that end while no worker runs are measured from
#    the new worker's start, and the log must show the worker back within
#    $PROMPT s of every "ready to accept connections" (seen: 0.2-0.7 s);
#  - afterwards, amcheck: bt_index_check(heapallindexed) and
#    bt_index_parent_check on every btree index of schema pgq (and of its
#    TOAST tables), verify_heapam on every pgq table; the server log shows no
#    PANIC and no process killed by a signal this test did not send; no
#    client process met an unexpected error (chaos_worker.py: HARD lines; any
#    error on a live connection is one).
#
# Faults are spread over the run by progress: fault i of F waits until
# i/(F+1) of the jobs are completed, so work is in flight whatever the speed.
# Sizes: PGQ_CHAOS_JOBS (default 10000); PGQ_CHAOS_ROUNDS repeats the six
# faults (default: one round per 20,000 jobs, at least one). The longer
# profile is PGQ_CHAOS_JOBS=100000 (five rounds, 30 faults): make test
# PROFILE=long.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use JSON::PP;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use Time::Local qw(timegm);
use PgqTap;

my $t0 = time;
my $N = $ENV{PGQ_CHAOS_JOBS} // 10000;
my $ROUNDS = $ENV{PGQ_CHAOS_ROUNDS} // (int($N / 20000) || 1);
my $WORKERS = 8;
# The mean "work" per job, a sleep between claim and complete: it paces the
# run so the faults fall among the jobs (about 60 s of work for 10,000
# jobs on 8 workers) and keeps claims in flight when they hit. Shorter for
# bigger runs, where the machine sets the pace.
my $WORK_MS = $ENV{PGQ_CHAOS_WORK_MS} // ($N <= 10000 ? 40 : 400_000 / $N);
my $PASSES_S = 2 * 0.100;    # two maintenance passes of the test clusters
my $SLACK = $ENV{PGQ_CHAOS_SLACK} // 1.0;
# The queue keeps its jobs on a ring (ADR 0028); the view pgq.jobs shows
# them with the rows of pgq.job_rows (a job whose lease ended is moved
# there), once each.
my $JOBS = 'pgq.jobs';
$ENV{PGQ_CHAOS_SOURCE} = $JOBS;
my $GRACE = $PASSES_S + $SLACK;
my $python = $ENV{PGQ_PYTHON} // '/usr/bin/python3';
my $script = "$FindBin::RealBin/chaos_worker.py";

my $node = pgq_node('chaos');
# Crash restarts are under test (Cluster.pm turns them off); no statement
# logging (a few hundred thousand statements); log times in UTC, read back
# as timestamptz to tell which sessions a restart ended.
$node->append_conf(
	'postgresql.conf', q(
restart_after_crash = on
log_statement = 'none'
log_timezone = 'UTC'
));
$node->start;
my $log_start = log_size($node);

$node->safe_psql(
	'postgres', qq{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('chaos', max_attempts => 100, lease => '2 seconds');
CREATE TABLE chaos_jobs (id bigint PRIMARY KEY);
-- One row per committed claim, written in the claim's transaction.
CREATE TABLE chaos_claims (job bigint NOT NULL, attempt int NOT NULL, worker int NOT NULL,
  pid int NOT NULL, backend_start timestamptz NOT NULL, claimed_at timestamptz NOT NULL,
  lease_until timestamptz NOT NULL);
CREATE INDEX ON chaos_claims (job, attempt);
-- One row per accepted completion, in the completion's transaction.
CREATE TABLE chaos_done (job bigint PRIMARY KEY, attempt int NOT NULL, worker int NOT NULL,
  pid int NOT NULL, backend_start timestamptz NOT NULL, at timestamptz NOT NULL, kind text NOT NULL);
-- One row per refused completion (pgq.complete returned false).
CREATE TABLE chaos_refused (job bigint NOT NULL, attempt int NOT NULL, worker int NOT NULL,
  pid int NOT NULL, backend_start timestamptz NOT NULL, at timestamptz NOT NULL, kind text NOT NULL);
CREATE TABLE chaos_probe (job bigint NOT NULL, attempt int NOT NULL, superseded boolean NOT NULL,
  result boolean NOT NULL, at timestamptz NOT NULL);
-- Written by this test after the run: whom it killed, and its restarts.
CREATE TABLE chaos_victims (pid int NOT NULL, backend_start timestamptz NOT NULL, kind text NOT NULL,
  killed_at timestamptz NOT NULL);
CREATE TABLE chaos_restarts (kind text NOT NULL, fault_at timestamptz NOT NULL,
  ready_at timestamptz NOT NULL);
});
is($node->safe_psql('postgres', 'SHOW pgq.debug_clock_offset'),
	'0', 'pgq.clock() is the wall clock (the test compares it with its own)');

# The jobs, 1,000 per transaction; their ids in chaos_jobs.
for (my $done = 0; $done < $N;)
{
	my $batch = $N - $done < 1000 ? $N - $done : 1000;
	$node->safe_psql('postgres',
		    "INSERT INTO chaos_jobs SELECT pgq.enqueue_many('chaos', "
		  . "(SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series("
		  . ($done + 1) . ", " . ($done + $batch) . ") g))");
	$done += $batch;
}
is( $node->safe_psql('postgres',
		"SELECT count(*) || ' ' || (SELECT count(*) FROM $JOBS j WHERE state = 'p') FROM chaos_jobs"),
	"$N $N",
	"$N jobs enqueued, all pending");

# The client processes, started by this test and stopped by it (by pid).
my $ctl = PostgreSQL::Test::Utils::tempdir('chaos');
my $dsn = $node->connstr('postgres');
my %children;    # name => pid, while running
my %status;      # name => exit status
sub spawn
{
	my ($name, @args) = @_;
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		open STDOUT, '>', "$ctl/$name.out" or POSIX::_exit(126);
		open STDERR, '>', "$ctl/$name.err" or POSIX::_exit(126);
		exec($python, $script, $dsn, $ctl, @args) or POSIX::_exit(127);
	}
	$children{$name} = $pid;
}

sub reap
{
	for my $name (keys %children)
	{
		if (waitpid($children{$name}, WNOHANG) == $children{$name})
		{
			$status{$name} = $?;
			delete $children{$name};
		}
	}
}

END
{
	kill 'TERM', $_ for values %children;
}

sub touch { open my $f, '>', $_[0] or die "$_[0]: $!"; close $f; }

spawn("worker$_", 'worker', $_, $WORK_MS) for 1 .. $WORKERS;
spawn('probe', 'probe');
spawn('monitor', 'monitor', $GRACE);

my $workers_query =
  "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'chaos\\_worker\\_%'";
my $maint_query =
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq maintenance' "
  . "AND datname = 'postgres'";

# Waits until COND (a code ref) is true, every 20 ms, at most SECONDS; fails
# early when a client process ended before it was asked to.
sub wait_until
{
	my ($what, $seconds, $cond, $exits_expected) = @_;
	my $deadline = time + $seconds;
	while (time < $deadline)
	{
		my $v = $cond->();
		return $v if $v;
		reap();
		if (keys %status && !$exits_expected)
		{
			diag("$what: client processes ended early: " . join(', ', sort keys %status));
			return undef;
		}
		usleep(20_000);
	}
	diag("$what: timed out after ${seconds}s");
	return undef;
}

my $done_query = 'SELECT count(*) FROM chaos_done';
sub done_count { return $node->safe_psql('postgres', $done_query); }

# Everything the faults left to check afterwards.
my (@victims, @restarts, @faults, %held_at_kill);
my $kills = 0;    # kill -9 sent

# The time of the "ready to accept connections" line the restart logged
# after OFFSET: every session that started before it is gone.
sub ready_at_after
{
	my ($offset) = @_;
	my @t = log_since($node, $offset) =~
	  /^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \S+) \[\d+\] LOG:  database system is ready to accept connections/mg;
	return $t[-1];
}

# After a restart: the server is back, the workers reconnected, the
# maintenance worker runs.
sub back_to_work
{
	my ($name) = @_;
	ok(wait_for($node, 'postgres', $workers_query, "$WORKERS", $LONG),
		"$name: the $WORKERS workers are connected again");
	ok(wait_for($node, 'postgres', $maint_query, '1', $LONG),
		"$name: the maintenance worker runs");
}

sub crash
{
	my ($name, $kind, $pid) = @_;
	my $offset = log_size($node);
	my $fault_at;
	my $ok = crash_restart(
		$node, $name,
		sub {
			$fault_at = time;
			kill('KILL', $pid) or die "kill $pid: $!";
			$kills++;
		});
	ok($ok, "$name: the server is back");
	my $ready = ready_at_after($offset);
	ok(defined $ready, "$name: its restart is in the log");
	push @restarts, { kind => $kind, fault_at => $fault_at, ready_at => $ready // '-infinity' };
	return $fault_at;
}

# Worker W stops between a claim and its completion; its backend is killed.
sub fault_paused_kill
{
	my ($name, $w) = @_;
	unlink "$ctl/paused.$w";
	touch("$ctl/pause.$w");
	my $ok = wait_until("$name: worker $w pauses", $SHORT, sub { -e "$ctl/paused.$w" });
	ok($ok, "$name: worker $w paused between a claim and its completion");
	if (!$ok) { unlink "$ctl/pause.$w"; return; }
	my $p = decode_json(slurp_file("$ctl/paused.$w"));
	is( $node->safe_psql(
			'postgres',
			"SELECT (SELECT count(*) FROM pg_stat_activity WHERE pid = $p->{pid} "
			  . "AND backend_start = '$p->{backend_start}'::timestamptz) || ' ' || "
			  . "coalesce((SELECT state::text || ' ' || attempt FROM $JOBS j WHERE id = $p->{job}), 'gone') "
			  . "|| ' ' || (SELECT count(*) FROM chaos_done WHERE job = $p->{job})"),
		"1 r $p->{attempt} 0",
		"$name: its backend $p->{pid} is alive and holds job $p->{job} (attempt $p->{attempt}), not completed"
	);
	my $at = crash($name, 'crash restart after kill -9 of a paused claimer', $p->{pid});
	unlink "$ctl/pause.$w";
	push @victims,
	  { pid => $p->{pid}, backend_start => $p->{backend_start}, kind => 'kill -9 (paused claimer)', killed_at => $at };
	$held_at_kill{"$p->{job} $p->{attempt}"} = $p;
}

sub fault_maintenance_kill
{
	my ($name) = @_;
	my $row = $node->safe_psql('postgres',
		    "SELECT pid || '|' || backend_start FROM pg_stat_activity "
		  . "WHERE backend_type = 'pgq maintenance' AND datname = 'postgres'");
	like($row, qr/^\d+\|[^\n]+$/, "$name: one maintenance worker");
	return unless $row =~ /^(\d+)\|([^\n]+)$/;
	my ($pid, $bs) = ($1, $2);
	my $at = crash($name, 'crash restart after kill -9 of the maintenance worker', $pid);
	push @victims, { pid => $pid, backend_start => $bs, kind => 'kill -9 (maintenance worker)', killed_at => $at };
	isnt(worker_pid($node, 'postgres'), $pid, "$name: a new maintenance worker");
}

sub fault_terminate_half
{
	my ($name, $first) = @_;
	my @names = map { "'chaos_worker_" . (($first + $_ - 1) % $WORKERS + 1) . "'" } 1 .. $WORKERS / 2;
	my $at = time;
	my $out = $node->safe_psql('postgres',
		    "SELECT pid || '|' || backend_start || '|' || pg_terminate_backend(pid) FROM "
		  . "(SELECT pid, backend_start FROM pg_stat_activity WHERE application_name IN ("
		  . join(', ', @names) . ")) s");
	my @rows = map { [ split /\|/ ] } split /\n/, $out;
	is(scalar(grep { $_->[2] eq 'true' } @rows),
		$WORKERS / 2, "$name: pg_terminate_backend of " . join(', ', @names) . ' at once');
	push @victims, { pid => $_->[0], backend_start => $_->[1], kind => 'pg_terminate_backend', killed_at => $at }
	  for @rows;
	my $pids = join(', ', map { $_->[0] } @rows) || '0';
	ok(wait_for($node, 'postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid IN ($pids)", '0'),
		"$name: their backends are gone");
}

# A backend that holds a running job according to the ledger.
sub fault_ledger_kill
{
	my ($name) = @_;
	my $row = wait_until(
		"$name: a backend with a running job",
		$SHORT,
		sub {
			$node->safe_psql('postgres',
				    "SELECT c.pid || '|' || c.backend_start || '|' || c.job || '|' || c.attempt "
				  . "FROM chaos_claims c JOIN $JOBS j ON j.id = c.job AND j.attempt = c.attempt "
				  . "AND j.state = 'r' JOIN pg_stat_activity a ON a.pid = c.pid "
				  . "AND a.backend_start = c.backend_start "
				  . "WHERE c.worker > 0 ORDER BY c.claimed_at DESC LIMIT 1");
		});
	ok($row, "$name: the ledger names a live backend with a running job");
	return unless $row;
	my ($pid, $bs, $job, $attempt) = split /\|/, $row;
	my $at = crash($name, 'crash restart after kill -9 of a claimer from the ledger', $pid);
	push @victims, { pid => $pid, backend_start => $bs, kind => 'kill -9 (claimer from the ledger)', killed_at => $at };
}

sub fault_immediate
{
	my ($name) = @_;
	my $offset = log_size($node);
	my $at = time;
	$node->stop('immediate');
	$node->start;
	ok(wait_for($node, 'postgres', 'SELECT 1', '1', $LONG), "$name: the server is back");
	my $ready = ready_at_after($offset);
	ok(defined $ready, "$name: its start is in the log");
	push @restarts, { kind => 'immediate shutdown and start', fault_at => $at, ready_at => $ready // '-infinity' };
}

my @schedule = (
	[ 'kill -9 of a paused claimer', sub { fault_paused_kill($_[0], 1 + (2 * $_[1]) % $WORKERS) } ],
	[ 'kill -9 of the maintenance worker', sub { fault_maintenance_kill($_[0]) } ],
	[ 'pg_terminate_backend of half the workers', sub { fault_terminate_half($_[0], 1 + 4 * $_[1]) } ],
	[ 'kill -9 of a claimer from the ledger', sub { fault_ledger_kill($_[0]) } ],
	[ 'immediate shutdown and restart', sub { fault_immediate($_[0]) } ],
	[ 'kill -9 of a paused claimer', sub { fault_paused_kill($_[0], 2 + (2 * $_[1]) % $WORKERS) } ],
);
my $F = @schedule * $ROUNDS;
note("chaos: $N jobs, $WORKERS workers, $F faults ($ROUNDS rounds), ${WORK_MS} ms of work a job, grace ${GRACE}s");

ok(wait_for($node, 'postgres', $workers_query, "$WORKERS", $LONG), "the $WORKERS workers are connected");
my $run_start = time;
for my $i (0 .. $F - 1)
{
	my ($kind, $code) = @{ $schedule[ $i % @schedule ] };
	my $round = int($i / @schedule);
	my $name = sprintf('fault %d (%s)', $i + 1, $kind);
	my $threshold = int($N * ($i + 1) / ($F + 1));
	my $done = wait_until("$name: $threshold jobs completed", 60 + $N / 100,
		sub { my $d = done_count(); $d >= $threshold ? $d : 0 });
	ok($done, "$name: after $threshold completions");
	last unless $done;
	back_to_work("$name: before");
	my ($left, $running) = split /\|/,
	  $node->safe_psql('postgres', "SELECT count(*) || '|' || count(*) FILTER (WHERE state = 'r') FROM $JOBS j");
	cmp_ok($left, '>', 0, "$name: injected while work is in flight ($left jobs left, $running running)");
	my $f0 = time;
	$code->($name, $round);
	back_to_work("$name: after");
	push @faults, { kind => $kind, done => $done, left => $left, running => $running, seconds => time - $f0 };
}
my $faults_end = time;

# Every job completes: pgq.jobs drains (leases of the last victims expire).
my $drained = wait_until("drain", 120 + $N / 100,
	sub { $node->safe_psql('postgres', "SELECT count(*) FROM $JOBS j") eq '0' });
ok($drained, 'pgq.jobs drains after the last fault');
my $drain_seconds = time - $faults_end;
my $run_seconds = time - $run_start;

touch("$ctl/stop");
my $ended = wait_until('clients end', 60, sub { reap(); !%children }, 1);
ok($ended, 'every client process ends when asked');
kill 'TERM', $_ for values %children;

my %stats;
for my $name (sort keys %status)
{
	is($status{$name}, 0, "$name exited with status 0");
	my $out = -e "$ctl/$name.out" ? slurp_file("$ctl/$name.out") : '';
	my $err = -e "$ctl/$name.err" ? slurp_file("$ctl/$name.err") : '';
	is($err, '', "$name wrote nothing to stderr (no HARD error, no traceback)");
	my ($json) = $out =~ /^(\{.*\})\s*$/m;
	ok(defined $json, "$name printed its figures");
	$stats{$name} = defined $json ? decode_json($json) : {};
}
is(scalar(keys %status), $WORKERS + 2, 'all the client processes were accounted for');
sub total { my ($key, $prefix) = @_; my $s = 0; $s += ($stats{$_}{$key} // 0) for grep { /^$prefix/ } keys %stats; return $s; }

# What the test did, next to the ledger.
my $sql = "INSERT INTO chaos_victims VALUES "
  . join(', ', map { "($_->{pid}, '$_->{backend_start}', '$_->{kind}', to_timestamp($_->{killed_at}))" } @victims)
  . ";\nINSERT INTO chaos_restarts VALUES "
  . join(', ', map { "('$_->{kind}', to_timestamp($_->{fault_at}), '$_->{ready_at}')" } @restarts);
$node->safe_psql('postgres', $sql) if @victims && @restarts;

# 0 jobs lost, each completed once.
is( $node->safe_psql(
		'postgres',
		"SELECT (SELECT count(*) FROM chaos_jobs) || ' ' || "
		  . "(SELECT count(*) FROM chaos_jobs j WHERE NOT EXISTS (SELECT 1 FROM chaos_done d WHERE d.job = j.id)) || ' ' || "
		  . "(SELECT count(*) FROM chaos_done d WHERE NOT EXISTS (SELECT 1 FROM chaos_jobs j WHERE j.id = d.job)) || ' ' || "
		  . "(SELECT count(*) FROM chaos_done)"),
	"$N 0 0 $N",
	"every one of the $N jobs has exactly one completion (none missing, none unknown)");
is($node->safe_psql('postgres', "SELECT count(*) FROM $JOBS j"), '0', 'pgq.jobs is empty');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pgq.dead_jobs'), '0', 'pgq.dead_jobs is empty');

# The ledger: every job claimed as attempts 1..n, each attempt once.
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FILTER (WHERE n <> top OR low <> 1) || ' ' || count(*) FILTER (WHERE n <> distinct_n) "
		  . "FROM (SELECT job, count(*) n, count(DISTINCT attempt) distinct_n, min(attempt) low, max(attempt) top "
		  . "FROM chaos_claims GROUP BY job) s"),
	'0 0',
	'the ledger holds each job\'s claims as attempts 1..n, none twice');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM chaos_jobs j WHERE NOT EXISTS (SELECT 1 FROM chaos_claims c WHERE c.job = j.id)"),
	'0', 'every job was claimed');

# 0 late completions from a superseded claimer accepted: each completion is
# of the job's last claim.
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FILTER (WHERE d.attempt < m.top) || ' ' || count(*) FILTER (WHERE d.attempt > m.top) "
		  . "FROM chaos_done d JOIN (SELECT job, max(attempt) top FROM chaos_claims GROUP BY job) m USING (job)"),
	'0 0',
	'no completion accepted from a superseded claim (each is of the job\'s last claimed attempt)');

# Every refusal is explained by a newer claim that committed before it (or
# the claimer's own completion, whose commit it did not hear of).
my %refused = map { my ($k, $why, $n) = split /\|/; ("$k|$why" => $n) } split /\n/,
  $node->safe_psql(
	'postgres',
	"SELECT kind, CASE WHEN EXISTS (SELECT 1 FROM chaos_claims c WHERE c.job = r.job AND c.attempt > r.attempt "
	  . "AND c.claimed_at <= r.at) THEN 'superseded' "
	  . "WHEN EXISTS (SELECT 1 FROM chaos_done d WHERE d.job = r.job AND d.attempt = r.attempt AND d.at <= r.at) "
	  . "THEN 'own completion' ELSE 'UNEXPLAINED' END, count(*) FROM chaos_refused r GROUP BY 1, 2 ORDER BY 1, 2");
is(join(', ', grep { /UNEXPLAINED/ } sort keys %refused),
	'', 'every refused completion had a newer claim (or was its own, already committed)');
my $refused_superseded = 0;
$refused_superseded += $refused{$_} for grep { /\|superseded$/ } keys %refused;

# The probe: every late completion after a newer claim refused.
my ($probes, $probe_refused, $probe_superseded) = split /\|/,
  $node->safe_psql('postgres',
	"SELECT count(*) || '|' || count(*) FILTER (WHERE NOT result) || '|' || count(*) FILTER (WHERE superseded) FROM chaos_probe");
cmp_ok($probes, '>=', 1, "the probe made $probes superseded-claimer attempts");
is($probe_superseded, $probes, 'each after a worker had claimed its job again');
is($probe_refused, $probes, 'pgq.complete refused every one of them');

# Every second delivery explained: the previous claimer was killed (by this
# test, or by a restart) before the new claim, or was the stalled probe; and
# the new claim came after the previous lease ended.
my $explain = $node->safe_psql(
	'postgres', q{
WITH pairs AS (
  SELECT c.job, c.attempt, c.worker, c.pid, c.backend_start, c.lease_until, n.claimed_at AS next_at
    FROM chaos_claims c JOIN chaos_claims n ON n.job = c.job AND n.attempt = c.attempt + 1),
why AS (
  SELECT p.*,
         (SELECT v.kind FROM chaos_victims v
           WHERE v.pid = p.pid AND v.backend_start = p.backend_start AND v.killed_at < p.next_at
           ORDER BY v.killed_at LIMIT 1) AS victim,
         (SELECT CASE WHEN r.fault_at < p.next_at THEN r.kind END FROM chaos_restarts r
           WHERE p.backend_start < r.ready_at ORDER BY r.ready_at LIMIT 1) AS restart
    FROM pairs p)
SELECT cause || '|' || count(*) || '|' || count(*) FILTER (WHERE next_at < lease_until)
       || '|' || round(extract(epoch FROM min(next_at - lease_until))::numeric, 3)
  FROM (SELECT coalesce(victim, restart, CASE WHEN worker = 0 THEN 'stalled probe' END,
                        'UNEXPLAINED') AS cause, next_at, lease_until FROM why) w
 GROUP BY cause ORDER BY cause});
my (%redelivered, $redeliveries, $early, $min_gap);
for (split /\n/, $explain)
{
	my ($why, $n, $e, $gap) = split /\|/;
	$redelivered{$why} = $n;
	$redeliveries += $n;
	$early += $e;
	$min_gap = $gap if !defined $min_gap || $gap < $min_gap;
}
$redeliveries //= 0;
is($redelivered{UNEXPLAINED} // 0, 0, 'every second delivery follows a claimer killed before it (or the stalled probe)');
is($early // 0, 0, 'and comes after the previous claim\'s lease_until');
cmp_ok($redeliveries - ($redelivered{'stalled probe'} // 0), '>=', 1, 'the faults caused redeliveries');

# The paused claimers were killed holding their job: it was completed by a
# later claim, or late by the worker after reconnecting, never by the
# killed session.
for my $key (sort keys %held_at_kill)
{
	my $p = $held_at_kill{$key};
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM chaos_done WHERE job = $p->{job} AND pid = $p->{pid} "
			  . "AND backend_start = '$p->{backend_start}'::timestamptz"),
		'0',
		"job $p->{job}: the killed session never completed it");
}

# The claimers killed from the ledger: did they die holding a claim?
my $ledger_held = $node->safe_psql(
	'postgres', q{
SELECT count(*) FROM chaos_victims v JOIN chaos_claims c USING (pid, backend_start)
 WHERE v.kind = 'kill -9 (claimer from the ledger)'
   AND NOT EXISTS (SELECT 1 FROM chaos_done d WHERE d.job = c.job AND d.attempt = c.attempt
                     AND d.pid = c.pid AND d.backend_start = c.backend_start)});

# The monitor.
my $mon = $stats{monitor} // {};
cmp_ok($mon->{samples} // 0, '>=', $run_seconds, "the monitor sampled ($mon->{samples} samples, $mon->{down} while down)");
is($mon->{violation_count} // -1, 0,
	sprintf('no job stayed running past greatest(lease_until, worker start) + %.1fs (worst %.3fs)',
		$GRACE, $mon->{max_overdue} // -1))
  or diag(encode_json($mon->{violations} // []));
cmp_ok($mon->{longest_no_worker} // 99, '<=', $PROMPT,
	sprintf('the server was never without a maintenance worker for more than %ss (longest %.1fs)',
		$PROMPT, $mon->{longest_no_worker} // -1));

# After every restart the maintenance worker came back within $PROMPT s
# (from the log: "ready to accept connections" to the worker's first line).
my (@comebacks, $ready_t);
for my $line (split /\n/, log_since($node, $log_start))
{
	next unless $line =~ /^(\d+)-(\d+)-(\d+) (\d+):(\d+):(\d+(?:\.\d+)?) UTC /;
	my $t = timegm(0, $5, $4, $3, $2 - 1, $1) + $6;
	if ($line =~ /database system is ready to accept connections/) { $ready_t = $t; }
	elsif ($line =~ /pgq maintenance worker started for database "postgres"/ && defined $ready_t)
	{
		push @comebacks, $t - $ready_t;
		undef $ready_t;
	}
}
is(scalar(@comebacks), scalar(@restarts), 'the maintenance worker came back after each of the ' . scalar(@restarts) . ' restarts');
my $slowest_comeback = (sort { $b <=> $a } @comebacks)[0] // 0;
cmp_ok(sprintf('%.1f', $slowest_comeback), '<=', $PROMPT,
	sprintf('each time within %ss of the server accepting connections (slowest %.2fs)', $PROMPT, $slowest_comeback));

# The faults.
my %kinds;
$kinds{ $_->{kind} }++ for @faults;
cmp_ok(scalar(@faults), '>=', 5, scalar(@faults) . ' faults injected');
is(scalar(keys %kinds), 5, 'of the five kinds: ' . join(', ', sort keys %kinds));
is(total('hard_errors', ''), 0, 'no client hit a hard error');

# The server log: no PANIC, nothing killed by a signal the test did not send.
my $log = log_since($node, $log_start);
is(count_matches($log, qr/PANIC/), 0, 'no PANIC in the server log');
my @signals = $log =~ /terminated by signal (\d+)/g;
is(join(',', grep { $_ ne '9' } @signals), '', 'no process died of another signal than the kill -9s');
is(scalar(@signals), $kills, "each of the $kills kill -9s shows in the log");
my %errors;
$errors{$1}++ while $log =~ /(?:ERROR|FATAL|WARNING):  ([^\n]{0,90})/g;
note("server log: $_ x $errors{$_}") for sort keys %errors;

# amcheck.
$node->safe_psql('postgres', 'CREATE EXTENSION amcheck');
my @indexes = split /\n/, $node->safe_psql(
	'postgres', q{
SELECT c.oid::regclass FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_am am ON am.oid = c.relam AND am.amname = 'btree'
 WHERE c.relkind = 'i'  -- a partitioned table's index has no pages: its segments' do
   AND i.indrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'pgq'::regnamespace
                      UNION SELECT reltoastrelid FROM pg_class WHERE relnamespace = 'pgq'::regnamespace)
 ORDER BY 1});
cmp_ok(scalar(@indexes), '>=', 10, scalar(@indexes) . ' btree indexes in schema pgq and its TOAST tables');
my @bad;
for my $index (@indexes)
{
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT bt_index_check('$index', true); SELECT bt_index_parent_check('$index', true, true)");
	push @bad, "$index: $err" if $ret != 0 || $err ne '';
}
is(join("\n", @bad), '', 'bt_index_check and bt_index_parent_check are clean on every one');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_class c, verify_heapam(c.oid)
 WHERE c.relnamespace = 'pgq'::regnamespace AND c.relkind = 'r'}),
	'0',
	'verify_heapam finds nothing in the pgq tables');

# The figures.
my %late = map { my ($k, $n) = split /\|/; ($k => $n) } split /\n/,
  $node->safe_psql('postgres',
	"SELECT w || '|' || count(*) FROM (SELECT CASE WHEN d.at > c.lease_until THEN 'after lease' "
	  . "ELSE 'within lease' END AS w FROM chaos_done d JOIN chaos_claims c USING (job, attempt) "
	  . "WHERE d.kind = 'late') s GROUP BY w");
my $claims = $node->safe_psql('postgres', 'SELECT count(*) FROM chaos_claims');
diag(sprintf('chaos: %d jobs, %d workers, %d faults (%s), %.0f s (%.0f s of run, drain %.1f s after the last fault)',
	$N, $WORKERS, scalar(@faults), join('; ', map { "$_ x $kinds{$_}" } sort keys %kinds),
	time - $t0, $run_seconds, $drain_seconds));
diag(sprintf('chaos: %d claims, %d redeliveries (%s), earliest re-claim %ss after the lease ended',
	$claims, $redeliveries, join('; ', map { "$_: $redelivered{$_}" } sort keys %redelivered), $min_gap // '-'));
diag(sprintf('chaos: late completions from superseded claimers refused: %d (probe %d, workers after reconnecting %d), accepted: 0; '
	. 'late completions accepted because nobody had re-claimed the job: %d within the lease, %d after it',
	$refused_superseded, $probe_refused, $refused_superseded - $probe_refused,
	$late{'within lease'} // 0, $late{'after lease'} // 0));
diag('chaos: refusals by kind: ' . join('; ', map { "$_: $refused{$_}" } sort keys %refused));
diag(sprintf('chaos: monitor %d samples (%d while down, %d without a maintenance worker), worst overdue %.3f s (grace %.1f s); '
	. 'the maintenance worker was back %s s after each restart',
	$mon->{samples} // 0, $mon->{down} // 0, $mon->{no_worker} // 0, $mon->{max_overdue} // -1, $GRACE,
	join(', ', map { sprintf('%.2f', $_) } @comebacks)));
diag("chaos: the claimers killed from the ledger died holding $ledger_held claims they had not completed");
diag(sprintf('chaos: workers reconnected %d times, lost %d connections; amcheck: %d btree indexes clean',
	total('connects', 'worker') - $WORKERS, total('lost', 'worker'), scalar(@indexes)));
diag(sprintf('chaos: fault %d %s at %d done, %d left (%d running), %.1f s',
	$_ + 1, $faults[$_]{kind}, $faults[$_]{done}, $faults[$_]{left}, $faults[$_]{running}, $faults[$_]{seconds}))
  for 0 .. $#faults;

$node->stop;
done_testing();
