'use strict';

// What a handler can do beyond succeeding or failing (pgq_cpp 1.2): return a
// result, report progress, snooze, declare its outcome unknown; and a running
// job cancelled with pgq.cancel.
const assert = require('node:assert/strict');
const { after, before, test } = require('node:test');
const { CancelledError, OutcomeUnknown, Snooze, getJob } = require('..');
const { freshDatabase, gate, newQueue, startWorker, waitFor } = require('./helpers');

let db;

before(async () => {
  db = await freshDatabase('lifecycle');
});
after(() => db?.close());



// Resolves to `abortSignal`'s reason once it is aborted, or to undefined when
// test `t` ends first (so that a handler waiting on it cannot hang the test).
function aborted(t, abortSignal) {
  const testOver = gate(t);
  const abort = new Promise((resolve) =>
    abortSignal.addEventListener('abort', () => resolve(abortSignal.reason), { once: true }),
  );
  return Promise.race([abort, testOver.promise]);
}

test("a handler's resolved value is stored as the job's result", async (t) => {
  const queue = await newQueue(db, ", keep_completed => '1 hour'");
  const ids = await queue.enqueueMany(db.admin, [{ result: 'object' }, { result: 'none' }, { result: 'bigint' }]);
  const results = { object: { sent: true, to: ['ana@example.com'] }, none: undefined, bigint: 10n };
  const { logger } = await startWorker(t, db, queue, {
    concurrency: 3,
    handler: (job) => results[job.payload.result],
  });
  const done = await waitFor('the three jobs done', async () => {
    const infos = await Promise.all(ids.map((id) => getJob(db.admin, id)));
    return infos.every((info) => info?.state === 'done') && infos;
  });
  assert.deepEqual(
    done.map((info) => info.result),
    [{ sent: true, to: ['ana@example.com'] }, null, null],
  );
  assert.ok(done.every((info) => info.finishedAt instanceof Date));
  // JSON has no BigInt: completed all the same, without a result.
  assert.deepEqual(logger.lines, [
    `pgq: job ${ids[2]} attempt 1: its handler's result is not JSON (Do not know how to serialize a BigInt); ` +
      'completed without a result',
  ]);
});

test('job.progress() is visible in pgq.job while the handler runs', async (t) => {
  const queue = await newQueue(db);
  const id = await queue.enqueue(db.admin, {});
  const finish = gate(t);
  const saved = [];
  const { logger } = await startWorker(t, db, queue, {
    handler: async (job) => {
      saved.push(await job.progress({ step: 1, of: 2 }));
      saved.push(await job.progress({ step: 2, of: 2 })); // overwrites the first
      await finish.promise;
    },
  });
  await waitFor('two progress reports', () => saved.length === 2);
  const {
    rows: [shown],
  } = await db.admin.query('SELECT state, progress FROM pgq.job($1)', [id]);
  assert.deepEqual(shown, { state: 'running', progress: { step: 2, of: 2 } });
  assert.deepEqual(saved, [true, true]);
  finish.open();
  await waitFor('the job to complete', async () => (await getJob(db.admin, id)) === null);
  assert.deepEqual(logger.lines, []);
});

test('a snoozed job is pending again, for later, without spending its attempt', async (t) => {
  // One attempt: a snooze that spent it would leave none for the second run.
  const queue = await newQueue(db, ', max_attempts => 1');
  const [later, soon] = await queue.enqueueMany(db.admin, [{ snooze: '1 hour' }, { snooze: 1 }]);
  const runs = [];
  const { logger } = await startWorker(t, db, queue, {
    concurrency: 2,
    handler: (job) => {
      runs.push({ id: job.id, attempt: job.attempt, at: Date.now() });
      if (job.id === later) job.snooze(job.payload.snooze); // throws
      const firstRun = runs.filter((run) => run.id === soon).length === 1;
      if (job.id === soon && firstRun) throw new Snooze(job.payload.snooze);
    },
  });

  const snoozed = await waitFor('the job snoozed for an hour to be scheduled', async () => {
    const info = await getJob(db.admin, later);
    return info.state === 'scheduled' && info;
  });
  const wakesIn = snoozed.runAt - Date.now();
  assert.ok(wakesIn > 3_500_000 && wakesIn <= 3_600_000, `run_at is ${wakesIn} ms away`);

  await waitFor('the job snoozed for a second to run again and complete', async () => {
    return runs.filter((run) => run.id === soon).length === 2 && (await getJob(db.admin, soon)) === null;
  });
  const [first, second] = runs.filter((run) => run.id === soon);
  assert.deepEqual([first.attempt, second.attempt], [1, 1]);
  // (The server's clock and ours are the host's; run_at = the snooze's now() + 1 s.)
  assert.ok(second.at - first.at >= 950, `ran again after ${second.at - first.at} ms`);
  assert.deepEqual(
    runs.filter((run) => run.id === later).map((run) => run.attempt),
    [1],
  );
  assert.deepEqual(logger.lines, []);
});

