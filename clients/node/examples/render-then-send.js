#!/usr/bin/env node
'use strict';

// Render, then send: a two-step workflow. Asking for a newsletter enqueues a
// render job and a send job in ONE transaction, the send job `after` the
// render job: it waits (state 'waiting') until the render job is done, then
// becomes ready. One worker runs both queues. Had the render job died (its
// attempts spent, or cancelled), the send job would go to dead-letter with
// reason 'dependency_failed' instead of sending nothing.
//
//   node examples/render-then-send.js          the worker, until SIGTERM or Ctrl-C
//   node examples/render-then-send.js --demo   resets the demo (schema render_demo,
//                                              queues render and send), asks for
//                                              three newsletters, runs them, exits
//
// It connects with DATABASE_URL, or else the PG* variables (PGHOST, PGPORT,
// PGUSER, PGPASSWORD, PGDATABASE), to a database with pgq_cpp 1.2 installed.
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');
const { Queue, Worker, getJob } = require('pgq-cpp');

const render = new Queue('render');
const send = new Queue('send');
// How long rendering takes here: long enough to see that sending waits.
const RENDER_MS = 300;

async function setUp(pool, { reset }) {
  if (reset) {
    await pool.query('DROP SCHEMA IF EXISTS render_demo CASCADE');
    await pool.query(
      "SELECT pgq.drop_queue(name, force => true) FROM pgq.queues WHERE name IN ('render', 'send')",
    );
  }
  await pool.query('CREATE SCHEMA IF NOT EXISTS render_demo');
  await pool.query(`CREATE TABLE IF NOT EXISTS render_demo.rendered (
    email text PRIMARY KEY,
    body text NOT NULL,
    rendered_at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  // Our stand-in for the mail provider: one row per email it sent.
  await pool.query(`CREATE TABLE IF NOT EXISTS render_demo.sent (
    email text PRIMARY KEY,
    body text NOT NULL,
    sent_at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  // Completed jobs kept an hour, for the demo to show when each one ran.
  for (const queue of [render, send]) {
    await pool.query("SELECT pgq.create_queue($1, keep_completed => '1 hour', if_not_exists => true)", [queue.name]);
  }
}

/**
 * Both jobs, or neither: the send job waits for the render job. Resolves to
 * their ids.
 */
async function requestNewsletter(pool, email) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const renderId = await render.enqueue(client, { email, template: 'newsletter' });
    const sendId = await send.enqueue(client, { email }, { after: [renderId] });
    await client.query('COMMIT');
    return { renderId, sendId };
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
}

// The handlers, by queue. Jobs are delivered at least once: both are idempotent.
const handlers = {
  async render(pool, job) {
    const { email, template } = job.payload;
    await sleep(RENDER_MS);
    await pool.query(
      `INSERT INTO render_demo.rendered (email, body) VALUES ($1, $2)
       ON CONFLICT (email) DO UPDATE SET body = excluded.body, rendered_at = clock_timestamp()`,
      [email, `Hello ${email}, here is this month's ${template}.`],
    );
    console.log(`rendered the email to ${email} (render job ${job.id})`);
  },

  async send(pool, job) {
    const { email } = job.payload;
    // The render job is done: its body is there (else this fails the job).
    const { rows } = await pool.query('SELECT body FROM render_demo.rendered WHERE email = $1', [email]);
    if (rows.length === 0) throw new Error(`nothing rendered for ${email}`);
    await pool.query('INSERT INTO render_demo.sent (email, body) VALUES ($1, $2) ON CONFLICT (email) DO NOTHING', [
      email,
      rows[0].body,
    ]);
    console.log(`sent the email to ${email} (send job ${job.id}, attempt ${job.attempt})`);
  },
};

// One worker over both queues; each job says which queue it came from.
function newsletterWorker(pool, connection, { onDone = () => {} } = {}) {
  return new Worker({
    ...connection,
    queue: [render, send],
    concurrency: 4,
    handler: async (job) => {
      await handlers[job.queue](pool, job);
      onDone(job);
    },
  });
}

async function demo(pool, connection) {
  const emails = ['ana@example.com', 'bo@example.com', 'cy@example.com'];
  const requests = [];
  for (const email of emails) requests.push(await requestNewsletter(pool, email));
  // Before any worker runs: each send job waits for its render job.
  for (const { renderId, sendId } of requests) {
    const job = await getJob(pool, sendId);
    console.log(`send job ${sendId} is ${job.state} for ${job.openParents} job (render job ${renderId})`);
  }

  let sent = 0;
  let markAllSent;
  const allSent = new Promise((resolve) => (markAllSent = resolve));
  const worker = newsletterWorker(pool, connection, {
    onDone: (job) => job.queue === send.name && ++sent === emails.length && markAllSent(),
  });
  await worker.start();
  await allSent;
  await worker.stop();

  // From the server's own records: each send job was claimed after its render job was done.
  for (const { renderId, sendId } of requests) {
    const [rendered, sending] = [await getJob(pool, renderId), await getJob(pool, sendId)];
    const after = sending.claimedAt - rendered.finishedAt;
    console.log(`send job ${sendId} (${sending.state}) started ${after} ms after render job ${renderId} was done`);
  }
  const { rows } = await pool.query('SELECT count(*) AS sent FROM render_demo.sent');
  console.log(`${emails.length} newsletters rendered, then ${rows[0].sent} sent`);
}

async function main() {
  const connection = process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL } : {};
  const pool = new pg.Pool(connection);
  const isDemo = process.argv.includes('--demo');
  await setUp(pool, { reset: isDemo });
  if (isDemo) {
    await demo(pool, connection);
  } else {
    const worker = newsletterWorker(pool, connection);
    await worker.start();
    console.log('rendering and sending newsletters (SIGTERM or Ctrl-C stops)');
    await worker.stopOnSignals();
  }
  await pool.end();
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
