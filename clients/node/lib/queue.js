'use strict';

const { setTimeout: delay } = require('node:timers/promises');
const { QueueFullError, isQueueFull } = require('./errors');
const { interval, jobIds, keysOfJobs, pgqCall } = require('./sql');
const tracing = require('./tracing');

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
// waitForRoomMs: a retry refused although the wait found room (a batch larger
// than the room below the low-water mark, or another producer first) pauses
// this long before the next wait, doubling to the cap.
const FIRST_PAUSE_MS = 50;
const MAX_PAUSE_MS = 1000;

// The client's own option of enqueue and enqueueMany, apart from the pgq
// arguments; checked before anything is sent.
function splitOptions(options) {
  const { waitForRoomMs = null, ...rest } = options;
  if (waitForRoomMs != null && !(typeof waitForRoomMs === 'number' && waitForRoomMs >= 0 && waitForRoomMs < Infinity)) {
    throw new TypeError(`waitForRoomMs is a number of milliseconds, 0 or more, not ${String(waitForRoomMs)}`);
  }
  return [waitForRoomMs, rest];
}

// Whether a statement sent now on `client` runs in no transaction of the
// caller's: a pg.Pool (each query on a pooled connection, by itself), or a
// client in no transaction block (node-postgres has no implicit transaction:
// the statement commits by itself). Anything else (a client in BEGIN, or a
// Queryable of unknown kind) is the caller's.
function ownsTransaction(client) {
  if (typeof client.getTransactionStatus === 'function') return client.getTransactionStatus() === 'I';
  return typeof client.connect === 'function' && typeof client.totalCount === 'number'; // a pg.Pool
}

// The millisecond interval text of pgq.wait_for_room.
function milliseconds(ms) {
  if (!(typeof ms === 'number' && ms >= 0 && ms < Infinity)) {
    throw new TypeError(`a timeout is a number of milliseconds, 0 or more, not ${String(ms)}`);
  }
  return `${ms} milliseconds`;
}

/** A queue to send jobs to, on the caller's connection and in its transaction. */
class Queue {
  constructor(name) {
    if (typeof name !== 'string') throw new TypeError('the queue name must be a string');
    this.name = name;
  }

  /**
   * Whether the queue has room (pgq.wait_for_room, pgq_cpp 3.1): true at once
   * when it has no max_pending or holds fewer unfinished jobs than its
   * low-water mark (nine tenths of max_pending, rounded up); otherwise the
   * server sleeps until completions take it below that mark or `timeoutMs`
   * have passed, and answers whether it is below now. Holds `client`'s
   * connection while it waits; begins and commits nothing.
   */
  async waitForRoom(client, timeoutMs = 0) {
    const { rows } = await client.query('SELECT pgq.wait_for_room($1, $2::interval) AS room', [
      this.name,
      milliseconds(timeoutMs),
    ]);
    return rows[0].room;
  }

  // run() (one producing statement), with a full queue's refusal thrown as a
  // QueueFullError.
  async #refusing(run) {
    try {
      return await run();
    } catch (err) {
      if (isQueueFull(err)) throw new QueueFullError(this.name, err);
      throw err;
    }
  }

  // run(), and with waitForRoomMs, while the queue refuses it as full, waits
  // for room and runs it again until that time has passed; only where the
  // client owns the transaction (ownsTransaction, before the call). In the
  // caller's transaction the refusal aborted it: the QueueFullError at once.
  async #produce(client, run, waitForRoomMs) {
    if (waitForRoomMs == null) return this.#refusing(run);
    const owned = ownsTransaction(client);
    const deadline = performance.now() + waitForRoomMs;
    let pause = 0;
    for (;;) {
      try {
        return await this.#refusing(run);
      } catch (err) {
        if (!(err instanceof QueueFullError) || !owned || performance.now() >= deadline) throw err;
        if (pause) {
          await delay(Math.min(pause, Math.max(0, deadline - performance.now())));
          pause = Math.min(2 * pause, MAX_PAUSE_MS);
        } else {
          pause = FIRST_PAUSE_MS;
        }
        let room;
        try {
          room = await this.waitForRoom(client, Math.max(0, deadline - performance.now()));
        } catch (waitErr) {
          // 25P02: the refused call was in a transaction block after all (a
          // BEGIN sent before it and not awaited): the caller's.
          if (waitErr?.code === '25P02') throw err;
          throw waitErr;
        }
        if (!room) return this.#refusing(run); // one last try: room below the mark, maybe
      }
    }
  }

  /**
   * Enqueues one job with `client.query`, so inside the caller's transaction
   * when one is open: the job exists if and only if it commits. Begins and
   * commits nothing. Resolves to the job id (a string, as pg returns bigint).
   * With `after` (job ids), the job waits until every one of them is done.
   * A full queue (max_pending) rejects with a QueueFullError; with
   * `waitForRoomMs`, where the call is in no transaction of the caller's, it
   * waits for room and tries again until that time has passed. With an
   * OpenTelemetry SDK, runs in a `send <queue>` span whose context the job
   * keeps (./tracing).
   */
  async enqueue(client, payload, options = {}) {
    const [waitForRoomMs, pgqOptions] = splitOptions(options);
    return tracing.producing(
      this.name,
      null,
      (trace) => {
        const values = [this.name, JSON.stringify(payload)];
        const call = pgqCall('enqueue', values, pgqOptions, ENQUEUE_OPTIONS, trace);
        const run = async () => (await client.query(`SELECT ${call} AS id`, values)).rows[0].id;
        return this.#produce(client, run, waitForRoomMs);
      },
      (id) => id,
    );
  }

  /**
   * Enqueues many jobs in one statement; resolves to their ids in input
   * order. With `after`, every one of them waits for the same jobs.
   * `groupKeys` / `dedupeKeys`: a key for every job (a string) or one per
   * job (an array, null for none); a taken dedupe key gives its holder's id
   * in that job's place, as enqueue does. A full queue refuses all of them
   * (QueueFullError); `waitForRoomMs` as for enqueue.
   */
  async enqueueMany(client, payloads, options = {}) {
    const [waitForRoomMs, pgqOptions] = splitOptions(options);
    return tracing.producing(this.name, payloads.length, (trace) => {
      const values = [this.name, payloads.map((payload) => JSON.stringify(payload))];
      const call = pgqCall('enqueue_many', values, pgqOptions, ENQUEUE_MANY_OPTIONS, trace);
      const run = async () => (await client.query(`SELECT ${call} AS id`, values)).rows.map((row) => row.id);
      return this.#produce(client, run, waitForRoomMs);
    });
  }
}

module.exports = { Queue };
