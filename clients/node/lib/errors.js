'use strict';

// Errors of the server that the client turns into classes of their own, to be
// told apart with instanceof. Every other server error is passed on as pg's
// DatabaseError.

// A producer refused by a queue's max_pending (pgq_cpp 3.1): SQLSTATE 53400
// (configuration_limit_exceeded) with this message. The server raises 53400
// for other limits too (its shared memory's): those stay DatabaseErrors.
const QUEUE_FULL_CODE = '53400';
const QUEUE_FULL_MESSAGE = /^queue ".*" is full/;

/**
 * The queue is full: the call would take it past its max_pending (its
 * scheduled, waiting, ready and running jobs, plus those of producers in
 * flight), and the server refused all of it; nothing of the call was kept. As
 * after any failed statement, the transaction it ran in is aborted.
 * `message` is the server's (`queue "emails" is full`), `detail` and `hint`
 * too; `queue` the queue's name; `code` '53400'; `cause` pg's DatabaseError.
 */
class QueueFullError extends Error {
  constructor(queue, cause) {
    super(cause?.message ?? `queue "${queue}" is full`, { cause });
    this.name = 'QueueFullError';
    this.queue = queue;
    this.code = QUEUE_FULL_CODE;
    this.detail = cause?.detail;
    this.hint = cause?.hint;
  }
}

// Whether `err` is the server's refusal of a full queue. Not instanceof
// pg.DatabaseError: the caller's client may come from another copy of pg.
function isQueueFull(err) {
  return err?.code === QUEUE_FULL_CODE && QUEUE_FULL_MESSAGE.test(String(err.message));
}

module.exports = { QueueFullError, isQueueFull };
