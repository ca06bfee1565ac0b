'use strict';

// Who may open the dashboard: a password (login form, session cookie), a
// trusted reverse proxy header, or nobody checked — only when asked for, and
// only on a loopback address. And the command line that starts it.

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { freshDatabase, startDashboard, Browser, serverConfig, OFFSITE_NEXTS } = require('./helpers');
const { createServer } = require('..');
const { parseCommandLine } = require('../lib/cli');
const { constantTimeEqual } = require('../lib/auth');

const PASSWORD = 'pA55 wörd';

let db;

test.before(async () => {
  db = await freshDatabase('auth');
  await db.admin.query("SELECT pgq.create_queue('q')");
});

test.after(() => db?.close());

test('with a password every page needs a login; a wrong password gets no session', async (t) => {
  const app = await startDashboard(t, db, { password: PASSWORD });
  const browser = new Browser(app);

  let res = await browser.get('/queues/q?state=ready');
  assert.equal(res.statusCode, 303);
  assert.equal(res.headers.location, '/login?next=%2Fqueues%2Fq%3Fstate%3Dready');
  for (const url of ['/', '/workers', '/jobs/1', '/schedules', '/coordination']) {
    assert.equal((await browser.get(url)).statusCode, 303, url);
  }
  res = await browser.get('/api/overview');
  assert.equal(res.statusCode, 401);
  assert.deepEqual(Object.keys(res.json()).sort(), ['code', 'error']);
  assert.equal((await browser.post('/queues/q/pause', {})).statusCode, 401);
  assert.equal((await browser.get('/static/style.css')).statusCode, 200, 'static files need no login');

  const login = await browser.get('/login?next=%2Fqueues%2Fq');
  assert.equal(login.statusCode, 200);
  assert.match(login.body, /<input type="password" name="password"/);
  assert.doesNotMatch(login.body, /<nav>/, 'no navigation before login');
  const token = /name="_csrf" value="([^"]+)"/.exec(login.body)[1];

  // The login form itself needs its CSRF token.
  assert.equal((await browser.post('/login', { password: PASSWORD })).statusCode, 403);
  res = await browser.post('/login', { _csrf: token, password: 'wrong', next: '/queues/q' });
  assert.equal(res.statusCode, 401);
  assert.match(res.body, /Wrong password/);
  assert.equal(browser.cookies.has('pgq_dashboard_session'), false);
  assert.equal((await browser.post('/login', { _csrf: token, password: '' })).statusCode, 401);
  assert.equal((await browser.post('/login', { _csrf: token })).statusCode, 401);
  assert.equal((await browser.get('/')).statusCode, 303);

  res = await browser.post('/login', { _csrf: token, password: PASSWORD, next: '/queues/q' });
  assert.equal(res.statusCode, 303);
  assert.equal(res.headers.location, '/queues/q');
  const cookie = res.cookies.find((c) => c.name === 'pgq_dashboard_session');
  assert.ok(cookie, 'a session cookie');
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Strict');
  assert.match(cookie.value, /^[\w-]{43}\.[\w+/]+$/, 'a signed session id');
  assert.equal((await browser.get('/queues/q')).statusCode, 200);
  assert.equal((await browser.get('/api/overview')).statusCode, 200);

  // A tampered cookie is no session.
  const forged = new Browser(app);
  // (one character of the id changed: to 'A', or to 'B' where it was 'A')
  const changed = cookie.value[10] === 'A' ? 'B' : 'A';
  forged.cookies.set('pgq_dashboard_session', `${cookie.value.slice(0, 10)}${changed}${cookie.value.slice(11)}`);
  assert.equal((await forged.get('/')).statusCode, 303);
  const unsigned = new Browser(app);
  unsigned.cookies.set('pgq_dashboard_session', cookie.value.split('.')[0]);
  assert.equal((await unsigned.get('/')).statusCode, 303);

  // Logging out ends the session on the server: the old cookie is no good.
  const page = await browser.get('/');
  const logoutToken = /action="\/logout" class="inline"><input type="hidden" name="_csrf" value="([^"]+)"/.exec(
    page.body,
  )[1];
  res = await browser.post('/logout', { _csrf: logoutToken });
  assert.equal(res.statusCode, 303);
  assert.equal(res.headers.location, '/login');
  const replay = new Browser(app);
  replay.cookies.set('pgq_dashboard_session', cookie.value);
  assert.equal((await replay.get('/')).statusCode, 303);
});