test('OutcomeUnknown: the job is left alone, and runs again only once its lease has run out', async (t) => {
  // A quick backoff: a job wrongly failed would run again long before its lease ran out.
  const queue = await newQueue(db, ", backoff_base => '10 milliseconds', backoff_max => '20 milliseconds'");
  const unknown = await queue.enqueue(db.admin, { n: 1 }, { priority: 1 });
  const next = await queue.enqueue(db.admin, { n: 2 });
  const runs = [];
  let seenByNext = null;
  const { logger } = await startWorker(t, db, queue, {
    lease: 2, // heartbeats every 2/3 s
    concurrency: 1, // the next job runs only once the unknown one has freed the slot
    handler: async (job) => {
      runs.push({ id: job.id, attempt: job.attempt, at: new Date() });
      if (job.id === unknown && job.attempt === 1) throw new OutcomeUnknown('the mail API timed out');
      if (job.id === next) seenByNext = await getJob(db.admin, unknown);
    },
  });

  // Expiring leases is maintenance's: the preloaded library's worker runs a
  // pass every second; run them here too, for a server without it.
  await waitFor('the job to run again', async () => {
    await db.admin.query('SELECT pgq.maintain()');
    return runs.length >= 3;
  });
  assert.deepEqual(
    runs.map((run) => [run.id, run.attempt]),
    [
      [unknown, 1],
      [next, 1],
      [unknown, 2],
    ],
  );
  // While the next job ran, the first one was still held by its first claim ...
  assert.equal(seenByNext.state, 'running');
  assert.equal(seenByNext.attempt, 1);
  // ... and claimed again only after that lease had run out: no heartbeat kept
  // it, no release or failure gave it back early.
  assert.ok(
    runs[2].at >= seenByNext.leaseUntil,
    `claimed again at ${runs[2].at.toISOString()}, its lease ran until ${seenByNext.leaseUntil.toISOString()}`,
  );
  await waitFor('both jobs to complete', async () => (await getJob(db.admin, unknown)) === null);
  assert.equal(logger.lines.length, 1, logger.lines.join('\n'));
  assert.match(
    logger.lines[0],
    new RegExp(`^pgq: job ${unknown} attempt 1: outcome unknown \\(the mail API timed out\\); neither completed nor`),
  );
});

test('pgq.cancel on a running job aborts job.signal within a heartbeat; its outcome is not recorded', async (t) => {
  const queue = await newQueue(db);
  const [cancelled, next] = await queue.enqueueMany(db.admin, [{ n: 1 }, { n: 2 }]);
  const seen = {};
  const { logger } = await startWorker(t, db, queue, {
    lease: 3, // heartbeats every second
    concurrency: 1, // the second job runs once the cancelled one's handler has ended and been dealt with
    handler: async (job) => {
      if (job.id !== cancelled) return;
      seen.started = true;
      seen.reason = await aborted(t, job.signal);
      seen.abortedAt = Date.now();
      seen.progressSaved = await job.progress({ step: 'after the cancel' });
      return { would: 'be its result' };
    },
  });
  await waitFor('the handler to start', () => seen.started);
  const cancelledAt = Date.now();
  const { rows } = await db.admin.query('SELECT pgq.cancel($1) AS done', [cancelled]);
  assert.equal(rows[0].done, true);
  await waitFor('the handler to see the cancel', () => seen.progressSaved !== undefined);

  // One heartbeat is a second: the cancel is seen at the next, then pgq.job is read.
  const took = seen.abortedAt - cancelledAt;
  assert.ok(took < 1800, `the signal was aborted ${took} ms after the cancel`);
  assert.ok(seen.reason instanceof CancelledError, String(seen.reason));
  assert.equal(seen.reason.name, 'CancelledError');
  assert.equal(seen.progressSaved, false, 'the claim no longer holds the job');
  const { rows: dead } = await db.admin.query('SELECT reason FROM pgq.dead_jobs WHERE id = $1', [cancelled]);
  assert.deepEqual(dead, [{ reason: 'cancelled' }]);
  assert.equal((await getJob(db.admin, cancelled)).state, 'cancelled');

  // Once the slot is free the next job runs; by then the cancelled one's end
  // has been dealt with: no complete (that would log its false) and no fail.
  await waitFor('the next job to complete', async () => (await getJob(db.admin, next)) === null);
  assert.deepEqual(logger.lines, [
    `pgq: job ${cancelled} attempt 1 was cancelled: its signal is aborted, and its outcome will not be recorded`,
  ]);
});

test('a lease lost to a newer claim is logged; the signal is not aborted', async (t) => {
  const queue = await newQueue(db);
  const id = await queue.enqueue(db.admin, {});
  const finish = gate(t);
  let job = null;
  const { logger } = await startWorker(t, db, queue, {
    lease: 2,
    handler: async (claimed) => {
      job = claimed;
      await finish.promise;
    },
  });
  await waitFor('the handler to start', () => job);
  // Someone else takes the job over: failed for retry now, claimed again (attempt 2).
  await db.admin.query("SELECT pgq.fail($1, 1, 'taken over', retry_in => '0')", [id]);
  const { rows } = await db.admin.query('SELECT id, attempt FROM pgq.claim($1)', [queue.name]);
  assert.deepEqual(rows, [{ id, attempt: 2 }]);

  const lost = `pgq: job ${id} attempt 1: lease lost to a newer claim (the job is running now)`;
  await waitFor('the lost lease to be logged', () => logger.lines.includes(lost));
  assert.equal(job.signal.aborted, false);
  finish.open();
  await waitFor('the fenced completion to be logged', () => logger.lines.length === 2);
  assert.deepEqual(logger.lines, [lost, `pgq: job ${id} attempt 1 succeeded but its lease was lost to a newer claim`]);
});
