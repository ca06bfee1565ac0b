'use strict';

// Queue.enqueue / enqueueMany on the caller's own connection and transaction.
const assert = require('node:assert/strict');
const { after, before, beforeEach, test } = require('node:test');
const pg = require('pg');
const { Queue } = require('..');
const { freshDatabase } = require('./helpers');

let db;
let queueCount = 0;
let queue; // a new queue for each test

before(async () => {
  db = await freshDatabase('enqueue');
});
after(() => db?.close());
beforeEach(async () => {
  queue = new Queue(`emails_${++queueCount}`);
  await db.admin.query('SELECT pgq.create_queue($1)', [queue.name]);
});

async function stats() {
  const { rows } = await db.admin.query('SELECT ready, scheduled FROM pgq.queue_stats WHERE queue = $1', [queue.name]);
  return { ready: Number(rows[0].ready), scheduled: Number(rows[0].scheduled) };
}

async function claimAll() {
  const { rows } = await db.admin.query('SELECT id, payload, priority, max_attempts FROM pgq.claim($1, 100)', [
    queue.name,
  ]);
  return rows;
}

test('a job enqueued in a rolled-back transaction does not exist; a committed one does', async () => {
  const app = new pg.Client(db.config);
  await app.connect();
  try {
    await app.query('BEGIN');
    const rolledBack = await queue.enqueue(app, { to: 'ghost@example.com' });
    assert.match(rolledBack, /^\d+$/);
    // Not visible to anyone else before the commit either.
    assert.deepEqual(await stats(), { ready: 0, scheduled: 0 });
    await app.query('ROLLBACK');
    assert.deepEqual(await stats(), { ready: 0, scheduled: 0 });

    await app.query('BEGIN');
    const committed = await queue.enqueue(app, { to: 'ana@example.com' });
    await app.query('COMMIT');
    assert.deepEqual(await claimAll(), [
      { id: committed, payload: { to: 'ana@example.com' }, priority: 0, max_attempts: 5 },
    ]);
  } finally {
    await app.end();
  }
});

test('enqueue options reach pgq.enqueue', async () => {
  await queue.enqueue(db.admin, { n: 'later' }, { runAt: new Date(Date.now() + 3_600_000) });
  const low = await queue.enqueue(db.admin, { n: 'low' }, { priority: -1, maxAttempts: 9 });
  const high = await queue.enqueue(db.admin, { n: 'high' }, { priority: 5, dedupeKey: 'k' });
  assert.equal(await queue.enqueue(db.admin, { n: 'duplicate' }, { dedupeKey: 'k' }), high);
  const grouped = await queue.enqueue(db.admin, { n: 'g1' }, { groupKey: 'g' });
  await queue.enqueue(db.admin, { n: 'g2' }, { groupKey: 'g' }); // waits behind g1
  assert.deepEqual(await stats(), { ready: 4, scheduled: 1 });
  assert.deepEqual(
    (await claimAll()).map(({ id, priority, max_attempts }) => [id, priority, max_attempts]),
    [
      [high, 5, 5],
      [grouped, 0, 5],
      [low, -1, 9],
    ],
  );
});

test('enqueueMany returns the ids in input order', async () => {
  const payloads = [{ n: 1 }, { n: 2 }, [3, 'an array is a JSON payload too'], 'four'];
  const ids = await queue.enqueueMany(db.admin, payloads, { priority: 2 });
  assert.equal(ids.length, 4);
  const claimed = await claimAll();
  assert.deepEqual(
    ids.map((id) => claimed.find((job) => job.id === id).payload),
    payloads,
  );
  assert.ok(claimed.every((job) => job.priority === 2));
});

test('server errors carry their SQLSTATE; an unknown option sends nothing', async () => {
  await assert.rejects(new Queue('no_such_queue').enqueue(db.admin, {}), (err) => {
    assert.ok(err instanceof pg.DatabaseError);
    assert.equal(err.code, '42704');
    return true;
  });
  await assert.rejects(queue.enqueue(db.admin, {}, { priority: 'high' }), { code: '22P02' });
  await assert.rejects(queue.enqueue(db.admin, {}, { runat: new Date() }), TypeError);
  assert.deepEqual(await stats(), { ready: 0, scheduled: 0 });
});
