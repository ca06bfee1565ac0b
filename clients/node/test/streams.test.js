'use strict';

// Streams: Stream appends in the caller's transaction; StreamConsumer reads
// batches end to end, gets a failed batch again, stops gracefully, wakes on
// the appending commit and reconnects.
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const { once } = require('node:events');
const path = require('node:path');
const { after, before, test } = require('node:test');
const pg = require('pg');
const { Stream, StreamConsumer } = require('..');
const { freshDatabase, gate, newStream, startConsumer, waitFor } = require('./helpers');

let db;

before(async () => {
  db = await freshDatabase('streams');
});
after(() => db?.close());

async function stats(stream, consumer = 'c') {
  const { rows } = await db.admin.query(
    `SELECT pending_events::int AS pending, batch_open AS open, finished_events::int AS finished
       FROM pgq.stream_stats WHERE stream = $1 AND consumer = $2`,
    [stream.name, consumer],
  );
  assert.equal(rows.length, 1, `consumer ${consumer} of ${stream.name} is not registered`);
  return rows[0];
}

function finished(stream, count, consumer = 'c') {
  const expected = { pending: 0, open: false, finished: count };
  return waitFor(`${count} events of ${stream.name} finished by ${consumer}`, async () => {
    const now = await stats(stream, consumer);
    return JSON.stringify(now) === JSON.stringify(expected);
  });
}

// Resolves once the consumer's next_batch is asleep on the server, waiting for
// an append, since `seconds` at least.
function nextBatchIsWaiting(stream, consumer = 'c', seconds = 0) {
  return waitFor(`next_batch of ${stream.name} waiting for ${seconds} s`, async () => {
    const { rows } = await db.admin.query(
      `SELECT 1 FROM pg_stat_activity
        WHERE application_name = $1 AND query LIKE '%pgq.next_batch(%' AND wait_event_type = 'Extension'
          AND now() - query_start >= make_interval(secs => $2)`,
      [`consumer_${stream.name}_${consumer}`, seconds],
    );
    return rows.length === 1;
  });
}

// A handler that keeps every batch it is handed.
function recorder() {
  const batches = [];
  const handler = (batch) => {
    batches.push(batch);
  };
  const eventIds = () => batches.flatMap((batch) => batch.events.map((event) => event.id));
  return { batches, handler, eventIds };
}

// Runs fn(client) in a transaction of its own connection, committed if fn resolves.
async function inTransaction(fn) {
  const client = new pg.Client(db.config);
  await client.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } finally {
    await client.end();
  }
}

test('append and appendMany belong to the caller\'s transaction', async () => {
  const stream = await newStream(db);
  await db.admin.query("SELECT pgq.register_consumer($1, 'c')", [stream.name]);
  const [one, many] = await inTransaction(async (client) => [
    await stream.append(client, { n: 1 }),
    await stream.appendMany(client, [{ n: 2 }, [3], 'four', null]),
  ]);
  await assert.rejects(
    inTransaction(async (client) => {
      await stream.append(client, { n: 'rolled back' });
      await stream.appendMany(client, [{ n: 'rolled back too' }]);
      throw new Error('the business write failed');
    }),
    /the business write failed/,
  );
  assert.equal(typeof one, 'string');
  assert.deepEqual(
    many,
    [1, 2, 3, 4].map((k) => String(Number(one) + k)),
  );
  assert.deepEqual(await stream.appendMany(db.admin, []), []);
  const { rows } = await db.admin.query("SELECT event_id, payload FROM pgq.next_batch($1, 'c')", [stream.name]);
  assert.deepEqual(rows, [
    { event_id: one, payload: { n: 1 } },
    { event_id: many[0], payload: { n: 2 } },
    { event_id: many[1], payload: [3] },
    { event_id: many[2], payload: 'four' },
    { event_id: many[3], payload: null },
  ]);
});

test('append errors are the server\'s: 42704 for an unknown stream', async () => {
  const nope = new Stream('nope');
  await assert.rejects(nope.append(db.admin, {}), { code: '42704' });
  await assert.rejects(nope.appendMany(db.admin, [{}]), { code: '42704' });
  assert.throws(() => new Stream(7), TypeError);
});

