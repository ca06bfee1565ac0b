'use strict';

// One worker over several queues (pgq_cpp 1.2): pgq.claim(queues text[], ...)
// takes jobs from any of them, and each job says which queue it came from.
const assert = require('node:assert/strict');
const { after, before, test } = require('node:test');
const { Queue, Worker } = require('..');
const { freshDatabase, gate, newQueue, startWorker, waitFor } = require('./helpers');

let db;

before(async () => {
  db = await freshDatabase('queues');
});
after(() => db?.close());

async function doneRecent(queue) {
  const { rows } = await db.admin.query('SELECT done_recent FROM pgq.queue_stats WHERE queue = $1', [queue.name]);
  return Number(rows[0].done_recent);
}

// Resolves once a claim of the worker named `application` is asleep on the
// server, waiting for a job.
function claimIsWaiting(application) {
  return waitFor(`a claim of ${application} waiting`, async () => {
    const { rows } = await db.admin.query(
      `SELECT query FROM pg_stat_activity
        WHERE application_name = $1 AND query LIKE '%pgq.claim(%' AND wait_event_type = 'Extension'`,
      [application],
    );
    return rows[0]?.query;
  });
}

test('a worker over several queues runs the jobs of each, by priority across them', async (t) => {
  const [render, send] = [await newQueue(db), await newQueue(db)];
  // Enqueued before the worker starts: one job per claim then takes the
  // highest priority of both queues.
  const jobs = [
    [render, 1],
    [send, 5],
    [render, 3],
    [send, 2],
    [render, 4],
  ];
  const ids = [];
  for (const [queue, priority] of jobs) ids.push(await queue.enqueue(db.admin, { priority }, { priority }));
  const seen = [];
  // A Queue and a name, mixed.
  await startWorker(t, db, [render, send.name], {
    wait: 60,
    handler: (job) => {
      seen.push([job.id, job.queue, job.payload.priority]);
    },
  });
  await waitFor('five jobs done', async () => (await doneRecent(render)) === 3 && (await doneRecent(send)) === 2);
  const expected = jobs.map(([queue, priority], i) => [ids[i], queue.name, priority]);
  assert.deepEqual(
    seen,
    expected.sort((a, b) => b[2] - a[2]),
  );

  // One claim waits on both: a job committed to either wakes it.
  const application = `worker_${render.name}_${send.name}`;
  assert.match(await claimIsWaiting(application), /pgq\.claim\(\$1::text\[\]/);
  const late = await send.enqueue(db.admin, { priority: 0 });
  await waitFor('the late job to run', () => seen.some(([id]) => id === late));
  assert.deepEqual(seen.at(-1), [late, send.name, 0]);
});

test('a worker over several queues runs them concurrently and completes each on its own queue', async (t) => {
  const queues = [await newQueue(db), await newQueue(db), await newQueue(db)];
  // In turns: the first claim (by run_at, then id) takes one of each first.
  for (let n = 1; n <= 4; n++) for (const queue of queues) await queue.enqueue(db.admin, n);
  const running = new Set();
  const allBusy = gate(t);
  await startWorker(t, db, queues, {
    concurrency: 3,
    batch: 5,
    handler: async (job) => {
      running.add(job.queue);
      if (running.size === 3) allBusy.open();
      await allBusy.promise;
    },
  });
  await waitFor('twelve jobs done', async () => {
    const counts = await Promise.all(queues.map(doneRecent));
    return counts.every((count) => count === 4);
  });
  assert.deepEqual([...running].sort(), queues.map((queue) => queue.name).sort());
});

test('an array of one queue is that queue', async (t) => {
  const queue = await newQueue(db);
  const id = await queue.enqueue(db.admin, {});
  const ran = gate(t);
  const { logger } = await startWorker(t, db, [queue.name], { handler: (job) => ran.open(job) });
  const job = await ran.promise;
  assert.deepEqual([job.id, job.queue], [id, queue.name]);
  await waitFor('the job done', async () => (await doneRecent(queue)) === 1);
  assert.deepEqual(logger.lines, []);
});

test('the queue option is checked before anything is sent', () => {
  const handler = () => {};
  const queue = new Queue('render');
  assert.throws(() => new Worker({ queue: [], handler }), RangeError);
  assert.throws(() => new Worker({ queue: [queue, 'render'], handler }), {
    name: 'RangeError',
    message: 'queue: "render" is named twice',
  });
  assert.throws(() => new Worker({ queue: ['render', 7], handler }), TypeError);
  assert.throws(() => new Worker({ queue: ['render', null], handler }), TypeError);
  assert.throws(() => new Worker({ queue: 7, handler }), TypeError);
  assert.throws(() => new Worker({ handler }), TypeError);
});

test('an unknown queue among several: start() rejects with 42704 and takes nothing', async (t) => {
  const queue = await newQueue(db);
  const id = await queue.enqueue(db.admin, {});
  const worker = new Worker({ ...db.config, queue: [queue, 'no_such_queue'], handler() {} });
  t.after(() => worker.stop());
  await assert.rejects(worker.start(), { code: '42704' });
  const { rows } = await db.admin.query('SELECT state FROM pgq.job($1)', [id]);
  assert.deepEqual(rows, [{ state: 'ready' }]);
});
