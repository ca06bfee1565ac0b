'use strict';

const { interval, jobIds, keysOfJobs, pgqCall } = require('./sql');

// The options of enqueue and enqueueMany and the pgq arguments they fill. An
// option left out (or null) keeps the server's default, and is not sent:
// `after` (pgq_cpp 1.2) only when given.
const AFTER = ['after', jobIds, 'bigint[]'];
const ENQUEUE_OPTIONS = {
  runAt: 'run_at',
  priority: 'priority',
  dedupeKey: 'dedupe_key',
  maxAttempts: 'max_attempts',
  groupKey: 'group_key',
  dedupeFor: ['dedupe_for', interval],
  onDuplicate: 'on_duplicate',
  after: AFTER,
};
// groupKeys and dedupeKeys (pgq_cpp 3.1): one key for every job, or one each.
const ENQUEUE_MANY_OPTIONS = {
  runAt: 'run_at',
  priority: 'priority',
  after: AFTER,
  groupKeys: ['group_keys', keysOfJobs, 'text[]'],
  dedupeKeys: ['dedupe_keys', keysOfJobs, 'text[]'],
};

/** A queue to send jobs to, on the caller's connection and in its transaction. */
class Queue {
  constructor(name) {
    if (typeof name !== 'string') throw new TypeError('the queue name must be a string');
    this.name = name;
  }

  /**
   * Enqueues one job with `client.query`, so inside the caller's transaction
   * when one is open: the job exists if and only if it commits. Begins and
   * commits nothing. Resolves to the job id (a string, as pg returns bigint).
   * With `after` (job ids), the job waits until every one of them is done.
   */
  async enqueue(client, payload, options = {}) {
    const values = [this.name, JSON.stringify(payload)];
    const call = pgqCall('enqueue', values, options, ENQUEUE_OPTIONS);
    const { rows } = await client.query(`SELECT ${call} AS id`, values);
    return rows[0].id;
  }

  /**
   * Enqueues many jobs in one statement; resolves to their ids in input
   * order. With `after`, every one of them waits for the same jobs.
   * `groupKeys` / `dedupeKeys`: a key for every job (a string) or one per
   * job (an array, null for none); a taken dedupe key gives its holder's id
   * in that job's place, as enqueue does.
   */
  async enqueueMany(client, payloads, options = {}) {
    const values = [this.name, payloads.map((payload) => JSON.stringify(payload))];
    const call = pgqCall('enqueue_many', values, options, ENQUEUE_MANY_OPTIONS);
    const { rows } = await client.query(`SELECT ${call} AS id`, values);
    return rows.map((row) => row.id);
  }
}

module.exports = { Queue };
