
# pg_dump / pg_restore: a database with queues, pending (due, delayed,
# deduplicated, grouped and waiting), running and dead jobs, schedules,
# teams, assignments, switches, ladders, once keys, subscriptions and events
# comes back whole in a fresh database (every pgq table row for row, every
# sequence where it was), and the restored queue works: the running job
# completes with its attempt token, claims find the restored jobs in order,
# the group moves on, dedupe still holds, new ids do not collide, turns go on
# where they were, and the maintenance worker runs the restored schedule.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $node = pgq_node('main');
$node->start;
# No worker in the source database: nothing may change it between the
# fingerprint and the dump (a schedule firing, counts being flushed); none
# in the restored one either until its fingerprint is taken (the schedule
# every 5 seconds could fire in between).
$node->safe_psql('postgres', "ALTER SYSTEM SET pgq.databases = 'none'");
$node->reload;
$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', 'CREATE EXTENSION pgq_cpp');
# Roles are cluster-wide: restored grants name them again (pg_dumpall
# --roles-only restores them elsewhere first).
$node->safe_psql('postgres', 'CREATE ROLE mail_worker; CREATE ROLE ops');

# --- a database in use ---------------------------------------------------------
$node->safe_psql(
	'src', q{
SELECT pgq.create_queue('mail', max_attempts => 2, lease => '10 minutes', rate_limit => 50);
SELECT pgq.create_queue('orbits', retention => '2 days');
SELECT pgq.create_queue('idle');
SELECT pgq.pause('idle');
SELECT pgq.enqueue('mail', '{"n": "due"}', priority => 3);
SELECT pgq.enqueue('mail', '{"n": "later"}', run_at => '2999-01-01');
SELECT pgq.enqueue('mail', '{"n": "dedupe"}', dedupe_key => 'signup-42');
SELECT pgq.enqueue('mail', '{"n": "g1"}', group_key => 'cust-7');
SELECT pgq.enqueue('mail', '{"n": "g2"}', group_key => 'cust-7');
SELECT pgq.enqueue('orbits', '{"sat": 25544}');
SELECT pgq.schedule('refresh-tle', 'orbits', '@every 5 seconds', '{"what": "tle"}');
SELECT pgq.add_member('sellers', m) FROM unnest(ARRAY['ann', 'bob', 'cat']) m;
SELECT pgq.next_turn('sellers');
SELECT pgq.assign('sellers', 'conversation-1');
SELECT pgq.set_switch('send-enabled', true);
SELECT pgq.advance('lead-9', 2);
SELECT pgq.once('welcome-42');
SELECT pgq.create_topic('orbit.changed');
SELECT pgq.subscribe('orbit.changed', 'orbits');
SELECT pgq.publish('orbit.changed', '{"sat": 25544}');
SELECT pgq.grant('mail_worker', 'mail', 'consume');
SELECT pgq.grant('ops', NULL, 'admin');
});
# One running job (the highest priority: "due"), one dead by exhaustion
# (claimed and failed twice), one cancelled.
my ($run_id, $run_attempt) = split /\|/,
  $node->safe_psql('src', "SELECT id, attempt FROM pgq.claim('mail', 1)");
$node->safe_psql(
	'src', q{
SELECT pgq.enqueue('mail', '{"n": "doomed"}', priority => 2);
SELECT pgq.enqueue('mail', '{"n": "cancelled"}', run_at => '2998-01-01');
});
for my $try (1 .. 2)
{
	my ($id, $attempt) = split /\|/,
	  $node->safe_psql('src', "SELECT id, attempt FROM pgq.claim('mail', 1)");
	$node->safe_psql('src', "SELECT pgq.fail($id, $attempt, 'smtp 550', '0')");
}
$node->safe_psql('src',
	q{SELECT pgq.cancel(id) FROM pgq.jobs WHERE payload->>'n' = 'cancelled'});
is( $node->safe_psql(
		'src',
		"SELECT string_agg(payload->>'n' || ':' || state::text, ',' ORDER BY id) FROM pgq.jobs "
		  . "WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'mail')"),
	'due:r,later:p,dedupe:p,g1:p,g2:w',
	'the source holds running, pending, delayed, deduplicated and waiting jobs');
