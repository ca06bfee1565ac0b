'use strict';

// Every SQL statement the dashboard runs is in this file, each a constant
// string with $n parameters: nothing from a request is ever spliced into SQL.
// The statements run as the dashboard's own database role, so pgq's queue
// rights decide what each one returns or refuses (42501).
//
// They need the 3.0 catalog (ALTER EXTENSION pgq_cpp UPDATE): the queues'
// settings, the claiming sessions, the coordination readers, a job's dead
// reason and the actions' outcome words are 3.0's read surfaces (ADR 0022).
// A 2.0.1 catalog answers 42883 (no such function) on the pages that use
// them, shown as the database's error.
//
// The queues' numbers come from pgq.queue_overview(), which counts each
// state through an index exactly up to EXACT_UP_TO and estimates past it
// from the planner's statistics (marking the row estimated): a page costs
// the same with a million jobs as with a thousand, where pgq.queue_stats
// would count every job each time.

/** bigint and numeric columns arrive as strings (node-postgres): counts fit a double. */
function num(value) {
  return value === null || value === undefined ? null : Number(value);
}

// ---- Overview ---------------------------------------------------------------

/** Counts up to this are exact; past it, estimates (shown as such). */
const EXACT_UP_TO = 1000;

const OVERVIEW_COLUMNS = `
       queue, ready, scheduled, running, expired, dead, done_recent,
       extract(epoch FROM oldest_ready_age)::float8 AS oldest_ready_seconds,
       paused, max_running, awaiting_parents, estimated`;

const OVERVIEW_SQL = `SELECT ${OVERVIEW_COLUMNS} FROM pgq.queue_overview($1) ORDER BY queue`;

/** A pgq.queue_overview row with its counts as numbers. */
function statsRow(r) {
  return {
    queue: r.queue,
    ready: num(r.ready),
    scheduled: num(r.scheduled),
    running: num(r.running),
    expired: num(r.expired),
    dead: num(r.dead),
    done_recent: num(r.done_recent),
    oldest_ready_seconds: r.oldest_ready_seconds === null ? 0 : Number(r.oldest_ready_seconds),
    paused: r.paused,
    max_running: r.max_running,
    awaiting_parents: num(r.awaiting_parents),
    estimated: r.estimated,
  };
}

/** One row per queue the role holds some right on (pgq.queue_overview). */
async function overview(db) {
  const { rows } = await db.query(OVERVIEW_SQL, [EXACT_UP_TO]);
  return rows.map(statsRow);
}

// What the role may read beyond what its queue rights show: the monitoring
// counters (pg_monitor). Asked once per sample: a grant may come or go
// meanwhile. (The rate limits come from pgq.queue_settings(), which shows
// every queue the role holds a right on: no grant needed since 3.0.)
const CAPABILITIES_SQL = `
SELECT true                                                          AS rate_limits,
       has_function_privilege('pgq.queue_counters()', 'EXECUTE')      AS counters,
       has_table_privilege('pgq.workers', 'SELECT')                    AS workers`;

async function capabilities(db) {
  const { rows } = await db.query(CAPABILITIES_SQL);
  return rows[0];
}

const RATE_LIMITS_SQL = `SELECT queue_name AS name, rate_limit FROM pgq.queue_settings() WHERE rate_limit IS NOT NULL`;

/** Map of queue name to its rate limit (claims per second), of the queues the role holds a right on. */
async function rateLimits(db) {
  const { rows } = await db.query(RATE_LIMITS_SQL);
  return new Map(rows.map((r) => [r.name, Number(r.rate_limit)]));
}

// The counters alone: queue_metrics() would also count every job.
const COUNTERS_SQL = `SELECT queue, completions, failures FROM pgq.queue_counters()`;

/** Map of queue name to {completions, failures} since the server started (pg_monitor). */
async function counters(db) {
  const { rows } = await db.query(COUNTERS_SQL);
  return new Map(rows.map((r) => [r.queue, { completions: num(r.completions), failures: num(r.failures) }]));
}

// ---- A queue ----------------------------------------------------------------

const QUEUE_STATS_SQL = `SELECT ${OVERVIEW_COLUMNS} FROM pgq.queue_overview($1) WHERE queue = $2`;

/** The queue's pgq.queue_overview row, or null when the role holds no right on it. */
async function queueStats(db, queue) {
  const { rows } = await db.query(QUEUE_STATS_SQL, [EXACT_UP_TO, queue]);
  return rows.length === 0 ? null : statsRow(rows[0]);
}

