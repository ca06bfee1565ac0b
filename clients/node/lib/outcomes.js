'use strict';

const { interval } = require('./sql');

// What a handler can say besides "done" (resolve) and "failed" (throw any
// other error), and what a cancelled job's signal carries. The worker tells
// them apart with instanceof.

/**
 * Not now: the worker puts the job back with pgq.snooze, to run again after
 * `delay` (seconds, or interval text such as '5 minutes') without spending an
 * attempt. Thrown by job.snooze(delay), or by the handler itself.
 */
class Snooze extends Error {
  constructor(delay) {
    // Checked here, in the handler, so that a bad delay fails the job with a
    // TypeError rather than reaching the worker as a snooze it cannot send.
    interval(delay ?? NaN);
    super(`snoozed for ${typeof delay === 'number' ? `${delay} seconds` : delay}`);
    this.name = 'Snooze';
    this.delay = delay;
  }
}

/**
 * The handler cannot know whether its effect happened (a timeout on a call
 * that is not idempotent). The worker neither completes, fails nor releases
 * the job and stops extending its lease: it runs again once the lease has
 * run out, and not before.
 */
class OutcomeUnknown extends Error {
  constructor(message = 'the outcome of the job is unknown', options = undefined) {
    super(message, options);
    this.name = 'OutcomeUnknown';
  }
}

/** The reason a cancelled job's `signal` is aborted with (pgq.cancel). */
class CancelledError extends Error {
  constructor(message = 'the job was cancelled') {
    super(message);
    this.name = 'CancelledError';
  }
}

module.exports = { Snooze, OutcomeUnknown, CancelledError };
