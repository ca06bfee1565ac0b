'use strict';

// The "database unavailable" page: the dashboard pointed at each kind of bad
// database answers a 503 page saying which kind and what to check, never a
// stack trace or the DSN's password (before 3.0 a socket path that did not
// exist gave a generic 500, an unknown database or a refused role too).
//
// Real servers where one can be made to fail that way (no socket, nothing
// listening, an unknown role, a database that does not exist); a small fake
// server speaking the first message of PostgreSQL's protocol for the states
// a test cannot put a real cluster in (starting up, shutting down, out of
// connection slots) and one that never answers (the connect timeout).

const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const { createServer } = require('..');
const { serverConfig } = require('./helpers');
const { describe: describeError } = require('../lib/errors');

/** A TCP server on 127.0.0.1 that answers every startup with `answer(socket)`. */
async function fakeServer(t, answer) {
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('data', () => answer(socket));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return server.address().port;
}

/** An ErrorResponse message of the protocol, FATAL with the SQLSTATE and text. */
function fatal(code, message) {
  const fields = Buffer.from(`SFATAL\0VFATAL\0C${code}\0M${message}\0\0`, 'utf8');
  const head = Buffer.alloc(5);
  head.write('E', 0);
  head.writeInt32BE(fields.length + 4, 1);
  return Buffer.concat([head, fields]);
}

/** A port nothing listens on (opened, then closed). */
async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function dashboardOn(t, database) {
  const app = await createServer({ database, sample: false, insecureNoAuth: true });
  t.after(() => app.close());
  return app;
}

const PASSWORD = 'sekrit-in-the-dsn';
const URLS = ['/', '/queues/work', '/jobs/1', '/streams', '/search?q=1', '/schedules', '/workers', '/coordination'];

async function expectUnavailable(t, database, kind, { code = null, text = null } = {}) {
  const app = await dashboardOn(t, database);
  for (const url of URLS) {
    const res = await app.inject({ method: 'GET', url });
    assert.equal(res.statusCode, 503, `${url}: ${res.body.slice(0, 400)}`);
    assert.equal(res.headers['retry-after'], '10');
    assert.match(res.headers['content-type'], /^text\/html/);
    assert.match(res.body, /Database unavailable/);
    assert.match(res.body, new RegExp(`data-unavailable="${kind}"`));
    assert.match(res.body, /What to check:/);
    if (code) assert.match(res.body, new RegExp(`SQLSTATE ${code}`));
    if (text) assert.match(res.body, text);
    assert.doesNotMatch(res.body, /    at |Error:|node_modules/); // no stack trace
    assert.doesNotMatch(res.body, new RegExp(PASSWORD));
  }
  const api = await app.inject({ method: 'GET', url: '/api/overview' });
  assert.equal(api.statusCode, 503);
  assert.equal(api.json().unavailable, kind);
}

test('a socket directory that does not exist: socket_missing, and where it looked', async (t) => {
  await expectUnavailable(
    t,
    { host: '/nonexistent/pgq-dashboard-test', port: 5999, user: 'x', password: PASSWORD, database: 'x' },
    'socket_missing',
    { text: /Tried: \/nonexistent\/pgq-dashboard-test\/\.s\.PGSQL\.5999/ },
  );
});

test('a port nothing listens on: refused', async (t) => {
  const port = await freePort();
  await expectUnavailable(
    t,
    { host: '127.0.0.1', port, user: 'x', password: PASSWORD, database: 'x' },
    'refused',
    { text: new RegExp(`Tried: 127\\.0\\.0\\.1 port ${port}`) },
  );
});

test('a role that does not exist: auth, with the server’s words', async (t) => {
  const server = serverConfig();
  const config = server.connectionString
    ? { connectionString: server.connectionString, user: 'pgq_dash_no_such_role', password: PASSWORD }
    : { ...server, user: 'pgq_dash_no_such_role', password: PASSWORD };
  await expectUnavailable(t, config, 'auth', { code: '28000', text: /pgq_dash_no_such_role/ });
});