const RIGHTS_SQL = `
SELECT pgq.has_queue_privilege($1, 'produce') AS produce,
       pgq.has_queue_privilege($1, 'consume') AS consume,
       pgq.has_queue_privilege($1, 'admin')   AS admin`;

/** The role's rights on the queue; 42704 when there is no such queue. */
async function queueRights(db, queue) {
  const { rows } = await db.query(RIGHTS_SQL, [queue]);
  return rows[0];
}

// jsonb columns are read as text (payload::text keeps numbers exactly as
// stored, which JSON.parse would round) and pretty-printed by the server.
const JOB_COLUMNS = `
       id, queue, state, attempt, max_attempts, priority, group_key, dedupe_key,
       run_at, enqueued_at, claimed_at, lease_until, finished_at,
       extract(epoch FROM lease_until - pgq.clock())::float8 AS lease_left_seconds,
       last_error, open_parents, dead_reason, trace_id,
       payload::text AS payload, jsonb_pretty(payload) AS payload_pretty,
       progress::text AS progress, jsonb_pretty(progress) AS progress_pretty,
       result::text AS result, jsonb_pretty(result) AS result_pretty`;

// A page of jobs shows the start of each payload and error: only that much
// leaves the server.
const LIST_COLUMNS = `
       id, queue, state, attempt, max_attempts, priority, group_key,
       run_at, enqueued_at, finished_at, dead_reason,
       left(last_error, 201) AS last_error, left(payload::text, 201) AS payload`;

const LIST_JOBS_SQL = `SELECT ${LIST_COLUMNS} FROM pgq.list_jobs($1, $2, $3, $4, $5)`;

/**
 * Up to max jobs of the queue, newest first, older than beforeId if given, in
 * state if given, dead (or cancelled) for reason if given.
 */
async function listJobs(db, queue, { state = null, max = 100, beforeId = null, reason = null } = {}) {
  const { rows } = await db.query(LIST_JOBS_SQL, [queue, state, max, beforeId, reason]);
  return rows;
}

const JOB_SQL = `SELECT ${JOB_COLUMNS} FROM pgq.job($1)`;

/** The job as pgq.job shows it to the role, or null. */
async function job(db, id) {
  const { rows } = await db.query(JOB_SQL, [id]);
  return rows[0] || null;
}

// ---- Search -----------------------------------------------------------------

// The live jobs (pending, running, waiting) whose dedupe or group key is the
// text come from pgq.find_jobs (3.0: through the key indexes, across every
// queue the role holds a right on, redacted as list_jobs). It does not look
// at completed and dead jobs (no index on their keys): those are looked for
// among the newest SEARCH_WINDOW jobs of each queue the role holds a right
// on, through pgq.list_jobs (its rights and redaction). With a queue,
// find_jobs is asked for its most (10000) and narrowed to that queue.
const SEARCH_WINDOW = 1000;

const SEARCH_KEYS_SQL = `
SELECT * FROM (
  SELECT j.id, j.queue, j.state, j.attempt, j.max_attempts, j.priority, j.group_key, j.dedupe_key,
         j.run_at, j.enqueued_at, j.finished_at, j.dead_reason, left(j.last_error, 201) AS last_error
    FROM pgq.find_jobs($1, CASE WHEN $4::text IS NULL THEN $3 ELSE 10000 END) j
   WHERE $4::text IS NULL OR j.queue = $4
  UNION ALL
  SELECT j.id, j.queue, j.state, j.attempt, j.max_attempts, j.priority, j.group_key, j.dedupe_key,
         j.run_at, j.enqueued_at, j.finished_at, j.dead_reason, left(j.last_error, 201) AS last_error
    FROM (SELECT o.queue FROM pgq.queue_overview(1) o WHERE $4::text IS NULL OR o.queue = $4) q,
         LATERAL pgq.list_jobs(q.queue, NULL, $2) j
   WHERE (j.dedupe_key = $1 OR j.group_key = $1) AND j.state IN ('done', 'dead', 'cancelled')
) j
 ORDER BY j.id DESC
 LIMIT $3`;

/**
 * Jobs whose dedupe or group key is `key`: every live one (pgq.find_jobs), and
 * the finished ones among the newest SEARCH_WINDOW of each queue the role may read.
 */
