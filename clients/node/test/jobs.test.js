'use strict';

// getJob and listJobs: pgq.job and pgq.list_jobs with camelCase fields.
const assert = require('node:assert/strict');
const { after, before, test } = require('node:test');
const { Queue, getJob, listJobs } = require('..');
const { freshDatabase } = require('./helpers');

let db;
before(async () => {
  db = await freshDatabase('jobs');
});
after(() => db?.close());

const FIELDS = [
  'id',
  'queue',
  'state',
  'attempt',
  'maxAttempts',
  'priority',
  'groupKey',
  'dedupeKey',
  'runAt',
  'enqueuedAt',
  'claimedAt',
  'leaseUntil',
  'finishedAt',
  'progress',
  'result',
  'lastError',
  'openParents',
  'payload',
  'deadReason',
];

test('getJob: one job with camelCase fields, or null', async () => {
  const queue = new Queue('jobs_get');
  await db.admin.query('SELECT pgq.create_queue($1)', [queue.name]);
  const id = await queue.enqueue(db.admin, { to: 'ana@example.com' }, { dedupeKey: 'd', groupKey: 'g', priority: 3 });
  await db.admin.query('SELECT pgq.claim($1, 1)', [queue.name]);
  await db.admin.query('SELECT pgq.progress($1, 1, $2)', [id, { step: 1 }]);

  const info = await getJob(db.admin, id);
  assert.deepEqual(Object.keys(info), FIELDS);
  const { runAt, enqueuedAt, claimedAt, leaseUntil, ...rest } = info;
  assert.deepEqual(rest, {
    id,
    queue: queue.name,
    state: 'running',
    attempt: 1,
    maxAttempts: 5,
    priority: 3,
    groupKey: 'g',
    dedupeKey: 'd',
    finishedAt: null,
    progress: { step: 1 },
    result: null,
    lastError: null,
    openParents: null,
    payload: { to: 'ana@example.com' },
    deadReason: null,
  });
  for (const time of [runAt, enqueuedAt, claimedAt, leaseUntil]) assert.ok(time instanceof Date, String(time));
  assert.ok(leaseUntil > claimedAt);

  // A cancelled job says why it is dead (server 3.0).
  await db.admin.query('SELECT pgq.cancel($1)', [id]);
  const cancelled = await getJob(db.admin, id);
  assert.equal(cancelled.state, 'cancelled');
  assert.equal(cancelled.deadReason, 'cancelled');

  assert.equal(await getJob(db.admin, '987654321'), null);
});

test('listJobs: newest first, by state, a page at a time with beforeId', async () => {
  const queue = new Queue('jobs_list');
  await db.admin.query("SELECT pgq.create_queue($1, keep_completed => '1 hour')", [queue.name]);
  const ids = await queue.enqueueMany(
    db.admin,
    [1, 2, 3, 4, 5].map((n) => ({ n })),
  );
  // The first done (kept, with its result), the second running, the rest ready.
  await db.admin.query('SELECT pgq.claim($1, 1)', [queue.name]);
  await db.admin.query('SELECT pgq.complete($1, 1, $2)', [ids[0], { ok: true }]);
  await db.admin.query('SELECT pgq.claim($1, 1)', [queue.name]);

  const pages = [];
  let beforeId = null;
  for (;;) {
    const page = await listJobs(db.admin, queue.name, { max: 2, beforeId });
    if (page.length === 0) break;
    pages.push(page.map((job) => [job.id, job.state, job.payload.n]));
    beforeId = page.at(-1).id;
    assert.ok(pages.length <= 3, 'paging ends');
  }
  assert.deepEqual(pages, [
    [
      [ids[4], 'ready', 5],
      [ids[3], 'ready', 4],
    ],
    [
      [ids[2], 'ready', 3],
      [ids[1], 'running', 2],
    ],
    [[ids[0], 'done', 1]],
  ]);

  const listed = async (options) => (await listJobs(db.admin, queue.name, options)).map((job) => job.id);
  assert.deepEqual(await listed({}), [...ids].reverse());
  assert.deepEqual(await listed({ state: 'ready' }), [ids[4], ids[3], ids[2]]);
  assert.deepEqual(await listed({ state: 'ready', beforeId: ids[4], max: 1 }), [ids[3]]);
  const [done] = await listJobs(db.admin, queue.name, { state: 'done' });
  assert.deepEqual([done.id, done.result, done.finishedAt instanceof Date], [ids[0], { ok: true }, true]);
  assert.deepEqual(Object.keys(done), FIELDS);

  await assert.rejects(listJobs(db.admin, queue.name, { limit: 2 }), TypeError);
});
