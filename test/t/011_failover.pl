
# Failover under load. A primary with a synchronous streaming standby; two
# producers enqueue continuously and four workers claim and complete, each
# completion recorded in a ledger in the completion's transaction; the
# primary is stopped with an immediate shutdown in the middle of it, the
# standby is promoted, and the clients (libpq multi-host, target_session_attrs
# = read-write) reconnect to it by themselves. Then, on the new primary:
#
# - every job whose enqueue COMMIT returned to a producer is there (on the
#   standby before promotion already, and after it pending, running or
#   completed in the ledger; none dead), and no job whose transaction failed
#   before its COMMIT;
# - the jobs running at the failover keep their leases: a worker that carries
#   on completes them with its attempt number, and the ones whose worker died
#   with the primary are handed out again only after their lease expired,
#   by the new primary's maintenance worker; a completion with the old
#   attempt of a re-claimed job is then refused;
# - a FIFO group, a dedupe key and a future run_at hold across the failover;
#   the @every schedule fires there; the launcher, the maintenance worker and
#   the handler workers run there and the handler queue is served;
# - in the end every job is completed exactly once (the ledger's primary key,
#   the handler's rows) and no claim was ever handed out before the previous
#   claim's lease ran out.
#
# Prints the figures docs/reliability.md quotes (jobs committed before the
# failover, running at it, time to promote, time to the first claim on the
# new primary).
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use List::Util qw(min max sum0);
use PgqTap;

my $test_start = time;
my %phase;    # phase name => seconds since the start, noted at the end
sub phase { $phase{ $_[0] } = time - $test_start; }

# Leases, in seconds: the load's workers (long enough to outlast the
# outage, so that a worker that carries on can still complete), the jobs the
# test holds over the failover itself.
my $work_lease = 5;
my $held_lease = 10;
my $held_jobs  = 6;

# ---------------------------------------------------------------------------
# The primary, its queues, the ledger, the handler.

