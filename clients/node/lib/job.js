'use strict';

const { Snooze } = require('./outcomes');

/**
 * The job a handler gets: the claim's fields (id, queue, payload, attempt,
 * maxAttempts, leaseUntil, enqueuedAt, priority), its cancellation signal,
 * and the calls it may make while it runs.
 */
class Job {
  #saveProgress;

  constructor(fields, signal, saveProgress) {
    Object.assign(this, fields);
    this.signal = signal;
    this.#saveProgress = saveProgress;
  }

  /**
   * Sets the job's progress (any JSON value) with pgq.progress at once, for
   * pgq.job and pgq.list_jobs to show. Resolves to false when this claim no
   * longer holds the job (cancelled, or its lease lost).
   */
  progress(value) {
    return this.#saveProgress(value);
  }

  /** Throws the Snooze that makes the worker put the job back for `delay` (seconds or interval text). */
  snooze(delay) {
    throw new Snooze(delay);
  }
}

module.exports = { Job };
