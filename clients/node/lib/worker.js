'use strict';

const { setTimeout: delay } = require('node:timers/promises');
const pg = require('pg');
const {
  CLAIM_GRACE_MS,
  FIRST_BACKOFF_MS,
  MAX_BACKOFF_MS,
  cancelUntilEnded,
  connect,
  isQueryCanceled,
  jitter,
  onceOnSignals,
  retryConnectionErrors,
} = require('./connection');
const { Job } = require('./job');
const { CancelledError, OutcomeUnknown, Snooze } = require('./outcomes');
const { interval } = require('./sql');
const tracing = require('./tracing');

// The backoff after a failed claim (FIRST_BACKOFF_MS doubling to
// MAX_BACKOFF_MS) and CLAIM_GRACE_MS are in ./connection. Retrying complete,
// fail, snooze or release after a lost connection: the backoff doubles from
// the first to the cap, for as long as the job's lease lasts.
const FIRST_SETTLE_RETRY_MS = 100;
const MAX_SETTLE_RETRY_MS = 2_000;

// pgq.clock() is read after the claim: lease_until minus it is at most the
// lease, whatever the difference between our clock and the server's. Several
// queues are claimed from together, passed as one text[] parameter (a JS
// array); one queue keeps the claim of one queue, which every version has.
const CLAIM_SQL = 'SELECT c.*, pgq.clock() AS now FROM pgq.claim($1, $2, $3::interval, $4::interval) c';
const CLAIM_QUEUES_SQL =
  'SELECT c.*, pgq.clock() AS now FROM pgq.claim($1::text[], $2, $3::interval, $4::interval) c';
// While an OpenTelemetry SDK is registered (./tracing): the same claim, with
// each job's trace context (pgq_cpp 3.1).
const CLAIM_TRACED_SQL = CLAIM_SQL.replace('pgq.claim(', 'pgq.claim_traced(');
const CLAIM_QUEUES_TRACED_SQL = CLAIM_QUEUES_SQL.replace('pgq.claim(', 'pgq.claim_traced(');

/**
 * The queue names of the worker's `queue` option: a name, a Queue, or an
 * array of them (at least one, no name twice). Throws before anything is sent.
 */
function queueNames(option) {
  const names = (Array.isArray(option) ? option : [option]).map((queue) =>
    typeof queue === 'string' ? queue : queue?.name,
  );
  if (names.some((n) => typeof n !== 'string')) {
    throw new TypeError('queue must be a name, a Queue, or an array of them');
  }
  if (names.length === 0) throw new RangeError('queue: the array names no queue');
  const twice = names.find((n, i) => names.indexOf(n) !== i);
  if (twice !== undefined) throw new RangeError(`queue: ${JSON.stringify(twice)} is named twice`);
  return names;
}

/**
 * Claims jobs of one queue, or of several, and runs `handler(job)` on each,
 * up to `concurrency` at once. See README.md for the lifecycle.
 */
class Worker {
  #queues; // the names
  #claimSql;
  #claimTracedSql;
  #claimQueues; // the claim's first parameter: a name, or an array of them
  #label; // "queue a", "queues a, b": for the log
  #handler;
  #concurrency;
  #batch;
  #lease; // seconds, or null for the queue's own
  #wait; // seconds
  #logger;
  #tracing; // {consumerParent}
  #connection; // pg.Pool config, also used for the claim connection

