'use strict';

// OpenTelemetry (lib/tracing.js, pgq_cpp 3.1): a producer's `send` span
// passes its W3C context to the server in the caller's transaction, and the
// Worker's and StreamConsumer's `process` spans continue it (or link to it);
// with the API but no SDK, nothing is sent and nothing recorded. Spans are
// kept by the SDK's InMemorySpanExporter; context flows through
// AsyncLocalStorage, as in an application.
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const path = require('node:path');
const { promisify } = require('node:util');
const { after, before, beforeEach, test } = require('node:test');
const api = require('@opentelemetry/api');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const {
  AlwaysOffSampler,
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} = require('@opentelemetry/sdk-trace-base');
const pg = require('pg');
const { Stream, Topic, Worker } = require('..');
const { freshDatabase, newQueue, newStream, startConsumer, startWorker, waitFor } = require('./helpers');

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = () => api.trace.getTracer('pgq-node-tests');

// The SDK as an application registers it (sdk-trace-node's register() does
// these two); undone by unregisterSdk for the test without one.
function registerSdk() {
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  api.trace.setGlobalTracerProvider(provider);
}

function unregisterSdk() {
  api.trace.disable();
  api.context.disable();
}

let db;

before(async () => {
  db = await freshDatabase('tracing');
  await db.admin.query('CREATE TABLE orders (id serial PRIMARY KEY, item text)');
});
after(async () => {
  await db?.close();
  await provider.shutdown();
});
beforeEach(() => {
  registerSdk();
  exporter.reset();
});

const spans = () => exporter.getFinishedSpans();

/** Waits for the finished span named `name` (and matching `where`, if given). */
function spanOf(name, where = () => true) {
  return waitFor(`span ${name}`, () => spans().find((span) => span.name === name && where(span)));
}

/** Waits for `count` finished spans named `name` that match `where`; resolves to them, oldest first. */
function spansOf(name, count, where = () => true) {
  return waitFor(`${count} span(s) ${name}`, () => {
    const found = spans().filter((span) => span.name === name && where(span));
    return found.length >= count && found;
  });
}

function traceparentOf(span) {
  const { traceId, spanId } = span.spanContext();
  return `00-${traceId}-${spanId}-01`;
}

// Runs fn(client) in a transaction of its own connection, committed if fn
// resolves: the business transaction.
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

// A Queryable that keeps the SQL it is given.
function recordingClient(client) {
  const texts = [];
  return {
    texts,
    query: (text, values) => {
      texts.push(text);
      return client.query(text, values);
    },
  };
}

async function storedContext(id) {
  const { rows } = await db.admin.query('SELECT trace_id, trace_context FROM pgq.job($1)', [id]);
  return rows[0];
}

