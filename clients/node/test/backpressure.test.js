'use strict';

// Backpressure (pgq_cpp 3.1): a queue's max_pending refuses producers whole
// (QueueFullError, 53400); queue.waitForRoom sleeps until completions take the
// queue below its low-water mark; enqueue's waitForRoomMs waits and tries
// again, but only where the client owns the transaction.
const assert = require('node:assert/strict');
const { performance } = require('node:perf_hooks');
const { after, before, test } = require('node:test');
const pg = require('pg');
const { Queue, QueueFullError } = require('..');
const { freshDatabase, newQueue, waitFor, withServer } = require('./helpers');

const PASSWORD = 'pgq-node-test';
const STRANGER = 'pgq_node_bp_stranger';
// Upper bound on a wait for a call the test let go: reaching it is a hang.
const HANG_MS = 15_000;
// Longer than any test: a call still waiting this long was not woken.
const LONG_MS = 3 * HANG_MS;

let db;

before(async () => {
  db = await freshDatabase('backpressure');
  await db.admin.query(`DROP ROLE IF EXISTS ${STRANGER}`);
  await db.admin.query(`CREATE ROLE ${STRANGER} LOGIN PASSWORD '${PASSWORD}'`);
});
after(async () => {
  await db?.close();
  await withServer((client) => client.query(`DROP ROLE IF EXISTS ${STRANGER}`));
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

// A queue of its own for each test, with max_pending 3 unless told.
function bounded(maxPending = 3) {
  return newQueue(db, `, max_pending => ${maxPending}`);
}

// The queue's unfinished jobs (scheduled, waiting, ready, running), as another
// session sees them.
async function unfinished(queue) {
  const { rows } = await db.admin.query(
    'SELECT count(*)::int AS n FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = $1',
    [queue.name],
  );
  return rows[0].n;
}

async function fill(queue, n = 3) {
  const ids = await queue.enqueueMany(
    db.admin,
    Array.from({ length: n }, (_, i) => ({ n: i })),
  );
  assert.equal(await unfinished(queue), n);
  return ids;
}

// A connected client (as the superuser unless `config` says otherwise), named
// `name` in pg_stat_activity; at the end of test `t` a statement it still runs
// is cancelled and it is closed.
async function session(t, name, config = db.config) {
  const client = new pg.Client({ ...config, application_name: name });
  client.on('error', () => {});
  await client.connect();
  t.after(async () => {
    await db.admin.query('SELECT pg_cancel_backend($1)', [client.processID]);
    await client.end().catch(() => {});
  });
  return client;
}

// A pool for test `t`, closed at its end.
function pool(t, name) {
  const p = new pg.Pool({ ...db.config, application_name: name, max: 2 });
  t.after(async () => {
    await db.admin.query('SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [name]);
    await p.end();
  });
  return p;
}

// Whether the session `name` runs pgq.wait_for_room and the server has it
// waiting (on its latch), not working.
async function sleepingInWaitForRoom(name) {
  const { rows } = await db.admin.query(
    `SELECT count(*) = 1 AS sleeping FROM pg_stat_activity
      WHERE application_name = $1 AND state = 'active'
        AND query LIKE '%wait_for_room%' AND wait_event IS NOT NULL`,
    [name],
  );
  return rows[0].sleeping;
}

// Claims and completes `n` jobs of `queue` on `client`, in its transaction.
async function complete(client, queue, n) {
  const { rows } = await client.query('SELECT pgq.complete(c.id, c.attempt) AS done FROM pgq.claim($1, $2) c', [
    queue.name,
    n,
  ]);
  assert.deepEqual(
    rows.map((row) => row.done),
    Array(n).fill(true),
  );
}

// `promise` watched: `settled` tells whether it has settled, `outcome`
// resolves to {value} or {error}, with `markWasSet`: whether mark.set was true
// when it settled (the order of its end and the moment the test set the mark).
function watch(promise, mark) {
  const watched = { settled: false };
  const end = (result) => {
    watched.settled = true;
    return { ...result, markWasSet: mark.set };
  };
  watched.outcome = promise.then(
    (value) => end({ value }),
    (error) => end({ error }),
  );
  return watched;
}

// The outcome of a watched call, within HANG_MS.
async function outcomeOf(watched) {
  let timer;
  const hang = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still running after ${HANG_MS} ms`)), HANG_MS);
  });
  try {
    return await Promise.race([watched.outcome, hang]);
  } finally {
    clearTimeout(timer);
  }
}

// The client's transaction is open and aborted: its next statement is refused
// (25P02). (pg rejects a failed query before the server's ReadyForQuery
// updates getTransactionStatus(), so that is not read here.)
async function assertAborted(client) {
  await assert.rejects(client.query('SELECT 1'), { code: '25P02' });
  assert.equal(client.getTransactionStatus(), 'E');
}

function assertQueueFull(err, queue) {
  assert.ok(err instanceof QueueFullError, `not a QueueFullError: ${err}`);
  assert.ok(err instanceof Error);
  assert.equal(err.name, 'QueueFullError');
  assert.equal(err.queue, queue.name);
  assert.equal(err.code, '53400');
  assert.equal(err.message, `queue "${queue.name}" is full`);
  assert.ok(err.cause instanceof pg.DatabaseError);
  assert.equal(err.cause.code, '53400');
  assert.equal(err.cause.message, err.message);
  return true;
}

test('a full queue refuses the whole call with a QueueFullError', async () => {
  const queue = await bounded();
  const { rows } = await db.admin.query('SELECT max_pending FROM pgq.queue_settings($1)', [queue.name]);
  assert.equal(rows[0].max_pending, 3);
  await queue.enqueueMany(db.admin, [{ n: 1 }, { n: 2 }]);
  // Two more do not fit in the one place left: neither is added.
  await assert.rejects(queue.enqueueMany(db.admin, [{ n: 3 }, { n: 4 }]), (err) => {
    assertQueueFull(err, queue);
    assert.equal(err.detail, 'It holds 2 unfinished jobs of its max_pending 3; this call adds 2.');
    return true;
  });
  assert.equal(await unfinished(queue), 2);

  await queue.enqueue(db.admin, { n: 3 });
  await assert.rejects(queue.enqueue(db.admin, { n: 4 }), (err) => {
    assertQueueFull(err, queue);
    assert.equal(err.detail, 'It holds 3 unfinished jobs of its max_pending 3; this call adds 1.');
    assert.match(err.hint, /pgq\.wait_for_room/);
    assert.equal(err.cause.detail, err.detail);
    return true;
  });
  assert.equal(await unfinished(queue), 3);
  const payloads = await db.admin.query(
    "SELECT payload->>'n' AS n FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = $1 ORDER BY id",
    [queue.name],
  );
  assert.deepEqual(
    payloads.rows.map((row) => row.n),
    ['1', '2', '3'],
  );
  // Other queues are not limited by it.
  const plain = await newQueue(db);
  await plain.enqueueMany(db.admin, [{}, {}, {}, {}, {}]);
  assert.equal(await unfinished(plain), 5);
});

test('scheduled, waiting and running jobs count; finished ones do not', async () => {
  const queue = await bounded();
  const running = await queue.enqueue(db.admin, { state: 'running' });
  const claimed = await db.admin.query('SELECT id FROM pgq.claim($1, 1)', [queue.name]);
  assert.equal(claimed.rows[0].id, running);
  const scheduled = await queue.enqueue(db.admin, { state: 'scheduled' }, { runAt: new Date(Date.now() + 3_600_000) });
  const waiting = await queue.enqueue(db.admin, { state: 'waiting' }, { after: [scheduled] });
  const { rows } = await db.admin.query('SELECT id, state FROM pgq.list_jobs($1) ORDER BY id', [queue.name]);
  assert.deepEqual(rows, [
    { id: running, state: 'running' },
    { id: scheduled, state: 'scheduled' },
    { id: waiting, state: 'waiting' },
  ]);
  await assert.rejects(queue.enqueue(db.admin, {}), QueueFullError);
  assert.equal(await queue.waitForRoom(db.admin), false);
  await db.admin.query('SELECT pgq.complete($1, 1)', [running]);
  await queue.enqueue(db.admin, { state: 'ready' });
  assert.equal(await unfinished(queue), 3);
});

test('alter_queue sets max_pending, and 0 removes it', async () => {
  const queue = await newQueue(db);
  await db.admin.query('SELECT pgq.alter_queue($1, max_pending => 2)', [queue.name]);
  await queue.enqueueMany(db.admin, [{}, {}]);
  await assert.rejects(queue.enqueue(db.admin, {}), (err) => assertQueueFull(err, queue));
  await db.admin.query('SELECT pgq.alter_queue($1, max_pending => 0)', [queue.name]);
  const { rows } = await db.admin.query('SELECT max_pending FROM pgq.queue_settings($1)', [queue.name]);
  assert.equal(rows[0].max_pending, null);
  await queue.enqueueMany(db.admin, [{}, {}, {}]);
  assert.equal(await unfinished(queue), 5);
  const started = performance.now();
  assert.equal(await queue.waitForRoom(db.admin, LONG_MS), true); // no max_pending: at once
  assert.ok(performance.now() - started < HANG_MS);
});

test('a caller transaction that a full queue refused is aborted', async (t) => {
  const queue = await bounded();
  const plain = await newQueue(db);
  await fill(queue);
  const app = await session(t, 'bp_aborted');
  await app.query('BEGIN');
  const work = await plain.enqueue(app, { callers: 'work' });
  await assert.rejects(queue.enqueue(app, {}), QueueFullError);
  await assertAborted(app);
  await app.query('ROLLBACK');
  assert.equal((await db.admin.query('SELECT count(*)::int AS n FROM pgq.job($1)', [work])).rows[0].n, 0);
  assert.equal(await unfinished(queue), 3);
});

test('waitForRoom answers false after its timeout while the queue is full', async () => {
  const queue = await bounded();
  await fill(queue);
  assert.equal(await queue.waitForRoom(db.admin), false); // no wait: at once
  const started = performance.now();
  assert.equal(await queue.waitForRoom(db.admin, 300), false);
  assert.ok(performance.now() - started >= 250, 'it did not wait');
  assert.equal(await unfinished(queue), 3);
  await assert.rejects(queue.waitForRoom(db.admin, -1), TypeError);
  await assert.rejects(queue.waitForRoom(db.admin, '1 second'), TypeError);
});

test('the low-water mark is nine tenths of max_pending', async () => {
  const queue = await bounded(10);
  await fill(queue, 10);
  assert.equal(await queue.waitForRoom(db.admin), false);
  await complete(db.admin, queue, 1); // 9: room for one, but not below 9
  assert.equal(await queue.waitForRoom(db.admin), false);
  await queue.enqueue(db.admin, {});
  await assert.rejects(queue.enqueue(db.admin, {}), QueueFullError);
  await complete(db.admin, queue, 2); // 8
  assert.equal(await queue.waitForRoom(db.admin), true);
  assert.equal(await unfinished(queue), 8);
});

test('a waiter wakes when a completion commits, not before', async (t) => {
  const queue = await bounded();
  await fill(queue);
  const waiter = await session(t, 'bp_waiter');
  const committing = { set: false };
  const wait = watch(queue.waitForRoom(waiter, LONG_MS), committing);
  await waitFor('the waiter asleep in the server', () => sleepingInWaitForRoom('bp_waiter'));
  const worker = await session(t, 'bp_worker');
  await worker.query('BEGIN');
  await complete(worker, queue, 1); // 2 of 3 once committed: below the mark (3)
  assert.equal(wait.settled, false, 'woken by a completion not committed');
  committing.set = true;
  await worker.query('COMMIT');
  const outcome = await outcomeOf(wait);
  assert.equal(outcome.error, undefined);
  assert.equal(outcome.value, true);
  assert.ok(outcome.markWasSet, 'it returned before the completion committed');
  assert.equal(await unfinished(queue), 2);
});

test('waitForRoom needs a right on a queue that exists', async (t) => {
  const queue = await bounded();
  await fill(queue);
  const stranger = await session(t, 'bp_stranger', as(STRANGER));
  await assert.rejects(queue.waitForRoom(stranger), { code: '42501' });
  await db.admin.query('SELECT pgq.grant($1, $2, $3)', [STRANGER, queue.name, 'produce']);
  assert.equal(await queue.waitForRoom(stranger), false);
  await assert.rejects(new Queue('no_such_queue').waitForRoom(stranger), { code: '42704' });
});

test('enqueue with waitForRoomMs waits for room on a client in no transaction', async (t) => {
  const queue = await bounded();
  await fill(queue);
  const producer = await session(t, 'bp_producer');
  const committing = { set: false };
  const call = watch(queue.enqueue(producer, { n: 'late' }, { waitForRoomMs: LONG_MS }), committing);
  await waitFor('the producer refused, then waiting for room', () => sleepingInWaitForRoom('bp_producer'));
  const worker = await session(t, 'bp_worker');
  await worker.query('BEGIN');
  await complete(worker, queue, 1);
  committing.set = true;
  await worker.query('COMMIT');
  const outcome = await outcomeOf(call);
  assert.equal(outcome.error, undefined);
  assert.ok(outcome.markWasSet, 'enqueued before the completion committed');
  const { rows } = await db.admin.query('SELECT payload FROM pgq.job($1)', [outcome.value]);
  assert.deepEqual(rows, [{ payload: { n: 'late' } }]);
  assert.equal(producer.getTransactionStatus(), 'I');
  assert.equal(await unfinished(queue), 3);
});

test('enqueueMany with waitForRoomMs waits for room on a pool', async (t) => {
  const queue = await bounded();
  await fill(queue);
  const producers = pool(t, 'bp_pool');
  const committing = { set: false };
  const call = watch(queue.enqueueMany(producers, [{ n: 'a' }], { waitForRoomMs: LONG_MS }), committing);
  await waitFor('the producer refused, then waiting for room', () => sleepingInWaitForRoom('bp_pool'));
  const worker = await session(t, 'bp_worker');
  await worker.query('BEGIN');
  await complete(worker, queue, 1);
  committing.set = true;
  await worker.query('COMMIT');
  const outcome = await outcomeOf(call);
  assert.equal(outcome.error, undefined);
  assert.ok(outcome.markWasSet, 'enqueued before the completion committed');
  assert.equal(outcome.value.length, 1);
  assert.equal(await unfinished(queue), 3);
});

test('waitForRoomMs ends in a QueueFullError when the wait finds no room', async () => {
  const queue = await bounded();
  await fill(queue);
  await assert.rejects(queue.enqueue(db.admin, {}, { waitForRoomMs: 0 }), (err) => assertQueueFull(err, queue));
  const started = performance.now();
  await assert.rejects(queue.enqueueMany(db.admin, [{}, {}], { waitForRoomMs: 300 }), (err) =>
    assertQueueFull(err, queue),
  );
  assert.ok(performance.now() - started >= 250, 'it did not wait');
  assert.equal(await unfinished(queue), 3);
  // Checked before anything is sent.
  await assert.rejects(queue.enqueue(db.admin, {}, { waitForRoomMs: -1 }), TypeError);
  await assert.rejects(queue.enqueue(db.admin, {}, { waitForRoomMs: '1 second' }), TypeError);
  assert.equal(await unfinished(queue), 3);
});

test('no retry in the caller transaction: the QueueFullError at once, the transaction left aborted', async (t) => {
  const queue = await bounded();
  const plain = await newQueue(db);
  await fill(queue);
  const app = await session(t, 'bp_caller');
  const sent = [];
  const recorded = (text, values) => {
    sent.push(text);
    return app.query(text, values);
  };
  await app.query('BEGIN');
  await plain.enqueue(app, { callers: 'work' });
  const started = performance.now();
  const inTransaction = { query: recorded, getTransactionStatus: () => app.getTransactionStatus() };
  await assert.rejects(queue.enqueue(inTransaction, {}, { waitForRoomMs: HANG_MS }), (err) =>
    assertQueueFull(err, queue),
  );
  assert.ok(performance.now() - started < HANG_MS / 2, 'it waited');
  assert.equal(sent.length, 1, `sent ${sent.join('; ')}`); // the enqueue, nothing more
  // Aborted, not rolled back behind the caller's back.
  await assertAborted(app);
  await app.query('ROLLBACK');
  assert.equal(await unfinished(plain), 0);

  // Something that runs queries but is neither a pg.Pool nor a client that
  // tells its transaction status may be in the caller's transaction: no retry.
  sent.length = 0;
  await assert.rejects(queue.enqueue({ query: recorded }, {}, { waitForRoomMs: HANG_MS }), QueueFullError);
  assert.equal(sent.length, 1, `sent ${sent.join('; ')}`);
  assert.equal(app.getTransactionStatus(), 'I');

  // A BEGIN sent and not awaited: the status seen before the call is stale.
  const begun = app.query('BEGIN');
  await assert.rejects(queue.enqueueMany(app, [{}], { waitForRoomMs: HANG_MS }), (err) => assertQueueFull(err, queue));
  await begun;
  await assertAborted(app);
  await app.query('ROLLBACK');
  assert.equal(await unfinished(queue), 3);
});