  #pool = null; // complete, fail, snooze, extend, release, progress, pgq.job, the cancel at stop
  #claimer = null; // the claim's own connection: a waiting claim blocks it
  #claimEnded = null; // while a claim runs: settles when it ends
  #ready = []; // claimed, not started: {job, lease} (lease: see #heartbeat)
  #running = new Set(); // promises of the jobs being run
  #roomForClaim = null; // resolves the loop's wait for a free slot
  #stopping = false;
  #abort = new AbortController(); // cuts the backoff sleep short at stop
  #starting = null; // start()'s promise
  #loop = null;
  #removeSignalHandlers = () => {};
  #markStopped;
  #stopped = new Promise((resolve) => {
    this.#markStopped = resolve;
  });

  constructor(options) {
    const {
      queue,
      handler,
      concurrency = 1,
      batch = concurrency,
      lease = null,
      wait = 30,
      logger = console,
      tracing: tracingOptions = null,
      ...connection
    } = options;
    this.#queues = queueNames(queue);
    const several = Array.isArray(queue) && this.#queues.length > 1;
    this.#claimSql = several ? CLAIM_QUEUES_SQL : CLAIM_SQL;
    this.#claimTracedSql = several ? CLAIM_QUEUES_TRACED_SQL : CLAIM_TRACED_SQL;
    this.#tracing = tracing.readerOptions(tracingOptions);
    this.#claimQueues = several ? this.#queues : this.#queues[0];
    this.#label = `${several ? 'queues' : 'queue'} ${this.#queues.join(', ')}`;
    if (typeof handler !== 'function') throw new TypeError('handler must be a function');
    for (const [name, value] of Object.entries({ concurrency, batch })) {
      if (!Number.isInteger(value) || value < 1) throw new RangeError(`${name} must be an integer >= 1`);
    }
    if (lease !== null && !(lease > 0)) throw new RangeError('lease must be a number of seconds > 0');
    if (!(wait > 0)) throw new RangeError('wait must be a number of seconds > 0');
    this.#handler = handler;
    this.#concurrency = concurrency;
    this.#batch = batch;
    this.#lease = lease;
    this.#wait = wait;
    this.#logger = logger;
    this.#connection = connection;
  }

  /**
   * Connects and makes a first claim, so that a wrong connection, an unknown
   * queue (42704) or a missing consume right (42501) rejects here; then runs
   * in the background until stop().
   */
  start() {
    if (this.#starting || this.#stopping) {
      return Promise.reject(new Error('a worker starts once, and not after stop()'));
    }
    this.#starting = this.#begin();
    return this.#starting;
  }

  async #begin() {
    this.#pool = new pg.Pool(this.#connection);
    // An idle pooled connection that dies is dropped by the pool; the next
    // query opens a new one.
    this.#pool.on('error', () => {});
    try {
      this.#claimer = await connect(this.#connection);
      this.#take(await this.#claim(0));
    } catch (err) {
      await this.#close();
      throw err;
    }
    this.#loop = this.#run();
  }

  /**
   * Stops claiming, gives back the jobs claimed but not started (pgq.release:
   * their next claim has the same attempt number), lets the running ones
   * finish, and closes the connections. Resolves when all that is done; the
   * same promise for every call. A release or an outcome that cannot be
   * recorded for a lost connection is retried for up to the job's lease
   * (#settle), so stop() may wait that long after the last handler ends.
   */
  stop() {
    if (!this.#stopping) this.#shutdown();
    return this.#stopped;
  }

  /**
   * Calls stop() on the first of these signals (a second one then kills the
   * process as usual). Resolves once the worker has stopped, however.
   */
  stopOnSignals(signals = ['SIGTERM', 'SIGINT']) {
    this.#removeSignalHandlers();
    this.#removeSignalHandlers = onceOnSignals(signals, (signal) => {
      this.#logger.warn(`pgq: ${signal}: stopping the worker of ${this.#label}`);
      this.stop();
    });
    return this.#stopped;
  }

  async #run() {
    let backoff = FIRST_BACKOFF_MS;
    while (!this.#stopping) {
      await this.#freeSlot();
      if (this.#stopping) break;
      try {
        this.#claimer ??= await connect(this.#connection);
        if (this.#stopping) break;
        this.#take(await this.#claim(this.#wait));
        backoff = FIRST_BACKOFF_MS;
      } catch (err) {
        if (this.#stopping) break; // the claim was cancelled by stop()
        const pause = jitter(backoff);
        if (isQueryCanceled(err)) {
          // Not by us: pg_cancel_backend, a statement_timeout, or a lock wait
          // cancelled while ALTER EXTENSION waits. The claim rolled back and
          // took nothing; the connection is fine: claim again on it.
          this.#logger.warn(`pgq: claim from ${this.#label} was cancelled (57014); claiming again in ${pause} ms`);
        } else {
          this.#logger.error(`pgq: claim from ${this.#label} failed; retrying in ${pause} ms:`, err);
          this.#claimer?.end().catch(() => {});
          this.#claimer = null;
        }
        await delay(pause, undefined, { signal: this.#abort.signal }).catch(() => {});
        backoff = Math.min(2 * backoff, MAX_BACKOFF_MS);
      }
    }
  }

  async #claim(waitSeconds) {
    const traced = tracing.enabled();
    const claim = this.#claimer.query({
      text: traced ? this.#claimTracedSql : this.#claimSql,
      values: [this.#claimQueues, this.#batch, interval(this.#lease), interval(waitSeconds)],
      query_timeout: waitSeconds * 1000 + CLAIM_GRACE_MS,
    });
    this.#claimEnded = claim.catch(() => {});
    try {
      const { rows } = await claim;
      const returnedAt = Date.now();
      return rows.map((row) => ({
        id: row.id,
        queue: row.queue,
        payload: row.payload,
        attempt: row.attempt,
        maxAttempts: row.max_attempts,
        leaseUntil: row.lease_until,
        enqueuedAt: row.enqueued_at,
        priority: row.priority,
        leaseMs: this.#lease === null ? row.lease_until - row.now : this.#lease * 1000,
        // When the lease ends, on this process's clock.
        expiresAt: returnedAt + (row.lease_until - row.now),
        // The job's trace context and its parents' (null: not read).
        trace: traced ? { traceparent: row.traceparent, tracestate: row.tracestate, links: row.links ?? [] } : null,
      }));
    } finally {
      this.#claimEnded = null;
    }
  }

  // Holds claimed jobs: each heartbeats from now on, and starts when a slot is free.
  #take(claimed) {
    for (const { leaseMs, expiresAt, trace, ...fields } of claimed) {
      const cancel = new AbortController();
      const job = new Job(fields, cancel.signal, (value) => this.#saveProgress(job, value));
      this.#ready.push({ job, trace, lease: this.#heartbeat(job, leaseMs, expiresAt, cancel) });
    }
    this.#startReady();
  }

  async #saveProgress(job, value) {
    // The pool closes only once every handler has ended; a handler that kept
    // its job past that gets this rather than a TypeError.
    if (!this.#pool) throw new Error(`pgq: job ${job.id}: progress after the worker stopped`);
    const { rows } = await this.#pool.query('SELECT pgq.progress($1, $2, $3::jsonb) AS saved', [
      job.id,
      job.attempt,
      JSON.stringify(value),
    ]);
    return rows[0].saved;
  }

  #startReady() {
    while (!this.#stopping && this.#ready.length > 0 && this.#running.size < this.#concurrency) {
      const { job, trace, lease } = this.#ready.shift();
      if (lease.cancelled) {
        lease.end(); // cancelled while it waited for a slot: nothing to run or record
        continue;
      }
      const run = this.#execute(job, lease, trace).finally(() => {
        this.#running.delete(run);
        this.#startReady();
      });
      this.#running.add(run);
    }
    if (this.#hasFreeSlot() && this.#roomForClaim) {
      this.#roomForClaim();
      this.#roomForClaim = null;
    }
  }

  #hasFreeSlot() {
    return this.#ready.length === 0 && this.#running.size < this.#concurrency;
  }

  #freeSlot() {
    if (this.#hasFreeSlot()) return Promise.resolve();
    return new Promise((resolve) => {
      this.#roomForClaim = resolve;
    });
  }

  // Extends the job's lease every third of it, so that one missed heartbeat
  // still leaves time for the next, until the job's outcome is recorded (or
  // given up). Returns the lease: {expiresAt, settling, cancelled, checking,
  // end}: when it ends on this process's clock (as far as known); whether the
  // outcome is being recorded (a lease found gone then is the outcome's to
  // report: a complete that committed, or one that will return false);
  // whether the job was found cancelled, and that check while it runs (the
  // outcome waits for it: a cancelled job's is not recorded); the function
  // that ends the heartbeat.
  #heartbeat(job, leaseMs, expiresAt, cancel) {
    let held = true;
    const lease = { expiresAt, settling: false, cancelled: false, checking: null, end: null };
    const timer = setInterval(async () => {
      const sentAt = Date.now();
      try {
        const { rows } = await this.#pool.query('SELECT pgq.extend($1, $2, $3::interval) AS lease_until', [
          job.id,
          job.attempt,
          interval(leaseMs / 1000),
        ]);
        if (!held) return;
        if (rows[0].lease_until !== null) {
          job.leaseUntil = rows[0].lease_until;
          lease.expiresAt = sentAt + leaseMs;
          return;
        }
        // (Also keeps a second heartbeat under way, after a slow extend, from
        // reporting the loss again.)
        held = false;
        clearInterval(timer);
        if (!lease.settling) lease.checking = this.#leaseGone(job, lease, cancel);
      } catch (err) {
        if (held) this.#logger.warn(`pgq: heartbeat of job ${job.id} failed; trying again:`, err);
      }
    }, leaseMs / 3);
    lease.end = () => {
      held = false;
      clearInterval(timer);
    };
    return lease;
  }

  // pgq.extend returned NULL while the handler runs: this claim no longer
  // holds the job. Cancelled (pgq.cancel; no row: cancelled and its history
  // purged since, as a job we hold cannot have been completed): the handler's
  // signal is aborted. Otherwise the lease was lost (it expired, and the job
  // may be running under a newer claim), as before 1.2. Never rejects.
  async #leaseGone(job, lease, cancel) {
    const name = `job ${job.id} attempt ${job.attempt}`;
    const state = await this.#jobState(job);
    if (state === undefined) {
      this.#logger.warn(`pgq: ${name}: lease lost (its state could not be read)`);
    } else if (state !== null && state !== 'cancelled') {
      this.#logger.warn(`pgq: ${name}: lease lost to a newer claim (the job is ${state} now)`);
    } else {
      lease.cancelled = true;
      this.#logger.warn(`pgq: ${name} was cancelled: its signal is aborted, and its outcome will not be recorded`);
      cancel.abort(new CancelledError(`job ${job.id} was cancelled`));
    }
  }

  // The job's state (pgq.job), null when the server has no row for it,
  // undefined when it could not be read (logged).
  async #jobState(job) {
    try {
      const { rows } = await this.#pool.query('SELECT state FROM pgq.job($1)', [job.id]);
      return rows.length === 0 ? null : rows[0].state;
    } catch (err) {
      this.#logger.warn(`pgq: could not read the state of job ${job.id}:`, err);
      return undefined;
    }
  }

  /**
   * Runs complete, fail, snooze or release (`text`, `values`) on the pool. An
   * error that means the database could not be reached or the connection
   * broke (isConnectionError) is retried with backoff, on a new connection, until
   * it works or the lease ends (`expiresAt()`, which the heartbeat moves on):
   * after that the server takes the job back by itself. Resolves to
   * {rows, tries}; rejects with any other error, or the last one.
   */
  async #settle(what, text, values, expiresAt) {
    const { result, tries } = await retryConnectionErrors(what, () => this.#pool.query(text, values), {
      firstMs: FIRST_SETTLE_RETRY_MS,
      maxMs: MAX_SETTLE_RETRY_MS,
      giveUp: (nextTryAt) => nextTryAt >= expiresAt(),
      logger: this.#logger,
    });
    return { rows: result.rows, tries };
  }

  // Runs the handler on the job and records its outcome; never rejects. With
  // the job's trace context (`trace`, read while tracing), in a `process
  // <queue>` span, which the handler runs in and which ends with the outcome
  // (pgq.outcome): what the handler enqueues joins the job's trace.
  async #execute(job, lease, trace) {
    const processing =
      trace &&
      tracing.startProcessing(job.queue, {
        parent: trace,
        links: trace.links,
        consumerParent: this.#tracing.consumerParent,
        attributes: { 'messaging.message.id': String(job.id), 'pgq.attempt': job.attempt },
      });
    const outcome = await Promise.resolve()
      .then(() => tracing.within(processing, () => this.#handler(job)))
      .then(
        (result) => ({ succeeded: true, result }),
        (failure) => ({ succeeded: false, failure }),
      );
    // The heartbeat goes on until the outcome is recorded: retries after a
    // lost connection last as long as the lease, which it keeps extending.
    lease.settling = true;
    await lease.checking;
    const name = `job ${job.id} attempt ${job.attempt}`;
    const expiresAt = () => lease.expiresAt;
    const { succeeded, result, failure } = outcome;
    let recorded; // the span's pgq.outcome
    const failures = []; // the span's exceptions
    try {
      if (lease.cancelled) {
        // Logged when found; complete would return false and fail 'lost'.
        recorded = 'cancelled';
      } else if (!succeeded && failure instanceof OutcomeUnknown) {
        recorded = 'unknown';
        failures.push(failure);
        // No heartbeat from now on: the lease runs out and the job is claimed
        // again then, and only then (neither released nor failed, so that
        // nobody runs it while the first run's effect may still be under way).
        lease.end();
        this.#logger.warn(
          `pgq: ${name}: outcome unknown (${failure.message}); neither completed nor failed: ` +
            `it runs again once its lease has run out (${job.leaseUntil.toISOString()})`,
        );
      } else if (!succeeded && failure instanceof Snooze) {
        const { rows, tries } = await this.#settle(
          `snooze of ${name}`,
          'SELECT pgq.snooze($1, $2, $3::interval) AS snoozed',
          [job.id, job.attempt, interval(failure.delay)],
          expiresAt,
        );
        recorded = rows[0].snoozed ? 'snoozed' : 'lost';
        if (!rows[0].snoozed) await this.#reportFenced(job, `${name} snoozed`, 'snooze', tries);
      } else if (succeeded) {
        recorded = (await this.#complete(job, name, result, expiresAt)) ? 'completed' : 'lost';
      } else {
        failures.push(failure);
        const { rows } = await this.#settle(
          `fail of ${name}`,
          'SELECT pgq.fail($1, $2, $3) AS outcome',
          [job.id, job.attempt, String(failure?.stack ?? failure)],
          expiresAt,
        );
        recorded = rows[0].outcome === 'retry' ? 'failed' : rows[0].outcome; // or 'dead', 'lost'
        this.#logger.warn(`pgq: ${name} failed (${rows[0].outcome}):`, failure);
      }
    } catch (err) {
      // The lease expires by itself and the job is claimed again.
      this.#logger.error(`pgq: could not record the outcome of ${name}:`, err);
      recorded = 'unrecorded';
      failures.push(err);
    } finally {
      lease.end();
      tracing.endProcessing(processing, recorded, failures);
    }
  }

  // pgq.complete, with the handler's resolved value as the job's result
  // unless it is undefined or null (then without one, as a 1.1 server takes
  // it). Resolves to whether it was recorded (false: fenced, reported).
  async #complete(job, name, result, expiresAt) {
    const json = resultJson(result, (why) =>
      this.#logger.warn(`pgq: ${name}: its handler's result is not JSON (${why}); completed without a result`),
    );
    const [text, values] =
      json === null
        ? ['SELECT pgq.complete($1, $2) AS done', [job.id, job.attempt]]
        : ['SELECT pgq.complete($1, $2, $3::jsonb) AS done', [job.id, job.attempt, json]];
    const { rows, tries } = await this.#settle(`complete of ${name}`, text, values, expiresAt);
    if (!rows[0].done) await this.#reportFenced(job, `${name} succeeded`, 'completion', tries);
    return rows[0].done;
  }

  // A complete or snooze returned false: the job was cancelled after the last
  // heartbeat, or the lease was lost to a newer claim, or (retried) an earlier
  // try did commit. `what` is "job 7 attempt 1 succeeded".
  async #reportFenced(job, what, call, tries) {
    // (No row is no proof of a cancel here: a completion that committed
    // leaves none on a queue that does not keep completed jobs.)
    if ((await this.#jobState(job)) === 'cancelled') {
      this.#logger.warn(`pgq: ${what} but it was cancelled meanwhile; its outcome is not recorded`);
    } else if (tries === 1) {
      this.#logger.warn(`pgq: ${what} but its lease was lost to a newer claim`);
    } else {
      this.#logger.warn(
        `pgq: ${what}; its retried ${call} returned false: an earlier try committed ` +
          'before the connection broke, or its lease was lost to a newer claim',
      );
    }
  }

  // Never rejects: every step catches and logs its own failure.
  async #shutdown() {
    this.#stopping = true;
    this.#removeSignalHandlers();
    this.#abort.abort();
    this.#roomForClaim?.();
    await this.#starting?.catch(() => {}); // its first claim does not wait
    // A waiting claim is cancelled: it ends at once and, rolled back, takes
    // nothing. The server ignores a cancel that comes before it has begun
    // the claim, so cancel again until the claim has ended.
    await cancelUntilEnded(
      this.#pool,
      () => this.#claimEnded && { ended: this.#claimEnded, processID: this.#claimer.processID },
      this.#logger,
      'the waiting claim',
    );
    await this.#loop;
    const unstarted = this.#ready.splice(0);
    if (unstarted.length > 0) {
      for (const { lease } of unstarted) lease.settling = true;
      await this.#settle(
        'release of the unstarted jobs',
        'SELECT pgq.release(id, attempt) FROM unnest($1::bigint[], $2::int[]) AS j(id, attempt)',
        [unstarted.map(({ job }) => job.id), unstarted.map(({ job }) => job.attempt)],
        () => Math.max(...unstarted.map(({ lease }) => lease.expiresAt)),
      )
        .catch((err) =>
          this.#logger.error('pgq: could not release the unstarted jobs; their leases will expire:', err),
        )
        .finally(() => {
          for (const { lease } of unstarted) lease.end();
        });
    }
    await Promise.all(this.#running);
    await this.#close();
    this.#markStopped();
  }

  async #close() {
    const [claimer, pool] = [this.#claimer, this.#pool];
    this.#claimer = this.#pool = null;
    await Promise.all([claimer?.end(), pool?.end()]).catch((err) =>
      this.#logger.warn('pgq: closing the connections failed:', err),
    );
  }
}

// A handler's resolved value as JSON text, or null for no result (undefined
// or null). One JSON cannot hold (a BigInt, a cycle, a function) is reported
// to `warn` and left out: the job's work is done, and failing it for that
// would only do the work again.
function resultJson(value, warn) {
  if (value == null) return null;
  let json;
  try {
    json = JSON.stringify(value);
  } catch (err) {
    warn(err.message);
    return null;
  }
  if (json === undefined) warn(`a ${typeof value}`);
  return json ?? null;
}

module.exports = { Worker };
