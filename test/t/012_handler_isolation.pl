# Handlers of different owners share a handler worker process; nothing one
# leaves in that process may reach the next (issue 15, H1; ADR 0012).
#
# One handler worker (pgq.handler_workers = 1), so every handler below runs
# in the same backend, which the test checks by pid. Alice's handler plants
# every kind of session leftover (settings, a temporary table, a prepared
# statement, a cursor WITH HOLD, a session advisory lock, a sequence's
# lastval; LISTEN, PostgreSQL refuses in a background worker) and reports what its session holds; bob's handler reports the same
# before and after: what he sees after must equal what he saw before.
# Then the reviewer's escalation to superuser through a planted search_path,
# and a handler that makes every later transaction read-only.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use PgqTap;

my $test_start = time;

my $node = pgq_node('handler_isolation');
$node->append_conf('postgresql.conf', "pgq.handler_workers = 1\n");
$node->start;
my $log_start = log_size($node);

sub as_role
{
	my ($role, $sql) = @_;
	return $node->safe_psql('postgres', $sql, extra_params => [ '-U', $role ]);
}

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION pgq_cpp;
CREATE ROLE alice LOGIN;
CREATE ROLE bob LOGIN;
CREATE SCHEMA alice AUTHORIZATION alice;
CREATE SCHEMA bob AUTHORIZATION bob;
SELECT pgq.grant('alice', NULL, 'admin');
SELECT pgq.grant('bob', NULL, 'admin');
-- What a session holds, as one line (kind=value;...): every kind of leftover the test plants.
CREATE FUNCTION public.session_state() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    last text;
BEGIN
    BEGIN
        last := pg_catalog.lastval()::text;
    EXCEPTION WHEN object_not_in_prerequisite_state THEN
        last := 'none';
    END;
    RETURN pg_catalog.concat_ws(';',
        'user=' || current_user,
        'search_path=' || pg_catalog.current_setting('search_path'),
        'work_mem=' || pg_catalog.current_setting('work_mem'),
        'planted=' || coalesce(pg_catalog.current_setting('pgq_test.planted', true), ''),
        'read_only=' || pg_catalog.current_setting('default_transaction_read_only'),
        'temp_table=' || (pg_catalog.to_regclass('pg_temp.leftover') IS NOT NULL),
        'prepared=' || (SELECT count(*) FROM pg_catalog.pg_prepared_statements),
        'cursors=' || (SELECT count(*) FROM pg_catalog.pg_cursors WHERE is_holdable),
        'advisory=' || (SELECT count(*) FROM pg_catalog.pg_locks
                         WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()),
        'lastval=' || last);
END $$;
CREATE TABLE public.seen (
    queue  text NOT NULL,
    tag    text NOT NULL,
    pid    int NOT NULL,
    state  text NOT NULL);
GRANT INSERT ON public.seen TO PUBLIC;
});

# Alice's handler plants, by the payload, then reports its session.
as_role(
	'alice', q{
CREATE SEQUENCE alice.counter;
GRANT USAGE, SELECT ON SEQUENCE alice.counter TO PUBLIC;  -- so lastval() can show it
CREATE FUNCTION alice.plant(job pgq.claimed_job) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF job.payload ? 'plant' THEN
        PERFORM pg_catalog.set_config('search_path', 'alice, pg_catalog, public', false);
        PERFORM pg_catalog.set_config('work_mem', '77MB', false);
        PERFORM pg_catalog.set_config('pgq_test.planted', 'by alice', false);
        PERFORM pg_catalog.set_config('application_name', 'planted by alice', false);
        CREATE TEMP TABLE leftover (x int);
        GRANT ALL ON leftover TO PUBLIC;
        EXECUTE 'PREPARE planted_statement AS SELECT 1';
        EXECUTE 'DECLARE planted_cursor CURSOR WITH HOLD FOR SELECT 1';
        PERFORM pg_catalog.pg_advisory_lock(4242);
        PERFORM pg_catalog.nextval('alice.counter');
    END IF;
    IF job.payload ? 'plant_and_fail' THEN
        -- What an abort does not take back: PREPARE and session advisory locks.
        EXECUTE 'PREPARE failed_statement AS SELECT 2';
        PERFORM pg_catalog.pg_advisory_lock(4343);
        RAISE EXCEPTION 'alice fails after planting';
    END IF;
    IF job.payload ? 'read_only' THEN
        PERFORM pg_catalog.set_config('default_transaction_read_only', 'on', false);
    END IF;
    INSERT INTO public.seen (queue, tag, pid, state)
    VALUES (job.queue, job.payload->>'tag', pg_catalog.pg_backend_pid(), public.session_state());
END $$;
SELECT pgq.create_queue('alice_q', handler => 'alice.plant(pgq.claimed_job)');
});

# Bob's handler only reports.
as_role(
	'bob', q{
CREATE FUNCTION bob.look(job pgq.claimed_job) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.seen (queue, tag, pid, state)
    VALUES (job.queue, job.payload->>'tag', pg_catalog.pg_backend_pid(), public.session_state());
END $$;
SELECT pgq.create_queue('bob_q', handler => 'bob.look(pgq.claimed_job)');
});

# Enqueues one job as ROLE and waits until its handler reported TAG.
sub run_job
{
	my ($role, $queue, $payload, $tag) = @_;
	as_role($role, "SELECT pgq.enqueue('$queue', '$payload')");
	return wait_for($node, 'postgres', "SELECT count(*) FROM public.seen WHERE tag = '$tag'",
		'1', $LONG);
}

sub seen
{
	my ($tag, $column) = @_;
	return $node->safe_psql('postgres', "SELECT $column FROM public.seen WHERE tag = '$tag'");
}