test('events reach the handler in batches, which are finished', async (t) => {
  const stream = await newStream(db);
  const seen = recorder();
  await startConsumer(t, db, stream, { maxEvents: 2, handler: seen.handler });
  const before = Date.now();
  const ids = await stream.appendMany(
    db.admin,
    [0, 1, 2, 3, 4].map((n) => ({ n })),
  );
  await finished(stream, 5);
  assert.deepEqual(seen.eventIds(), ids);
  assert.ok(seen.batches.every((batch) => batch.events.length >= 1 && batch.events.length <= 2));
  const batchIds = seen.batches.map((batch) => batch.id);
  assert.equal(new Set(batchIds).size, batchIds.length, 'each batch once');
  const [first] = seen.batches;
  assert.equal(first.stream, stream.name);
  assert.equal(first.consumer, 'c');
  assert.equal(typeof first.id, 'string');
  assert.deepEqual(first.events[0].payload, { n: 0 });
  assert.ok(first.events[0].appendedAt instanceof Date);
  assert.ok(Math.abs(first.events[0].appendedAt - before) < 60_000);
  await assert.rejects(db.admin.query('SELECT pgq.finish_batch($1)', [batchIds.at(-1)]), { code: '55000' });
});

test('a failing handler gets the same batch again; it is finished once', async (t) => {
  const stream = await newStream(db);
  const calls = [];
  const { logger } = await startConsumer(t, db, stream, {
    handler: async (batch) => {
      calls.push({ id: batch.id, events: batch.events.map((event) => event.id) });
      if (calls.length === 1) throw new Error('the archive is down');
    },
  });
  const ids = await stream.appendMany(db.admin, [{ n: 1 }, { n: 2 }, { n: 3 }]);
  await finished(stream, 3);
  assert.equal(calls.length, 2);
  assert.deepEqual(calls[1], calls[0]); // the same batch id, the same events
  assert.deepEqual(calls[0].events, ids);
  assert.equal(logger.lines.length, 1, logger.lines.join('\n'));
  assert.match(
    logger.lines[0],
    new RegExp(
      `^pgq: batch ${calls[0].id} \\(3 event\\(s\\)\\) of consumer c of stream ${stream.name}: the handler failed; ` +
        'the batch is not finished and comes again in about \\d+ ms: Error: the archive is down',
    ),
  );
  await assert.rejects(db.admin.query('SELECT pgq.finish_batch($1)', [calls[0].id]), { code: '55000' });
  // And it goes on with the next batch.
  const later = await stream.append(db.admin, { n: 4 });
  await finished(stream, 4);
  assert.deepEqual(calls.at(-1).events, [later]);
});

test('two consumers of one stream each get every event', async (t) => {
  const stream = await newStream(db);
  const [first, second] = [recorder(), recorder()];
  await startConsumer(t, db, stream, { consumer: 'c1', handler: first.handler });
  await startConsumer(t, db, stream, { consumer: 'c2', maxEvents: 1, handler: second.handler });
  const ids = [];
  for (let n = 0; n < 4; n++) {
    ids.push(...(await inTransaction((client) => stream.appendMany(client, [0, 1, 2].map((i) => ({ n, i }))))));
  }
  await finished(stream, 12, 'c1');
  await finished(stream, 12, 'c2');
  assert.deepEqual(first.eventIds(), ids);
  assert.deepEqual(second.eventIds(), ids);
  assert.equal(second.batches.length, 12); // one event per batch
});

test('a transaction that commits late is delivered, in a later batch', async (t) => {
  const stream = await newStream(db);
  const seen = recorder();
  await startConsumer(t, db, stream, { handler: seen.handler });
  const late = new pg.Client(db.config);
  await late.connect();
  t.after(() => late.end());
  await late.query('BEGIN');
  const early = await stream.append(late, { n: 'appended first, committed last' });
  // Meanwhile another transaction appends, commits and is read.
  const other = await stream.append(db.admin, { n: 'appended second, committed first' });
  await finished(stream, 1);
  assert.deepEqual(seen.eventIds(), [other]);
  await late.query('COMMIT');
  await finished(stream, 2);
  assert.deepEqual(seen.eventIds(), [other, early]);
  assert.equal(seen.batches.length, 2);
  assert.ok(BigInt(early) < BigInt(other));
});

test('a waiting consumer gets an event appended later within milliseconds', async (t) => {
  const stream = await newStream(db);
  let received = null;
  await startConsumer(t, db, stream, {
    wait: 60,
    handler: () => {
      received?.(Date.now());
    },
  });
  for (const asleep of [1, 0, 0]) {
    // One next_batch asleep on the server (a second already, the first time):
    // the consumer does not poll.
    await nextBatchIsWaiting(stream, 'c', asleep);
    const handled = new Promise((resolve) => (received = resolve));
    await stream.append(db.admin, {});
    const committedAt = Date.now();
    const latency = (await handled) - committedAt;
    // A functional bound (the commit wakes the wait; it does not run out its
    // minute), not a benchmark: typically a few milliseconds.
    assert.ok(latency < 2000, `the event reached the handler ${latency} ms after its commit`);
  }
});