test("a request's enqueue in its transaction: the worker's span is in its trace, a child of the send span", async (t) => {
  const orders = await newQueue(db);
  const receipts = await newQueue(db);
  const recorder = { texts: [] };
  // A request span around the business transaction, as an HTTP server's
  // instrumentation would make it.
  const [request, id] = await tracer().startActiveSpan('POST /orders', async (span) => {
    try {
      const jobId = await inTransaction(async (client) => {
        const { rows } = await client.query("INSERT INTO orders (item) VALUES ('tea') RETURNING id");
        const recording = recordingClient(client);
        recorder.texts = recording.texts;
        return orders.enqueue(recording, { order: rows[0].id });
      });
      return [span, jobId];
    } finally {
      span.end();
    }
  });
  const send = await spanOf(`send ${orders.name}`);
  assert.equal(send.kind, api.SpanKind.PRODUCER);
  assert.equal(send.spanContext().traceId, request.spanContext().traceId);
  assert.equal(send.parentSpanContext?.spanId, request.spanContext().spanId);
  assert.deepEqual(send.attributes, {
    'messaging.system': 'pgq',
    'messaging.destination.name': orders.name,
    'messaging.operation.type': 'send',
    'messaging.operation.name': 'send',
    'messaging.message.id': id,
  });
  assert.match(recorder.texts[0], /^SELECT pgq\.enqueue\(\$1, \$2, traceparent => \$3\) AS id$/);
  // The job keeps the send span's context (committed with the order).
  assert.deepEqual(await storedContext(id), {
    trace_id: request.spanContext().traceId,
    trace_context: traceparentOf(send),
  });

  // The handler runs in the job's span: what it enqueues joins the trace.
  let active = null;
  await startWorker(t, db, orders, {
    handler: async (job) => {
      active = api.trace.getSpanContext(api.context.active());
      await receipts.enqueue(db.admin, { order: job.payload.order });
    },
  });
  await startWorker(t, db, receipts, { handler: () => {} });
  const process = await spanOf(`process ${orders.name}`);
  assert.equal(process.kind, api.SpanKind.CONSUMER);
  assert.equal(process.spanContext().traceId, request.spanContext().traceId);
  assert.equal(process.parentSpanContext?.spanId, send.spanContext().spanId);
  assert.equal(process.parentSpanContext?.isRemote, true);
  assert.deepEqual(process.attributes, {
    'messaging.system': 'pgq',
    'messaging.destination.name': orders.name,
    'messaging.operation.type': 'process',
    'messaging.operation.name': 'process',
    'messaging.message.id': id,
    'pgq.attempt': 1,
    'pgq.outcome': 'completed',
  });
  assert.equal(process.status.code, api.SpanStatusCode.UNSET);
  assert.equal(active?.spanId, process.spanContext().spanId);

  const sendReceipt = await spanOf(`send ${receipts.name}`);
  assert.equal(sendReceipt.parentSpanContext?.spanId, process.spanContext().spanId);
  const processReceipt = await spanOf(`process ${receipts.name}`);
  assert.equal(processReceipt.spanContext().traceId, request.spanContext().traceId);
  assert.equal(processReceipt.parentSpanContext?.spanId, sendReceipt.spanContext().spanId);
});

test('a failed attempt and its retry: both spans in the trace, the retry with pgq.attempt 2', async (t) => {
  const queue = await newQueue(db, ", backoff_base => '10 milliseconds', backoff_max => '20 milliseconds'");
  const id = await tracer().startActiveSpan('request', async (span) => {
    try {
      return await queue.enqueue(db.admin, { n: 1 });
    } finally {
      span.end();
    }
  });
  const send = await spanOf(`send ${queue.name}`);
  await startWorker(t, db, queue, {
    handler: (job) => {
      if (job.attempt === 1) throw new Error('the printer is out of paper');
    },
  });
  const [first, second] = await spansOf(`process ${queue.name}`, 2);
  for (const span of [first, second]) {
    assert.equal(span.attributes['messaging.message.id'], id);
    assert.equal(span.spanContext().traceId, send.spanContext().traceId);
    assert.equal(span.parentSpanContext?.spanId, send.spanContext().spanId);
  }
  assert.equal(first.attributes['pgq.attempt'], 1);
  assert.equal(first.attributes['pgq.outcome'], 'failed');
  assert.equal(first.status.code, api.SpanStatusCode.ERROR);
  assert.equal(first.status.message, 'the printer is out of paper');
  assert.equal(first.events[0]?.name, 'exception');
  assert.equal(first.events[0].attributes['exception.message'], 'the printer is out of paper');
  assert.equal(second.attributes['pgq.attempt'], 2);
  assert.equal(second.attributes['pgq.outcome'], 'completed');
  assert.equal(second.status.code, api.SpanStatusCode.UNSET);
});

