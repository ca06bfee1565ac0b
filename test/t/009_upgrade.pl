
# The upgrade path: a database that installed release 1.0 and holds live
# jobs (pending, delayed, grouped, running, dead), a schedule and a team is
# updated with ALTER EXTENSION pgq_cpp UPDATE. It ends at the default version
# with the same catalog as a fresh install (every object of the extension,
# every column, index, constraint, view, function definition, privilege and
# configuration-dump entry), and with every job: the running one completes
# with its attempt token, the others are claimed as before.
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
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('postgres', 'CREATE DATABASE old');
$node->safe_psql('postgres', 'CREATE DATABASE old11');
$node->safe_psql('postgres', 'CREATE DATABASE old12');
$node->safe_psql('postgres', 'CREATE DATABASE old20');
$node->safe_psql('postgres', 'CREATE DATABASE old201');

my $default = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'pgq_cpp'");
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(version, ',' ORDER BY version) FROM pg_available_extension_versions "
		  . "WHERE name = 'pgq_cpp'"),
	"1.0,1.1,1.2,2.0,2.0.1,$default",
	"releases 1.0, 1.1, 1.2, 2.0 and 2.0.1 and the default version $default are installable");

$node->safe_psql('fresh', 'CREATE EXTENSION pgq_cpp');
is($node->safe_psql('fresh', "SELECT extversion FROM pg_extension WHERE extname = 'pgq_cpp'"),
	$default, 'a fresh install is at the default version');

# --- release 1.0, in use ----------------------------------------------------------
$node->safe_psql('old', "CREATE EXTENSION pgq_cpp VERSION '1.0'");
$node->safe_psql(
	'old', q{
SELECT pgq.create_queue('mail', max_attempts => 1, lease => '10 minutes');
SELECT pgq.enqueue('mail', '{"n": "running"}', priority => 9);
SELECT pgq.enqueue('mail', '{"n": "due"}');
SELECT pgq.enqueue('mail', '{"n": "later"}', run_at => '2999-01-01');
SELECT pgq.enqueue('mail', '{"n": "g1"}', group_key => 'c');
SELECT pgq.enqueue('mail', '{"n": "g2"}', group_key => 'c');
SELECT pgq.enqueue('mail', '{"n": "doomed"}', priority => 5);
SELECT pgq.schedule('nightly', 'mail', '0 3 * * *');
SELECT pgq.add_member('sellers', 'ann');
});
my ($run_id, $run_attempt) = split /\|/,
  $node->safe_psql('old', "SELECT id, attempt FROM pgq.claim('mail', 1)");
my ($doomed, $doomed_attempt) = split /\|/,
  $node->safe_psql('old', "SELECT id, attempt FROM pgq.claim('mail', 1)");
is($node->safe_psql('old', "SELECT pgq.fail($doomed, $doomed_attempt, 'boom')"),
	'dead', 'a job is dead-lettered before the update');
# The new binaries serve the 1.0 catalog (no pgq.grants yet): there a role
# that owns no queue and is no superuser may use none, and is told so.
$node->safe_psql('postgres', 'CREATE ROLE app_1_0');
$node->safe_psql('old', 'GRANT USAGE ON SCHEMA pgq TO app_1_0');
my (undef, undef, $refused) = $node->psql('old',
	"SET ROLE app_1_0; SELECT pgq.enqueue('mail', '{}')");
like($refused, qr/permission denied for queue "mail"/,
	'1.0 catalog, new binaries: a role without a queue of its own is refused (42501)');
$node->safe_psql('old', 'REVOKE USAGE ON SCHEMA pgq FROM app_1_0');
# A session that lives across the update claims with the 1.0 statement
# before it and records who claimed after it (claimed_by is new in 1.1).
$node->safe_psql('old',
	"SELECT pgq.create_queue('long'); SELECT pgq.enqueue_many('long', ARRAY['{}', '{}']::jsonb[])");
my $long = $node->background_psql('old');
my $long_pid = $long->query_safe('SELECT pg_backend_pid()');
my $long_first = $long->query_safe("SELECT id FROM pgq.claim('long', 1)");
my $jobs_before = $node->safe_psql('old',
	"SELECT string_agg(id || ':' || state::text || ':' || attempt, ',' ORDER BY id) FROM pgq.jobs");