test('an unknown stream or consumer rejects start() with 42704', async () => {
  const stream = await newStream(db);
  const unknownStream = new StreamConsumer({ ...db.config, stream: 'nope', consumer: 'c', handler() {} });
  await assert.rejects(unknownStream.start(), { code: '42704', message: /stream "nope" does not exist/ });
  const unregistered = new StreamConsumer({ ...db.config, stream, consumer: 'c', register: false, handler() {} });
  await assert.rejects(unregistered.start(), (err) => err.code === '42704' && /register/.test(err.hint));
  // Either one stopped: stop() resolves, and it cannot start again.
  await unknownStream.stop();
  await assert.rejects(unknownStream.start(), /starts once/);
});

test('register: false reads from the position a consumer registered before has', async (t) => {
  const stream = await newStream(db);
  await db.admin.query("SELECT pgq.register_consumer($1, 'pre')", [stream.name]);
  const before = await stream.append(db.admin, { n: 'before the consumer started' });
  const seen = recorder();
  await startConsumer(t, db, stream, { consumer: 'pre', register: false, handler: seen.handler });
  await finished(stream, 1, 'pre');
  assert.deepEqual(seen.eventIds(), [before]);
});

test('a consume grant is needed (42501) and enough', async (t) => {
  const stream = await newStream(db);
  const role = 'pgq_node_stream_reader';
  await db.admin.query(`DROP ROLE IF EXISTS ${role}`);
  await db.admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pgq-node-test'`);
  t.after(() => db.admin.query(`DROP OWNED BY ${role}; DROP ROLE ${role}`));
  const password = 'pgq-node-test';
  const asReader = db.config.connectionString
    ? { connectionString: Object.assign(new URL(db.config.connectionString), { username: role, password }).href }
    : { ...db.config, user: role, password };
  const refused = new StreamConsumer({ ...asReader, stream, consumer: 'c', handler() {} });
  await assert.rejects(refused.start(), { code: '42501' });
  await db.admin.query("SELECT pgq.grant_stream($1, $2, 'consume')", [role, stream.name]);
  const seen = recorder();
  const consumer = new StreamConsumer({ ...asReader, stream, consumer: 'c', handler: seen.handler });
  await consumer.start();
  t.after(() => consumer.stop());
  const ids = await stream.appendMany(db.admin, [{}, {}]);
  await finished(stream, 2);
  assert.deepEqual(seen.eventIds(), ids);
});

test('settings that cannot work are refused before anything is sent', () => {
  const base = { stream: 's', consumer: 'c', handler() {} };
  for (const [settings, error] of [
    [{ maxEvents: 0 }, RangeError],
    [{ maxEvents: 1.5 }, RangeError],
    [{ wait: 0 }, RangeError], // it would poll: next_batch, nothing, next_batch again
    [{ stream: 7 }, TypeError],
    [{ consumer: undefined }, TypeError],
    [{ handler: 'no' }, TypeError],
  ]) {
    assert.throws(() => new StreamConsumer({ ...base, ...settings }), error, JSON.stringify(settings));
  }
});

test('a cancelled next_batch (57014) is asked again on the same connection', async (t) => {
  // pg_cancel_backend or a statement_timeout: the next_batch rolled back and
  // took nothing; the consumer asks again after a short backoff.
  const stream = await newStream(db);
  const seen = recorder();
  const { logger } = await startConsumer(t, db, stream, { wait: 60, handler: seen.handler });
  await nextBatchIsWaiting(stream);
  const {
    rows: [{ pid, at }],
  } = await db.admin.query(
    `SELECT pid, clock_timestamp() AS at FROM pg_stat_activity
      WHERE application_name = $1 AND query LIKE '%pgq.next_batch(%'`,
    [`consumer_${stream.name}_c`],
  );
  await db.admin.query('SELECT pg_cancel_backend($1)', [pid]);
  await waitFor('next_batch again, on the same backend', async () => {
    const { rows } = await db.admin.query(
      `SELECT 1 FROM pg_stat_activity
        WHERE pid = $1 AND query LIKE '%pgq.next_batch(%' AND wait_event_type = 'Extension' AND query_start > $2`,
      [pid, at],
    );
    return rows.length === 1;
  });
  const first = await stream.append(db.admin, {});
  await finished(stream, 1);
  assert.deepEqual(seen.eventIds(), [first]);
  assert.match(logger.lines[0], /^pgq: next_batch of .* was cancelled \(57014\); asking again in \d+ ms/);
});

