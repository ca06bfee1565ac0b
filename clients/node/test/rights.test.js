'use strict';

// Ordinary roles: a consumer holding only pgq.grant(role, queue, 'consume')
// can work; a role without the right gets 42501 from the server.
const assert = require('node:assert/strict');
const { after, before, test } = require('node:test');
const pg = require('pg');
const { Queue, Worker } = require('..');
const { freshDatabase, recordingLogger, waitFor, withServer } = require('./helpers');

const PASSWORD = 'pgq-node-test';
const ROLES = ['pgq_node_consumer', 'pgq_node_producer', 'pgq_node_nobody'];
const queue = new Queue('mail');
const other = new Queue('mail_bounces'); // the consumer has no right on it
let db;

before(async () => {
  db = await freshDatabase('rights');
  for (const role of ROLES) {
    await db.admin.query(`DROP ROLE IF EXISTS ${role}`);
    await db.admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${PASSWORD}'`);
  }
  await db.admin.query('SELECT pgq.create_queue($1)', [queue.name]);
  await db.admin.query('SELECT pgq.create_queue($1)', [other.name]);
  await db.admin.query("SELECT pgq.grant('pgq_node_consumer', $1, 'consume')", [queue.name]);
  await db.admin.query("SELECT pgq.grant('pgq_node_producer', $1, 'produce')", [queue.name]);
});
after(async () => {
  await db?.close();
  await withServer(async (client) => {
    for (const role of ROLES) await client.query(`DROP ROLE IF EXISTS ${role}`);
  });
});

// Connection settings for `role` instead of the superuser.
function as(role) {
  if (db.config.connectionString) {
    const url = new URL(db.config.connectionString);
    url.username = role;
    url.password = PASSWORD;
    return { connectionString: url.href };
  }
  return { ...db.config, user: role, password: PASSWORD };
}

async function doneRecent() {
  const { rows } = await db.admin.query('SELECT done_recent FROM pgq.queue_stats WHERE queue = $1', [queue.name]);
  return Number(rows[0].done_recent);
}

test('a producer enqueues and a consumer works, each with its one grant', async () => {
  const producer = new pg.Client(as('pgq_node_producer'));
  await producer.connect();
  try {
    await queue.enqueueMany(producer, [{ n: 1 }, { n: 2 }, { n: 3 }]);
  } finally {
    await producer.end();
  }
  const seen = [];
  const worker = new Worker({
    ...as('pgq_node_consumer'),
    queue,
    concurrency: 2,
    lease: 2, // heartbeats (pgq.extend, every 2/3 s) run as the consumer too
    logger: recordingLogger(),
    handler: async (job) => {
      seen.push(job.payload.n);
      const claimedUntil = job.leaseUntil;
      await waitFor('a heartbeat', () => job.leaseUntil > claimedUntil);
    },
  });
  await worker.start();
  try {
    await waitFor('three completions', async () => (await doneRecent()) === 3);
  } finally {
    await worker.stop();
  }
  assert.deepEqual(seen.sort(), [1, 2, 3]);
});

test('without the right: 42501 from enqueue and from Worker.start()', async (t) => {
  for (const role of ['pgq_node_nobody', 'pgq_node_consumer']) {
    const client = new pg.Client(as(role));
    await client.connect();
    try {
      await assert.rejects(queue.enqueue(client, {}), (err) => err instanceof pg.DatabaseError && err.code === '42501');
    } finally {
      await client.end();
    }
  }
  for (const role of ['pgq_node_nobody', 'pgq_node_producer']) {
    const worker = new Worker({ ...as(role), queue, handler() {}, logger: recordingLogger() });
    t.after(() => worker.stop()); // nothing to do once start() failed: it closed what it opened
    await assert.rejects(worker.start(), (err) => err instanceof pg.DatabaseError && err.code === '42501');
  }
  const unknown = new Worker({ ...db.config, queue: 'no_such_queue', handler() {} });
  t.after(() => unknown.stop());
  await assert.rejects(unknown.start(), { code: '42704' });
});

test('a worker over several queues needs consume on every one: 42501, and nothing is taken', async (t) => {
  const id = await queue.enqueue(db.admin, { n: 'for the consumer' });
  const worker = new Worker({
    ...as('pgq_node_consumer'),
    queue: [queue, other],
    handler() {},
    logger: recordingLogger(),
  });
  t.after(() => worker.stop());
  await assert.rejects(worker.start(), (err) => {
    assert.ok(err instanceof pg.DatabaseError);
    assert.equal(err.code, '42501');
    assert.match(err.message, /mail_bounces/);
    return true;
  });
  const { rows } = await db.admin.query('SELECT state, attempt FROM pgq.job($1)', [id]);
  assert.deepEqual(rows, [{ state: 'ready', attempt: 0 }]);
  // With the right on both, the same worker runs it.
  await db.admin.query("SELECT pgq.grant('pgq_node_consumer', $1, 'consume')", [other.name]);
  const ran = [];
  const granted = new Worker({
    ...as('pgq_node_consumer'),
    queue: [queue, other],
    handler: (job) => ran.push([job.id, job.queue]),
    logger: recordingLogger(),
  });
  await granted.start();
  try {
    await waitFor('the job to run', () => ran.length === 1);
  } finally {
    await granted.stop();
  }
  assert.deepEqual(ran, [[id, queue.name]]);
});