async function searchKeys(db, key, { max = 100, queue = null } = {}) {
  return (await db.query(SEARCH_KEYS_SQL, [key, SEARCH_WINDOW, max, queue])).rows;
}

// ---- Workflow (dependencies, SPEC §8) ----------------------------------------

// pgq.job_dependencies (3.0): the job's parents not yet settled, its
// children waiting for it and, once it is dead or cancelled, the dependents
// it took with it, at most `max` of each, of the queues the role holds a
// right on only (no row for a job of another queue). pgq.job adds each one's
// open parents.
const WORKFLOW_SQL = `
SELECT d.direction, d.job_id AS id, d.queue, d.state, j.open_parents
  FROM pgq.job_dependencies($1, $2) d
  LEFT JOIN LATERAL pgq.job(d.job_id) j ON true`;

/** { parents, children, taken } of the job, each at most max rows, by id. */
async function workflow(db, id, max) {
  const { rows } = await db.query(WORKFLOW_SQL, [id, max]);
  const of = (direction) => rows.filter((r) => r.direction === direction);
  return { parents: of('parent'), children: of('child'), taken: of('taken') };
}

// ---- Streams ----------------------------------------------------------------

// pgq.stream_stats: every role, one row per consumer of the streams it holds
// a right on.
const STREAM_STATS_SQL = `
SELECT stream, consumer, extract(epoch FROM lag)::float8 AS lag_seconds, pending_events, pending_capped,
       batch_open, extract(epoch FROM batch_age)::float8 AS batch_age_seconds, finished_events,
       last_finished_at
  FROM pgq.stream_stats
 ORDER BY stream, consumer
 LIMIT $1`;

async function streamStats(db, max) {
  return (await db.query(STREAM_STATS_SQL, [max])).rows.map((r) => ({
    ...r,
    pending_events: num(r.pending_events),
    finished_events: num(r.finished_events),
  }));
}

// The rings (rotation, truncation, segment sizes): pgq.stream_segments()
// (3.0), the streams the role holds a right on.
const SEGMENTS_SQL = `
SELECT stream_name AS stream, rotation::text AS rotation, segments, current_segment AS current,
       rotations AS generation, rotated_at, segment, state = 'current' AS is_current,
       state = 'empty' AS empty, opened_at, sealed_at, truncated_at, bytes
  FROM pgq.stream_segments()
 LIMIT $1`;

async function streamSegments(db, max) {
  return (await db.query(SEGMENTS_SQL, [max])).rows.map((r) => ({
    ...r,
    generation: num(r.generation),
    bytes: num(r.bytes),
  }));
}

// ---- Actions (each refused by the server without the right) -----------------

async function scalar(db, sql, params) {
  const { rows } = await db.query(sql, params);
  return rows[0].value;
}

const pause = (db, queue) => scalar(db, 'SELECT pgq.pause($1) AS value', [queue]);
const resume = (db, queue) => scalar(db, 'SELECT pgq.resume($1) AS value', [queue]);
const retryDeadJobs = async (db, queue, max) =>
  num(await scalar(db, 'SELECT pgq.retry_dead($1::text, $2::integer) AS value', [queue, max]));
const purgeDead = async (db, queue) => num(await scalar(db, 'SELECT pgq.purge_dead($1::text) AS value', [queue]));
// One job each, answering an outcome word (3.0): cancelled / retried /
// purged, or why nothing happened (not_found, already_completed,
// already_dead, already_cancelled, not_dead, dedupe_key_taken). A job of a
// queue the role holds no right on is not_found, as an unknown id.
const cancelJob = (db, id) => scalar(db, 'SELECT pgq.cancel_job($1::bigint) AS value', [id]);
const retryDeadJob = (db, id) => scalar(db, 'SELECT pgq.retry_dead_job($1::bigint) AS value', [id]);
const purgeDeadJob = (db, id) => scalar(db, 'SELECT pgq.purge_dead_job($1::bigint) AS value', [id]);

// ---- Schedules, workers, coordination ---------------------------------------

const SCHEDULES_SQL = `
SELECT name, queue, spec, timezone, next_run_at, last_run_at, last_job_id, running,
       payload::text AS payload
  FROM pgq.schedules
 ORDER BY queue, name`;

async function schedules(db) {
  return (await db.query(SCHEDULES_SQL)).rows;
}

