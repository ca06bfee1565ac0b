'use strict';

// Queue.enqueue / enqueueMany on the caller's own connection and transaction.
const assert = require('node:assert/strict');
const { after, before, beforeEach, test } = require('node:test');
const pg = require('pg');
const { Queue, getJob } = require('..');
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

test('onDuplicate: ignore keeps the holder as it is; replace updates one not started', async () => {
  const id = await queue.enqueue(db.admin, { v: 1 }, { dedupeKey: 'k' });
  assert.equal(await queue.enqueue(db.admin, { v: 2 }, { dedupeKey: 'k', onDuplicate: 'ignore', priority: 7 }), id);
  const ignored = await getJob(db.admin, id);
  assert.deepEqual([ignored.payload, ignored.priority, ignored.state], [{ v: 1 }, 0, 'ready']);

  const later = new Date(Date.now() + 3_600_000);
  const replacement = { dedupeKey: 'k', onDuplicate: 'replace', priority: 7, runAt: later };
  assert.equal(await queue.enqueue(db.admin, { v: 3 }, replacement), id);
  const replaced = await getJob(db.admin, id);
  assert.deepEqual(
    [replaced.payload, replaced.priority, replaced.runAt.getTime(), replaced.state],
    [{ v: 3 }, 7, later.getTime(), 'scheduled'],
  );

  // A running holder keeps its payload; the replacement is a new job behind it.
  const running = await queue.enqueue(db.admin, { v: 1 }, { dedupeKey: 'r' });
  assert.deepEqual(
    (await claimAll()).map((job) => job.id),
    [running],
  );
  const behind = await queue.enqueue(db.admin, { v: 2 }, { dedupeKey: 'r', onDuplicate: 'replace' });
  assert.notEqual(behind, running);
  assert.deepEqual((await getJob(db.admin, running)).payload, { v: 1 });
  assert.deepEqual((await getJob(db.admin, behind)).payload, { v: 2 });
});

test('dedupeFor keeps the key taken after its job is done, given in seconds or as interval text', async () => {
  const seconds = await queue.enqueue(db.admin, { n: 1 }, { dedupeKey: 'hourly', dedupeFor: 3600 });
  const text = await queue.enqueue(db.admin, { n: 1 }, { dedupeKey: 'daily', dedupeFor: '1 day' });
  const plain = await queue.enqueue(db.admin, { n: 1 }, { dedupeKey: 'plain' });
  const claimed = await claimAll();
  assert.equal(claimed.length, 3);
  for (const { id } of claimed) await db.admin.query('SELECT pgq.complete($1, 1)', [id]);

  assert.equal(await queue.enqueue(db.admin, { n: 2 }, { dedupeKey: 'hourly', dedupeFor: 3600 }), seconds);
  assert.equal(await queue.enqueue(db.admin, { n: 2 }, { dedupeKey: 'daily', dedupeFor: '1 day' }), text);
  // Without dedupeFor a finished job frees its key at once.
  assert.notEqual(await queue.enqueue(db.admin, { n: 2 }, { dedupeKey: 'plain' }), plain);
  assert.deepEqual(await stats(), { ready: 1, scheduled: 0 });
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

test('enqueueMany takes group and dedupe keys: one for every job or one each', async () => {
  const held = await queue.enqueue(db.admin, { row: 0 }, { dedupeKey: 'row-0' });
  const ids = await queue.enqueueMany(db.admin, [{ row: 1 }, { row: 2 }, { row: 1 }, { row: 0 }], {
    groupKeys: 'tenant-a',
    dedupeKeys: ['row-1', 'row-2', 'row-1', 'row-0'],
  });
  // A key taken by an earlier job of the call, or before it: its holder's id.
  assert.equal(ids[2], ids[0]);
  assert.equal(ids[3], held);
  const { rows } = await db.admin.query(
    'SELECT id, group_key, dedupe_key FROM pgq.jobs WHERE id = ANY ($1::bigint[]) ORDER BY id',
    [ids.slice(0, 2)],
  );
  assert.deepEqual(rows, [
    { id: ids[0], group_key: 'tenant-a', dedupe_key: 'row-1' },
    { id: ids[1], group_key: 'tenant-a', dedupe_key: 'row-2' },
  ]);
  const oneEach = await queue.enqueueMany(db.admin, [{}, {}], { groupKeys: ['tenant-b', null] });
  const groups = await db.admin.query('SELECT group_key FROM pgq.jobs WHERE id = ANY ($1::bigint[]) ORDER BY id', [
    oneEach,
  ]);
  assert.deepEqual(
    groups.rows.map((row) => row.group_key),
    ['tenant-b', null],
  );
  await assert.rejects(queue.enqueueMany(db.admin, [{}, {}, {}], { dedupeKeys: ['a', 'b'] }), { code: '22023' });
  await assert.rejects(queue.enqueueMany(db.admin, [{}], { groupKeys: 7 }), TypeError);
});

test('server errors carry their SQLSTATE; an unknown option sends nothing', async () => {
  await assert.rejects(new Queue('no_such_queue').enqueue(db.admin, {}), (err) => {
    assert.ok(err instanceof pg.DatabaseError);
    assert.equal(err.code, '42704');
    return true;
  });
  await assert.rejects(queue.enqueue(db.admin, {}, { priority: 'high' }), { code: '22P02' });
  await assert.rejects(queue.enqueue(db.admin, {}, { runat: new Date() }), TypeError);
  await assert.rejects(queue.enqueue(db.admin, {}, { dedupeKey: 'k', dedupeFor: { hours: 1 } }), TypeError);
  await assert.rejects(queue.enqueue(db.admin, {}, { dedupeKey: 'k', onDuplicate: 'merge' }), { code: '22023' });
  assert.deepEqual(await stats(), { ready: 0, scheduled: 0 });
});
