#!/usr/bin/env node
'use strict';

// The welcome email: signing up inserts the user and enqueues the email in
// ONE transaction (no user without an email, no email without a user), and a
// worker sends it. The mail provider's API may time out, and then nobody knows
// whether the email went out: the handler says so (OutcomeUnknown) and the job
// runs again only once its lease has run out.
//
//   node examples/welcome-email.js          the worker, until SIGTERM or Ctrl-C
//   node examples/welcome-email.js --demo   resets the demo (schema welcome_demo,
//                                           queue welcome_email), signs up a few
//                                           users, sends their emails (the API
//                                           times out once), exits
//
// It connects with DATABASE_URL, or else the PG* variables (PGHOST, PGPORT,
// PGUSER, PGPASSWORD, PGDATABASE), to a database with pgq_cpp installed. The
// demo's timed-out email comes back when maintenance expires its lease: the
// library preloaded, or pgq.maintain() run by you (docs/operations.md).
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const { OutcomeUnknown, Queue, Worker } = require('pgq-cpp');

const welcomeEmails = new Queue('welcome_email');
// How long the handler waits for the mail API's answer.
const MAIL_API_TIMEOUT_MS = 1000;

async function setUp(pool, { reset }) {
  if (reset) {
    await pool.query('DROP SCHEMA IF EXISTS welcome_demo CASCADE');
    await pool.query(
      "SELECT pgq.drop_queue('welcome_email', force => true) FROM pgq.queues WHERE name = 'welcome_email'",
    );
  }
  await pool.query('CREATE SCHEMA IF NOT EXISTS welcome_demo');
  await pool.query(`CREATE TABLE IF NOT EXISTS welcome_demo.users (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL UNIQUE)`);
  // Our stand-in for the mail provider: one row per email it sent.
  await pool.query(`CREATE TABLE IF NOT EXISTS welcome_demo.sent_emails (
    email text PRIMARY KEY REFERENCES welcome_demo.users (email),
    sent_at timestamptz NOT NULL DEFAULT now())`);
  await pool.query("SELECT pgq.create_queue('welcome_email', max_attempts => 8, if_not_exists => true)");
}

/**
 * Signs a user up: the row and its welcome email commit together, or neither
 * does. (The email is queued first to show that: when the insert fails, the
 * rollback takes the queued email back.)
 */
async function signUp(pool, email) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await welcomeEmails.enqueue(client, { email });
    await client.query('INSERT INTO welcome_demo.users (email) VALUES ($1)', [email]);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
}

/**
 * Our stand-in for the mail provider's API: it sends the email (a row), then
 * answers after `latencyMs`. Like real providers it takes an idempotency key
 * (the address here): a second request for the same email sends nothing.
 */
async function mailApiSend(pool, email, latencyMs) {
  const { rowCount } = await pool.query(
    'INSERT INTO welcome_demo.sent_emails (email) VALUES ($1) ON CONFLICT (email) DO NOTHING',
    [email],
  );
  await sleep(latencyMs);
  return { alreadySent: rowCount === 0 };
}

/**
 * The handler. Jobs are delivered at least once: sending twice must do no
 * harm, which the provider's idempotency key sees to. When the API does not
 * answer in time, the email may or may not have gone out: failing the job
 * would retry it after the backoff, perhaps while the first request is still
 * under way, so the handler throws OutcomeUnknown instead and the job runs
 * again only after its lease has run out.
 */
async function sendWelcomeEmail(pool, job, latencyMs) {
  const { email } = job.payload;
  const timedOut = Symbol('timed out');
  const answer = await Promise.race([
    mailApiSend(pool, email, latencyMs),
    sleep(MAIL_API_TIMEOUT_MS, timedOut, { ref: false }),
  ]);
  if (answer === timedOut) {
    console.log(`the mail API did not answer for ${email} within ${MAIL_API_TIMEOUT_MS} ms (job ${job.id})`);
    throw new OutcomeUnknown(`the mail API did not answer within ${MAIL_API_TIMEOUT_MS} ms`);
  }
  const what = answer.alreadySent ? 'was already sent' : 'sent';
  console.log(`the welcome email to ${email} ${what} (job ${job.id}, attempt ${job.attempt})`);
}

// `mailLatencyMs(job)`: how slow the (simulated) mail API is for this job.
function emailWorker(pool, connection, { lease, mailLatencyMs = () => 0, onSent = () => {} } = {}) {
  return new Worker({
    ...connection,
    queue: welcomeEmails,
    concurrency: 4,
    lease,
    handler: async (job) => {
      await sendWelcomeEmail(pool, job, mailLatencyMs(job));
      onSent();
    },
  });
}

async function demo(pool, connection) {
  const emails = ['ana@example.com', 'bo@example.com', 'cy@example.com'];
  let sent = 0;
  let markAllSent;
  const allSent = new Promise((resolve) => (markAllSent = resolve));
  // The API is slow for bo's first try: the email goes out, the answer comes
  // too late. A short lease brings that job back soon (the default is 2 minutes).
  const worker = emailWorker(pool, connection, {
    lease: 2,
    mailLatencyMs: (job) => (job.payload.email === emails[1] && job.attempt === 1 ? 2 * MAIL_API_TIMEOUT_MS : 0),
    onSent: () => ++sent === emails.length && markAllSent(),
  });
  await worker.start();

  for (const email of emails) await signUp(pool, email);
  await signUp(pool, emails[0]).catch((err) =>
    console.log(`signing up ${emails[0]} again failed (${err.code}): rolled back with its queued email`),
  );
  await allSent;
  await worker.stop();

  const { rows } = await pool.query(`SELECT (SELECT count(*) FROM welcome_demo.users) AS users,
                                            (SELECT count(*) FROM welcome_demo.sent_emails) AS emails`);
  console.log(`${rows[0].users} users signed up, ${rows[0].emails} welcome emails sent`);
}

async function main() {
  const connection = process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL } : {};
  const pool = new pg.Pool(connection);
  const isDemo = process.argv.includes('--demo');
  await setUp(pool, { reset: isDemo });
  if (isDemo) {
    await demo(pool, connection);
  } else {
    const worker = emailWorker(pool, connection);
    await worker.start();
    console.log('waiting for welcome emails (SIGTERM or Ctrl-C stops)');
    await worker.stopOnSignals();
  }
  await pool.end();
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
