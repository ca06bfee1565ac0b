'use strict';

// The client's spans leave the process as an application exports them: the
// SDK's OTLPTraceExporter (OTLP/HTTP, JSON) posts them to a receiver this
// test runs on 127.0.0.1, and the producer's and the worker's spans arrive
// there, in one trace, with the messaging.* attributes.
const assert = require('node:assert/strict');
const http = require('node:http');
const { once } = require('node:events');
const { after, before, test } = require('node:test');
const api = require('@opentelemetry/api');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-http');
const { BasicTracerProvider, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { freshDatabase, newQueue, startWorker, waitFor } = require('./helpers');

let db;
let receiver;
let provider;
const received = []; // the spans posted, flattened: {name, kind, traceId, spanId, parentSpanId, attributes}

// OTLP/JSON attribute values: {stringValue}, {intValue} (a string or number), {boolValue}, ...
function attributesOf(list = []) {
  return Object.fromEntries(
    list.map(({ key, value }) => [key, 'intValue' in value ? Number(value.intValue) : Object.values(value)[0]]),
  );
}

before(async () => {
  db = await freshDatabase('otlp');
  receiver = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces') {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        for (const { scopeSpans = [] } of body.resourceSpans ?? []) {
          for (const { spans = [] } of scopeSpans) {
            for (const span of spans) received.push({ ...span, attributes: attributesOf(span.attributes) });
          }
        }
      }
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{}');
    });
  });
  receiver.listen(0, '127.0.0.1');
  await once(receiver, 'listening');
  const { port } = receiver.address();
  const exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${port}/v1/traces` });
  provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  api.trace.setGlobalTracerProvider(provider);
});

after(async () => {
  await provider?.shutdown();
  receiver?.close();
  await db?.close();
});

test("the producer's and the worker's spans reach an OTLP/HTTP receiver, with their messaging attributes", async (t) => {
  const queue = await newQueue(db);
  const id = await api.trace.getTracer('pgq-node-tests').startActiveSpan('request', async (span) => {
    try {
      return await queue.enqueue(db.admin, { n: 1 });
    } finally {
      span.end();
    }
  });
  await startWorker(t, db, queue, { handler: () => ({ ok: true }) });
  // Each span is posted as it ends; forceFlush waits for the posts under way.
  const find = (name) => received.find((span) => span.name === name);
  await waitFor(
    'the send and process spans at the receiver',
    async () => {
      await provider.forceFlush();
      return find(`send ${queue.name}`) && find(`process ${queue.name}`);
    },
    10_000,
  );
  const send = find(`send ${queue.name}`);
  const process = find(`process ${queue.name}`);
  const request = find('request');
  // OTLP's SpanKind: 4 PRODUCER, 5 CONSUMER.
  assert.equal(send.kind, 4);
  assert.equal(process.kind, 5);
  assert.equal(send.traceId, request.traceId);
  assert.equal(process.traceId, request.traceId);
  assert.equal(process.parentSpanId, send.spanId);
  assert.deepEqual(send.attributes, {
    'messaging.system': 'pgq',
    'messaging.destination.name': queue.name,
    'messaging.operation.type': 'send',
    'messaging.operation.name': 'send',
    'messaging.message.id': id,
  });
  assert.deepEqual(process.attributes, {
    'messaging.system': 'pgq',
    'messaging.destination.name': queue.name,
    'messaging.operation.type': 'process',
    'messaging.operation.name': 'process',
    'messaging.message.id': id,
    'pgq.attempt': 1,
    'pgq.outcome': 'completed',
  });
});
