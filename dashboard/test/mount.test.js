'use strict';

// Mounting the dashboard into an existing app: a fastify app (the plugin,
// under a prefix, beside the app's own cookie and form plugins), and an
// Express-style app (expressMiddleware), over a real socket.

const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const Fastify = require('fastify');
const { freshDatabase, Browser } = require('./helpers');
const { plugin, expressMiddleware } = require('..');

let db;

test.before(async () => {
  db = await freshDatabase('mount');
  await db.admin.query("SELECT pgq.create_queue('q')");
});

test.after(() => db?.close());

test('as a fastify plugin under a prefix, in an app with its own cookie and form plugins', async (t) => {
  const app = Fastify();
  await app.register(require('@fastify/cookie'), { secret: 'the app’s own secret, long enough to sign' });
  await app.register(require('@fastify/formbody'));
  app.get('/', async () => 'the app');
  app.post('/echo', async (request) => request.body);
  await app.register(plugin, { prefix: '/ops/pgq', database: db.config, password: 'pw', loginFailureDelayMs: 0 });
  await app.ready();
  t.after(() => app.close());

  const browser = new Browser(app);
  assert.equal((await browser.get('/')).body, 'the app');
  assert.deepEqual((await browser.post('/echo', { a: '1' })).json(), { a: '1' }, 'the app’s routes need no CSRF token');
  let res = await browser.get('/ops/pgq/queues/q');
  assert.equal(res.statusCode, 303);
  assert.equal(res.headers.location, '/ops/pgq/login?next=%2Fops%2Fpgq%2Fqueues%2Fq');
  const token = await browser.csrf('/ops/pgq/login');
  res = await browser.post('/ops/pgq/login', { _csrf: token, password: 'pw', next: '/ops/pgq/queues/q' });
  assert.equal(res.statusCode, 303);
  assert.equal(res.headers.location, '/ops/pgq/queues/q');
  assert.equal(res.cookies.find((c) => c.name === 'pgq_dashboard_session').path, '/ops/pgq');
  // Logged in, the login page sends the browser on: only under the prefix.
  const offsite = ['/ops/pgq/\t/evil.example', '/ops/pgq/../../evil', '/ops/pgq/%2F/evil.example', '/evil', '//evil'];
  for (const next of offsite) {
    res = await browser.get(`/ops/pgq/login?next=${encodeURIComponent(next)}`);
    assert.equal(res.headers.location, '/ops/pgq/', next);
  }
  res = await browser.get('/ops/pgq/');
  assert.equal(res.statusCode, 200);
  assert.match(res.body, /<a href="\/ops\/pgq\/queues\/q">q<\/a>/);
  assert.match(res.body, /<script src="\/ops\/pgq\/static\/app.js"><\/script>/);
  assert.match(res.body, /"api":"\/ops\/pgq\/api\/overview"/);
  const queueToken = await browser.csrf('/ops/pgq/queues/q');
  res = await browser.post('/ops/pgq/queues/q/pause', { _csrf: queueToken });
  assert.equal(res.headers.location, '/ops/pgq/queues/q?notice=paused');
  await db.admin.query("SELECT pgq.resume('q')");
  assert.equal((await browser.get('/ops/pgq/static/uPlot.iife.min.js')).statusCode, 200);
  assert.equal((await browser.get('/ops/pgq/nope')).statusCode, 404);
  assert.equal(res.headers['x-frame-options'], 'DENY');
});

test('in an Express-style app with expressMiddleware', async (t) => {
  const handler = expressMiddleware({
    mountPath: '/pgq',
    database: db.config,
    proxyHeader: 'X-Forwarded-User',
    sample: false,
  });
  t.after(() => handler.close());
  // What Express does for app.use('/pgq', handler): strip the mount path from
  // req.url and keep the original in req.originalUrl.
  const server = http.createServer((req, res) => {
    if (req.url === '/pgq' || req.url.startsWith('/pgq/')) {
      req.originalUrl = req.url;
      req.url = req.url.slice('/pgq'.length) || '/';
      handler(req, res, (err) => {
        res.statusCode = 500;
        res.end(String(err));
      });
    } else {
      res.end('the app');
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  const base = `http://127.0.0.1:${server.address().port}`;
  const headers = { 'x-forwarded-user': 'alice' };

  assert.equal(await (await fetch(`${base}/`)).text(), 'the app');
  assert.equal((await fetch(`${base}/pgq/`)).status, 401);
  let res = await fetch(`${base}/pgq/`, { headers });
  assert.equal(res.status, 200);
  const body = await res.text();
  assert.match(body, /<a href="\/pgq\/queues\/q">q<\/a>/);
  res = await fetch(`${base}/pgq/queues/q`, { headers });
  assert.equal(res.status, 200);
  const cookie = res.headers
    .getSetCookie()
    .map((c) => c.split(';')[0])
    .join('; ');
  const token = /name="_csrf" value="([^"]+)"/.exec(await res.text())[1];
  res = await fetch(`${base}/pgq/queues/q/pause`, {
    method: 'POST',
    headers: { ...headers, cookie, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ _csrf: token }),
    redirect: 'manual',
  });
  assert.equal(res.status, 303);
  assert.equal(res.headers.get('location'), '/pgq/queues/q?notice=paused');
  await db.admin.query("SELECT pgq.resume('q')");
  assert.throws(() => expressMiddleware({ database: db.config, insecureNoAuth: true }), /mountPath/);
});