test('the login redirects only to the dashboard’s own pages', async (t) => {
  const app = await startDashboard(t, db, { password: PASSWORD });
  for (const next of OFFSITE_NEXTS) {
    const browser = new Browser(app);
    const token = await browser.csrf('/login');
    const res = await browser.post('/login', { _csrf: token, password: PASSWORD, next });
    assert.equal(res.statusCode, 303, JSON.stringify(next));
    assert.equal(res.headers.location, '/', JSON.stringify(next));
    // Logged in, the login page sends the browser on at once: the same check.
    const again = await browser.get(`/login?next=${encodeURIComponent(next)}`);
    assert.equal(again.statusCode, 303, JSON.stringify(next));
    assert.equal(again.headers.location, '/', JSON.stringify(next));
  }
  // A page's own odd query survives the round trip through the login.
  {
    const b = new Browser(app);
    let res = await b.get("/queues/q?state=ready&x='a%20b'");
    assert.equal(res.headers.location, '/login?next=%2Fqueues%2Fq%3Fstate%3Dready%26x%3D%2527a%2520b%2527');
    const token = await b.csrf(res.headers.location);
    res = await b.post('/login', { _csrf: token, password: PASSWORD, next: "/queues/q?state=ready&x='a%20b'" });
    assert.equal(res.headers.location, '/queues/q?state=ready&x=%27a%20b%27');
  }
  // The form carries `next` through a wrong password: also checked.
  const browser = new Browser(app);
  const login = await browser.get(`/login?next=${encodeURIComponent('/\t/evil.example')}`);
  assert.match(login.body, /<input type="hidden" name="next" value="\/">/);
  // A page of its own is kept, with its query, as the URL parser writes it.
  for (const [next, location] of [
    ['/queues/q', '/queues/q'],
    ['/queues/q?state=ready&limit=5', '/queues/q?state=ready&limit=5'],
    ['/jobs/1?notice=cancelled', '/jobs/1?notice=cancelled'],
    ['/queues/q/../../workers', '/workers'],
  ]) {
    const b = new Browser(app);
    const token = await b.csrf('/login');
    const res = await b.post('/login', { _csrf: token, password: PASSWORD, next });
    assert.equal(res.headers.location, location, next);
  }
});

test('the password is compared in constant time, whatever its length', () => {
  assert.equal(constantTimeEqual('a', 'a'), true);
  assert.equal(constantTimeEqual('a', 'ab'), false);
  assert.equal(constantTimeEqual('', 'x'.repeat(10000)), false);
});

test('behind a proxy: the header is trusted, and required', async (t) => {
  const app = await startDashboard(t, db, { proxyHeader: 'X-Forwarded-User' });
  let res = await new Browser(app).get('/');
  assert.equal(res.statusCode, 401);
  assert.match(res.body, /no X-Forwarded-User header/);
  assert.equal((await new Browser(app, { 'x-forwarded-user': '   ' }).get('/')).statusCode, 401);
  assert.equal((await new Browser(app).get('/api/overview')).statusCode, 401);
  assert.equal((await new Browser(app).post('/queues/q/pause', {})).statusCode, 401);

  const alice = new Browser(app, { 'X-Forwarded-User': 'alice@example.com' });
  res = await alice.get('/');
  assert.equal(res.statusCode, 200);
  assert.match(res.body, /<span>alice@example\.com<\/span>/);
  assert.doesNotMatch(res.body, /action="\/logout"/);
  assert.equal((await alice.get('/login')).statusCode, 303, 'no login form in proxy mode');
  // Actions still need the CSRF token.
  assert.equal((await alice.post('/queues/q/pause', {})).statusCode, 403);
  const token = await alice.csrf('/queues/q');
  assert.equal((await alice.post('/queues/q/pause', { _csrf: token })).statusCode, 303);
  await db.admin.query("SELECT pgq.resume('q')");
});