$node->safe_psql('old', 'ALTER EXTENSION pgq_cpp UPDATE');
is($node->safe_psql('old', "SELECT extversion FROM pg_extension WHERE extname = 'pgq_cpp'"),
	$default, "ALTER EXTENSION UPDATE reaches $default");

# --- the same catalog ------------------------------------------------------------------
# Names, not OIDs: every object that belongs to the extension with its
# definition, then the details of the schema's tables.
my $catalog = q{
WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'pgq_cpp'),
members AS (
  SELECT d.classid, d.objid FROM pg_depend d, ext
   WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
rels AS (SELECT oid FROM pg_class WHERE relnamespace = 'pgq'::regnamespace)
SELECT string_agg(line, E'\n' ORDER BY line) FROM (
  SELECT 'member ' || pg_describe_object(m.classid, m.objid, 0) || ' ' || coalesce(
           CASE m.classid
             WHEN 'pg_proc'::regclass THEN
               (SELECT pg_get_functiondef(p.oid) || ' acl=' || coalesce(p.proacl::text, '-')
                       || ' config=' || coalesce(p.proconfig::text, '-')
                       || ' secdef=' || p.prosecdef
                  FROM pg_proc p WHERE p.oid = m.objid)
             WHEN 'pg_class'::regclass THEN
               (SELECT c.relkind::text || ' acl=' || coalesce(c.relacl::text, '-')
                       || ' options=' || coalesce(c.reloptions::text, '-')
                  FROM pg_class c WHERE c.oid = m.objid)
             WHEN 'pg_namespace'::regclass THEN
               (SELECT 'acl=' || coalesce(n.nspacl::text, '-') FROM pg_namespace n WHERE n.oid = m.objid)
             ELSE '' END, '') AS line
    FROM members m
  UNION ALL
  SELECT format('column %s.%s #%s %s notnull=%s default=%s', a.attrelid::regclass, a.attname,
                a.attnum, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                pg_get_expr(ad.adbin, ad.adrelid))
    FROM pg_attribute a LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
   WHERE a.attrelid IN (SELECT oid FROM rels) AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT format('constraint %s %s %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid))
    FROM pg_constraint c WHERE c.connamespace = 'pgq'::regnamespace
  UNION ALL
  SELECT format('view %s %s', c.oid::regclass, pg_get_viewdef(c.oid))
    FROM pg_class c WHERE c.oid IN (SELECT oid FROM rels) AND c.relkind = 'v'
  UNION ALL
  SELECT format('trigger %s %s', t.tgrelid::regclass, pg_get_triggerdef(t.oid))
    FROM pg_trigger t WHERE t.tgrelid IN (SELECT oid FROM rels) AND NOT t.tgisinternal
  UNION ALL
  SELECT format('dumped %s %s', cfg.rel::regclass, coalesce(cfg.cond, '-'))
    FROM pg_extension e, ext, unnest(e.extconfig, e.extcondition) AS cfg(rel, cond)
   WHERE e.oid = ext.oid
) lines};
my $fresh_catalog = $node->safe_psql('fresh', $catalog);
like($fresh_catalog, qr/^member function pgq\.claim\(/m, 'the catalog description lists functions');
like($fresh_catalog, qr/^index CREATE INDEX jobs_ready_idx/m, 'and indexes');
like($fresh_catalog, qr/^dumped pgq\.jobs /m, 'and configuration-dump entries');
is($node->safe_psql('old', $catalog), $fresh_catalog,
	'the updated database has exactly the catalog of a fresh install');

# --- no job lost ---------------------------------------------------------------------
is( $node->safe_psql(
		'old',
		"SELECT string_agg(id || ':' || state::text || ':' || attempt, ',' ORDER BY id) FROM pgq.jobs"),
	$jobs_before, 'every job is there, in the state and attempt it had');
is($node->safe_psql('old', "SELECT pgq.complete($run_id, $run_attempt)"),
	't', 'the job running across the update completes with its attempt token');
is( $node->safe_psql(
		'old', "SELECT string_agg(payload->>'n', ',' ORDER BY id) FROM pgq.claim('mail', 10)"),
	'due,g1', 'the pending jobs are claimed as before');
is($node->safe_psql('old', "SELECT count(*) FROM pgq.dead_jobs WHERE id = $doomed"),
	'1', 'the dead job is kept');
is($node->safe_psql('old', "SELECT count(*) FROM pgq.schedules WHERE name = 'nightly'"),
	'1', 'the schedule is kept');
is($node->safe_psql('old', "SELECT pgq.next_turn('sellers')"), 'ann', 'the team is kept');

# --- release 1.1, with topics in use and values 1.2 refuses ---------------------
# Topics had no owner and publishing took the produce right on every
# subscribed queue; a retention of 200000 years and a job due at -infinity
# were accepted (and failed maintenance and monitoring, issue 15 M3).
$node->safe_psql('postgres', 'CREATE ROLE team_a; CREATE ROLE pub_both; CREATE ROLE pub_half');
$node->safe_psql(
	'old11', q{
CREATE EXTENSION pgq_cpp VERSION '1.1';
SELECT pgq.grant('team_a', NULL, 'admin');
SET ROLE team_a;
SELECT pgq.create_queue('qa');
SELECT pgq.create_queue('qb');
RESET ROLE;
-- (The new binaries refuse both values: written by hand as 1.1 stored them.)
SELECT pgq.create_queue('far');
UPDATE pgq.queues SET retention = '200000 years' WHERE name = 'far';
SELECT pgq.enqueue('far', '{"n": "minus infinity"}');
UPDATE pgq.jobs SET run_at = '-infinity' WHERE payload->>'n' = 'minus infinity';
SELECT pgq.subscribe('tb', 'qa'), pgq.subscribe('tb', 'qb');
SELECT pgq.grant('pub_both', 'qa', 'produce'), pgq.grant('pub_both', 'qb', 'produce');
SELECT pgq.grant('pub_half', 'qa', 'produce');
SELECT pgq.publish('lonely', '{}');
});
# Live jobs in every state, and dead ones, across the update (issue 17:
# pgq.dead_jobs becomes a partitioned ring, its 1.1 table segment 0).
$node->safe_psql(
	'old11', q{
SELECT pgq.create_queue('life', max_attempts => 1);
SELECT pgq.enqueue('life', '{"n": "run"}', priority => 9);
SELECT pgq.enqueue('life', '{"n": "die"}', priority => 8);
SELECT pgq.enqueue('life', '{"n": "ready"}', dedupe_key => 'k');
SELECT pgq.enqueue('life', '{"n": "later"}', run_at => '2999-01-01');
SELECT pgq.enqueue('life', '{"n": "head"}', group_key => 'g');
SELECT pgq.enqueue('life', '{"n": "behind"}', group_key => 'g');
SELECT pgq.enqueue('life', '{"n": "cancelled"}');
SELECT pgq.claim('life', 2);
SELECT pgq.fail(id, 1, 'boom') FROM pgq.jobs WHERE payload->>'n' = 'die';
SELECT pgq.cancel(id) FROM pgq.jobs WHERE payload->>'n' = 'cancelled';
});
my $life_sql = q{SELECT string_agg(payload->>'n' || ':' || state::text || ':' || attempt, ',' ORDER BY id)
  FROM pgq.jobs WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'life')};
my $dead_sql = q{SELECT string_agg(id || ':' || reason || ':' || coalesce(last_error, '-'), ',' ORDER BY id)
  FROM pgq.dead_jobs};
my $life_before = $node->safe_psql('old11', $life_sql);
my $dead_before = $node->safe_psql('old11', $dead_sql);
is($life_before, 'run:r:1,ready:p:0,later:p:0,head:p:0,behind:w:0',
	'1.1: live jobs running, ready, scheduled, heading and waiting in a group');
my (undef, undef, $blind) = $node->psql('old11', 'SELECT * FROM pgq.queue_stats');
like($blind, qr/cannot subtract infinite timestamps/, '1.1: a job due at -infinity blinds queue_stats');
$node->safe_psql('old11', 'ALTER EXTENSION pgq_cpp UPDATE');
is($node->safe_psql('old11', $catalog), $fresh_catalog,
	'1.1 updated: exactly the catalog of a fresh install');
is($node->safe_psql('old11', $life_sql), $life_before, '1.1 updated: every live job keeps its state and attempt');
is($node->safe_psql('old11', $dead_sql), $dead_before, '1.1 updated: every dead job is kept');
is( $node->safe_psql(
		'old11',
		q{SELECT string_agg(payload->>'n' || ':' || state, ',' ORDER BY id) FROM pgq.list_jobs('life')}),
	'run:running,die:dead,ready:ready,later:scheduled,head:ready,behind:waiting,cancelled:cancelled',
	'1.1 updated: pgq.list_jobs sees every job where it is');
is( $node->safe_psql(
		'old11',
		q{SELECT pgq.complete(id, 1, '{"ok": true}') FROM pgq.jobs WHERE payload->>'n' = 'run'}),
	't', '1.1 updated: the job claimed before the update completes (with a result)');
is( $node->safe_psql(
		'old11', "SELECT string_agg(name || ':' || owner::text, ',' ORDER BY name) FROM pgq.topics"),
	'lonely:postgres,tb:team_a',
	'1.1 topics are owned by their first subscribed queue\'s owner, else by the tables\' owner');
is($node->safe_psql('old11', "SET ROLE pub_both; SELECT pgq.publish('tb', '{}') > 0"),
	't', 'a role that could publish in 1.1 still may');
my (undef, undef, $half) = $node->psql('old11', "SET ROLE pub_half; SELECT pgq.publish('tb', '{}')");
like($half, qr/permission denied for topic "tb"/, 'one that could not still may not');
$node->safe_psql('old11',
	"SET ROLE team_a; SELECT pgq.create_queue('qc'); SELECT pgq.subscribe('tb', 'qc')");
is($node->safe_psql('old11', "SELECT count(*) FROM pgq.subscriptions WHERE topic = 'tb'"),
	'3', 'the owner of the subscribed queues may subscribe another');
is( $node->safe_psql(
		'old11',
		"SELECT retention FROM pgq.queues WHERE name = 'far'") . ' '
	  . $node->safe_psql('old11',
		"SELECT isfinite(run_at) AND run_at <= now() FROM pgq.jobs WHERE payload->>'n' = 'minus infinity'"),
	'100 years t', 'the retention is brought within 100 years, the job due at -infinity is due now');
is($node->safe_psql('old11', "SELECT ready, oldest_ready_age IS NOT NULL FROM pgq.queue_stats WHERE queue = 'far'"),
	'1|t', 'and queue_stats answers');
$node->safe_psql('old11', 'SELECT * FROM pgq.maintain()');

# --- release 1.2, with the outbox in use -> 2.0 (streams) --------------------------
$node->safe_psql(
	'old12', q{
CREATE EXTENSION pgq_cpp VERSION '1.2';
SELECT pgq.create_queue('mail');
SELECT pgq.create_topic('signup');
SELECT pgq.subscribe('signup', 'mail');
SELECT pgq.publish('signup', '{"user": 1}');
});
$node->safe_psql('old12', 'ALTER EXTENSION pgq_cpp UPDATE');
is($node->safe_psql('old12', $catalog), $fresh_catalog,
	'1.2 updated: exactly the catalog of a fresh install');
is( $node->safe_psql(
		'old12', q{
SELECT pgq.create_stream('audit');
SELECT pgq.register_consumer('audit', 'a');
SELECT pgq.subscribe('signup', stream => 'audit');
SELECT pgq.publish('signup', '{"user": 2}');
SELECT count(*) FROM pgq.jobs WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'mail');
SELECT string_agg(payload->'payload'->>'user', ',') FROM pgq.next_batch('audit', 'a');
}),
	"\nt\n\n2\n2\n2",
	'1.2 updated: the queue subscription still works (positional subscribe), a stream subscribes and receives');