// Each firing of the schedules, newest first: pgq.list_schedule_runs() shows
// those of the queues the role administers (3.0), nothing of the others.
const SCHEDULE_RUNS_SQL = `
SELECT schedule_name, queue_name AS queue, slot, fired_at, job_id
  FROM pgq.list_schedule_runs(NULL, NULL, $1)`;

async function scheduleRuns(db, max) {
  return (await db.query(SCHEDULE_RUNS_SQL, [max])).rows;
}

const WORKERS_SQL = `
SELECT pid, kind, database, started_at, last_pass_at, state, wait_event
  FROM pgq.workers
 ORDER BY kind, database, pid`;

/** pgq.workers: for pg_monitor (42501 otherwise). */
async function workers(db) {
  return (await db.query(WORKERS_SQL)).rows;
}

const RUNNING_JOBS_SQL = `
SELECT id, queue, attempt, max_attempts, claimed_at,
       extract(epoch FROM running_for)::float8 AS running_seconds,
       lease_until, extract(epoch FROM lease_left)::float8 AS lease_left_seconds, expired,
       claimer_pid, claimer_role, claimer_application, host(claimer_address) AS claimer_address,
       claimer_connected, group_key
  FROM pgq.running_jobs
 ORDER BY claimed_at, id
 LIMIT $1`;

async function runningJobs(db, max) {
  return (await db.query(RUNNING_JOBS_SQL, [max])).rows;
}

// The sessions holding claims, per queue: pgq.queue_workers() shows the
// queues the role administers (3.0; pgq.workers, pg_monitor's, shows pgq's
// own background workers only).
const CLAIMERS_SQL = `
SELECT queue_name AS queue, claimer_pid, claimer_role, claimer_application,
       host(claimer_address) AS claimer_address, claimer_connected, connected_since,
       running, oldest_claimed_at, newest_claimed_at, expired
  FROM pgq.queue_workers()
 ORDER BY queue_name, oldest_claimed_at
 LIMIT $1`;

async function claimers(db, max) {
  return (await db.query(CLAIMERS_SQL, [max])).rows.map((r) => ({
    ...r,
    running: num(r.running),
    expired: num(r.expired),
  }));
}

// Coordination is not about queues: its readers (3.0) are EXECUTE-granted
// as its other functions are (42501 otherwise).
const TEAMS_SQL = `
SELECT name, turn, created_at, active_members, inactive_members, last_member, assignments
  FROM pgq.list_teams(NULL, $1)
 ORDER BY name`;

const SWITCHES_SQL = `SELECT name, value, updated_at FROM pgq.list_switches(NULL, $1) ORDER BY name`;
const LADDERS_SQL = `SELECT subject, step, updated_at FROM pgq.list_ladders(NULL, $1)`;

const teams = async (db, max) => (await db.query(TEAMS_SQL, [max])).rows;
const switches = async (db, max) => (await db.query(SWITCHES_SQL, [max])).rows;
const ladders = async (db, max) => (await db.query(LADDERS_SQL, [max])).rows;

// A fair queue's busiest group keys (issue 34, pgq.fair_keys: read from its
// lanes and lease map in shared memory, bounded).
const FAIR_KEYS_SQL = `
SELECT k.group_key, k.weight, k.held, k.more, k.running, k.served,
       extract(epoch FROM k.waiting)::float8 AS waiting_seconds
  FROM pgq.fair_keys($1, $2) k`;

/** The queue's busiest keys in fair order (none for a queue without fairness). */
async function fairKeys(db, queue, max = 20) {
  const { rows } = await db.query(FAIR_KEYS_SQL, [queue, max]);
  return rows.map((r) => ({ ...r, served: num(r.served) }));
}

const WHOAMI_SQL = `SELECT current_user AS role, current_database() AS database`;

async function whoami(db) {
  return (await db.query(WHOAMI_SQL)).rows[0];
}

module.exports = {
  EXACT_UP_TO,
  fairKeys,
  SEARCH_WINDOW,
  searchKeys,
  workflow,
  streamStats,
  streamSegments,
  overview,
  capabilities,
  rateLimits,
  counters,
  queueStats,
  queueRights,
  listJobs,
  job,
  pause,
  resume,
  retryDeadJobs,
  purgeDead,
  cancelJob,
  retryDeadJob,
  purgeDeadJob,
  schedules,
  scheduleRuns,
  workers,
  runningJobs,
  claimers,
  teams,
  switches,
  ladders,
  whoami,
};