my $primary = pgq_node('primary', allows_streaming => 1);
# Thousands of statements: keep the log to what the servers have to say.
$primary->append_conf('postgresql.conf', "log_statement = 'none'\n");
$primary->start;
$primary->safe_psql(
	'postgres', qq{
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('work', lease => '${work_lease} seconds');
SELECT pgq.create_queue('ticks');
SELECT pgq.create_queue('held');
SELECT pgq.create_queue('fifo');
SELECT pgq.create_queue('later');
-- One row per completed job, written in the completion's transaction: a job
-- completed twice would be a duplicate key, not a merged entry.
CREATE TABLE public.ledger (
    job     bigint PRIMARY KEY,
    queue   text NOT NULL,
    attempt integer NOT NULL,
    port    integer NOT NULL,
    seq     bigserial NOT NULL);
-- The handler's rows (no key: a second run would show as a second row).
CREATE TABLE public.handled (
    job_id  bigint NOT NULL,
    attempt integer NOT NULL,
    port    integer NOT NULL);
CREATE FUNCTION public.handle(job pgq.claimed_job) RETURNS void
LANGUAGE sql AS \$\$
    INSERT INTO public.handled VALUES (job.id, job.attempt, current_setting('port')::int)
\$\$;
-- A short lease: a handler worker may hold a job of it when the primary
-- dies (its claim committed, its handler's transaction not), and that job
-- comes back only when the lease ends, within the drain's wait.
SELECT pgq.create_queue('handled', lease => '3 seconds', handler => 'public.handle(pgq.claimed_job)');
SELECT pgq.schedule('tick', 'ticks', '\@every 1 second', '{"what": "tick"}');
});

my $pgq_count = sub {
	my ($type, $where) = @_;
	return
	    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = '$type' "
	  . "AND application_name = '$type'"
	  . ($where ? " AND $where" : '');
};
ok(wait_for($primary, 'postgres', $pgq_count->('pgq maintenance', "datname = 'postgres'"), '1'),
	'primary: the maintenance worker runs');
ok(wait_for($primary, 'postgres', $pgq_count->('pgq handler', "datname = 'postgres'"), '2'),
	'primary: the two handler workers run');

# ---------------------------------------------------------------------------
# The standby, synchronous.

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
# Acknowledged commits must be on the standby: with asynchronous replication
# PostgreSQL itself may lose the last commits at a failover (they were never
# sent), which is not the extension's doing and not what is tested here.
# synchronous_commit = on: a COMMIT returns once the standby has flushed it,
# which is all a promotion needs (it replays everything flushed). Set after
# the base backup, so the promoted standby does not wait for a standby of
# its own. (The walreceiver's application_name is its cluster_name.)
$primary->append_conf(
	'postgresql.conf', qq(
synchronous_standby_names = 'standby'
synchronous_commit = on
));
$primary->reload;
ok( wait_for(
		$primary, 'postgres',
		"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'",
		'sync'),
	'the standby streams synchronously');
is($standby->safe_psql('postgres', 'SHOW synchronous_standby_names'),
	'', 'the standby itself waits for no standby (once promoted, commits do not hang)');

# ---------------------------------------------------------------------------
# The load: a Python process (Debian's psycopg 3) with 2 producer and 4
# worker threads. Each writes what it saw to its own file, one line per
# event, after the event:
#   C id queue group port time   a producer's COMMIT returned: committed
#   D id queue             its COMMIT failed: in doubt, may or may not be there
#   A id queue             its transaction failed before COMMIT: must be absent
#   K id attempt queue lease_until_us claimed_at_us port time   a claim returned
#   F id attempt queue port time   a completion's COMMIT returned (complete: true)
#   L id attempt queue port        complete returned false (lease lost)
#   S id attempt result            complete with the previous attempt of a
#                                  re-claimed job (must be false)
#   X time error                   the connection broke
#   N port time                    (re)connected
#   E ...                          something that must not happen
# claimed_at_us is lease_until minus the lease asked: the server's clock at
# the claim (pgq sets lease_until = its clock + lease in the claim).
# Workers 0-2 carry on after a broken connection: they reconnect and complete
# the jobs they hold with their attempt numbers. Worker 3 "dies with the
# primary": it holds each batch for 2 s, and what it holds when the
# connection breaks it drops, to be handed out again after the lease; then it
# comes back as an ordinary worker.
# Stops: file 'stop' (producers), file 'finish' (workers, once their hands
# are empty), or a hard deadline.

my $dir = PostgreSQL::Test::Utils::tempdir;
my $script = "$dir/load.py";
open my $fh, '>', $script or die "$script: $!";
print $fh <<'PYTHON';
import json, os, random, sys, threading, time
import psycopg

conninfo, outdir, work_lease = sys.argv[1], sys.argv[2], int(sys.argv[3])
DEADLINE = time.time() + 240

def flag(name):
    return os.path.exists(os.path.join(outdir, name))

def now():
    return f"{time.time():.6f}"

class Log:
    def __init__(self, name):
        self.f = open(os.path.join(outdir, name + ".log"), "a", buffering=1)
    def __call__(self, *fields):
        self.f.write(" ".join(str(x) for x in fields) + "\n")

def connect(log):
    while True:
        try:
            conn = psycopg.connect(conninfo, autocommit=True)
            log("N", conn.info.port, now())
            return conn
        except psycopg.OperationalError:
            if time.time() > DEADLINE:
                raise
            time.sleep(0.05)

def broken(log, conn, e):
    log("X", now(), repr(e).replace("\n", " ")[:200])
    try:
        conn.close()
    except Exception:
        pass
    return connect(log)

def producer(k):
    log = Log(f"producer{k}")
    rnd = random.Random(k)
    conn = connect(log)
    seq = 0
    while not flag("stop") and time.time() < DEADLINE:
        ids, phase = [], "stmt"
        try:
            conn.execute("BEGIN")
            for _ in range(rnd.randint(1, 4)):
                seq += 1
                payload = json.dumps({"p": k, "n": seq})
                g = "-"
                kind = seq % 16
                if kind in (0, 8):
                    q, sql, args = "handled", "SELECT pgq.enqueue('handled', %s::jsonb)", (payload,)
                elif kind in (1, 9):
                    q, sql, args = "work", ("SELECT pgq.enqueue('work', %s::jsonb, "
                                            "run_at => now() + make_interval(secs => %s))"), (payload, rnd.uniform(0.5, 4))
                elif kind == 2:
                    g = f"p{k}-g{seq // 16 % 4}"
                    q, sql, args = "work", "SELECT pgq.enqueue('work', %s::jsonb, group_key => %s)", (payload, g)
                elif kind in (3, 11):
                    q, sql, args = "work", "SELECT pgq.enqueue('work', %s::jsonb, dedupe_key => %s)", (payload, f"p{k}-{seq}")
                else:
                    q, sql, args = "work", "SELECT pgq.enqueue('work', %s::jsonb)", (payload,)
                ids.append((conn.execute(sql, args).fetchone()[0], q, g))
            phase = "commit"
            port = conn.info.port
            conn.execute("COMMIT")
            for i, q, g in ids:
                log("C", i, q, g, port, now())
        except psycopg.OperationalError as e:
            for i, q, _ in ids:
                log("D" if phase == "commit" else "A", i, q)
            conn = broken(log, conn, e)
        time.sleep(0.01)

def worker(w, abandon):
    log = Log(f"worker{w}")
    lease = f"{work_lease} seconds"
    conn = connect(log)
    held = []      # (id, attempt, queue): claimed, not finished
    turn = w
    while time.time() < DEADLINE:
        try:
            if not held:
                if flag("finish"):
                    break
                turn += 1
                q = ("work", "ticks")[turn % 2]
                rows = conn.execute(
                    "SELECT id, attempt, (extract(epoch FROM lease_until) * 1e6)::bigint,"
                    " (extract(epoch FROM lease_until - %s::interval) * 1e6)::bigint"
                    " FROM pgq.claim(%s, 10, %s::interval)", (lease, q, lease)).fetchall()
                port = conn.info.port
                for i, a, until, at in rows:
                    log("K", i, a, q, until, at, port, now())
                held = [(i, a, q) for i, a, _, _ in rows]
                if not held:
                    time.sleep(0.05)
                    continue
                if abandon:
                    time.sleep(2)
            while held:
                i, a, q = held[0]
                if not abandon:
                    time.sleep(0.003)
                conn.execute("BEGIN")
                if a > 1:
                    stale = conn.execute("SELECT pgq.complete(%s, %s)", (i, a - 1)).fetchone()[0]
                    log("S", i, a - 1, stale)
                    if stale:
                        log("E", "complete with a stale attempt returned true", i, a - 1)
                if conn.execute("SELECT pgq.complete(%s, %s)", (i, a)).fetchone()[0]:
                    conn.execute(
                        "INSERT INTO public.ledger (job, queue, attempt, port)"
                        " VALUES (%s, %s, %s, current_setting('port')::int)", (i, q, a))
                    port = conn.info.port
                    conn.execute("COMMIT")
                    log("F", i, a, q, port, now())
                else:
                    conn.execute("ROLLBACK")
                    log("L", i, a, q, conn.info.port)
                held.pop(0)
        except psycopg.OperationalError as e:
            if abandon:
                # Dies with the primary: what it held is left to its lease.
                # It comes back as a new worker, of the ordinary kind.
                held = []
                abandon = False
            conn = broken(log, conn, e)
        except psycopg.Error as e:
            # A duplicate ledger key (a second completion) or anything else
            # a correct queue never causes.
            log("E", repr(e).replace("\n", " ")[:300])
            try:
                conn.execute("ROLLBACK")
            except psycopg.Error:
                pass
            if held:
                held.pop(0)

threads = [threading.Thread(target=producer, args=(k,)) for k in range(2)]
threads += [threading.Thread(target=worker, args=(w, w == 3)) for w in range(4)]
failed = []
def guard(t):
    target = t._target
    def run(*args):
        try:
            target(*args)
        except BaseException as e:
            failed.append(repr(e))
            Log("main")("E", "thread died:", repr(e).replace("\n", " ")[:300])
    t._target = run
for t in threads:
    guard(t)
    t.start()
for t in threads:
    t.join()
sys.exit(1 if failed else 0)
PYTHON
close $fh;

my $host = $primary->host;
my ($old_port, $new_port) = ($primary->port, $standby->port);
my $conninfo =
	"host=$host,$host port=$old_port,$new_port dbname=postgres "
  . "target_session_attrs=read-write connect_timeout=2 application_name=load";
my ($load_out, $load_err) = ('', '');
my $load = IPC::Run::start([ '/usr/bin/python3', $script, $conninfo, $dir, $work_lease ],
	'>', \$load_out, '2>', \$load_err, IPC::Run::timeout(300));

# Everything the load's files say so far.
sub load_logs
{
	my %r = (committed => {}, doubt => {}, aborted => {}, claims => [], done => [],
		lost => [], stale => [], errors => [], broke => [], connects => []);
	opendir my $dh, $dir or die "$dir: $!";
	for my $file (sort grep { /\.log$/ } readdir $dh)
	{
		(my $who = $file) =~ s/\.log$//;
		open my $in, '<', "$dir/$file" or die "$dir/$file: $!";
		while (my $line = <$in>)
		{
			# A line still being written has no newline yet.
			last unless $line =~ s/\n$//;
			my ($t, @f) = split / /, $line;
			if ($t eq 'C')
			{
				$r{committed}{ $f[0] } =
				  { queue => $f[1], group => $f[2], port => $f[3], time => $f[4] };
			}
			elsif ($t eq 'D') { $r{doubt}{ $f[0] }   = $f[1]; }
			elsif ($t eq 'A') { $r{aborted}{ $f[0] } = $f[1]; }
			elsif ($t eq 'K')
			{
				push @{ $r{claims} },
				  { who => $who, id => $f[0], attempt => $f[1], queue => $f[2],
					until => $f[3], at => $f[4], port => $f[5], time => $f[6] };
			}
			elsif ($t eq 'F')
			{
				push @{ $r{done} },
				  { who => $who, id => $f[0], attempt => $f[1], queue => $f[2], port => $f[3], time => $f[4] };
			}
			elsif ($t eq 'L') { push @{ $r{lost} },  { id => $f[0], attempt => $f[1] }; }
			elsif ($t eq 'S') { push @{ $r{stale} }, { id => $f[0], attempt => $f[1], result => $f[2] }; }
			elsif ($t eq 'X') { push @{ $r{broke} }, { who => $who, time => $f[0] }; }
			elsif ($t eq 'N') { push @{ $r{connects} }, { who => $who, port => $f[0], time => $f[1] }; }
			elsif ($t eq 'E') { push @{ $r{errors} }, "$who: " . join(' ', @f); }
		}
	}
	return \%r;
}

# Waits until CODE(load_logs) is true; false after TIMEOUT seconds.
sub wait_load
{
	my ($what, $code, $timeout) = @_;
	my $deadline = time + ($timeout // $SHORT);
	while (time < $deadline)
	{
		return 1 if $code->(load_logs());
		usleep(100_000);
	}
	diag("timed out waiting for the load: $what");
	return 0;
}

# A few seconds of load on the primary, with completions.
ok( wait_load(
		'600 jobs committed, 200 completed, every worker busy',
		sub {
			my ($l) = @_;
			my %busy = map { $_->{who} => 1 } @{ $l->{done} };
			return keys(%{ $l->{committed} }) >= 600 && @{ $l->{done} } >= 200 && keys(%busy) == 4;
		},
		$LONG),
	'load: the producers commit and every worker completes on the primary');
phase('load running on the primary');

# ---------------------------------------------------------------------------
# Just before the failover, on the primary: a dedupe key on a job due later,
# a FIFO group whose head is running, and jobs held with a lease that will
# run out on the new primary.

my $later_id = $primary->safe_psql('postgres',
	"SELECT pgq.enqueue('later', '{\"k\": \"later\"}', "
	  . "run_at => pgq.clock() + interval '12 seconds', dedupe_key => 'later-1')");
my $later_run_at = $primary->safe_psql('postgres',
	"SELECT (extract(epoch FROM run_at) * 1e6)::bigint FROM pgq.jobs WHERE id = $later_id");
my @fifo = split /\n/,
  $primary->safe_psql('postgres',
	"SELECT pgq.enqueue('fifo', jsonb_build_object('n', n), group_key => 'customer-1') "
	  . "FROM generate_series(1, 3) n");
is( $primary->safe_psql('postgres',
		"SELECT string_agg(id || ' ' || attempt, ',') FROM pgq.claim('fifo', 10, '1 minute')"),
	"$fifo[0] 1", 'primary: only the head of the FIFO group is claimed');
my @held = split /\n/,
  $primary->safe_psql('postgres',
	"SELECT pgq.enqueue('held', jsonb_build_object('n', n)) FROM generate_series(1, $held_jobs) n");
my %held_until = map { split /\|/ } split /\n/,
  $primary->safe_psql('postgres',
	    "SELECT id, (extract(epoch FROM lease_until) * 1e6)::bigint "
	  . "FROM pgq.claim('held', $held_jobs, '$held_lease seconds')");
is_deeply([ sort { $a <=> $b } keys %held_until ],
	\@held, "primary: $held_jobs jobs claimed with a ${held_lease}-second lease");

# A session on the standby opened beforehand: the picture taken after the
# kill costs no connection start-up while the clients hammer the standby
# with theirs. BackgroundPsql notes every query and its whole output
# (thousands of ids below): quietly() sends its notes to /dev/null.
sub quietly
{
	my ($code) = @_;
	my $tap_out = Test::More->builder->output;
	open my $devnull, '>', '/dev/null' or die "/dev/null: $!";
	Test::More->builder->output($devnull);
	my @r = eval { $code->() };
	my $err = $@;
	Test::More->builder->output($tap_out);
	die $err if $err;
	return wantarray ? @r : $r[0];
}
my $on_standby_psql = quietly(sub { $standby->background_psql('postgres') });

# Stop the primary while the worker that dies with it holds a batch (it
# holds each for 2 s) it claimed less than a second ago.
ok( wait_load(
		'worker 3 holding a fresh batch',
		sub {
			my ($l) = @_;
			my @mine = grep { $_->{who} eq 'worker3' } @{ $l->{claims} };
			return 0 unless @mine;
			my $last = $mine[-1];
			my $later = grep { $_->{who} eq 'worker3' && $_->{time} > $last->{time} }
			  (@{ $l->{done} }, @{ $l->{broke} });
			return !$later && $last->{queue} eq 'work' && time - $last->{time} < 1;
		},
		$SHORT),
	'load: the worker that will die with the primary holds jobs');
my $running_on_primary = $primary->safe_psql('postgres',
	"SELECT count(*) FROM pgq.jobs WHERE state = 'r' AND lease_until > pgq.clock()");

my ($ok, $waited);
my $t_kill = time;
phase('kill');
$primary->stop('immediate');
my $t_stopped = time;

# The standby has everything acknowledged; once it has replayed all it
# received, take its picture before the promotion: every job it has (live,
# completed in the ledger, handled) and those running.
my ($caught_up, $all_ids, $running) = quietly(
	sub {
		my $deadline = time + $SHORT;
		my $c;
		while (1)
		{
			$c = $on_standby_psql->query_safe(
				'SELECT pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()');
			last if $c eq 't' || time > $deadline;
			usleep(10_000);
		}
		my @r = (
			$c,
			$on_standby_psql->query_safe(
				    'SELECT id FROM pgq.jobs UNION ALL SELECT job FROM public.ledger '
				  . 'UNION ALL SELECT job_id FROM public.handled UNION ALL SELECT id FROM pgq.dead_jobs'
			),
			$on_standby_psql->query_safe(
				    "SELECT j.id, q.name, j.attempt, (extract(epoch FROM j.lease_until) * 1e6)::bigint "
				  . "FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) "
				  . "WHERE j.state = 'r' AND j.lease_until > pgq.clock()"));
		$on_standby_psql->quit;
		return @r;
	});
is($caught_up, 't', 'the standby has replayed all it received');
my %on_standby = map { $_ => 1 } split /\n/, $all_ids;
my %running_at_failover = map {
	my ($id, $queue, $attempt, $until) = split /\|/;
	($id => { queue => $queue, attempt => $attempt, until => $until })
} split /\n/, $running;
my @running_work =
  grep { $running_at_failover{$_}{queue} eq 'work' } keys %running_at_failover;

my $standby_log = log_size($standby);
my $t_promote = time;
$standby->promote;
my $t_promoted = time;
phase('promoted');
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	'f', 'the standby is promoted');
my $promoted_us = $standby->safe_psql('postgres',
	'SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint');

# ---------------------------------------------------------------------------
# On the new primary, at once.

# The held jobs are still running with their attempt and lease; a worker
# that carries on completes one with its attempt number.
my $held_list = join(',', @held);
is( $standby->safe_psql('postgres',
		"SELECT string_agg(id || ' ' || state::text || ' ' || attempt || ' ' "
		  . "|| (extract(epoch FROM lease_until) * 1e6)::bigint, ',' ORDER BY id) "
		  . "FROM pgq.jobs WHERE id IN ($held_list)"),
	join(',', map { "$_ r 1 $held_until{$_}" } @held),
	'new primary: the held jobs are running, attempt 1, with the leases taken on the old primary');
my $keep = shift @held;
$held_list = join(',', @held);
is($standby->safe_psql('postgres', "SELECT pgq.complete($keep, 1)"),
	't', 'new primary: the worker that held a job completes it with its attempt (lease carried over)');
cmp_ok(
	$standby->safe_psql('postgres', 'SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint'),
	'<', $held_until{$keep},
	'... before that lease would have run out');

# The FIFO group: its head is still running, nothing else of the group is
# handed out; completed with its old attempt, the group moves on in order.
is($standby->safe_psql('postgres', "SELECT count(*) FROM pgq.claim('fifo', 10, '1 minute')"),
	'0', 'new primary: while the FIFO head runs, no other job of its group is claimed');
is($standby->safe_psql('postgres', "SELECT pgq.complete($fifo[0], 1)"),
	't', 'new primary: the FIFO head completes with the attempt claimed on the old primary');
is( $standby->safe_psql('postgres',
		"SELECT string_agg(id || ' ' || attempt, ',') FROM pgq.claim('fifo', 10, '1 minute') "
		  . "WHERE pgq.complete(id, attempt)"),
	"$fifo[1] 1", 'new primary: then the second job of the group, alone');
is( $standby->safe_psql('postgres',
		"SELECT string_agg(id || ' ' || attempt, ',') FROM pgq.claim('fifo', 10, '1 minute') "
		  . "WHERE pgq.complete(id, attempt)"),
	"$fifo[2] 1", 'new primary: then the third');

# The dedupe key of a job not due yet still holds, and the job is not handed
# out before its run_at.
is( $standby->safe_psql('postgres',
		"SELECT pgq.enqueue('later', '{\"k\": \"again\"}', dedupe_key => 'later-1')"),
	$later_id, 'new primary: an enqueue with the dedupe key of a pending job returns that job');
# (A claim's time is its lease_until minus the lease it asked for.)
my $claim_later =
	"SELECT id || ' ' || attempt || ' ' "
  . "|| ((extract(epoch FROM lease_until - interval '1 minute') * 1e6)::bigint >= $later_run_at) "
  . "|| ' ' || pgq.complete(id, attempt) FROM pgq.claim('later', 1, '1 minute')";
my $later_early = $standby->safe_psql('postgres', $claim_later);
my $later_now = $standby->safe_psql('postgres',
	"SELECT (extract(epoch FROM pgq.clock()) * 1e6)::bigint");
ok($later_early eq '' || $later_early eq "$later_id 1 true true",
	'new primary: the job due later is not claimed before its run_at ('
	  . ($later_early eq '' ? 'not claimed, ' . sprintf('%.1f', ($later_run_at - $later_now) / 1e6) . ' s before it'
		  : "claimed: $later_early") . ')');

# The workers of the new primary.
($ok, undef, $waited) =
  wait_for($standby, 'postgres', $pgq_count->('pgq launcher', 'datname IS NULL'), '1', $LONG);
ok($ok, "new primary: the 'pgq launcher' runs");
($ok, undef, $waited) = wait_for($standby, 'postgres',
	$pgq_count->('pgq maintenance', "datname = 'postgres'"), '1', $LONG);
ok($ok, "new primary: the 'pgq maintenance' worker runs for the database");
my $t_maintenance = $t_promoted + $waited;
ok( wait_for($standby, 'postgres', $pgq_count->('pgq handler', "datname = 'postgres'"), '2', $LONG),
	"new primary: the two 'pgq handler' workers run");
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'pgq%' "
		  . "AND (application_name IS DISTINCT FROM backend_type)"),
	'0', 'new primary: every pgq backend shows its name as application_name too');

