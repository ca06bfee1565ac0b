'use strict';

// enqueue(..., { after: [ids] }) (pgq_cpp 1.2): a job waits for its parents,
// runs once every one is done, and is dead-lettered when one dies.
const assert = require('node:assert/strict');
const { after, before, test } = require('node:test');
const pg = require('pg');
const { getJob, listJobs } = require('..');
const { freshDatabase, gate, newQueue, startWorker, waitFor } = require('./helpers');

let db;

before(async () => {
  db = await freshDatabase('dependencies');
});
after(() => db?.close());

async function stateOf(id) {
  const info = await getJob(db.admin, id);
  return info && [info.state, info.openParents];
}

async function deadJob(id) {
  const { rows } = await db.admin.query('SELECT reason, last_error, attempts FROM pgq.dead_jobs WHERE id = $1', [id]);
  return rows[0];
}

test('a job enqueued after another waits, then runs once its parent is done', async (t) => {
  const keep = ", keep_completed => '1 hour'";
  const [render, send] = [await newQueue(db, keep), await newQueue(db, keep)];
  // Both in one transaction, as a producer would.
  const client = new pg.Client(db.config);
  await client.connect();
  let renderId;
  let sendId;
  try {
    await client.query('BEGIN');
    renderId = await render.enqueue(client, { step: 'render' });
    sendId = await send.enqueue(client, { step: 'send' }, { after: [renderId] });
    await client.query('COMMIT');
  } finally {
    await client.end();
  }
  assert.deepEqual(await stateOf(renderId), ['ready', null]);
  assert.deepEqual(await stateOf(sendId), ['waiting', 1]);
  const { rows } = await db.admin.query('SELECT state FROM pgq.jobs WHERE id = $1', [sendId]);
  assert.equal(rows[0].state, 'b', 'waiting for its parents, outside the ready jobs');

  const events = [];
  const renderMayEnd = gate(t);
  await startWorker(t, db, [render, send], {
    concurrency: 2, // a free slot: the send job would run now if it could
    wait: 60,
    handler: async (job) => {
      events.push(`${job.payload.step} started`);
      if (job.id === renderId) await renderMayEnd.promise;
      if (job.id === sendId) events.push(`render was ${(await getJob(db.admin, renderId)).state}`);
      events.push(`${job.payload.step} ended`);
    },
  });
  await waitFor('the render job to start', () => events.includes('render started'));
  // The worker's other slot claims and waits on the server: the send job is not ready.
  await waitFor('a claim waiting beside the render job', async () => {
    const { rows: claims } = await db.admin.query(
      `SELECT 1 FROM pg_stat_activity
        WHERE application_name = $1 AND query LIKE '%pgq.claim(%' AND wait_event_type = 'Extension'`,
      [`worker_${render.name}_${send.name}`],
    );
    return claims.length === 1;
  });
  assert.deepEqual(await stateOf(sendId), ['waiting', 1]);
  renderMayEnd.open();
  await waitFor('the send job done', async () => (await stateOf(sendId))?.[0] === 'done');
  assert.deepEqual(events, ['render started', 'render ended', 'send started', 'render was done', 'send ended']);
  const [renderInfo, sendInfo] = [await getJob(db.admin, renderId), await getJob(db.admin, sendId)];
  assert.ok(sendInfo.claimedAt >= renderInfo.finishedAt, 'claimed only once its parent was done');
  assert.equal(sendInfo.attempt, 1);
});

test('enqueueMany after two parents: every job waits for both, openParents counts down', async () => {
  const queue = await newQueue(db);
  const parents = await queue.enqueueMany(db.admin, [{ parent: 1 }, { parent: 2 }]);
  // Ids as pg returns them (strings), numbers and BigInts alike.
  const children = await queue.enqueueMany(db.admin, [{ child: 1 }, { child: 2 }], {
    after: [parents[0], BigInt(parents[1])],
  });
  const states = async () => Promise.all(children.map(stateOf));
  assert.deepEqual(await states(), [
    ['waiting', 2],
    ['waiting', 2],
  ]);
  const claimed = await db.admin.query('SELECT id FROM pgq.claim($1, 10)', [queue.name]);
  assert.deepEqual(
    claimed.rows.map((row) => row.id),
    parents,
  );
  await db.admin.query('SELECT pgq.complete($1, 1)', [parents[0]]);
  assert.deepEqual(await states(), [
    ['waiting', 1],
    ['waiting', 1],
  ]);
  await db.admin.query('SELECT pgq.complete($1, 1)', [parents[1]]);
  assert.deepEqual(await states(), [
    ['ready', null],
    ['ready', null],
  ]);
  // An empty array: no parents.
  const free = await queue.enqueue(db.admin, {}, { after: [] });
  assert.deepEqual(await stateOf(free), ['ready', null]);
  const numbered = await queue.enqueue(db.admin, {}, { after: [Number(free)] });
  assert.deepEqual(await stateOf(numbered), ['waiting', 1]);
});

test('a cancelled parent sends its dependents to dead-letter: dependency_failed', async () => {
  const queue = await newQueue(db);
  const parent = await queue.enqueue(db.admin, { n: 'parent' });
  const child = await queue.enqueue(db.admin, { n: 'child' }, { after: [parent] });
  const grandchild = await queue.enqueue(db.admin, { n: 'grandchild' }, { after: [child] });
  await db.admin.query('SELECT pgq.cancel($1)', [parent]);
  assert.deepEqual(await stateOf(parent), ['cancelled', null]);
  // (A long chain goes on in maintenance; this one fits in the cancel's transaction.)
  await waitFor('the dependents dead-lettered', async () => {
    await db.admin.query('SELECT * FROM pgq.maintain()');
    return (await stateOf(grandchild))?.[0] === 'dead';
  });
  assert.deepEqual(await stateOf(child), ['dead', null]);
  assert.deepEqual(await deadJob(child), {
    reason: 'dependency_failed',
    last_error: `parent job ${parent} did not complete`,
    attempts: 0,
  });
  assert.deepEqual(await deadJob(grandchild), {
    reason: 'dependency_failed',
    last_error: `parent job ${child} did not complete`,
    attempts: 0,
  });
});

test('a bad parent rejects: 23503 for an unknown job, 55000 for a dead one, TypeError for no array', async () => {
  const queue = await newQueue(db);
  await assert.rejects(queue.enqueue(db.admin, {}, { after: ['987654321'] }), (err) => {
    assert.ok(err instanceof pg.DatabaseError);
    assert.equal(err.code, '23503');
    assert.match(err.message, /job 987654321 named in after does not exist/);
    return true;
  });
  await assert.rejects(queue.enqueueMany(db.admin, [{}, {}], { after: [987654321] }), { code: '23503' });
  const dead = await queue.enqueue(db.admin, {});
  await db.admin.query('SELECT pgq.cancel($1)', [dead]);
  await assert.rejects(queue.enqueue(db.admin, {}, { after: [dead] }), { code: '55000' });
  await assert.rejects(queue.enqueue(db.admin, {}, { after: [null] }), { code: '22004' });
  await assert.rejects(queue.enqueue(db.admin, {}, { after: dead }), TypeError);
  await assert.rejects(queue.enqueueMany(db.admin, [{}], { after: new Set([dead]) }), TypeError);
  const jobs = await listJobs(db.admin, queue.name);
  assert.deepEqual(
    jobs.map((job) => job.id),
    [dead],
    'nothing else was enqueued',
  );
});
