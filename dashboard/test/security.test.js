'use strict';

// CSRF tokens on every state-changing POST, read-only mode, the security
// headers, and request values checked before they reach a statement.

const test = require('node:test');
const assert = require('node:assert/strict');
const { freshDatabase, startDashboard, Browser, csrfToken } = require('./helpers');

let db;
let deadId;

test.before(async () => {
  db = await freshDatabase('security');
  await db.admin.query("SELECT pgq.create_queue('q', max_attempts => 1)");
  deadId = (await db.admin.query("SELECT pgq.enqueue('q', '{}') AS id")).rows[0].id;
  const c = (await db.admin.query("SELECT id, attempt FROM pgq.claim('q')")).rows[0];
  await db.admin.query("SELECT pgq.fail($1, $2, 'x')", [c.id, c.attempt]);
});

test.after(() => db?.close());

const paused = async () =>
  (await db.admin.query("SELECT paused FROM pgq.queue_stats WHERE queue = 'q'")).rows[0].paused;
const state = async (id) => (await db.admin.query('SELECT state FROM pgq.job($1)', [id])).rows[0].state;

test('a POST without a CSRF token, with a wrong one, or without the cookie is refused (403)', async (t) => {
  const app = await startDashboard(t, db);
  const browser = new Browser(app);
  const token = await browser.csrf('/queues/q');

  const missing = await browser.post('/queues/q/pause', {});
  assert.equal(missing.statusCode, 403);
  assert.match(missing.body, /missing or invalid CSRF token/);
  assert.doesNotMatch(missing.body, /\n\s+at /);

  const wrong = await browser.post('/queues/q/pause', { _csrf: `${token.slice(0, -2)}xx` });
  assert.equal(wrong.statusCode, 403);

  // A token from a page is no good without the cookie its browser got with it.
  const other = new Browser(app);
  const stolen = await other.post('/queues/q/pause', { _csrf: token });
  assert.equal(stolen.statusCode, 403);
  // Nor with another browser's cookie.
  await other.get('/queues/q');
  assert.equal((await other.post('/queues/q/pause', { _csrf: token })).statusCode, 403);

  for (const url of [
    `/jobs/${deadId}/retry`,
    `/jobs/${deadId}/cancel`,
    '/queues/q/retry-dead',
    '/queues/q/purge-dead',
    '/queues/q/resume',
  ]) {
    assert.equal((await browser.post(url, {})).statusCode, 403, url);
  }
  assert.equal(await paused(), false);
  assert.equal(await state(deadId), 'dead');

  // As JSON or multipart: no token either, refused; and the form's token in a header works.
  const json = await app.inject({
    method: 'POST',
    url: '/queues/q/pause',
    headers: {
      'content-type': 'application/json',
      cookie: [...browser.cookies].map(([k, v]) => `${k}=${v}`).join('; '),
    },
    payload: JSON.stringify({ notatoken: token }),
  });
  assert.equal(json.statusCode, 403);
  assert.equal(await paused(), false);
  const ok = await browser.post('/queues/q/pause', {}, { 'x-csrf-token': token });
  assert.equal(ok.statusCode, 303);
  assert.equal(await paused(), true);
  await db.admin.query("SELECT pgq.resume('q')");
});

test('no GET changes anything', async (t) => {
  const app = await startDashboard(t, db);
  const browser = new Browser(app);
  for (const url of [
    '/queues/q/pause',
    '/queues/q/purge-dead',
    '/queues/q/retry-dead',
    `/jobs/${deadId}/retry`,
    `/jobs/${deadId}/cancel`,
  ]) {
    const res = await browser.get(url);
    assert.equal(res.statusCode, 404, url);
  }
  assert.equal(await paused(), false);
  assert.equal(await state(deadId), 'dead');
});

