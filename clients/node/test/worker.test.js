'use strict';

// Worker: claims with a server-side wait, runs jobs concurrently, heartbeats,
// completes or fails them, stops gracefully and reconnects.
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const { once } = require('node:events');
const path = require('node:path');
const { after, before, test } = require('node:test');
const { setTimeout: sleep } = require('node:timers/promises');
const { Worker } = require('..');
const { freshDatabase, gate, newQueue, startWorker, waitFor, withServer } = require('./helpers');

let db;

before(async () => {
  db = await freshDatabase('worker');
});
after(() => db?.close());



async function stats(queue) {
  const { rows } = await db.admin.query(
    'SELECT ready, scheduled, running, dead, done_recent FROM pgq.queue_stats WHERE queue = $1',
    [queue.name],
  );
  return Object.fromEntries(Object.entries(rows[0]).map(([column, count]) => [column, Number(count)]));
}

function statsAre(queue, expected) {
  return waitFor(`${queue.name} stats ${JSON.stringify(expected)}`, async () => {
    const now = await stats(queue);
    return Object.entries(expected).every(([column, count]) => now[column] === count);
  });
}

// Resolves once the worker's claim is asleep on the server, waiting for a job
// (the wait event an extension's sleep shows), since `seconds` at least.
function claimIsWaiting(queue, seconds = 0) {
  return waitFor(`a claim on ${queue.name} waiting for ${seconds} s`, async () => {
    const { rows } = await db.admin.query(
      `SELECT 1 FROM pg_stat_activity
        WHERE application_name = $1 AND query LIKE '%pgq.claim(%' AND wait_event_type = 'Extension'
          AND now() - query_start >= make_interval(secs => $2)`,
      [`worker_${queue.name}`, seconds],
    );
    return rows.length === 1;
  });
}

test('every job runs exactly once, up to `concurrency` at a time', async (t) => {
  const queue = await newQueue(db);
  const total = 200;
  const concurrency = 4;
  await queue.enqueueMany(
    db.admin,
    Array.from({ length: total }, (_, n) => ({ n })),
  );
  const runs = new Array(total).fill(0);
  const attempts = new Set();
  let inFlight = 0;
  let maxInFlight = 0;
  const allBusy = gate(t); // the first jobs hold on until `concurrency` run at once
  await startWorker(t, db, queue, {
    concurrency,
    batch: 7,
    handler: async (job) => {
      runs[job.payload.n] += 1;
      attempts.add(job.attempt);
      maxInFlight = Math.max(maxInFlight, ++inFlight);
      if (inFlight === concurrency) allBusy.open();
      await allBusy.promise;
      inFlight -= 1;
    },
  });
  await statsAre(queue, { ready: 0, scheduled: 0, running: 0, dead: 0, done_recent: total });
  assert.deepEqual(
    runs.flatMap((count, n) => (count === 1 ? [] : [`job ${n} ran ${count} times`])),
    [],
  );
  assert.deepEqual([...attempts], [1]);
  assert.equal(maxInFlight, concurrency);
});

test('a throwing or rejecting handler fails the job: retried, then dead-lettered', async (t) => {
  const queue = await newQueue(db, 
    ", max_attempts => 3, backoff_base => '10 milliseconds', backoff_max => '20 milliseconds'",
  );
  const id = await queue.enqueue(db.admin, { to: 'ana@example.com' });
  const attempts = [];
  const { logger } = await startWorker(t, db, queue, {
    handler(job) {
      attempts.push(job.attempt);
      if (job.attempt === 1) throw new Error('smtp down (thrown)');
      return Promise.reject(new Error(`smtp down (rejected, attempt ${job.attempt})`));
    },
  });
  await statsAre(queue, { dead: 1 });
  const { rows } = await db.admin.query('SELECT attempts, reason, last_error FROM pgq.dead_jobs WHERE id = $1', [id]);
  assert.equal(rows[0].attempts, 3);
  assert.equal(rows[0].reason, 'exhausted');
  assert.match(rows[0].last_error, /^Error: smtp down \(rejected, attempt 3\)\n\s+at /);
  assert.deepEqual(attempts, [1, 2, 3]);
  // The worker logs an outcome once pgq.fail has returned it, a moment after
  // its commit made the dead job visible to the stats above.
  await waitFor('the third failure logged', () => logger.lines.length === 3);
  assert.deepEqual(
    logger.lines.map((line) => line.match(/^pgq: (job \d+ attempt \d+ failed \(\w+\)):/)?.[1]),
    [`job ${id} attempt 1 failed (retry)`, `job ${id} attempt 2 failed (retry)`, `job ${id} attempt 3 failed (dead)`],
  );
});