# The load goes on on the new primary for a few seconds.
ok( wait_load(
		'every producer and worker active on the new primary',
		sub {
			my ($l) = @_;
			my %w = map { $_->{port} == $new_port ? ($_->{who} => 1) : () } @{ $l->{done} };
			my $new = grep { $_->{port} == $new_port } values %{ $l->{committed} };
			return $new >= 200 && keys(%w) == 4;
		},
		$LONG),
	'load: producers commit and every worker completes on the new primary');
phase('load running on the new primary');
my $l = load_logs();
my %producers_new = map { $_->{who} => 1 } grep { $_->{port} == $new_port } @{ $l->{connects} };
is_deeply([ sort grep { /producer/ } keys %producers_new ],
	[ 'producer0', 'producer1' ], 'load: both producers reconnected to the new primary');

# Enough: the producers stop, the workers go on until the end.
open my $stop, '>', "$dir/stop" or die;
close $stop;

# The held jobs: running until their lease ends, then back to pending
# through the new primary's maintenance worker, then claimed as attempt 2 at
# or after the end of the first lease. Sampled every 100 ms: a held job
# pending while its lease still runs would be released early.
my (%reclaimed, @early);
my $deadline = time + $held_lease + $LONG;
while (keys %reclaimed < @held && time < $deadline)
{
	my ($early, @rows) = split /\n/,
	  $standby->safe_psql('postgres',
		    "SELECT count(*) FROM pgq.jobs WHERE id IN ($held_list) AND state = 'p' "
		  . "AND lease_until > pgq.clock();\n"
		  . "SELECT id || ' ' || attempt || ' ' "
		  . "|| (extract(epoch FROM lease_until - interval '1 minute') * 1e6)::bigint "
		  . "FROM pgq.claim('held', 10, '1 minute')");
	push @early, $early if $early;
	for (@rows)
	{
		my ($id, $attempt, $at) = split / /;
		$reclaimed{$id} = { attempt => $attempt, at => $at };
	}
	usleep(100_000);
}
is_deeply([ sort { $a <=> $b } keys %reclaimed ],
	\@held, 'new primary: the other held jobs are handed out again');