# --- release 2.0, with a stream, a dependency and dead jobs in use -> 2.0.1 -------
$node->safe_psql(
	'old20', q{
CREATE EXTENSION pgq_cpp VERSION '2.0';
SELECT pgq.create_queue('mail', max_attempts => 1, keep_dead => '7 days');
SELECT pgq.create_stream('audit');
SELECT pgq.register_consumer('audit', 'a');
SELECT pgq.append('audit', '{"n": 1}');
SELECT pgq.enqueue('mail', '{"n": "parent"}');
SELECT pgq.enqueue('mail', '{"n": "child"}', after => ARRAY[currval('pgq.job_id_seq')]);
SELECT id FROM pgq.claim('mail', 1) \gset
SELECT pgq.fail(:id, 1, 'boom');
});
$node->safe_psql('old20', 'ALTER EXTENSION pgq_cpp UPDATE');
# (A stream's own tables are not members of the extension: left out.)
is(join("\n", grep { !/pgq\.stream_events_\d/ } split /\n/, $node->safe_psql('old20', $catalog)),
	$fresh_catalog, '2.0 updated: exactly the catalog of a fresh install');
is( $node->safe_psql(
		'old20', q{
SELECT pgq.append('audit', '{"n": 2}') > 0;
SELECT string_agg(payload->>'n', ',' ORDER BY event_id) FROM pgq.next_batch('audit', 'a');
SELECT string_agg(reason, ',' ORDER BY id) FROM pgq.dead_jobs WHERE queue = 'mail';
}),
	"t\n1,2\nexhausted,dependency_failed",
	'2.0 updated: the stream goes on from its consumer\'s position, the dead jobs are there');