test("publish to two queues and a stream: every consumer's span is in the publisher's trace", async (t) => {
  const [first, second] = [await newQueue(db), await newQueue(db)];
  const stream = await newStream(db);
  const topic = new Topic('orders_placed');
  await db.admin.query('SELECT pgq.create_topic($1)', [topic.name]);
  await db.admin.query('SELECT pgq.subscribe($1, queue => $2)', [topic.name, first.name]);
  await db.admin.query('SELECT pgq.subscribe($1, queue => $2)', [topic.name, second.name]);
  await db.admin.query('SELECT pgq.subscribe($1, stream => $2)', [topic.name, stream.name]);
  await db.admin.query("SELECT pgq.register_consumer($1, 'c')", [stream.name]);
  const batches = [];
  await startWorker(t, db, first, { handler: () => {} });
  await startWorker(t, db, second, { handler: () => {} });
  await startConsumer(t, db, stream, { handler: (batch) => batches.push(batch) });

  const eventId = await tracer().startActiveSpan('checkout', async (span) => {
    try {
      return await inTransaction((client) => topic.publish(client, { order: 7 }, { groupKey: 'customer-1' }));
    } finally {
      span.end();
    }
  });
  const send = await spanOf(`send ${topic.name}`);
  assert.equal(send.kind, api.SpanKind.PRODUCER);
  assert.equal(send.attributes['messaging.destination.name'], topic.name);
  assert.equal(send.attributes['messaging.message.id'], eventId);
  const readers = [
    await spanOf(`process ${first.name}`),
    await spanOf(`process ${second.name}`),
    await spanOf(`process ${stream.name}`),
  ];
  for (const span of readers) {
    assert.equal(span.spanContext().traceId, send.spanContext().traceId, span.name);
    assert.equal(span.parentSpanContext?.spanId, send.spanContext().spanId, span.name);
    assert.equal(span.kind, api.SpanKind.CONSUMER);
  }
  const [, , batchSpan] = readers;
  assert.equal(batchSpan.attributes['messaging.batch.message_count'], 1);
  assert.equal(batchSpan.attributes['pgq.outcome'], 'finished');
  assert.equal(batches.length, 1);
  assert.equal(batches[0].events[0].traceparent, traceparentOf(send));
  assert.equal(batches[0].events[0].tracestate, null);
});

test("a batch of events of several traces: a new trace, linked to each event's context", async (t) => {
  const stream = await newStream(db);
  await db.admin.query("SELECT pgq.register_consumer($1, 'c')", [stream.name]);
  const appendIn = (name, fn) =>
    tracer().startActiveSpan(name, async (span) => {
      try {
        return await fn();
      } finally {
        span.end();
      }
    });
  await appendIn('one', () => stream.append(db.admin, { n: 1 }));
  await appendIn('two', () => stream.appendMany(db.admin, [{ n: 2 }, { n: 3 }]));
  await db.admin.query('SELECT pgq.append($1, $2)', [stream.name, { n: 'untraced' }]);
  const sends = await spansOf(`send ${stream.name}`, 2);
  assert.equal(sends[1].attributes['messaging.batch.message_count'], 2);
  const batches = [];
  await startConsumer(t, db, stream, { handler: (batch) => batches.push(batch) });
  const process = await spanOf(`process ${stream.name}`);
  assert.equal(batches[0].events.length, 4);
  assert.deepEqual(
    batches[0].events.map((event) => event.traceparent),
    [traceparentOf(sends[0]), traceparentOf(sends[1]), traceparentOf(sends[1]), null],
  );
  assert.equal(process.parentSpanContext, undefined);
  assert.ok(!sends.some((send) => send.spanContext().traceId === process.spanContext().traceId));
  assert.deepEqual(
    process.links.map((link) => link.context.spanId),
    sends.map((send) => send.spanContext().spanId),
  );
  assert.equal(process.attributes['messaging.batch.message_count'], 4);
});