is($node->safe_psql('src', "SELECT string_agg(reason, ',' ORDER BY id) FROM pgq.dead_jobs"),
	'exhausted,cancelled', 'and dead ones');
is($node->safe_psql('src', "SELECT count(*) FROM pg_stat_activity WHERE datname = 'src' "
	  . "AND backend_type LIKE 'pgq%'"),
	'0', 'no pgq worker runs in the source database');

# History (1.2): a completed job kept with its result, in pgq.job_history.
$node->safe_psql('src', q{SELECT pgq.create_queue('reports', keep_completed => '1 day')});
my $report = $node->safe_psql('src', q{SELECT pgq.enqueue('reports', '{"month": 11}')});
$node->safe_psql('src', q{SELECT pgq.claim('reports')});
$node->safe_psql('src', qq{SELECT pgq.complete($report, 1, '{"url": "s3://r/11.pdf"}')});

# Caps and dependencies (1.2): a capped queue, and a job waiting for its
# parent, with its row in pgq.job_dependencies.
$node->safe_psql('src',
	q{SELECT pgq.create_queue('predict', max_running => 2, group_concurrency => 3)});
my $fetch = $node->safe_psql('src', q{SELECT pgq.enqueue('predict', '{"step": "fetch"}')});
my $predict = $node->safe_psql('src',
	qq{SELECT pgq.enqueue('predict', '{"step": "predict"}', after => ARRAY[$fetch])});

# Every row of every pgq table, and every pgq sequence, as text. Not the
# history and dead-letter rings' positions (their pgq.rings and
# pgq.ring_segments rows, negative ids), which a dump does not carry: rows
# are where they were, and the restored database adopts its rings again
# (ADR 0026). Streams' rings (positive ids) are compared.
my $contents = q{
SELECT string_agg(format('%s: %s', c.relname, pgq_tap_rows(c.oid)), E'\n' ORDER BY c.relname)
  FROM pg_class c WHERE c.relnamespace = 'pgq'::regnamespace AND c.relkind IN ('r', 'S')};
