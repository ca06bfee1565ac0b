'use strict';

// What the Worker and the StreamConsumer share: their connections, telling a
// lost connection from the server's answer, retrying after one, cancelling a
// statement that waits on the server, and stopping on signals.
const { setTimeout: delay } = require('node:timers/promises');
const pg = require('pg');

// Reconnect backoff after a failed claim or next_batch: doubles from the first
// to the cap.
const FIRST_BACKOFF_MS = 200;
const MAX_BACKOFF_MS = 10_000;
// A statement that waits on the server (a claim, a next_batch) and has not
// answered this long after its wait ended is taken for a connection lost
// without a word (a dead network), and the loop reconnects.
const CLAIM_GRACE_MS = 10_000;
// SQLSTATEs that mean the server could not take the statement (the session
// ended, or no new one could begin): it did not run, or its outcome is
// unknown, and the same statement may work on a new connection. Also any code
// of class 08 (connection exception), and 55000 as a FATAL error (a database
// not accepting connections, seen while connecting).
const CONNECTION_SQLSTATES = new Set([
  '57P01', // admin_shutdown: terminated, or the server is stopping
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now: the server is starting or stopping
  '53300', // too_many_connections
]);

// Whether `err` means the database could not be reached or the connection
// broke, rather than an error the server raised for the statement: any error
// without a SQLSTATE (not a pg DatabaseError: connection refused or reset, a
// socket closed, "Connection terminated unexpectedly", a pg timeout), a code
// of class 08, one of CONNECTION_SQLSTATES, or 55000 at FATAL severity.
function isConnectionError(err) {
  if (!(err instanceof pg.DatabaseError) || typeof err.code !== 'string') return true;
  if (err.code.startsWith('08') || CONNECTION_SQLSTATES.has(err.code)) return true;
  return err.code === '55000' && err.severity === 'FATAL';
}

// Whether the server cancelled the statement (query_canceled, 57014):
// pg_cancel_backend, a statement_timeout, a lock wait cancelled. The session
// is fine and the statement rolled back.
function isQueryCanceled(err) {
  return err instanceof pg.DatabaseError && err.code === '57014';
}

// A backoff with jitter: between half of `ms` and `ms`.
function jitter(ms) {
  return Math.round(ms * (0.5 + Math.random() / 2));
}

/**
 * A connected pg.Client of its own, for a statement that waits on the server
 * (it blocks its connection while it waits).
 */
async function connect(config) {
  const client = new pg.Client(config);
  // A connection lost between two statements makes the next one fail, and
  // the loop reconnects then.
  client.on('error', () => {});
  await client.connect();
  // Were this process to die while its claim waits, a pgq_cpp 1.0 server
  // would take the next job for it and hold it a whole lease (1.1 watches
  // the client's socket itself). This lets an older server notice a closed
  // connection within a second. (Servers on Windows refuse it.)
  await client.query('SET client_connection_check_interval = 1000').catch(() => {});
  return client;
}

/**
 * Runs `run()` until it resolves. An error that means the database could not
 * be reached or the connection broke (isConnectionError) is logged and
 * retried after a backoff that doubles from `firstMs` to `maxMs` (with
 * jitter), unless `giveUp(nextTryAt)` says not to; `signal`, if given, cuts a
 * backoff short. Resolves to {result, tries}; rejects with any other error,
 * or the last one.
 */
async function retryConnectionErrors(what, run, { firstMs, maxMs, giveUp, logger, signal }) {
  let backoff = firstMs;
  for (let tries = 1; ; tries++) {
    try {
      return { result: await run(), tries };
    } catch (err) {
      const pause = jitter(backoff);
      if (!isConnectionError(err) || giveUp(Date.now() + pause)) throw err;
      logger.warn(`pgq: ${what} failed; retrying in ${pause} ms:`, err);
      await delay(pause, undefined, { signal }).catch(() => {});
      backoff = Math.min(2 * backoff, maxMs);
    }
  }
}

/**
 * Cancels a statement waiting on the server (pg_cancel_backend, sent on
 * `pool`) until it has ended: the server ignores a cancel that comes before
 * the statement has begun, so it is sent again every 100 ms. `running()`
 * returns {ended, processID} while the statement runs (`ended`: a promise
 * that settles when it ends), null afterwards. Never rejects.
 */
async function cancelUntilEnded(pool, running, logger, what) {
  for (let statement = running(); statement; statement = running()) {
    await pool
      .query('SELECT pg_cancel_backend($1)', [statement.processID])
      .catch((err) => logger.warn(`pgq: could not cancel ${what}:`, err));
    await Promise.race([statement.ended, delay(100)]);
  }
}

/**
 * Calls `onSignal(signal)` on the first of `signals`, once; returns the
 * function that removes the listeners.
 */
function onceOnSignals(signals, onSignal) {
  for (const signal of signals) process.once(signal, onSignal);
  return () => {
    for (const signal of signals) process.removeListener(signal, onSignal);
  };
}

module.exports = {
  FIRST_BACKOFF_MS,
  MAX_BACKOFF_MS,
  CLAIM_GRACE_MS,
  isConnectionError,
  isQueryCanceled,
  jitter,
  connect,
  retryConnectionErrors,
  cancelUntilEnded,
  onceOnSignals,
};