# --- release 2.0.1, in use -> the default version ---------------------------------
$node->safe_psql(
	'old201', q{
CREATE EXTENSION pgq_cpp VERSION '2.0.1';
SELECT pgq.create_queue('mail', max_attempts => 1, keep_dead => '7 days', keep_completed => '1 hour');
SELECT pgq.enqueue('mail', '{"n": "done"}');
SELECT pgq.enqueue('mail', '{"n": "dead"}');
SELECT id FROM pgq.claim('mail', 1) \gset
SELECT pgq.complete(:id, 1);
SELECT id FROM pgq.claim('mail', 1) \gset
SELECT pgq.fail(:id, 1, 'boom');
});
# The 2.1 library on the 2.0.1 catalog: pgq.job_info without dead_reason,
# list_jobs with four arguments; they answer with the columns installed.
is( $node->safe_psql(
		'old201',
		"SELECT string_agg(state, ',' ORDER BY id) FROM pgq.list_jobs('mail'); "
		  . "SELECT count(*) FROM pgq.job((SELECT max(id) FROM pgq.dead_jobs))"),
	"done,dead\n1", '2.0.1 catalog, 2.1 library: pgq.list_jobs and pgq.job answer');
$node->safe_psql('old201', 'ALTER EXTENSION pgq_cpp UPDATE');
is($node->safe_psql('old201', $catalog), $fresh_catalog,
	'2.0.1 updated: exactly the catalog of a fresh install');