test("consumerParent 'link' starts a new trace, linked to the job's context; `after` parents are links", async (t) => {
  const queue = await newQueue(db);
  const [parentId, childId] = await tracer().startActiveSpan('request', async (span) => {
    try {
      const parent = await queue.enqueue(db.admin, { step: 'render' });
      return [parent, await queue.enqueue(db.admin, { step: 'send' }, { after: [parent] })];
    } finally {
      span.end();
    }
  });
  const [sendParent, sendChild] = await spansOf(`send ${queue.name}`, 2);
  await startWorker(t, db, queue, { tracing: { consumerParent: 'link' }, handler: () => {} });
  const byId = (id) => (span) => span.attributes['messaging.message.id'] === id;
  const parentSpan = await spanOf(`process ${queue.name}`, byId(parentId));
  assert.equal(parentSpan.parentSpanContext, undefined);
  assert.notEqual(parentSpan.spanContext().traceId, sendParent.spanContext().traceId);
  assert.deepEqual(
    parentSpan.links.map((link) => [link.context.traceId, link.context.spanId]),
    [[sendParent.spanContext().traceId, sendParent.spanContext().spanId]],
  );
  // The child: its own context, then its parent job's (pgq.claim_traced's links).
  const childSpan = await spanOf(`process ${queue.name}`, byId(childId));
  assert.equal(childSpan.parentSpanContext, undefined);
  assert.deepEqual(
    childSpan.links.map((link) => link.context.spanId),
    [sendChild.spanContext().spanId, sendParent.spanContext().spanId],
  );
  assert.throws(() => new Worker({ queue: 'q', handler() {}, tracing: { consumerParent: 'child' } }), RangeError);
  assert.throws(() => new Worker({ queue: 'q', handler() {}, tracing: 'link' }), TypeError);
});