// Runs one job that outlives its 2 s lease: the handler goes on until the
// heartbeats have moved the lease on by one and a half leases (a lapse would
// need a heartbeat 1.3 s late). Resolves to what was seen.
async function outliveLease(t, queue, options) {
  const runs = [];
  let movedBy = null;
  const { logger } = await startWorker(t, db, queue, {
    concurrency: 2, // a free slot would take the job again if its lease expired
    ...options,
    handler: async (job) => {
      runs.push(job.attempt);
      const claimedUntil = job.leaseUntil;
      await waitFor('the heartbeats to move the lease on by 3 s', () => job.leaseUntil - claimedUntil >= 3000);
      movedBy = job.leaseUntil - claimedUntil;
    },
  });
  const id = await queue.enqueue(db.admin, {});
  await waitFor(
    'the job to complete or run again',
    async () => runs.length > 1 || (await stats(queue)).done_recent === 1,
  );
  const { rows } = await db.admin.query('SELECT pgq.complete($1, 1) AS again', [id]);
  return { runs, movedBy, log: logger.lines, completedAgain: rows[0].again };
}

test('a job that outlives its lease is kept by heartbeats: one run, attempt 1', async (t) => {
  // The worker's lease, and the queue's own when the worker sets none.
  const [workerLease, queueLease] = await Promise.all([
    newQueue(db).then((queue) => outliveLease(t, queue, { lease: 2 })),
    newQueue(db, ", lease => '2 seconds'").then((queue) => outliveLease(t, queue, {})),
  ]);
  for (const seen of [workerLease, queueLease]) {
    assert.deepEqual(seen.runs, [1]);
    assert.ok(seen.movedBy >= 3000, `leaseUntil moved on by ${seen.movedBy} ms`);
    assert.deepEqual(seen.log, []);
    assert.equal(seen.completedAgain, false, 'the job is done');
  }
});

test('stop() gives back claimed jobs not started and lets the running one finish', async (t) => {
  const queue = await newQueue(db);
  const ids = await queue.enqueueMany(db.admin, [{ n: 1 }, { n: 2 }, { n: 3 }]);
  const started = [];
  const finish = gate(t);
  const { worker } = await startWorker(t, db, queue, {
    concurrency: 1,
    batch: 3,
    handler: async (job) => {
      started.push(job.id);
      await finish.promise;
    },
  });
  await statsAre(queue, { running: 3 });
  await waitFor('the first job to start', () => started.length === 1);

  let stopped = false;
  const stopping = worker.stop().then(() => {
    stopped = true;
  });
  await statsAre(queue, { ready: 2, running: 1 });
  assert.equal(stopped, false, 'stop() waits for the running job');
  finish.open();
  await stopping;

  assert.deepEqual(started, [ids[0]]);
  await statsAre(queue, { ready: 2, scheduled: 0, running: 0, dead: 0, done_recent: 1 });
  const { rows } = await db.admin.query('SELECT id, attempt FROM pgq.claim($1, 10)', [queue.name]);
  assert.deepEqual(rows, [
    { id: ids[1], attempt: 1 },
    { id: ids[2], attempt: 1 },
  ]);
});

test('stop() while start() is under way gives back what its first claim took', async () => {
  const queue = await newQueue(db);
  const ids = await queue.enqueueMany(db.admin, [{ n: 1 }, { n: 2 }]);
  const ran = [];
  const worker = new Worker({ ...db.config, queue, batch: 2, handler: (job) => ran.push(job.id) });
  const started = worker.start();
  await worker.stop();
  await started;
  assert.deepEqual(ran, []);
  const { rows } = await db.admin.query('SELECT id, attempt FROM pgq.claim($1, 10)', [queue.name]);
  assert.deepEqual(
    rows,
    ids.map((id) => ({ id, attempt: 1 })),
  );
});

test('stop() ends a waiting claim at once', { timeout: 20_000 }, async (t) => {
  const queue = await newQueue(db);
  const { worker } = await startWorker(t, db, queue, { wait: 60, handler() {} });
  await claimIsWaiting(queue);
  const begin = Date.now();
  await worker.stop();
  assert.ok(Date.now() - begin < 5000, `stop() took ${Date.now() - begin} ms`);
  // Nothing is left connected.
  const { rows } = await db.admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [
    `worker_${queue.name}`,
  ]);
  assert.equal(rows[0].n, 0);
});

// A worker process under stopOnSignals(), one job at a time, two per claim:
// each handler says which job it started and holds on until a line on stdin.
const SIGNALLED_WORKER = `
const { Worker } = require('pgq-cpp');
const readline = require('node:readline');
let go;
const released = new Promise((resolve) => (go = resolve));
readline.createInterface({ input: process.stdin }).on('line', () => go());
const worker = new Worker({
  ...JSON.parse(process.argv[1]),
  handler: async (job) => {
    console.log('started ' + job.id);
    await released;
  },
});
worker.stopOnSignals().then(() => {
  console.log('stopped');
  process.stdin.destroy();
});
worker.start();
`;

