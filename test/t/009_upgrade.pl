
# The upgrade path (ADR 0024). A fresh CREATE EXTENSION runs the full
# install script of the default version; a database that installed an
# earlier release (1.0, 1.1, 1.2, 2.0, 2.0.1, 3.0) and holds live jobs is updated
# with ALTER EXTENSION pgq_cpp UPDATE through the update scripts. Each ends
# with the same catalog as the fresh install (every member of the extension
# with its definition, privileges and comment, every column in its place,
# index, constraint, view, trigger, sequence, partition bound,
# configuration-dump entry), and with
# every job: the running ones complete with their attempt token, the others
# are claimed as before.
#
# The library serves only a catalog of its own version: on an older one
# every function of ours raises 55000 with the hint to update, a session
# that lives across the update is served once it is done, the
# maintenance worker waits (logged once) and resumes, the handler workers
# are not started until the update (then they run the handlers), and a
# running handler worker whose catalog changes under it waits too. So the old databases
# are filled by hand, with the rows each release stored (the shape of the
# data is what its update script must carry).
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use PgqTap;

my $node = pgq_node('main');
# A maintenance worker for each of the eight databases with pgq_cpp, the
# launcher and the handler workers of the last section.
$node->append_conf('postgresql.conf', "max_worker_processes = 16\n");
$node->start;
for my $db (qw(fresh old old11 old12 old20 old201 old30))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
}

my $default = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'pgq_cpp'");
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(version, ',' ORDER BY version) FROM pg_available_extension_versions "
		  . "WHERE name = 'pgq_cpp'"),
	"1.0,1.1,1.2,2.0,2.0.1,3.0,$default",
	"releases 1.0, 1.1, 1.2, 2.0, 2.0.1 and 3.0 and the default version $default are installable");

$node->safe_psql('fresh', 'CREATE EXTENSION pgq_cpp');
is($node->safe_psql('fresh', "SELECT extversion FROM pg_extension WHERE extname = 'pgq_cpp'"),
	$default, 'a fresh install is at the default version');
# Straight from its own script, not through the chain: no update script
# ran (an update script's own objects would be the same, but its data
# fixes and history are not a fresh install's business).
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pg_extension_update_paths('pgq_cpp') "
		  . "WHERE source = '1.0' AND target = '$default' AND path IS NOT NULL"),
	'1', 'the update chain from 1.0 reaches the default version');
ok(-f $node->config_data('--sharedir') . "/extension/pgq_cpp--$default.sql",
	"the full install script pgq_cpp--$default.sql is installed");

