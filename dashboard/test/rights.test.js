'use strict';

// The dashboard acts with its own database role: pgq's queue rights decide
// what each page shows and which buttons work. A refusal (42501) is shown as
// the database's readable message, never a stack trace.

const test = require('node:test');
const assert = require('node:assert/strict');
const { freshDatabase, startDashboard, Browser, csrfToken } = require('./helpers');

const PASSWORD = 'correct horse battery staple';

let db;
let deadId;
let readyId;

test.before(async () => {
  db = await freshDatabase('rights');
  await db.admin.query("SELECT pgq.create_queue('mail', max_attempts => 1)");
  await db.admin.query("SELECT pgq.create_queue('other')");
  deadId = (await db.admin.query(`SELECT pgq.enqueue('mail', '{"secret": "s3cr3t"}') AS id`)).rows[0].id;
  const c = (await db.admin.query("SELECT id, attempt FROM pgq.claim('mail')")).rows[0];
  await db.admin.query("SELECT pgq.fail($1, $2, 'smtp down')", [c.id, c.attempt]);
  readyId = (await db.admin.query(`SELECT pgq.enqueue('mail', '{"secret": "s3cr3t"}') AS id`)).rows[0].id;
});

test.after(() => db?.close());

// A logged-in browser on a dashboard acting as `role`: the logout form
// carries a CSRF token on every page, so a test can post what no button offers.
async function loggedIn(t, role) {
  const app = await startDashboard(t, db, { role, password: PASSWORD });
  const browser = new Browser(app);
  const res = await browser.login(PASSWORD);
  assert.equal(res.statusCode, 303);
  return browser;
}

function assertNoStack(body) {
  assert.doesNotMatch(body, /\n\s+at [\w.<>]+ \(/, 'no stack trace');
  assert.doesNotMatch(body, /node_modules|\.js:\d+/, 'no source locations');
}

test('a role without the admin right sees no admin buttons, and a forged action gets 42501 as a message', async (t) => {
  const worker = await db.createRole('worker');
  await db.admin.query("SELECT pgq.grant($1, 'mail', 'consume')", [worker]);
  assert.equal(
    (await db.admin.query("SELECT pgq.has_queue_privilege($1, 'mail', 'admin') AS a", [worker])).rows[0].a,
    false,
  );
  const browser = await loggedIn(t, worker);

  const page = await browser.get('/queues/mail');
  assert.equal(page.statusCode, 200);
  assert.match(page.body, /rights on the queue: <b>consume<\/b>/);
  assert.doesNotMatch(page.body, /\/pause"|\/resume"|\/retry-dead"|\/purge-dead"/);
  assert.match(page.body, /s3cr3t/, 'a consumer reads payloads');

  const token = csrfToken(page.body);
  const res = await browser.post('/queues/mail/pause', { _csrf: token });
  assert.equal(res.statusCode, 403);
  assert.match(res.body, /<strong>Refused by the database<\/strong>/);
  assert.match(res.body, /permission denied for queue &quot;mail&quot; <span class="code">\(SQLSTATE 42501\)<\/span>/);
  assert.match(res.body, /Hint: The queue&#39;s owner or a superuser can grant it/);
  assertNoStack(res.body);
  assert.equal((await db.admin.query("SELECT paused FROM pgq.queue_stats WHERE queue = 'mail'")).rows[0].paused, false);

  for (const action of ['retry-dead', 'purge-dead', 'resume']) {
    const r = await browser.post(`/queues/mail/${action}`, { _csrf: token });
    assert.equal(r.statusCode, 403, action);
    assert.match(r.body, /SQLSTATE 42501/, action);
  }

  // The job page: no cancel (needs produce or admin), no retry (admin).
  const job = await browser.get(`/jobs/${deadId}`);
  assert.equal(job.statusCode, 200);
  assert.doesNotMatch(job.body, /\/retry"|\/cancel"/);
  const retry = await browser.post(`/jobs/${deadId}/retry`, { _csrf: token });
  assert.equal(retry.statusCode, 403);
  assert.match(retry.body, /SQLSTATE 42501/);
  assertNoStack(retry.body);
  assert.equal((await db.admin.query('SELECT state FROM pgq.job($1)', [deadId])).rows[0].state, 'dead');
});

test('an admin-only role operates the queue but sees no payload', async (t) => {
  const ops = await db.createRole('ops');
  await db.admin.query("SELECT pgq.grant($1, 'mail', 'admin')", [ops]);
  const browser = await loggedIn(t, ops);
  const page = await browser.get('/queues/mail');
  assert.match(page.body, /action="\/queues\/mail\/pause"/);
  assert.match(page.body, /action="\/queues\/mail\/retry-dead"/);
  assert.match(page.body, /payloads, progress and results are not shown to it/);
  assert.doesNotMatch(page.body, /s3cr3t/);
  const job = await browser.get(`/jobs/${deadId}`);
  assert.match(job.body, /Payload: not shown to this role/);
  assert.doesNotMatch(job.body, /s3cr3t|Copy as SQL/);
  assert.match(job.body, new RegExp(`action="/jobs/${deadId}/retry"`));
  assert.match(job.body, /smtp down/, 'the last error is shown to an admin');
});

test('a producer may cancel a pending job, not retry a dead one', async (t) => {
  const web = await db.createRole('web');
  await db.admin.query("SELECT pgq.grant($1, 'mail', 'produce')", [web]);
  const browser = await loggedIn(t, web);
  const job = await browser.get(`/jobs/${readyId}`);
  assert.match(job.body, new RegExp(`action="/jobs/${readyId}/cancel"`));
  const dead = await browser.get(`/jobs/${deadId}`);
  assert.doesNotMatch(dead.body, /\/retry"/);
});

test('a role with no right on the queue is told so, and sees none of its jobs', async (t) => {
  const stranger = await db.createRole('stranger');
  await db.admin.query("SELECT pgq.grant($1, 'other', 'admin')", [stranger]);
  const browser = await loggedIn(t, stranger);
  const page = await browser.get('/queues/mail');
  assert.equal(page.statusCode, 403);
  assert.match(page.body, /permission denied for queue &quot;mail&quot;/);
  assert.doesNotMatch(page.body, /data-job-id|s3cr3t|\/pause"/);
  assertNoStack(page.body);
  const job = await browser.get(`/jobs/${deadId}`);
  assert.equal(job.statusCode, 404);
  assert.doesNotMatch(job.body, /s3cr3t|smtp down/);
  const unknown = await browser.get('/queues/nosuchqueue');
  assert.equal(unknown.statusCode, 404);
  assert.match(unknown.body, /queue &quot;nosuchqueue&quot; does not exist/);
});