test('stopOnSignals(): SIGTERM stops the process gracefully', async (t) => {
  const queue = await newQueue(db);
  const ids = await queue.enqueueMany(db.admin, [{ n: 1 }, { n: 2 }]);
  const settings = { ...db.config, queue: queue.name, concurrency: 1, batch: 2 };
  const child = spawn(process.execPath, ['-e', SIGNALLED_WORKER, JSON.stringify(settings)], {
    cwd: path.join(__dirname, '..'),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  t.after(() => child.kill('SIGKILL')); // if the test failed before it exited
  const exited = once(child, 'exit');
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));

  await waitFor('the first job to start', () => stdout.includes(`started ${ids[0]}\n`));
  child.kill('SIGTERM');
  // The job in line is given back at once; the running one runs on.
  await statsAre(queue, { ready: 1, running: 1 });
  child.stdin.write('\n');
  const [code, signal] = await exited;
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, stderr);
  assert.equal(stdout, `started ${ids[0]}\nstopped\n`);
  assert.match(stderr, new RegExp(`^pgq: SIGTERM: stopping the worker of queue ${queue.name}$`, 'm'));
  await statsAre(queue, { ready: 1, running: 0, dead: 0, done_recent: 1 });
  const { rows } = await db.admin.query('SELECT id, attempt FROM pgq.claim($1, 10)', [queue.name]);
  assert.deepEqual(rows, [{ id: ids[1], attempt: 1 }]);
});

test('a waiting claim wakes when a job is committed (no client-side polling)', async (t) => {
  const queue = await newQueue(db);
  const ran = gate(t);
  await startWorker(t, db, queue, { wait: 60, handler: () => ran.open(Date.now()) });
  await claimIsWaiting(queue, 1.5); // one long wait on the server, not short claims in a loop
  const committedAt = Date.now();
  await queue.enqueue(db.admin, {});
  const latency = (await ran.promise) - committedAt;
  // That claim returned with the job, not at the end of its minute. (How soon
  // a commit wakes it, milliseconds, is the server's to test, in
  // test/python/test_concurrency.py; a bound that tight fails on a loaded machine.)
  assert.ok(latency < 5000, `the job started ${latency} ms after its commit`);
});

test('the worker reconnects after losing its connections', async (t) => {
  const queue = await newQueue(db);
  const ran = gate(t);
  const { logger } = await startWorker(t, db, queue, { wait: 60, handler: () => ran.open() });
  await claimIsWaiting(queue);
  await db.admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [
    `worker_${queue.name}`,
  ]);
  await claimIsWaiting(queue); // a new connection
  await queue.enqueue(db.admin, {});
  await ran.promise;
  await statsAre(queue, { done_recent: 1 });
  assert.match(
    logger.lines[0],
    /^pgq: claim from queue q\d+ failed; retrying in \d+ ms: error: terminating connection/,
  );
});

test('a completion that cannot be recorded for a while is retried: the job runs once', async (t) => {
  const queue = await newQueue(db);
  const application = `worker_${queue.name}`;
  const {
    rows: [{ database }],
  } = await db.admin.query('SELECT current_database() AS database');
  // From another database: a session cannot disallow connections to its own.
  const allowConnections = (allow) =>
    withServer((client) => client.query(`ALTER DATABASE ${database} WITH ALLOW_CONNECTIONS ${allow}`));
  t.after(() => allowConnections(true)); // before the worker stops: after-hooks run in order
  const runs = [];
  const { logger } = await startWorker(t, db, queue, {
    lease: 6, // heartbeats every 2 s; without retries the outcome would be lost, not saved by expiry
    handler: async (job) => {
      runs.push(job.attempt);
      if (runs.length > 1) return;
      // After a heartbeat the pool holds a connection, which breaks below.
      const claimedUntil = job.leaseUntil;
      await waitFor('a heartbeat', () => job.leaseUntil > claimedUntil);
      // New connections are refused (55000, FATAL) and the worker's ones end
      // (57P01); not the test's own (db.admin).
      await allowConnections(false);
      await db.admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [
        application,
      ]);
      await waitFor("the worker's connections to end", async () => {
        const { rows } = await db.admin.query('SELECT 1 FROM pg_stat_activity WHERE application_name = $1', [
          application,
        ]);
        return rows.length === 0;
      });
    },
  });
  const id = await queue.enqueue(db.admin, {});
  const retry = `pgq: complete of job ${id} attempt 1 failed; retrying in `;
  // About a second of retries (0.1 s doubling, with jitter), then connections are allowed again.
  await waitFor('four retries of the completion', () => {
    const lost = logger.lines.find((line) => line.startsWith('pgq: could not record the outcome'));
    if (lost) throw new Error(`not retried: ${lost}`);
    return logger.lines.filter((line) => line.startsWith(retry)).length >= 4;
  });
  assert.equal((await stats(queue)).running, 1, 'the job is held while its completion is retried');
  await allowConnections(true);
  await statsAre(queue, { ready: 0, scheduled: 0, running: 0, dead: 0, done_recent: 1 });
  assert.deepEqual(runs, [1]);
  const { rows: left } = await db.admin.query('SELECT 1 FROM pgq.jobs WHERE id = $1', [id]);
  assert.deepEqual(left, []);
  assert.ok(
    logger.lines.some((line) => line.startsWith(retry) && line.includes('is not currently accepting connections')),
    logger.lines.join('\n'),
  );
  assert.deepEqual(
    logger.lines.filter((line) => /could not record|succeeded/.test(line)),
    [],
  );
});