# --- the same catalog ------------------------------------------------------------------
# Names, not OIDs: every object that belongs to the extension with its
# definition and comment, then the details of the schema's relations.
my $catalog = q{
WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'pgq_cpp'),
members AS (
  SELECT d.classid, d.objid FROM pg_depend d, ext
   WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
rels AS (SELECT oid FROM pg_class WHERE relnamespace = 'pgq'::regnamespace
                                    AND relname !~ '^(stream_events|job_log)_\d')
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
                       || ' persistence=' || c.relpersistence::text
                       || ' bound=' || coalesce(pg_get_expr(c.relpartbound, c.oid), '-')
                       || ' key=' || coalesce(pg_get_partkeydef(c.oid), '-')
                  FROM pg_class c WHERE c.oid = m.objid)
             WHEN 'pg_namespace'::regclass THEN
               (SELECT 'acl=' || coalesce(n.nspacl::text, '-') FROM pg_namespace n WHERE n.oid = m.objid)
             WHEN 'pg_type'::regclass THEN
               (SELECT t.typtype::text || ' acl=' || coalesce(t.typacl::text, '-')
                  FROM pg_type t WHERE t.oid = m.objid)
             ELSE '' END, '')
         || ' comment=' || coalesce(obj_description(m.objid, (SELECT relname FROM pg_class
                                                               WHERE oid = m.classid)), '-') AS line
    FROM members m
  UNION ALL
  SELECT format('column %s.%s #%s %s notnull=%s default=%s comment=%s', a.attrelid::regclass,
                a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                pg_get_expr(ad.adbin, ad.adrelid), col_description(a.attrelid, a.attnum))
    FROM pg_attribute a LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
   WHERE a.attrelid IN (SELECT oid FROM rels) AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT format('constraint %s %s %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid))
    FROM pg_constraint c WHERE c.connamespace = 'pgq'::regnamespace
     AND c.conrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT format('view %s %s', c.oid::regclass, pg_get_viewdef(c.oid))
    FROM pg_class c WHERE c.oid IN (SELECT oid FROM rels) AND c.relkind = 'v'
  UNION ALL
  SELECT format('trigger %s %s', t.tgrelid::regclass, pg_get_triggerdef(t.oid))
    FROM pg_trigger t WHERE t.tgrelid IN (SELECT oid FROM rels) AND NOT t.tgisinternal
  UNION ALL
  SELECT format('sequence %s %s start=%s increment=%s min=%s max=%s cache=%s cycle=%s owned=%s',
                s.seqrelid::regclass, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement,
                s.seqmin, s.seqmax, s.seqcache, s.seqcycle,
                (SELECT d.refobjid::regclass || '.' || d.refobjsubid FROM pg_depend d
                  WHERE d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid
                    AND d.refclassid = 'pg_class'::regclass AND d.deptype = 'a'))
    FROM pg_sequence s WHERE s.seqrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT format('dumped %s %s', cfg.rel::regclass, coalesce(cfg.cond, '-'))
    FROM pg_extension e, ext, unnest(e.extconfig, e.extcondition) AS cfg(rel, cond)
   WHERE e.oid = ext.oid
  -- (No rows of the ring ledger pgq.rings: an install makes none since 3.0;
  -- streams' rings are data, and the history and dead-letter rings are
  -- adopted by the maintenance worker whenever it first runs.)
) lines};
my $fresh_catalog = $node->safe_psql('fresh', $catalog);
like($fresh_catalog, qr/^member function pgq\.claim\(/m, 'the catalog description lists functions');
like($fresh_catalog, qr/^index CREATE INDEX jobs_ready_idx/m, 'and indexes');
like($fresh_catalog, qr/^dumped pgq\.job_rows /m, 'and configuration-dump entries');
like($fresh_catalog, qr/^member table pgq\.dead_jobs_0 r .* bound=FOR VALUES IN \('0'\)/m,
	'and partitions with their bounds');
like($fresh_catalog, qr/^sequence pgq\.job_id_seq bigint .* owned=pgq\.job_rows\.1$/m, 'and sequences');
like($fresh_catalog, qr/FUNCTION pgq\.enqueue\(queue text.*?\bacl=[^\n]* comment=adds a job/s, 'and comments');
like($fresh_catalog, qr/^dumped pgq\.rings WHERE ring_id OPERATOR\(pg_catalog\.>\) 0$/m,
	'and the ring ledger dumped without the history and dead-letter rings');
is( $node->safe_psql(
		'fresh', q{
SELECT string_agg(pg_describe_object(d.classid, d.objid, 0), ', ')
  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pgq_cpp'
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND (d.classid = 'pg_proc'::regclass
        OR (d.classid = 'pg_class'::regclass
            AND (SELECT relkind FROM pg_class WHERE oid = d.objid) IN ('r', 'p', 'v')))
   AND obj_description(d.objid, (SELECT relname FROM pg_class WHERE oid = d.classid)) IS NULL}),
	'', 'every function, table and view of the extension has a comment');

# The library refuses a catalog older than its own (ADR 0024): 55000 with
# the hint to update, for every function, including a view's.
sub refused
{
	my ($db, $sql, $what) = @_;
	my ($ret, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\n$sql");
	like($err, qr/ERROR:  55000: pgq_cpp [\d.]+ is installed in this database, older than the loaded library \Q$default\E/,
		"$what: refused with 55000");
	like($err, qr/HINT:  Run ALTER EXTENSION pgq_cpp UPDATE in this database\./, "$what: the hint says how");
}

# A catalog newer than the library (a package downgraded under an updated
# database) is refused too, with the hint to load the installed library.
$node->safe_psql('postgres', 'CREATE DATABASE newer');
$node->safe_psql('newer',
	"CREATE EXTENSION pgq_cpp; UPDATE pg_extension SET extversion = '9.0' WHERE extname = 'pgq_cpp'");
my (undef, undef, $newer) = $node->psql('newer', "\\set VERBOSITY verbose\nSELECT pgq.create_queue('q')");
like($newer, qr/ERROR:  55000: pgq_cpp 9\.0 is installed in this database, newer than the loaded library \Q$default\E/,
	'a catalog newer than the library: refused with 55000');
like($newer, qr/HINT:  Install the pgq_cpp 9\.0 library and reconnect/, 'the hint says which library');

# --- release 1.0, in use -------------------------------------------------------------
# As 1.0 stored them: two queues, a job running (claimed, attempt 1, its
# lease running), one due, one later, a FIFO group's head and the job behind
# it, a dead job, a schedule and a team.
$node->safe_psql(
	'old', q{
CREATE EXTENSION pgq_cpp VERSION '1.0';
INSERT INTO pgq.queues (name, max_attempts, lease, backoff_base, backoff_max, retention, notify)
VALUES ('mail', 1, '10 minutes', '1 second', '1 hour', '1 day', false),
       ('long', 5, '2 minutes', '1 second', '1 hour', '1 day', false);
INSERT INTO pgq.jobs (id, queue_id, state, priority, run_at, attempt, max_attempts, lease_until,
                      enqueued_at, group_key, payload)
SELECT nextval('pgq.job_id_seq'), q.queue_id, v.state, v.priority, v.run_at, v.attempt,
       q.max_attempts, v.lease_until, now(), v.group_key, v.payload
  FROM pgq.queues q,
       (VALUES (1, 'r', 9, now(), 1, now() + interval '10 minutes', NULL, '{"n": "running"}'::jsonb),
               (2, 'p', 0, now(), 0, NULL, NULL, '{"n": "due"}'),
               (3, 'p', 0, '2999-01-01', 0, NULL, NULL, '{"n": "later"}'),
               (4, 'p', 0, now(), 0, NULL, 'c', '{"n": "g1"}'),
               (5, 'w', 0, now(), 0, NULL, 'c', '{"n": "g2"}'))
         AS v(ord, state, priority, run_at, attempt, lease_until, group_key, payload)
 WHERE q.name = 'mail' ORDER BY v.ord;
INSERT INTO pgq.dead_jobs (id, queue, payload, attempts, last_error, reason, died_at, priority,
                           max_attempts, enqueued_at)
VALUES (nextval('pgq.job_id_seq'), 'mail', '{"n": "doomed"}', 1, 'boom', 'exhausted', now(), 5, 1, now());
INSERT INTO pgq.jobs (id, queue_id, state, priority, run_at, attempt, max_attempts, enqueued_at, payload)
SELECT nextval('pgq.job_id_seq'), queue_id, 'p', 0, now(), 0, 5, now(), '{}'
  FROM pgq.queues, generate_series(1, 2) WHERE name = 'long';
INSERT INTO pgq.recurring (name, queue_id, spec, timezone, payload, next_run_at)
SELECT 'nightly', queue_id, '0 3 * * *', 'UTC', '{}', date_trunc('day', now()) + interval '1 day 3 hours'
  FROM pgq.queues WHERE name = 'mail';
INSERT INTO pgq.teams (name) VALUES ('sellers');
INSERT INTO pgq.team_members (team_id, name) SELECT team_id, 'ann' FROM pgq.teams;
});
my ($run_id, $run_attempt) = split /\|/,
  $node->safe_psql('old', "SELECT id, attempt FROM pgq.jobs WHERE state = 'r'");
my $doomed = $node->safe_psql('old', 'SELECT id FROM pgq.dead_jobs');
refused('old', "SELECT pgq.enqueue('mail', '{}')", '1.0 catalog, newer library: enqueue');
refused('old', 'SELECT * FROM pgq.queue_stats', '1.0 catalog: a view calling our functions');
refused('old', 'SELECT * FROM pgq.maintain()', '1.0 catalog: maintain');

# The maintenance worker of that database waits for the update, says so
# once, and leaves the expired lease of a running job alone until then.
$node->safe_psql('old', "UPDATE pgq.jobs SET lease_until = now() - interval '1 minute' "
	  . "WHERE payload->>'n' = 'running'");
my $waits = wait_for_log($node,
	qr/pgq maintenance worker waits for ALTER EXTENSION pgq_cpp UPDATE: pgq_cpp 1\.0 is installed in database "old", the library is \Q$default\E/,
	0);
ok($waits, 'the maintenance worker of a 1.0 database logs that it waits for the update');
usleep(500_000);    # five passes
is(count_matches(log_since($node, $waits), qr/maintenance worker waits for ALTER EXTENSION pgq_cpp UPDATE: pgq_cpp 1\.0/),
	0, 'once, not at every pass');
is($node->safe_psql('old', "SELECT state FROM pgq.jobs WHERE id = $run_id"),
	'r', 'and expires no lease meanwhile');
$node->safe_psql('old', "UPDATE pgq.jobs SET lease_until = now() + interval '10 minutes' WHERE id = $run_id");

# A session that lives across the update is refused before it and served
# after it (the library reads the installed version again), its claim
# recorded with the claimer columns 1.1 brought.
my $long = $node->background_psql('old', on_error_stop => 0);
my $long_pid = $long->query_safe('SELECT pg_backend_pid()');
$long->query_safe('\set VERBOSITY verbose');
my (undef, $long_failed) = $long->query("SELECT id FROM pgq.claim('long', 1)");
ok($long_failed, 'a session before the update: its claim is refused');
like($long->{stderr}, qr/55000/, 'with 55000');
$long->{stderr} = '';
my $jobs_before = $node->safe_psql('old',
	"SELECT string_agg(id || ':' || state::text || ':' || attempt, ',' ORDER BY id) FROM pgq.jobs");

my $offset = log_size($node);
$node->safe_psql('old', 'ALTER EXTENSION pgq_cpp UPDATE');
is($node->safe_psql('old', "SELECT extversion FROM pg_extension WHERE extname = 'pgq_cpp'"),
	$default, "ALTER EXTENSION UPDATE reaches $default");
ok(wait_for_log($node, qr/pgq maintenance worker resumes: pgq_cpp \Q$default\E is installed in database "old"/, $offset),
	'the maintenance worker resumes after the update');
is($node->safe_psql('old', $catalog), $fresh_catalog,
	'1.0 updated: exactly the catalog of a fresh install');

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
is($node->safe_psql('old', "SELECT pgq.retry_dead($doomed)"), 't', 'and comes back with retry_dead');
is($node->safe_psql('old', "SELECT count(*) FROM pgq.schedules WHERE name = 'nightly'"),
	'1', 'the schedule is kept');
is($node->safe_psql('old', "SELECT pgq.next_turn('sellers')"), 'ann', 'the team is kept');
# Issue 33 (ADR 0028, "Step 3, as built"): the update gives no queue a
# ring (a script's tables would be members of the extension); the
# maintenance does, at its next pass, and a new plain job goes onto it while
# the jobs from before carry on from pgq.job_rows.
$node->safe_psql('old', 'SELECT * FROM pgq.maintain()');
is($node->safe_psql('old', 'SELECT count(*) FILTER (WHERE ring_id IS NULL) FROM pgq.queues'),
	'0', '1.0 updated: after a maintenance pass every queue has its ring');
my $on_ring = $node->safe_psql('old', q{SELECT pgq.enqueue('mail', '{"n": "new"}')});
is( $node->safe_psql(
		'old',
		"SELECT (SELECT count(*) FROM pgq.ring_jobs WHERE id = $on_ring) || ' ' "
		  . "|| (SELECT count(*) FROM pgq.job_rows WHERE id = $on_ring)"),
	'1 0', '1.0 updated: a new plain job goes onto the queue\'s ring');
my $long_first = $long->query_safe("SELECT id FROM pgq.claim('long', 1)");
is( $node->safe_psql(
		'old',
		"SELECT string_agg(id || ':' || coalesce(claimer_pid::text, '-'), ',' ORDER BY id) "
		  . "FROM pgq.running_jobs WHERE queue = 'long'"),
	"$long_first:$long_pid",
	'the session that lived across the update claims, with its pid recorded');
$long->quit;

# --- release 1.1, with topics in use and values 1.2 refuses ---------------------
# Topics had no owner and publishing took the produce right on every
# subscribed queue; a retention of 200000 years and a job due at -infinity
# were accepted (and failed maintenance and monitoring, issue 15 M3).
$node->safe_psql('postgres', 'CREATE ROLE team_a; CREATE ROLE pub_both; CREATE ROLE pub_half');
$node->safe_psql(
	'old11', q{
CREATE EXTENSION pgq_cpp VERSION '1.1';
INSERT INTO pgq.grants (role, queue_id, privilege) VALUES ('team_a', NULL, 'admin');
INSERT INTO pgq.queues (name, max_attempts, lease, backoff_base, backoff_max, retention, notify, owner)
VALUES ('qa', 5, '2 minutes', '1 second', '1 hour', '1 day', false, 'team_a'),
       ('qb', 5, '2 minutes', '1 second', '1 hour', '1 day', false, 'team_a'),
       ('far', 5, '2 minutes', '1 second', '1 hour', '200000 years', false, 'postgres'),
       ('life', 1, '2 minutes', '1 second', '1 hour', '1 day', false, 'postgres');
INSERT INTO pgq.jobs (id, queue_id, state, priority, run_at, attempt, max_attempts, enqueued_at, payload)
SELECT nextval('pgq.job_id_seq'), queue_id, 'p', 0, '-infinity', 0, 5, now(), '{"n": "minus infinity"}'
  FROM pgq.queues WHERE name = 'far';
INSERT INTO pgq.subscriptions (topic, queue_id)
SELECT 'tb', queue_id FROM pgq.queues WHERE name IN ('qa', 'qb');
INSERT INTO pgq.grants (role, queue_id, privilege)
SELECT r, queue_id, 'produce' FROM pgq.queues, unnest(ARRAY['pub_both', 'pub_half']::regrole[]) AS r
 WHERE name = 'qa' OR (name = 'qb' AND r = 'pub_both'::regrole);
INSERT INTO pgq.events (topic, payload) VALUES ('lonely', '{}');
-- Live jobs in every state, and dead ones (issue 17: pgq.dead_jobs becomes
-- a partitioned ring, its 1.1 table segment 0).
INSERT INTO pgq.jobs (id, queue_id, state, priority, run_at, attempt, max_attempts, lease_until,
                      enqueued_at, dedupe_key, group_key, payload, claimed_by, claimed_at)
SELECT nextval('pgq.job_id_seq'), q.queue_id, v.state, v.priority, v.run_at, v.attempt, 1,
       v.lease_until, now(), v.dedupe_key, v.group_key, v.payload, v.claimed_by, v.claimed_at
  FROM pgq.queues q,
       (VALUES (1, 'r', 9, now(), 1, now() + interval '2 minutes', NULL, NULL, '{"n": "run"}'::jsonb, 4242, now()),
               (2, 'p', 0, now(), 0, NULL, 'k', NULL, '{"n": "ready"}', NULL, NULL),
               (3, 'p', 0, '2999-01-01', 0, NULL, NULL, NULL, '{"n": "later"}', NULL, NULL),
               (4, 'p', 0, now(), 0, NULL, NULL, 'g', '{"n": "head"}', NULL, NULL),
               (5, 'w', 0, now(), 0, NULL, NULL, 'g', '{"n": "behind"}', NULL, NULL))
         AS v(ord, state, priority, run_at, attempt, lease_until, dedupe_key, group_key, payload,
              claimed_by, claimed_at)
 WHERE q.name = 'life' ORDER BY v.ord;
INSERT INTO pgq.dead_jobs (id, queue, payload, attempts, last_error, reason, died_at, priority,
                           max_attempts, enqueued_at)
VALUES (nextval('pgq.job_id_seq'), 'life', '{"n": "die"}', 1, 'boom', 'exhausted', now(), 8, 1, now()),
       (nextval('pgq.job_id_seq'), 'life', '{"n": "cancelled"}', 0, NULL, 'cancelled', now(), 0, 1, now());
});
my $life_sql = q{SELECT string_agg(payload->>'n' || ':' || state::text || ':' || attempt, ',' ORDER BY id)
  FROM pgq.jobs WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'life')};
my $dead_sql = q{SELECT string_agg(id || ':' || reason || ':' || coalesce(last_error, '-'), ',' ORDER BY id)
  FROM pgq.dead_jobs};
my $life_before = $node->safe_psql('old11', $life_sql);
my $dead_before = $node->safe_psql('old11', $dead_sql);
is($life_before, 'run:r:1,ready:p:0,later:p:0,head:p:0,behind:w:0',
	'1.1: live jobs running, ready, scheduled, heading and waiting in a group');
refused('old11', "SELECT pgq.publish('tb', '{}')", '1.1 catalog: publish');
$node->safe_psql('old11', 'ALTER EXTENSION pgq_cpp UPDATE');
is($node->safe_psql('old11', $catalog), $fresh_catalog,
	'1.1 updated: exactly the catalog of a fresh install');
is($node->safe_psql('old11', $life_sql), $life_before, '1.1 updated: every live job keeps its state and attempt');
is( $node->safe_psql(
		'old11',
		q{SELECT pgq.enqueue('life', '{}', dedupe_key => 'k') = (SELECT id FROM pgq.jobs WHERE payload->>'n' = 'ready')}),
	't', '1.1 updated: the ready job still holds its dedupe key (its row of pgq.dedupe_holds)');
is($node->safe_psql('old11', $dead_sql), $dead_before, '1.1 updated: every dead job is kept');
is( $node->safe_psql(
		'old11',
		q{SELECT string_agg(payload->>'n' || ':' || state, ',' ORDER BY id) FROM pgq.list_jobs('life')}),
	'run:running,ready:ready,later:scheduled,head:ready,behind:waiting,die:dead,cancelled:cancelled',
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

# --- release 1.2, with the outbox in use -------------------------------------------
$node->safe_psql(
	'old12', q{
CREATE EXTENSION pgq_cpp VERSION '1.2';
INSERT INTO pgq.queues (name, max_attempts, lease, backoff_base, backoff_max, retention, notify)
VALUES ('mail', 5, '2 minutes', '1 second', '1 hour', '1 day', false);
INSERT INTO pgq.topics (name, owner) VALUES ('signup', 'postgres');
INSERT INTO pgq.subscriptions (topic, queue_id) SELECT 'signup', queue_id FROM pgq.queues;
WITH e AS (INSERT INTO pgq.events (topic, payload) VALUES ('signup', '{"user": 1}') RETURNING id)
INSERT INTO pgq.jobs (id, queue_id, state, priority, run_at, attempt, max_attempts, enqueued_at, payload)
SELECT nextval('pgq.job_id_seq'), q.queue_id, 'p', 0, now(), 0, 5, now(),
       jsonb_build_object('event_id', e.id, 'topic', 'signup', 'payload', '{"user": 1}'::jsonb)
  FROM pgq.queues q, e;
});
refused('old12', "SELECT pgq.create_topic('t2')", '1.2 catalog: create_topic');
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

# --- release 2.0, with a stream and dead jobs in use -------------------------------
# The stream as 2.0's create_stream made it (a partition of
# pgq.stream_events per stream, partitioned by segment; the ring's ledger),
# a consumer registered before its one event; a parent dead and its child
# dead with it.
$node->safe_psql(
	'old20', q{
CREATE EXTENSION pgq_cpp VERSION '2.0';
INSERT INTO pgq.queues (name, max_attempts, lease, backoff_base, backoff_max, retention, notify, keep_dead)
VALUES ('mail', 1, '2 minutes', '1 second', '1 hour', '1 day', false, '7 days');
INSERT INTO pgq.streams (stream_id, name, owner, rotation)
VALUES (nextval('pgq.stream_id_seq'), 'audit', 'postgres', '2 hours');
CREATE TABLE pgq.stream_events_1 PARTITION OF pgq.stream_events FOR VALUES IN (1) PARTITION BY LIST (segment);
CREATE INDEX ON pgq.stream_events_1 (txid, id);
CREATE TABLE pgq.stream_events_1_0 PARTITION OF pgq.stream_events_1 FOR VALUES IN (0);
CREATE TABLE pgq.stream_events_1_1 PARTITION OF pgq.stream_events_1 FOR VALUES IN (1);
CREATE TABLE pgq.stream_events_1_2 PARTITION OF pgq.stream_events_1 FOR VALUES IN (2);
INSERT INTO pgq.rings (ring_id, segments, current, generation, rotated_at) VALUES (1, 3, 0, 0, now());
INSERT INTO pgq.ring_segments (ring_id, segment, empty, opened_at)
VALUES (1, 0, false, now()), (1, 1, true, NULL), (1, 2, true, NULL);
INSERT INTO pgq.stream_consumers (consumer_id, stream_id, name, done_snapshot, done_at)
VALUES (nextval('pgq.stream_consumer_id_seq'), 1, 'a', pg_current_snapshot(), clock_timestamp());
});
$node->safe_psql(
	'old20', q{
INSERT INTO pgq.stream_events (stream_id, segment, txid, id, appended_at, payload)
VALUES (1, 0, pg_current_xact_id(), nextval('pgq.stream_event_id_seq'), now(), '{"n": 1}');
INSERT INTO pgq.dead_jobs (id, queue, payload, attempts, last_error, reason, died_at, priority,
                           max_attempts, enqueued_at, segment)
VALUES (nextval('pgq.job_id_seq'), 'mail', '{"n": "parent"}', 1, 'boom', 'exhausted', now(), 0, 1, now(), 0),
       (nextval('pgq.job_id_seq'), 'mail', '{"n": "child"}', 0, 'parent job 1 did not complete',
        'dependency_failed', now(), 0, 1, now(), 0);
});
refused('old20', "SELECT pgq.append('audit', '{}')", '2.0 catalog: append');
$node->safe_psql('old20', 'ALTER EXTENSION pgq_cpp UPDATE');
is($node->safe_psql('old20', $catalog), $fresh_catalog,
	'2.0 updated: exactly the catalog of a fresh install (a stream\'s own tables are not members)');
is( $node->safe_psql(
		'old20', q{
SELECT pgq.append('audit', '{"n": 2}') > 0;
SELECT string_agg(payload->>'n', ',' ORDER BY event_id) FROM pgq.next_batch('audit', 'a');
SELECT string_agg(reason, ',' ORDER BY id) FROM pgq.dead_jobs WHERE queue = 'mail';
}),
	"t\n1,2\nexhausted,dependency_failed",
	'2.0 updated: the stream goes on from its consumer\'s position, the dead jobs are there');
# Issue 35: the stream's tables made before the update took trace_context
# from it (ALTER TABLE on pgq.stream_events recurses): a traced event is
# written into them and read back with its context.
is( $node->safe_psql(
		'old20', q{
SELECT pgq.finish_batch(batch_id) FROM pgq.next_batch('audit', 'a') LIMIT 1;
SELECT pgq.append('audit', '{"n": 3}',
                  traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01') > 0;
SELECT payload->>'n' || ' ' || traceparent FROM pgq.next_batch_traced('audit', 'a');
}),
	"2\nt\n3 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	'2.0 updated: a stream table made before 3.1 keeps a traced event with its context');

# --- release 2.0.1, in use -> the default version ---------------------------------
$node->safe_psql(
	'old201', q{
CREATE EXTENSION pgq_cpp VERSION '2.0.1';
INSERT INTO pgq.queues (name, max_attempts, lease, backoff_base, backoff_max, retention, notify,
                        keep_dead, keep_completed)
VALUES ('mail', 1, '2 minutes', '1 second', '1 hour', '1 day', false, '7 days', '1 hour');
INSERT INTO pgq.job_history (id, queue_id, attempt, max_attempts, priority, run_at, enqueued_at,
                             claimed_at, finished_at, payload, segment)
SELECT nextval('pgq.job_id_seq'), queue_id, 1, 1, 0, now(), now(), now(), now(), '{"n": "done"}',
       (SELECT current FROM pgq.segment_rings WHERE ring = 'history_3')
  FROM pgq.queues;
INSERT INTO pgq.dead_jobs (id, queue, payload, attempts, last_error, reason, died_at, priority,
                           max_attempts, enqueued_at, segment)
VALUES (nextval('pgq.job_id_seq'), 'mail', '{"n": "dead"}', 1, 'boom', 'exhausted', now(), 0, 1, now(),
        (SELECT current FROM pgq.segment_rings WHERE ring = 'dead_7'));
});
refused('old201', "SELECT count(*) FROM pgq.list_jobs('mail')", '2.0.1 catalog, newer library: list_jobs');
refused('old201', "SELECT count(*) FROM pgq.job(1)", '2.0.1 catalog, newer library: job');
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
# Issue 32 (ADR 0026): the update moves no row; the next maintenance pass
# adopts each history and dead-letter ring (pgq.segment_rings is gone) and
# truncates nothing its queue still keeps.
$node->safe_psql('old201', 'SELECT * FROM pgq.maintain()');
is( $node->safe_psql(
		'old201',
		"SELECT string_agg(state, ',' ORDER BY id) FROM pgq.list_jobs('mail'); "
		  . "SELECT count(*) FROM pgq.rings WHERE ring_id < 0; "
		  . "SELECT to_regclass('pgq.segment_rings') IS NULL"),
	"done,dead\n22\nt", '2.0.1 updated: after a pass, the rings are adopted and the kept jobs are there');

# --- release 3.0, in use -> the default version ----------------------------------
# A queue with a pending job and a running one (rows of pgq.job_rows, as a
# 3.0 database holds its retries and scheduled jobs; its rings are rebuilt
# from their own rows after the update as after any start). 3.1 changes
# enqueue_many's signature (group and dedupe keys): the old one is gone.
$node->safe_psql(
	'old30', q{
CREATE EXTENSION pgq_cpp VERSION '3.0';
INSERT INTO pgq.queues (name, max_attempts, lease, backoff_base, backoff_max, retention, notify)
VALUES ('mail', 3, '2 minutes', '1 second', '1 hour', '1 day', false);
INSERT INTO pgq.job_rows (id, queue_id, state, priority, run_at, attempt, max_attempts, enqueued_at,
                          payload, lease_until, claimed_at)
SELECT nextval('pgq.job_id_seq'), queue_id, s.state, 0, now(), s.attempt, 3, now(), s.payload,
       s.lease_until, s.claimed_at
  FROM pgq.queues,
       (VALUES ('p'::"char", 0, '{"n": "pending"}'::jsonb, NULL::timestamptz, NULL::timestamptz),
               ('r', 1, '{"n": "running"}', now() + interval '1 hour', now())) AS s(state, attempt, payload, lease_until, claimed_at);
});
refused('old30', "SELECT pgq.enqueue('mail', '{}')", '3.0 catalog, newer library: enqueue');
$node->safe_psql('old30', 'ALTER EXTENSION pgq_cpp UPDATE');
is($node->safe_psql('old30', $catalog), $fresh_catalog,
	'3.0 updated: exactly the catalog of a fresh install');
is( $node->safe_psql(
		'old30', q{
SELECT pgq.complete(id, 1) FROM pgq.job_rows WHERE state = 'r';
SELECT payload->>'n', attempt FROM pgq.claim('mail');
SELECT count(*) FROM pgq.enqueue_many('mail', ARRAY['{}', '{}']::jsonb[], group_keys => ARRAY['g']);
}),
	"t
pending|1
2",
	'3.0 updated: the running job completes with its attempt, the pending one is claimed, enqueue_many takes keys');
# Issue 35 (ADR 0030): the jobs kept before the update (and those enqueued
# since without one) have no trace context, wherever they are (the
# maintenance worker may have moved some onto the queue's new ring by now:
# read through list_jobs, not pgq.job_rows); a new one carries its own
# through claim_traced.
is( $node->safe_psql(
		'old30', q{
SELECT count(*) FILTER (WHERE trace_id IS NULL) || '/' || count(*) FROM pgq.list_jobs('mail');
SELECT pgq.enqueue('mail', '{"n": "traced"}', priority => 7,
                   traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01') > 0;
SELECT payload->>'n' || ' ' || traceparent FROM pgq.claim_traced('mail');
}),
	"3/3\nt\ntraced 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	'3.0 updated: the old jobs untraced, a new one claimed with its trace context');

# --- handler workers on an older catalog (ADR 0024) ---------------------------------
# The maintenance worker starts a database's handler workers once its pass
# has seen a queue with a handler; on an older catalog it runs no pass, so no
# handler worker starts and the job of a handler queue waits. After ALTER
# EXTENSION pgq_cpp UPDATE they start and run its handler.
$offset = log_size($node);
$node->safe_psql('postgres', 'CREATE DATABASE oldh');
$node->safe_psql(
	'oldh', q{
CREATE EXTENSION pgq_cpp VERSION '2.0.1';
CREATE TABLE public.handled (job_id bigint NOT NULL, payload jsonb NOT NULL);
CREATE FUNCTION public.record_job(job pgq.claimed_job) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.handled VALUES (job.id, job.payload) $$;
INSERT INTO pgq.queues (name, max_attempts, lease, backoff_base, backoff_max, retention, notify,
                        handler, owner)
VALUES ('hooks', 3, '2 minutes', '1 second', '1 hour', '1 day', false,
        'public.record_job(pgq.claimed_job)', 'postgres');
INSERT INTO pgq.jobs (id, queue_id, state, priority, run_at, attempt, max_attempts, enqueued_at, payload)
SELECT nextval('pgq.job_id_seq'), queue_id, 'p', 0, now(), 0, 3, now(), '{"n": "hook"}'
  FROM pgq.queues WHERE name = 'hooks';
});
my $hook = $node->safe_psql('oldh', 'SELECT id FROM pgq.jobs');
my $handler_workers =
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq handler' AND datname = 'oldh'";
ok( wait_for_log(
		$node,
		qr/pgq maintenance worker waits for ALTER EXTENSION pgq_cpp UPDATE: pgq_cpp 2\.0\.1 is installed in database "oldh"/,
		$offset),
	'2.0.1 catalog with a handler queue: its maintenance worker waits for the update');

# Each pass begins and ends a transaction, which moves the worker's
# state_change in pg_stat_activity: eight moves seen are three passes or
# more, each followed by the handler workers' supervision.
my %moves;
my $passes_deadline = time + $SHORT;
while (keys %moves < 8 && time < $passes_deadline)
{
	my $moved = $node->safe_psql('postgres',
		"SELECT state_change FROM pg_stat_activity WHERE backend_type = 'pgq maintenance' "
		  . "AND datname = 'oldh'");
	$moves{$moved} = 1 if $moved ne '';
	usleep(20_000);
}
cmp_ok(scalar(keys %moves), '>=', 8, 'its maintenance worker goes on passing meanwhile');
is($node->safe_psql('oldh', $handler_workers),
	'0', 'on the older catalog no handler worker of that database is started');
is( $node->safe_psql(
		'oldh',
		"SELECT state::text || ' ' || attempt FROM pgq.jobs WHERE id = $hook; "
		  . "SELECT count(*) FROM public.handled"),
	"p 0\n0", 'and the job of the handler queue waits, unclaimed');
is(count_matches(log_since($node, $offset), qr/pgq handler worker waits/),
	0, 'no handler worker logged a wait either: none ran');

$node->safe_psql('oldh', 'ALTER EXTENSION pgq_cpp UPDATE');
ok(wait_for($node, 'oldh', "SELECT string_agg(job_id || ' ' || (payload->>'n'), ',') FROM public.handled",
		"$hook hook"),
	'after the update, a handler worker runs the handler of the job that waited');
ok(wait_for($node, 'oldh', "SELECT count(*) FROM pgq.jobs WHERE id = $hook", '0'),
	'and completes it');
ok(wait_for($node, 'oldh', $handler_workers, '2'),
	'the handler workers of that database run (pgq.handler_workers: 2)');

# A handler worker also checks the catalog itself before each claim, for a
# catalog that changes under it: here set back by hand to 2.0.1 (older than
# its library) while a job of the handler queue is enqueued, not yet
# committed. Once every handler worker logged that it waits, the job is
# committed (its commit wakes them): they claim nothing until the catalog is
# their library's again, then run its handler.
my $hooked = $node->background_psql('oldh');
my $late = $hooked->query_safe("BEGIN; SELECT pgq.enqueue('hooks', '{\"n\": \"late\"}');");
my $workers = 2;
$offset = log_size($node);
$node->safe_psql(
	'oldh', q{
BEGIN;
UPDATE pg_extension SET extversion = '2.0.1' WHERE extname = 'pgq_cpp';
CREATE TABLE public.catalog_moved ();  -- a relation changes, as in an update script
COMMIT;
});
my $waiting = qr/pgq handler worker waits for ALTER EXTENSION pgq_cpp UPDATE: pgq_cpp 2\.0\.1 is installed in database "oldh", the library is \Q$default\E/;
my $deadline = time + $SHORT;
usleep(100_000)
  while count_matches(log_since($node, $offset), $waiting) < $workers && time < $deadline;
is(count_matches(log_since($node, $offset), $waiting),
	$workers, "each of the $workers handler workers logs that it waits for the update");
$hooked->query_safe('COMMIT');
$hooked->quit;

# Each look of a handler worker begins and ends a transaction, which moves
# its state_change: six moves of each are two looks or more since the job
# was committed.
my %looks;
$deadline = time + $SHORT;
while (time < $deadline)
{
	for my $line (split /\n/, $node->safe_psql('postgres',
		"SELECT pid || ' ' || state_change FROM pg_stat_activity "
		  . "WHERE backend_type = 'pgq handler' AND datname = 'oldh'"))
	{
		my ($pid, $moved) = split / /, $line, 2;
		$looks{$pid}{$moved} = 1;
	}
	last if keys %looks == $workers && !grep { keys %{ $looks{$_} } < 6 } keys %looks;
	usleep(20_000);
}
ok(keys %looks == $workers && !grep({ keys %{ $looks{$_} } < 6 } keys %looks),
	'the handler workers go on looking meanwhile');
is( $node->safe_psql(
		'oldh',
		"SELECT state::text || ' ' || attempt FROM pgq.jobs WHERE id = $late; "
		  . "SELECT count(*) FROM public.handled WHERE job_id = $late"),
	"p 0\n0", 'and claim nothing: the job waits');
is(count_matches(log_since($node, $offset), $waiting),
	$workers, 'each logged it once, not at every look');

$offset = log_size($node);
$node->safe_psql('oldh',
	"UPDATE pg_extension SET extversion = '$default' WHERE extname = 'pgq_cpp'");
ok(wait_for_log($node, qr/pgq handler worker resumes: pgq_cpp \Q$default\E is installed in database "oldh"/, $offset),
	'the catalog their library\'s again: the handler workers resume');
ok(wait_for($node, 'oldh', "SELECT count(*) FROM public.handled WHERE job_id = $late", '1'),
	'and run the handler of the job that waited');

$node->stop;
done_testing();