test('without a password, a proxy header or --insecure-no-auth the dashboard refuses to start', async () => {
  await assert.rejects(createServer({ database: db.config, sample: false }), /no authentication configured/);
  await assert.rejects(
    createServer({ database: db.config, sample: false, password: 'x', proxyHeader: 'X-User' }),
    /choose one/,
  );
  await assert.rejects(
    createServer({ database: db.config, sample: false, proxyHeader: 'X User' }),
    /not a header name/,
  );
});

test('the command line: flags, environment, and the refusals', () => {
  const env = { PGQ_DASHBOARD_PASSWORD: 'pw' };
  const p = parseCommandLine(['--database', 'postgres://x@h/db', '--listen', '0.0.0.0:9000', '--read-only'], env);
  assert.equal(p.host, '0.0.0.0');
  assert.equal(p.port, 9000);
  assert.equal(p.options.password, 'pw');
  assert.equal(p.options.readOnly, true);
  assert.equal(p.options.database, 'postgres://x@h/db');
  const proxy = parseCommandLine(['--trust-proxy-header', 'X-Forwarded-User', '--prefix', '/pgq/'], {});
  assert.equal(proxy.options.proxyHeader, 'X-Forwarded-User');
  assert.equal(proxy.options.prefix, '/pgq');
  assert.equal(parseCommandLine(['--listen', '[::1]:8080', '--insecure-no-auth'], {}).host, '::1');
  assert.throws(() => parseCommandLine([], {}), /no authentication/);
  assert.throws(() => parseCommandLine(['--insecure-no-auth', '--listen', '0.0.0.0:8080'], {}), /loopback/);
  assert.throws(() => parseCommandLine(['--trust-proxy-header', 'X-U'], env), /choose one/);
  assert.throws(() => parseCommandLine(['--listen', 'nope', '--insecure-no-auth'], {}), /HOST:PORT/);
  assert.throws(() => parseCommandLine(['--bogus'], env), /Unknown option/);
  assert.match(parseCommandLine(['--help'], {}).help, /--trust-proxy-header/);
});

test('npx pgq-cpp-dashboard: refuses without auth, serves with --insecure-no-auth on loopback', async (t) => {
  const bin = path.join(__dirname, '..', 'bin', 'pgq-cpp-dashboard.js');
  const run = (args, env = {}) =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, [bin, ...args], { env: { PATH: process.env.PATH, ...env } });
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (out += d));
      child.on('exit', (code) => resolve({ code, out }));
    });
  let r = await run(['--listen', '127.0.0.1:0']);
  assert.equal(r.code, 2);
  assert.match(r.out, /no authentication: set PGQ_DASHBOARD_PASSWORD/);
  r = await run(['--listen', '0.0.0.0:0', '--insecure-no-auth']);
  assert.equal(r.code, 2);
  assert.match(r.out, /loopback/);

  // It starts, and serves the overview from the database given as a URL.
  const server = serverConfig();
  const env = {};
  let url;
  if (server.connectionString) {
    const u = new URL(server.connectionString);
    u.pathname = `/${db.name}`;
    url = u.href;
  } else {
    url = `postgres://${encodeURIComponent(server.user || 'postgres')}@${encodeURIComponent(server.host || 'localhost')}:${server.port || 5432}/${db.name}`;
    if (server.password) env.PGPASSWORD = server.password;
  }
  const child = spawn(process.execPath, [bin, '--database', url, '--listen', '127.0.0.1:0', '--insecure-no-auth'], {
    env: { PATH: process.env.PATH, ...env },
  });
  t.after(() => child.kill('SIGKILL'));
  const address = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.stderr.on('data', (d) => (out += d));
    child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
  });
  const res = await fetch(address);
  assert.equal(res.status, 200);
  const body = await res.text();
  assert.match(body, /<tr data-queue="q">/);
  assert.match(body, /no login/);
  const exited = new Promise((resolve) => child.on('exit', resolve));
  child.kill('SIGTERM');
  assert.equal(await exited, 0);
});