phase('held jobs re-claimed');
is(scalar @early, 0, 'new primary: none of them pending while its lease still ran');
is_deeply(
	[ map { $reclaimed{$_}{attempt} // 'none' } @held ],
	[ map { 2 } @held ],
	'new primary: each as its second attempt');
my @again = grep { defined $reclaimed{$_}{at} } @held;
my @too_soon = grep { $reclaimed{$_}{at} < $held_until{$_} } @again;
is(scalar @too_soon, 0,
	'new primary: each claimed again only after its first lease ran out ('
	  . join(', ', map { sprintf '%.2fs after', ($reclaimed{$_}{at} - $held_until{$_}) / 1e6 } @again) . ')');
is( $standby->safe_psql('postgres',
		"SELECT string_agg(DISTINCT last_error, ',') FROM pgq.jobs WHERE id IN ($held_list)"),
	'lease expired', "new primary: their last_error says 'lease expired'");
is( $standby->safe_psql('postgres',
		"SELECT string_agg(pgq.complete(id, 1)::text, ',') FROM unnest(ARRAY[$held_list]) id"),
	join(',', map { 'false' } @held),
	'new primary: a completion with the old attempt 1 is refused for each');
is( $standby->safe_psql('postgres',
		"SELECT string_agg(pgq.complete(id, 2)::text, ',') FROM unnest(ARRAY[$held_list]) id"),
	join(',', map { 'true' } @held),
	'new primary: the completion with attempt 2 is accepted');
my $promoted_log = log_since($standby, $standby_log);
my $requeued = sum0($promoted_log =~
	  /LOG:  pgq maintenance in database "postgres": (\d+) expired leases requeued/mg);
cmp_ok($requeued, '>=', scalar @held,
	"new primary: its maintenance worker's log counts the requeued leases ($requeued)");

# New enqueues, claims and completions by hand.
my $fresh = $standby->safe_psql('postgres', "SELECT pgq.enqueue('held', '{\"k\": \"fresh\"}')");
is( $standby->safe_psql('postgres',
		"SELECT string_agg(id || ' ' || attempt || ' ' || pgq.complete(id, attempt), ',') "
		  . "FROM pgq.claim('held', 10, '1 minute')"),
	"$fresh 1 true", 'new primary: a new job is enqueued, claimed and completed');

# The job due later is claimed once due, not before.
if ($later_early eq '')
{
	($ok) = wait_for($standby, 'postgres', $claim_later, "$later_id 1 true true", $LONG);
	ok($ok, 'new primary: the job due later is claimed (at or after its run_at) and completed');
}
else
{
	is($later_early, "$later_id 1 true true",
		'new primary: the job due later was claimed (at or after its run_at) and completed');
}
phase('job due later claimed');

# ---------------------------------------------------------------------------
# Drain: the workers go on until the queues are empty.

ok( wait_for($standby, 'postgres',
		"SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) "
		  . "WHERE q.name IN ('work', 'handled', 'held', 'fifo', 'later')",
		'0', $LONG),
	'drain: every job of the load is finished');
phase('drained');
open my $finish, '>', "$dir/finish" or die;
close $finish;
my $exited = eval { $load->finish; 1 };
ok($exited && $load->result == 0, 'the load process ends cleanly')
  or diag("load: " . ($@ || 'exit ' . $load->result) . "\nstdout: $load_out\nstderr: $load_err");
# The schedule stops firing once its last job is pending and nobody claims.
ok(wait_for($standby, 'postgres',
		"SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = 'ticks'",
		'1', $LONG),
	'drain: the schedule has one job pending, the last');
phase('load ended');

# ---------------------------------------------------------------------------
# The accounts.

$l = load_logs();
is_deeply($l->{errors}, [], 'load: nothing that must not happen (no duplicate completion, '
	  . 'no stale completion accepted, no unexpected error)');

my %ledger = map {
	my ($job, $queue, $attempt, $port, $seq) = split /\|/;
	($job => { queue => $queue, attempt => $attempt, port => $port, seq => $seq })
  } split /\n/,
  $standby->safe_psql('postgres', 'SELECT job, queue, attempt, port, seq FROM public.ledger');
my %handled;
for (split /\n/, $standby->safe_psql('postgres', 'SELECT job_id, port FROM public.handled'))
{
	my ($job, $port) = split /\|/;
	push @{ $handled{$job} }, $port;
}
my @dead = split /\n/,
  $standby->safe_psql('postgres',
	"SELECT id || ' ' || queue || ' ' || reason || ' ' || coalesce(last_error, '') FROM pgq.dead_jobs");
my %live = map { $_ => 1 } split /\n/, $standby->safe_psql('postgres', 'SELECT id FROM pgq.jobs');

my %committed = %{ $l->{committed} };
my @before = grep { $committed{$_}{port} == $old_port } keys %committed;
my @after  = grep { $committed{$_}{port} == $new_port } keys %committed;
is(@before + @after, scalar keys %committed, 'every committed job was committed on one of the two');

# 1. Every job committed before the failover was on the standby before it
# was promoted.
my @missing_standby = sort { $a <=> $b } grep { !$on_standby{$_} } @before;
is_deeply(\@missing_standby, [],
	scalar(@before) . ' jobs committed on the old primary: every one on the standby before the promotion');

# 2. Every committed job is accounted for on the new primary: completed
# (ledger, or the handler's row), nothing left, nothing dead.
my @unaccounted = sort { $a <=> $b } grep {
	$committed{$_}{queue} eq 'work' ? !$ledger{$_} : !$handled{$_}
} keys %committed;
is_deeply(\@unaccounted, [],
	scalar(keys %committed) . ' committed jobs: every one completed on the new primary');
is_deeply(\@dead, [], 'no job is dead');

# 3. Exactly once: each handler job has one row; the ledger holds only jobs
# that were enqueued (committed or in doubt) or fired by the schedule; no
# completion was accepted twice.
my @handled_twice = grep { @{ $handled{$_} } != 1 } keys %handled;
is_deeply(\@handled_twice, [], 'every handled job was handled once');
my %doubt = %{ $l->{doubt} };
my @phantom = grep {
	$ledger{$_}{queue} eq 'work' && !$committed{$_} && !$doubt{$_}
} keys %ledger;
push @phantom, grep { !$committed{$_} && !$doubt{$_} } keys %handled;
is_deeply(\@phantom, [], 'no completed job that no producer enqueued');
my %accepted;
$accepted{ $_->{id} }++ for @{ $l->{done} };
my @twice = grep { $accepted{$_} > 1 } keys %accepted;
is_deeply(\@twice, [], 'no job whose completion was accepted twice ('
	  . scalar(keys %accepted) . ' accepted completions)');
my @not_in_ledger = grep { !$ledger{$_} } keys %accepted;
is_deeply(\@not_in_ledger, [], 'every accepted completion is in the ledger');

# 4. Transactions that failed before their COMMIT left nothing.
my %aborted = %{ $l->{aborted} };
my @resurrected = grep { $ledger{$_} || $handled{$_} || $live{$_} || $on_standby{$_} } keys %aborted;
is_deeply(\@resurrected, [],
	scalar(keys %aborted) . ' jobs of transactions broken before COMMIT: none exists');
my $doubt_there = grep { $ledger{$_} || $handled{$_} } keys %doubt;

# 5. Ids go on increasing across the failover (the sequence did not go back).
cmp_ok(min(@after) // 0, '>', max(@before) // 0,
	'the ids enqueued on the new primary follow the old ones');

# 6. Fencing across the failover: no job was claimed again before the lease
# of its previous claim ran out; each re-claim's stale completion refused.
my %claims_of;
push @{ $claims_of{ $_->{id} } }, $_ for @{ $l->{claims} };
my ($pairs, @early_claims) = (0);
for my $id (keys %claims_of)
{
	my %by_attempt = map { $_->{attempt} => $_ } @{ $claims_of{$id} };
	for my $n (keys %by_attempt)
	{
		my $next = $by_attempt{ $n + 1 } or next;
		$pairs++;
		push @early_claims, "$id: attempt " . ($n + 1) . ' claimed '
		  . ($by_attempt{$n}{until} - $next->{at}) / 1e6 . ' s before the lease of attempt '
		  . "$n ran out"
		  if $next->{at} < $by_attempt{$n}{until};
	}
}
is_deeply(\@early_claims, [], "no claim before the previous lease ran out ($pairs re-claims seen)");
my @stale_true = grep { $_->{result} ne 'False' } @{ $l->{stale} };
cmp_ok(scalar @{ $l->{stale} }, '>=', 1,
	'workers tried the previous attempt of re-claimed jobs (' . scalar(@{ $l->{stale} }) . ' times)');
is(scalar @stale_true, 0, 'and every such completion was refused');

# 7. The jobs of the load running at the failover: each completed once,
# either by its worker carrying on (same attempt) or, after its lease ran
# out, as a later attempt claimed no earlier than that.
cmp_ok(scalar @running_work, '>=', 1,
	'jobs of the load were running at the failover (' . scalar(@running_work) . ')');
my ($carried, $redone, @wrong) = (0, 0);
for my $id (@running_work)
{
	my $r = $running_at_failover{$id};
	my $done = $ledger{$id};
	if (!$done) { push @wrong, "$id: not completed"; next; }
	if ($done->{attempt} == $r->{attempt}) { $carried++; next; }
	$redone++;
	my ($next) = grep { $_->{attempt} == $r->{attempt} + 1 } @{ $claims_of{$id} // [] };
	push @wrong, "$id: attempt " . ($r->{attempt} + 1) . ' claimed before the lease ran out'
	  if $next && $next->{at} < $r->{until};
}
is_deeply(\@wrong, [],
	"each was completed once: $carried by the worker that held it, $redone again after its lease");
cmp_ok($redone, '>=', 1, 'some were handed out again after the lease of the worker that died');
# FIFO groups of the load: each group's jobs were completed in enqueue
# order (a group gets its jobs from one producer, so that is id order; the
# ledger's seq is taken in the completion's transaction, and a group's next
# job is only claimable once its head's completion committed).
my %groups;
for my $id (grep { $committed{$_}{group} ne '-' && $ledger{$_} } keys %committed)
{
	push @{ $groups{ $committed{$id}{group} } }, $id;
}
my @out_of_order;
for my $g (sort keys %groups)
{
	my @by_id  = sort { $a <=> $b } @{ $groups{$g} };
	my @by_seq = sort { $ledger{$a}{seq} <=> $ledger{$b}{seq} } @{ $groups{$g} };
	push @out_of_order, $g if "@by_id" ne "@by_seq";
}
cmp_ok(scalar keys %groups, '>=', 6, 'the load used FIFO groups (' . scalar(keys %groups) . ')');
is_deeply(\@out_of_order, [], 'every FIFO group of the load was completed in enqueue order');

# 8. The schedule fired on the new primary and its jobs were completed.
my @runs = map { [ split /\|/ ] } split /\n/,
  $standby->safe_psql('postgres',
	    "SELECT job_id, (extract(epoch FROM fired_at) * 1e6)::bigint FROM pgq.schedule_runs "
	  . "WHERE name = 'tick' ORDER BY fired_at");
my @fired_new = grep { $_->[1] > $promoted_us } @runs;
cmp_ok(scalar @fired_new, '>=', 1,
	'the schedule fired on the new primary (' . scalar(@fired_new) . ' of ' . scalar(@runs) . ' runs)');
my $fired_log = sum0(log_since($standby, $standby_log) =~
	  /LOG:  pgq maintenance in database "postgres": .* (\d+) schedules fired$/mg);
cmp_ok($fired_log, '>=', 1, "the new primary's maintenance worker logged the firings ($fired_log)");
my @tick_jobs = map { $_->[0] } @runs;
my @tick_undone = grep { !$ledger{$_} && !$live{$_} } @tick_jobs;
is_deeply(\@tick_undone, [], "every run's job was completed, but the last pending one");
my %is_run = map { $_ => 1 } @tick_jobs;
my @tick_extra = grep { $ledger{$_}{queue} eq 'ticks' && !$is_run{$_} } keys %ledger;
is_deeply(\@tick_extra, [], 'no job of the ticks queue that the schedule did not fire');

# 9. The handler queue was served on the new primary.
my $handled_new = grep { $_->[0] == $new_port } map { $handled{$_} } keys %handled;
cmp_ok($handled_new, '>=', 1, "the handler workers ran jobs on the new primary ($handled_new)");

# ---------------------------------------------------------------------------
# Figures.

my @first_claim = sort { $a <=> $b } map { $_->{time} } grep { $_->{port} == $new_port } @{ $l->{claims} };
my @first_commit = sort { $a <=> $b } map { $_->{time} } grep { $_->{port} == $new_port } values %committed;
diag(sprintf('jobs committed before the failover: %d (%d on the new primary after it; %d in doubt, '
	  . '%d of them there; %d broken before COMMIT)',
	scalar @before, scalar @after, scalar keys %doubt, $doubt_there, scalar keys %aborted));
diag(sprintf('running at the failover: %d (%d of the load, %d held by the test, 1 FIFO head); '
	  . 'the primary counted %d a moment before',
	scalar keys %running_at_failover, scalar @running_work, $held_jobs, $running_on_primary));
diag(sprintf('of the load\'s: %d completed by their worker after reconnecting, %d again after their lease',
	$carried, $redone));
diag(sprintf('immediate stop %.2f s; standby caught up and pictured %.2f s; pg_ctl promote %.2f s; '
	  . 'kill to writable %.2f s; maintenance worker up %.2f s after the promotion',
	$t_stopped - $t_kill, $t_promote - $t_stopped, $t_promoted - $t_promote,
	$t_promoted - $t_kill, $t_maintenance - $t_promoted));
diag(sprintf('first claim on the new primary: %.2f s after the kill (%.2f s after promote returned); '
	  . 'first commit: %.2f s after the kill',
	($first_claim[0] // 'NaN') - $t_kill, ($first_claim[0] // 'NaN') - $t_promoted,
	($first_commit[0] // 'NaN') - $t_kill));
diag(sprintf('%d completions in all, %d re-claims checked against the previous lease; test took %.0f s',
	scalar keys %ledger, $pairs, time - $test_start));
note('phases (s since the start): '
	  . join(', ', map { sprintf '%s %.1f', $_, $phase{$_} } sort { $phase{$a} <=> $phase{$b} } keys %phase));

$standby->stop;
done_testing();