test('the consumer reconnects after losing its connection', async (t) => {
  const stream = await newStream(db);
  const seen = recorder();
  const { logger } = await startConsumer(t, db, stream, { wait: 60, handler: seen.handler });
  const first = await stream.append(db.admin, {});
  await finished(stream, 1);
  await nextBatchIsWaiting(stream);
  await db.admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [
    `consumer_${stream.name}_c`,
  ]);
  await nextBatchIsWaiting(stream); // on a new connection
  const second = await stream.append(db.admin, {});
  await finished(stream, 2);
  assert.deepEqual(seen.eventIds(), [first, second]);
  assert.match(
    logger.lines[0],
    new RegExp(
      `^pgq: next_batch of consumer c of stream ${stream.name} failed; retrying in \\d+ ms: ` +
        'error: terminating connection',
    ),
  );
});

test('stop() lets the running handler finish and finishes its batch; nothing is read after', async (t) => {
  const stream = await newStream(db);
  const release = gate(t);
  let started = false;
  const handled = [];
  const { consumer } = await startConsumer(t, db, stream, {
    handler: async (batch) => {
      started = true;
      await release.promise;
      handled.push(...batch.events.map((event) => event.id));
    },
  });
  const ids = await stream.appendMany(db.admin, [{}, {}]);
  await waitFor('the handler to start', () => started);
  let stopped = false;
  const stopping = consumer.stop().then(() => {
    stopped = true;
  });
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(stopped, false, 'stop() waits for the running handler');
  assert.equal((await stats(stream)).open, true);
  release.open();
  await stopping;
  assert.deepEqual(handled, ids);
  assert.deepEqual(await stats(stream), { pending: 0, open: false, finished: 2 });
  await stream.append(db.admin, {});
  assert.equal((await stats(stream)).pending, 1);
});

test('stop() ends a waiting next_batch at once', { timeout: 20_000 }, async (t) => {
  const stream = await newStream(db);
  const { consumer } = await startConsumer(t, db, stream, { wait: 60, handler() {} });
  await nextBatchIsWaiting(stream);
  const begin = Date.now();
  await consumer.stop();
  assert.ok(Date.now() - begin < 5000, `stop() took ${Date.now() - begin} ms`);
  // Its connections are closed; a backend leaves pg_stat_activity a moment
  // after its client hung up (as the Python client's test waits for it).
  await waitFor('the consumer\'s sessions gone', async () => {
    const { rows } = await db.admin.query(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
      [`consumer_${stream.name}_c`],
    );
    return rows[0].n === 0;
  });
});

test('stop() while a failed batch waits for its retry leaves it open', async (t) => {
  const stream = await newStream(db);
  let failed = false;
  const { consumer } = await startConsumer(t, db, stream, {
    handler: () => {
      failed = true;
      throw new Error('down');
    },
  });
  await stream.append(db.admin, {});
  await waitFor('the handler to fail', () => failed);
  await consumer.stop();
  assert.deepEqual(await stats(stream), { pending: 1, open: true, finished: 0 });
});

// A consumer process under stopOnSignals(): each batch's handler says which
// events it got and holds on until a line on stdin.
const SIGNALLED_CONSUMER = `
const { StreamConsumer } = require('pgq-cpp');
const readline = require('node:readline');
let go;
const released = new Promise((resolve) => (go = resolve));
readline.createInterface({ input: process.stdin }).on('line', () => go());
const consumer = new StreamConsumer({
  ...JSON.parse(process.argv[1]),
  handler: async (batch) => {
    console.log('handling ' + batch.events.map((event) => event.id).join(' '));
    await released;
  },
});
consumer.stopOnSignals().then(() => {
  console.log('stopped');
  process.stdin.destroy();
});
consumer.start();
`;

test('stopOnSignals(): SIGTERM stops the process after its batch', async (t) => {
  const stream = await newStream(db);
  const settings = { ...db.config, application_name: `consumer_${stream.name}_c`, stream: stream.name, consumer: 'c' };
  const child = spawn(process.execPath, ['-e', SIGNALLED_CONSUMER, JSON.stringify(settings)], {
    cwd: path.join(__dirname, '..'),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  t.after(() => child.kill('SIGKILL')); // if the test failed before it exited
  const exited = once(child, 'exit');
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));

  await nextBatchIsWaiting(stream); // registered
  const id = await stream.append(db.admin, {});
  await waitFor('the batch to be handled', () => stdout.includes(`handling ${id}\n`));
  child.kill('SIGTERM');
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.equal((await stats(stream)).open, true, 'still handling');
  child.stdin.write('\n');
  const [code, signal] = await exited;
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, stderr);
  assert.equal(stdout, `handling ${id}\nstopped\n`);
  assert.match(stderr, new RegExp(`^pgq: SIGTERM: stopping the consumer c of stream ${stream.name}$`, 'm'));
  assert.deepEqual(await stats(stream), { pending: 0, open: false, finished: 1 });
});
