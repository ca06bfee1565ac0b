'use strict';

// Shared by the tests: the server to test against, a fresh database per test
// file (node --test may run files at once), and waiting for observable state.
const { format } = require('node:util');
const pg = require('pg');
const { Queue, Stream, StreamConsumer, Worker } = require('..');

// The server, as node-postgres settings: PGQ_TEST_URL (postgres://...) or
// PGQ_TEST_DSN, a libpq conninfo such as "host=/tmp/x port=5432 user=postgres
// dbname=db". A superuser: the tests create databases and roles.
function serverConfig() {
  if (process.env.PGQ_TEST_URL) return { connectionString: process.env.PGQ_TEST_URL };
  if (process.env.PGQ_TEST_DSN) return parseConninfo(process.env.PGQ_TEST_DSN);
  throw new Error('set PGQ_TEST_DSN (libpq conninfo) or PGQ_TEST_URL to a superuser connection');
}

const CONNINFO_KEYS = { host: 'host', port: 'port', user: 'user', password: 'password', dbname: 'database' };

// key=value pairs; a value may be 'single quoted' with \' and \\ inside.
function parseConninfo(dsn) {
  const config = {};
  const pair = /\s*(\w+)\s*=\s*(?:'((?:\\.|[^'\\])*)'|([^\s']*))\s*/y;
  while (pair.lastIndex < dsn.length) {
    const match = pair.exec(dsn);
    if (!match) throw new Error(`cannot parse the conninfo ${JSON.stringify(dsn)}`);
    const [, key, quoted, bare] = match;
    if (!CONNINFO_KEYS[key]) throw new Error(`conninfo key ${key} is not supported here`);
    config[CONNINFO_KEYS[key]] = quoted === undefined ? bare : quoted.replace(/\\(.)/g, '$1');
  }
  return config;
}

/** Runs fn(client) on a new superuser connection to the server's own database. */
function withServer(fn) {
  return withClient(serverConfig(), fn);
}

async function withClient(config, fn) {
  const client = new pg.Client(config);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * A new database `pgq_node_<name>` with pgq_cpp installed. Resolves to
 * {config, admin, close}: its settings (as the superuser), a superuser client
 * connected to it, and the function that drops it.
 */
async function freshDatabase(name) {
  const server = serverConfig();
  const database = `pgq_node_${name}`;
  await withServer(async (client) => {
    await client.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await client.query(`CREATE DATABASE ${database}`);
  });
  const config = server.connectionString
    ? { connectionString: withDatabase(server.connectionString, database) }
    : { ...server, database };
  const admin = new pg.Client(config);
  const close = async () => {
    await admin.end();
    await withServer((client) => client.query(`DROP DATABASE ${database} WITH (FORCE)`));
  };
  try {
    await admin.connect();
    await admin.query('CREATE EXTENSION pgq_cpp');
  } catch (err) {
    await close(); // an open connection would keep the test process alive
    throw err;
  }
  return { config, admin, close };
}

function withDatabase(url, database) {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.href;
}

/** Resolves to check()'s first truthy value, polling; rejects after the deadline. */
async function waitFor(what, check, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A logger that keeps what it is told (tests assert on it and keep the output clean). */
function recordingLogger() {
  const lines = [];
  const keep = (...args) => lines.push(format(...args));
  return { lines, warn: keep, error: keep };
}

/**
 * A promise with its resolve function, to hold a handler until the test lets
 * it go. Opened when test `t` ends, before the workers started after it stop
 * (after-hooks run in order), so that a failed test does not hang.
 */
function gate(t) {
  let open;
  const promise = new Promise((resolve) => {
    open = resolve;
  });
  t.after(() => open());
  return { promise, open };
}

let queueCount = 0;

// A new queue in `db` (a freshDatabase); `settings` are more
// pgq.create_queue arguments (", lease => '3 seconds'").
async function newQueue(db, settings = '') {
  const queue = new Queue(`q${++queueCount}`);
  await db.admin.query(`SELECT pgq.create_queue($1${settings})`, [queue.name]);
  return queue;
}

// A started worker of `queue` (or of an array of queues), stopped when test
// `t` ends, logging into a recordingLogger. Its connections are named after
// the queue (or the queues, joined by _), to find them in pg_stat_activity.
async function startWorker(t, db, queue, options) {
  const logger = recordingLogger();
  const names = [].concat(queue).map((q) => (typeof q === 'string' ? q : q.name));
  const application_name = `worker_${names.join('_')}`;
  const worker = new Worker({ ...db.config, application_name, queue, logger, ...options });
  await worker.start();
  t.after(() => worker.stop());
  return { worker, logger };
}

let streamCount = 0;

// A new stream in `db` (a freshDatabase).
async function newStream(db) {
  const stream = new Stream(`s${++streamCount}`);
  await db.admin.query('SELECT pgq.create_stream($1)', [stream.name]);
  return stream;
}

// A started consumer (options.consumer, default 'c') of `stream`, stopped when
// test `t` ends, logging into a recordingLogger. Its connections are named
// consumer_<stream>_<consumer>, to find them in pg_stat_activity.
async function startConsumer(t, db, stream, options) {
  const logger = recordingLogger();
  const consumer = options.consumer ?? 'c';
  const application_name = `consumer_${stream.name}_${consumer}`;
  const streamConsumer = new StreamConsumer({ ...db.config, application_name, stream, consumer, logger, ...options });
  await streamConsumer.start();
  t.after(() => streamConsumer.stop());
  return { consumer: streamConsumer, logger };
}

module.exports = {
  withServer,
  freshDatabase,
  waitFor,
  recordingLogger,
  gate,
  newQueue,
  startWorker,
  newStream,
  startConsumer,
};