test('read-only mode hides the buttons and refuses every action (403)', async (t) => {
  const app = await startDashboard(t, db, { readOnly: true, password: 'pw' });
  const browser = new Browser(app);
  assert.equal((await browser.login('pw')).statusCode, 303, 'logging in is not an action');
  const page = await browser.get('/queues/q');
  assert.equal(page.statusCode, 200);
  assert.match(page.body, /<span class="badge">read-only<\/span>/);
  assert.doesNotMatch(page.body, /\/pause"|\/retry-dead"|\/purge-dead"/);
  const job = await browser.get(`/jobs/${deadId}`);
  assert.doesNotMatch(job.body, /\/retry"|\/cancel"/);
  const token = csrfToken(page.body); // the logout form's
  for (const url of ['/queues/q/pause', '/queues/q/purge-dead', `/jobs/${deadId}/retry`]) {
    const res = await browser.post(url, { _csrf: token });
    assert.equal(res.statusCode, 403, url);
    assert.match(res.body, /read-only/);
  }
  assert.equal(await paused(), false);
  assert.equal(await state(deadId), 'dead');
});

test('every response carries the security headers', async (t) => {
  const app = await startDashboard(t, db);
  const browser = new Browser(app);
  for (const url of ['/', '/queues/q', '/api/overview', '/static/app.js', '/nope', '/jobs/abc']) {
    const res = await browser.get(url);
    const csp = res.headers['content-security-policy'];
    assert.ok(csp, url);
    assert.match(csp, /script-src 'self'(;|$)/, url);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/, url);
    assert.match(csp, /frame-ancestors 'none'/, url);
    assert.match(csp, /default-src 'none'/, url);
    assert.equal(res.headers['x-content-type-options'], 'nosniff', url);
    assert.equal(res.headers['referrer-policy'], 'no-referrer', url);
    assert.equal(res.headers['x-frame-options'], 'DENY', url);
  }
  // No inline script or inline handler in any page.
  for (const url of ['/', '/queues/q', `/jobs/${deadId}`, '/schedules', '/workers', '/coordination']) {
    const { body } = await browser.get(url);
    assert.doesNotMatch(body, /<script>|\son[a-z]+=/i, url);
    assert.doesNotMatch(body, /style="/, url);
  }
});

test('request values are checked before use: 404 or 400, never an SQL error', async (t) => {
  const app = await startDashboard(t, db);
  const browser = new Browser(app);
  const cases = [
    ['/jobs/abc', 404],
    ['/jobs/0', 404],
    ['/jobs/-1', 404],
    ['/jobs/1e3', 404],
    ['/jobs/9223372036854775808', 404],
    ['/jobs/99999999999999999999', 404],
    ['/jobs/9223372036854775807', 404], // a valid id that does not exist
    ['/queues/Q', 404],
    ['/queues/q%27%3B%20DROP%20TABLE%20pgq.jobs%3B--', 404],
    [`/queues/${'a'.repeat(64)}`, 404],
    ['/queues/nosuch', 404],
    ['/queues/q?state=bogus', 400],
    ['/queues/q?state=ready&state=dead', 400],
    ['/queues/q?before_id=x', 400],
    ['/queues/q?before_id=0', 400],
    ['/queues/q?limit=0', 400],
    ['/queues/q?limit=100000', 400],
    ['/static/..%2Fpackage.json', 404],
    ['/static/constructor', 404],
  ];
  for (const [url, status] of cases) {
    const res = await browser.get(url);
    assert.equal(res.statusCode, status, `${url}: ${res.body.slice(0, 400)}`);
    assert.match(res.headers['content-type'], /text\/html/, url);
    assert.doesNotMatch(res.body, /\n\s+at |SQLSTATE 22/, url);
  }
  assert.equal((await browser.get('/queues/q?state=dead&before_id=9223372036854775807&limit=1000')).statusCode, 200);
  const token = await browser.csrf('/queues/q');
  assert.equal((await browser.post('/jobs/abc/cancel', { _csrf: token })).statusCode, 404);
  assert.equal((await browser.post('/queues/BAD/pause', { _csrf: token })).statusCode, 404);
  assert.equal((await browser.post('/queues/nosuch/pause', { _csrf: token })).statusCode, 404);
  assert.equal((await browser.post('/queues/q/retry-dead', { _csrf: token, max: '1; DROP' })).statusCode, 400);
});

test('every statement is a constant string (no SQL assembled from values)', () => {
  const fs = require('node:fs');
  const source = fs.readFileSync(require.resolve('../lib/data.js'), 'utf8');
  // The only interpolations in statements are column lists, themselves constants.
  const interpolations = [...source.matchAll(/\$\{([^}]+)\}/g)].map((m) => m[1]);
  assert.deepEqual([...new Set(interpolations)].sort(), ['JOB_COLUMNS', 'LIST_COLUMNS', 'OVERVIEW_COLUMNS']);
  assert.match(source, /^const OVERVIEW_COLUMNS = `[^$`]*`;$/m);
  assert.match(source, /^const JOB_COLUMNS = `[^$`]*`;$/m);
  assert.match(source, /^const LIST_COLUMNS = `[^$`]*`;$/m);
  for (const file of ['plugin.js', 'views.js', 'sampler.js', 'auth.js']) {
    const text = fs.readFileSync(require.resolve(`../lib/${file}`), 'utf8');
    assert.doesNotMatch(text, /\.query\(/, `${file} runs no SQL of its own`);
  }
});