test('a database that does not exist: no_database', async (t) => {
  const server = serverConfig();
  const config = server.connectionString
    ? { connectionString: server.connectionString, database: 'pgq_dash_no_such_db' }
    : { ...server, database: 'pgq_dash_no_such_db' };
  await expectUnavailable(t, config, 'no_database', { code: '3D000', text: /pgq_dash_no_such_db/ });
});

test('a password refused (28P01): auth', async (t) => {
  const port = await fakeServer(t, (s) =>
    s.end(fatal('28P01', 'password authentication failed for user "dash"')),
  );
  await expectUnavailable(t, { host: '127.0.0.1', port, user: 'dash', password: PASSWORD, database: 'x' }, 'auth', {
    code: '28P01',
  });
});

test('a server starting up or shutting down (57P03): not_ready', async (t) => {
  const port = await fakeServer(t, (s) => s.end(fatal('57P03', 'the database system is shutting down')));
  await expectUnavailable(t, { host: '127.0.0.1', port, user: 'x', password: PASSWORD, database: 'x' }, 'not_ready', {
    code: '57P03',
    text: /shutting down/,
  });
});

test('a server out of connection slots (53300): too_many', async (t) => {
  const port = await fakeServer(t, (s) => s.end(fatal('53300', 'sorry, too many clients already')));
  await expectUnavailable(t, { host: '127.0.0.1', port, user: 'x', password: PASSWORD, database: 'x' }, 'too_many', {
    code: '53300',
  });
});

test('a server that never answers: timeout', async (t) => {
  const port = await fakeServer(t, () => {}); // reads the startup message, says nothing
  await expectUnavailable(
    t,
    { host: '127.0.0.1', port, user: 'x', password: PASSWORD, database: 'x', connectionTimeoutMillis: 200 },
    'timeout',
  );
});

test('a server that hangs up: lost', async (t) => {
  const port = await fakeServer(t, (s) => s.destroy());
  await expectUnavailable(t, { host: '127.0.0.1', port, user: 'x', password: PASSWORD, database: 'x' }, 'lost');
});

test('a server without TLS when the DSN asks for it: tls', async (t) => {
  const port = await fakeServer(t, (s) => s.write('N')); // the answer to an SSLRequest: no TLS here
  await expectUnavailable(
    t,
    { host: '127.0.0.1', port, user: 'x', password: PASSWORD, database: 'x', ssl: { rejectUnauthorized: true } },
    'tls',
  );
});

test('a certificate refused, a socket the OS user may not open: tls, socket_denied', () => {
  // Errors as Node raises them (a test running as root cannot be refused a socket).
  const cert = Object.assign(new Error('self-signed certificate'), { code: 'DEPTH_ZERO_SELF_SIGNED_CERT' });
  assert.equal(describeError(cert).kind, 'tls');
  assert.equal(describeError(cert).status, 503);
  const name = Object.assign(new Error('Hostname/IP does not match'), { code: 'ERR_TLS_CERT_ALTNAME_INVALID' });
  assert.equal(describeError(name).kind, 'tls');
  const denied = Object.assign(new Error('connect EACCES /run/pg/.s.PGSQL.5432'), {
    code: 'EACCES',
    syscall: 'connect',
    address: '/run/pg/.s.PGSQL.5432',
  });
  const e = describeError(denied);
  assert.equal(e.kind, 'socket_denied');
  assert.equal(e.detail, 'Tried: /run/pg/.s.PGSQL.5432.');
  // a file of the dashboard's own missing is no socket; an error of its own stays internal, without its text
  const file = Object.assign(new Error("ENOENT: no such file, open '/x'"), { code: 'ENOENT', syscall: 'open' });
  assert.equal(describeError(file).status, 500);
  assert.deepEqual(
    [describeError(new Error('bug at line 3')).status, describeError(new Error('bug at line 3')).message],
    [500, 'The dashboard failed; the details are in its log.'],
  );
});