ok(run_job('bob', 'bob_q', '{"tag": "before"}', 'before'), 'bob\'s first job is handled');
ok(run_job('alice', 'alice_q', '{"tag": "plant", "plant": true}', 'plant'),
	'alice\'s planting job is handled');
ok(run_job('bob', 'bob_q', '{"tag": "after"}', 'after'), 'bob\'s next job is handled');

my $pid = seen('before', 'pid');
is(seen('plant', 'pid') . ' ' . seen('after', 'pid'),
	"$pid $pid", 'all three ran in the same handler worker process');

my %before = map { split /=/, $_, 2 } split /;/, seen('before', 'state');
my %planted = map { split /=/, $_, 2 } split /;/, seen('plant', 'state');
my %after = map { split /=/, $_, 2 } split /;/, seen('after', 'state');
is($before{user}, 'bob', 'bob\'s handler runs as bob');
is($planted{user}, 'alice', 'alice\'s handler runs as alice');
# Each leftover was really there in alice's session (else the next check
# proves nothing), and none of it reached bob's.
for my $kind (qw(search_path work_mem planted temp_table prepared cursors advisory lastval))
{
	isnt($planted{$kind}, $before{$kind}, "alice's handler planted $kind ($planted{$kind})");
	is($after{$kind}, $before{$kind}, "bob's next handler does not see alice's $kind");
}
is($after{user}, 'bob', 'and runs as bob, not as alice');
is( $node->safe_psql(
		'postgres',
		"SELECT application_name FROM pg_stat_activity WHERE pid = $pid"),
	'pgq handler',
	'the worker still shows application_name "pgq handler" after a handler changed it');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242"),
	'0', 'alice\'s session advisory lock is no longer held by anyone');

# A handler that fails: the abort takes back most of what it did, but not a
# prepared statement or a session advisory lock.
as_role('alice',
	q{SELECT pgq.enqueue('alice_q', '{"plant_and_fail": true}', max_attempts => 1)});
ok( wait_for(
		$node, 'postgres',
		"SELECT last_error FROM pgq.dead_jobs WHERE queue = 'alice_q'",
		qr/alice fails after planting/, $LONG),
	'alice\'s failing job is dead-lettered with its error');
ok(run_job('bob', 'bob_q', '{"tag": "after_fail"}', 'after_fail'), 'bob\'s next job is handled');
my %after_fail = map { split /=/, $_, 2 } split /;/, seen('after_fail', 'state');
is( "$after_fail{prepared} $after_fail{advisory}",
	"$before{prepared} $before{advisory}",
	'bob does not see the prepared statement or the advisory lock of alice\'s failed handler');

# The reviewer's escalation (issue 15, H1): eve, admin on every queue with a
# schema of her own, plants a search_path that resolves a superuser-owned
# handler's unqualified lower() to her function, which then runs as the
# superuser.
$node->safe_psql(
	'postgres', q{
CREATE ROLE eve LOGIN;
CREATE SCHEMA eve AUTHORIZATION eve;
SELECT pgq.grant('eve', NULL, 'admin');
CREATE FUNCTION public.su_h(job pgq.claimed_job) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lower(job.payload->>'name');
    INSERT INTO public.seen (queue, tag, pid, state)
    VALUES (job.queue, job.payload->>'name', pg_catalog.pg_backend_pid(), current_user);
END $$;
SELECT pgq.create_queue('su_q', handler => 'public.su_h(pgq.claimed_job)');
});
as_role(
	'eve', q{
CREATE FUNCTION eve.lower(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
        EXECUTE 'ALTER ROLE eve SUPERUSER';
    END IF;
    RETURN pg_catalog.lower($1);
END $$;
CREATE FUNCTION eve.h(job pgq.claimed_job) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'eve, pg_catalog, public', false);
    INSERT INTO public.seen (queue, tag, pid, state)
    VALUES (job.queue, job.payload->>'tag', pg_catalog.pg_backend_pid(), current_user);
END $$;
SELECT pgq.create_queue('eve_q', handler => 'eve.h(pgq.claimed_job)');
});
ok(run_job('eve', 'eve_q', '{"tag": "eve"}', 'eve'), 'eve\'s handler ran');
ok(run_job('postgres', 'su_q', '{"name": "su"}', 'su'), 'the superuser\'s handler ran after it');
is(seen('eve', 'pid'), seen('su', 'pid'), 'in the same process');
is($node->safe_psql('postgres', "SELECT rolsuper FROM pg_roles WHERE rolname = 'eve'"),
	'f', 'eve did not make herself superuser');

# A handler that makes the session's transactions read-only: the worker goes
# on claiming and completing, for alice's queue and for bob's.
ok(run_job('alice', 'alice_q', '{"tag": "ro", "read_only": true}', 'ro'),
	'alice\'s read-only job is handled');
is(seen('ro', 'state') =~ /read_only=on/ ? 1 : 0, 1, 'it set default_transaction_read_only');
ok(run_job('bob', 'bob_q', '{"tag": "after_ro"}', 'after_ro'),
	'bob\'s queue is still served after it');
ok(run_job('alice', 'alice_q', '{"tag": "alice_after_ro"}', 'alice_after_ro'),
	'and alice\'s own next job too');
like(seen('after_ro', 'state'), qr/read_only=off/, 'bob\'s handler runs read-write');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) "
		  . "WHERE q.name IN ('alice_q', 'bob_q')"),
	'0', 'no job of either queue is left behind');

unlike(
	log_since($node, $log_start),
	qr/terminating any other active server processes|was terminated by signal|PANIC/,
	'no server process crashed');

$node->stop;
note(sprintf('012_handler_isolation.pl ran for %.1f s', time - $test_start));
done_testing();