is( $node->safe_psql(
		'old201',
		"SELECT string_agg(state, ',' ORDER BY id) FROM pgq.list_jobs('mail')"),
	'done,dead', '2.0.1 updated: the kept jobs are there');
is( $node->safe_psql(
		'old201',
		"SELECT string_agg(coalesce(dead_reason, '-'), ',' ORDER BY id) FROM pgq.list_jobs('mail'); "
		  . "SELECT state FROM pgq.list_jobs('mail', reason => 'exhausted')"),
	"-,exhausted\ndead", '2.0.1 updated: dead jobs say why, list_jobs filters on it');
# Issue 32 (ADR 0024): the update moves no row; the next maintenance pass
# adopts each history and dead-letter ring (pgq.segment_rings is gone) and
# truncates nothing its queue still keeps.
$node->safe_psql('old201', 'SELECT * FROM pgq.maintain()');
is( $node->safe_psql(
		'old201',
		"SELECT string_agg(state, ',' ORDER BY id) FROM pgq.list_jobs('mail'); "
		  . "SELECT count(*) FROM pgq.rings WHERE ring_id < 0; "
		  . "SELECT to_regclass('pgq.segment_rings') IS NULL"),
	"done,dead\n22\nt", '2.0.1 updated: after a pass, the rings are adopted and the kept jobs are there');

my $long_second = $long->query_safe("SELECT id FROM pgq.claim('long', 1)");
is( $node->safe_psql(
		'old',
		"SELECT string_agg(id || ':' || coalesce(claimer_pid::text, '-'), ',' ORDER BY id) "
		  . "FROM pgq.running_jobs WHERE queue = 'long'"),
	"$long_first:-,$long_second:$long_pid",
	'a session across the update: its claim before it has no claimer, its claim after it has');
$long->quit;

$node->stop;
done_testing();
