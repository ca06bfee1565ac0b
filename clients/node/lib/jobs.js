'use strict';

const { pgqCall } = require('./sql');

// Reading jobs back (pgq.job, pgq.list_jobs): for dashboards, and for a
// producer that wants a job's progress or result.

// The pgq.job_info columns, named: a server whose type lacks one fails the
// query (42703) instead of leaving a field undefined.
const JOB_INFO_COLUMNS = {
  id: 'id',
  queue: 'queue',
  state: 'state',
  attempt: 'attempt',
  max_attempts: 'maxAttempts',
  priority: 'priority',
  group_key: 'groupKey',
  dedupe_key: 'dedupeKey',
  run_at: 'runAt',
  enqueued_at: 'enqueuedAt',
  claimed_at: 'claimedAt',
  lease_until: 'leaseUntil',
  finished_at: 'finishedAt',
  progress: 'progress',
  result: 'result',
  last_error: 'lastError',
  open_parents: 'openParents',
  payload: 'payload',
  dead_reason: 'deadReason',
};
const SELECT_JOB_INFO = `SELECT ${Object.keys(JOB_INFO_COLUMNS).join(', ')} FROM`;

const LIST_JOBS_OPTIONS = { state: 'state', max: 'max', beforeId: 'before_id' };

/** The job `id` (pgq.job), or null when the server knows no such job (never existed, or purged). */
async function getJob(client, id) {
  const { rows } = await client.query(`${SELECT_JOB_INFO} pgq.job($1)`, [id]);
  return rows.length === 0 ? null : jobInfo(rows[0]);
}

/**
 * The jobs of `queue` (pgq.list_jobs), newest first: at most `max` (the
 * server's default 100), of one `state` if given, with ids below `beforeId`:
 * the next page starts before the last id of this one.
 */
async function listJobs(client, queue, options = {}) {
  const values = [queue];
  const call = pgqCall('list_jobs', values, options, LIST_JOBS_OPTIONS);
  const { rows } = await client.query(`${SELECT_JOB_INFO} ${call}`, values);
  return rows.map(jobInfo);
}

function jobInfo(row) {
  return Object.fromEntries(Object.entries(JOB_INFO_COLUMNS).map(([column, field]) => [field, row[column]]));
}

module.exports = { getJob, listJobs };