my $helper = q{
CREATE FUNCTION pg_temp.pgq_tap_rows(rel regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE result text;
BEGIN
  IF (SELECT relkind FROM pg_class WHERE oid = rel) = 'S' THEN
    EXECUTE format('SELECT last_value || '' '' || is_called FROM %s', rel) INTO result;
  ELSE
    EXECUTE format('SELECT count(*) || '' rows, '' || coalesce(md5(string_agg(t::text, ''|'' ORDER BY t::text)), ''-'') FROM %s t%s', rel,
                   CASE WHEN rel IN ('pgq.rings'::regclass, 'pgq.ring_segments'::regclass)
                        THEN ' WHERE ring_id > 0' ELSE '' END)
      INTO result;
  END IF;
  RETURN result;
END $$;
};
(my $query = $contents) =~ s/pgq_tap_rows/pg_temp.pgq_tap_rows/;
my $before = $node->safe_psql('src', $helper . $query);
like($before, qr/^grants: 2 rows, \w{32}$/m, 'the fingerprint covers the grants (by role name)');
is($node->safe_psql('src', 'SELECT count(*) FROM pgq.jobs'), '9',
	'nine unfinished jobs (5 mail jobs, 2 orbits jobs, 2 predict jobs)');
# (The plain ones are on their queues' rings, whose segments the
# fingerprint covers too.)
my $rows = $node->safe_psql('src', 'SELECT count(*) FROM pgq.job_rows');
like($before, qr/^job_rows: $rows rows, (\w{32}|-)$/m, 'the fingerprint covers the jobs table');
like($before, qr/^job_dependencies: 1 rows, \w{32}$/m, 'and the dependencies');
# (in a segment of the ring of its queue's retention class, ADR 0021)
like($before, qr/^job_history_\d+: 1 rows, \w{32}$/m, 'and the history of completed jobs');

# --- dump and restore ------------------------------------------------------------
my $dump = $node->basedir . '/src.dump';
$node->command_ok(
	[ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', $dump ],
	'pg_dump -Fc of the database');
$node->safe_psql('postgres', 'CREATE DATABASE dst');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', $node->connstr('dst'), $dump ],
	'pg_restore into a fresh database, without an error');

is($node->safe_psql('dst', $helper . $query),
	$before, 'every pgq table and sequence is restored row for row');
$node->safe_psql('postgres', "ALTER SYSTEM SET pgq.databases = 'dst'");
$node->reload;

# --- the restored queue works ----------------------------------------------------
is($node->safe_psql('dst', "SELECT state || ' ' || (result->>'url') FROM pgq.job($report)"),
	'done s3://r/11.pdf', 'a completed job is still known, with its result');
is($node->safe_psql('dst', "SELECT pgq.complete($run_id, $run_attempt)"),
	't', 'the job that was running completes with its attempt token');
is( $node->safe_psql(
		'dst',
		"SELECT string_agg(payload->>'n', ',' ORDER BY id) FROM pgq.claim('mail', 10)"),
	'dedupe,g1', 'a claim finds the restored due jobs (the delayed one and the waiting one not)');
my ($g1, $g1_attempt) = split /\|/, $node->safe_psql('dst',
	"SELECT id, attempt FROM pgq.jobs WHERE payload->>'n' = 'g1'");
$node->safe_psql('dst', "SELECT pgq.complete($g1, $g1_attempt)");
is($node->safe_psql('dst', "SELECT payload->>'n' FROM pgq.claim('mail', 1)"),
	'g2', 'the group moves on to its next job');
is( $node->safe_psql(
		'dst',
		"SELECT pgq.enqueue('mail', '{}', dedupe_key => 'signup-42') = "
		  . "(SELECT id FROM pgq.jobs WHERE dedupe_key = 'signup-42')"),
	't', 'the dedupe key is still held by the restored job');
is( $node->safe_psql(
		'dst',
		"SELECT pgq.enqueue('mail', '{}') > (SELECT max(id) FROM pgq.dead_jobs)"),
	't', 'new job ids continue after the restored ones');
is($node->safe_psql('dst', "SELECT pgq.next_turn('sellers')"),
	'cat', 'turns go on where they were (ann, then bob for the assignment)');
is($node->safe_psql('dst', "SELECT pgq.assign('sellers', 'conversation-1')"),
	'bob', 'the assignment made before the dump holds');
is($node->safe_psql('dst', "SELECT pgq.switch('send-enabled')"), 't', 'switches are kept');
is($node->safe_psql('dst', "SELECT pgq.once('welcome-42')"), 'f', 'once keys are kept');
is($node->safe_psql('dst', "SELECT paused FROM pgq.queues WHERE name = 'idle'"),
	't', 'a paused queue stays paused');
is( $node->safe_psql(
		'dst',
		"SET ROLE mail_worker; SELECT pgq.has_queue_privilege('mail', 'consume'), "
		  . "pgq.has_queue_privilege('mail', 'produce'), pgq.has_queue_privilege('ops', 'idle', 'admin')"),
	't|f|t',
	'the restored grants hold: mail_worker consumes mail, ops administers every queue');
is( $node->safe_psql(
		'dst', "SELECT max_running || ' ' || group_concurrency FROM pgq.queues WHERE name = 'predict'"),
	'2 3', 'the caps are kept');
is($node->safe_psql('dst', "SELECT state || ' ' || open_parents FROM pgq.job($predict)"),
	'waiting 1', 'a job waiting for its parent still waits');
$node->safe_psql('dst', "SELECT pgq.complete(id, attempt) FROM pgq.claim('predict', 10)");
is($node->safe_psql('dst', "SELECT state FROM pgq.job($predict)"),
	'ready', "its parent's completion makes it ready");
is($node->safe_psql('dst', "SELECT pgq.retry_dead('mail', 10)"),
	'2', 'the restored dead jobs can be retried');
ok( wait_for(
		$node, 'dst',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = 'dst' "
		  . "AND backend_type = 'pgq maintenance'",
		't'),
	'the maintenance worker starts for the restored database');
ok( wait_for(
		$node, 'dst',
		"SELECT count(*) FROM pgq.jobs WHERE payload->>'what' = 'tle'", '1'),
	'it fires the restored schedule');

$node->stop;
done_testing();