test('the tracestate goes with the context, W3C members only, and comes back to the worker', async (t) => {
  const queue = await newQueue(db);
  // An incoming request's context (a remote parent) whose tracestate holds a
  // member the server would refuse (an uppercase key): dropped, the rest sent.
  const traceState = api.createTraceState('congo=t61rcWkgMzE,rojo=00f067aa0ba902b7');
  const serialize = () => `${traceState.serialize()},Bad=1`;
  const incoming = api.trace.setSpanContext(api.ROOT_CONTEXT, {
    traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
    spanId: '00f067aa0ba902b7',
    traceFlags: api.TraceFlags.SAMPLED,
    isRemote: true,
    traceState: { ...traceState, get: (key) => traceState.get(key), serialize },
  });
  const id = await api.context.with(incoming, () => queue.enqueue(db.admin, { n: 1 }));
  const send = await spanOf(`send ${queue.name}`);
  assert.equal(send.spanContext().traceId, '4bf92f3577b34da6a3ce929d0e0e4736');
  assert.deepEqual(await storedContext(id), {
    trace_id: '4bf92f3577b34da6a3ce929d0e0e4736',
    trace_context: `${traceparentOf(send)};congo=t61rcWkgMzE,rojo=00f067aa0ba902b7`,
  });
  await startWorker(t, db, queue, { handler: () => {} });
  const process = await spanOf(`process ${queue.name}`);
  assert.equal(process.parentSpanContext?.traceState?.serialize(), 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7');
  assert.equal(process.spanContext().traceState?.get('rojo'), '00f067aa0ba902b7');
});

test('a producer that fails records the error on its span', async () => {
  const nope = new Stream('no_such_stream');
  await assert.rejects(nope.append(db.admin, {}), { code: '42704' });
  const send = await spanOf('send no_such_stream');
  assert.equal(send.status.code, api.SpanStatusCode.ERROR);
  assert.equal(send.events[0]?.name, 'exception');
});

test("a span the SDK's sampler drops still sends its context, unsampled (flags 00)", async (t) => {
  unregisterSdk();
  const dropping = new BasicTracerProvider({
    sampler: new AlwaysOffSampler(),
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  api.trace.setGlobalTracerProvider(dropping);
  t.after(() => {
    unregisterSdk();
    registerSdk();
  });
  const queue = await newQueue(db);
  const id = await queue.enqueue(db.admin, { n: 1 });
  const { trace_context: stored } = await storedContext(id);
  assert.match(stored, /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
  assert.deepEqual(spans(), []);
});

test("the API without an SDK: no context is sent or stored, no span, the readers' SQL of before", async (t) => {
  // No tracer provider; a context manager is left, so that a context
  // extracted from a request (a remote parent) is active: the API's
  // non-recording spans carry it on, and it is not the client's to send.
  api.trace.disable();
  t.after(() => {
    unregisterSdk();
    registerSdk();
  });
  const queue = await newQueue(db);
  const stream = await newStream(db);
  await db.admin.query("SELECT pgq.register_consumer($1, 'c')", [stream.name]);
  const recording = recordingClient(db.admin);
  const incoming = api.trace.setSpanContext(api.ROOT_CONTEXT, {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: 'b7ad6b7169203331',
    traceFlags: api.TraceFlags.SAMPLED,
    isRemote: true,
  });
  const id = await api.context.with(incoming, () =>
    tracer().startActiveSpan('request', async (span) => {
      try {
        await stream.append(recording, { n: 1 });
        return await queue.enqueue(recording, { n: 1 });
      } finally {
        span.end();
      }
    }),
  );
  assert.deepEqual(recording.texts, ['SELECT pgq.append($1, $2) AS id', 'SELECT pgq.enqueue($1, $2) AS id']);
  assert.deepEqual(await storedContext(id), { trace_id: null, trace_context: null });
  let ran = false;
  await startWorker(t, db, queue, {
    handler: () => {
      ran = true;
    },
  });
  const batches = [];
  await startConsumer(t, db, stream, { handler: (batch) => batches.push(batch) });
  await waitFor('the job to run', () => ran);
  await waitFor('the batch', () => batches.length === 1);
  assert.deepEqual(Object.keys(batches[0].events[0]), ['id', 'payload', 'appendedAt']);
  // The readers wait with pgq.claim and pgq.next_batch, not their traced forms.
  await waitFor('the plain claim and next_batch waiting', async () => {
    const { rows } = await db.admin.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE application_name IN ($1, $2) AND (query LIKE '%pgq.claim($1%' OR query LIKE '%pgq.next_batch($1%')`,
      [`worker_${queue.name}`, `consumer_${stream.name}_c`],
    );
    return rows[0].n === 2;
  });
  assert.deepEqual(spans(), []);
});

test('without the API package: the SQL of before, and the readers are not traced', async () => {
  // A process where the client cannot find @opentelemetry/api, as in an
  // application that does not install it, though an SDK (with an API of its
  // own) is registered and a span active: the client's SQL is recorded
  // without a server.
  const lib = path.join(__dirname, '..', 'lib');
  const script = `
    const Module = require('node:module');
    const resolve = Module._resolveFilename;
    Module._resolveFilename = function (request, parent, ...rest) {
      if (request === '@opentelemetry/api' && parent?.filename?.startsWith(${JSON.stringify(lib)})) {
        throw Object.assign(new Error('not installed'), { code: 'MODULE_NOT_FOUND' });
      }
      return resolve.call(this, request, parent, ...rest);
    };
    const api = require('@opentelemetry/api');
    const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
    const { BasicTracerProvider } = require('@opentelemetry/sdk-trace-base');
    api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    api.trace.setGlobalTracerProvider(new BasicTracerProvider());
    const { Queue, Stream, Topic } = require(${JSON.stringify(path.join(__dirname, '..'))});
    const tracing = require(${JSON.stringify(path.join(__dirname, '..', 'lib', 'tracing'))});
    const texts = [];
    const client = { query: async (text) => (texts.push(text), { rows: [{ id: '1' }] }) };
    api.trace.getTracer('t').startActiveSpan('request', async (span) => {
      await new Queue('q').enqueue(client, {});
      await new Queue('q').enqueueMany(client, [{}]);
      await new Topic('t').publish(client, {});
      await new Stream('s').append(client, {});
      await new Stream('s').appendMany(client, [{}]);
      span.end();
      console.log(JSON.stringify({ texts, enabled: tracing.enabled() }));
    });
  `;
  const { stdout } = await promisify(execFile)(process.execPath, ['-e', script], { cwd: path.join(__dirname, '..') });
  assert.deepEqual(JSON.parse(stdout), {
    texts: [
      'SELECT pgq.enqueue($1, $2) AS id',
      'SELECT pgq.enqueue_many($1, $2) AS id',
      'SELECT pgq.publish($1, $2) AS id',
      'SELECT pgq.append($1, $2) AS id',
      'SELECT e.id FROM pgq.append_many($1, $2) WITH ORDINALITY AS e(id, n) ORDER BY e.n',
    ],
    enabled: false,
  });
});