test('a worker process killed while its claim waits takes no job with it', async () => {
  const queue = await newQueue(db);
  const settings = { ...db.config, application_name: `worker_${queue.name}`, queue: queue.name, wait: 60 };
  const child = spawn(
    process.execPath,
    [
      '-e',
      `new (require('pgq-cpp').Worker)({ ...JSON.parse(process.argv[1]), handler() {} }).start()`,
      JSON.stringify(settings),
    ],
    { cwd: path.join(__dirname, '..'), stdio: 'inherit' },
  );
  const exited = once(child, 'exit');
  await claimIsWaiting(queue);
  child.kill('SIGKILL');
  await exited;
  await waitFor('the orphaned claim to end', async () => {
    const { rows } = await db.admin.query('SELECT 1 FROM pg_stat_activity WHERE application_name = $1', [
      `worker_${queue.name}`,
    ]);
    return rows.length === 0;
  });
  await queue.enqueue(db.admin, {});
  assert.deepEqual(await stats(queue), { ready: 1, scheduled: 0, running: 0, dead: 0, done_recent: 0 });
});

test('a completion fenced off by a newer claim is logged, not thrown', async (t) => {
  const queue = await newQueue(db);
  const first = await queue.enqueue(db.admin, { n: 1 });
  const finish = gate(t);
  const done = [];
  const { logger } = await startWorker(t, db, queue, {
    handler: async (job) => {
      if (job.id === first) await finish.promise;
      done.push(job.id);
    },
  });
  await statsAre(queue, { running: 1 });
  // Someone else takes the job over: failed for retry now, claimed again (attempt 2).
  await db.admin.query("SELECT pgq.fail($1, 1, 'taken over', retry_in => '0')", [first]);
  const { rows } = await db.admin.query('SELECT id, attempt FROM pgq.claim($1)', [queue.name]);
  assert.deepEqual(rows, [{ id: first, attempt: 2 }]);
  finish.open();

  await waitFor('the lost completion to be logged', () =>
    logger.lines.includes(`pgq: job ${first} attempt 1 succeeded but its lease was lost to a newer claim`),
  );
  const second = await queue.enqueue(db.admin, { n: 2 });
  await waitFor('the worker to go on with the next job', () => done.includes(second));
  const {
    rows: [taker],
  } = await db.admin.query('SELECT pgq.complete($1, 2) AS done', [first]);
  assert.equal(taker.done, true, "the newer claim's completion still holds");
});

test('a cancelled claim (57014) is claimed again on the same connection', async (t) => {
  // pg_cancel_backend, a statement_timeout, or a lock wait cancelled while
  // ALTER EXTENSION waits: the claim rolled back and took nothing; the worker
  // claims again after a short backoff, without reconnecting.
  const queue = await newQueue(db);
  const ran = gate(t);
  const { logger } = await startWorker(t, db, queue, { wait: 60, handler: () => ran.open() });
  await claimIsWaiting(queue);
  const {
    rows: [{ pid, at }],
  } = await db.admin.query(
    `SELECT pid, clock_timestamp() AS at FROM pg_stat_activity
      WHERE application_name = $1 AND query LIKE '%pgq.claim(%'`,
    [`worker_${queue.name}`],
  );
  await db.admin.query('SELECT pg_cancel_backend($1)', [pid]);
  await waitFor('the claim again, on the same backend', async () => {
    const { rows } = await db.admin.query(
      `SELECT 1 FROM pg_stat_activity
        WHERE pid = $1 AND query LIKE '%pgq.claim(%' AND wait_event_type = 'Extension' AND query_start > $2`,
      [pid, at],
    );
    return rows.length === 1;
  });
  await queue.enqueue(db.admin, {});
  await ran.promise;
  await statsAre(queue, { done_recent: 1 });
  assert.match(logger.lines[0], /^pgq: claim from queue q\d+ was cancelled \(57014\); claiming again in \d+ ms/);
});
