'use strict';

// The buttons, posted as the page's forms post them (with the page's CSRF
// token): retry a dead job, cancel a running one, pause and resume, retry
// and purge the dead jobs of a queue; and "copy as SQL" run in psql.

const test = require('node:test');
const assert = require('node:assert/strict');
const { freshDatabase, startDashboard, Browser, unescapeHtml } = require('./helpers');

let db;
let role;

test.before(async () => {
  db = await freshDatabase('actions');
  // The dashboard's role: admin (operate) and produce (see payloads, cancel).
  role = await db.createRole('ops');
  await db.admin.query("SELECT pgq.create_queue('work', max_attempts => 1)");
  await db.admin.query("SELECT pgq.grant($1, 'work', 'admin'), pgq.grant($1, 'work', 'produce')", [role]);
});

test.after(() => db?.close());

async function deadJob(payload = {}) {
  const id = (await db.admin.query("SELECT pgq.enqueue('work', $1) AS id", [payload])).rows[0].id;
  const claimed = await claim(id);
  const r = await db.admin.query("SELECT pgq.fail($1, $2, 'it broke') AS r", [id, claimed.attempt]);
  assert.equal(r.rows[0].r, 'dead');
  return id;
}

// Claims until job `id` is the one claimed (the queue may hold others).
async function claim(id) {
  const { rows } = await db.admin.query(
    "SELECT c.id, c.attempt FROM pgq.claim('work', 100) c", // claims all; the others stay running
  );
  const mine = rows.find((r) => r.id === id);
  assert.ok(mine, `job ${id} claimed`);
  return mine;
}

const jobState = async (id) => (await db.admin.query('SELECT state FROM pgq.job($1)', [id])).rows[0]?.state;

test('retrying a dead job from its page moves it back to pending', async (t) => {
  const id = await deadJob({ to: 'ana@example.com' });
  const app = await startDashboard(t, db, { role });
  const browser = new Browser(app);
  const page = await browser.get(`/jobs/${id}`);
  assert.equal(page.statusCode, 200);
  assert.match(page.body, /<h1>Job \d+ <span class="state state-dead">dead<\/span><\/h1>/);
  assert.match(page.body, /it broke/);
  assert.match(page.body, new RegExp(`action="/jobs/${id}/retry"`));
  const token = /action="\/jobs\/\d+\/retry" class="inline"><input type="hidden" name="_csrf" value="([^"]+)"/.exec(
    page.body,
  )[1];

  const res = await browser.post(`/jobs/${id}/retry`, { _csrf: token });
  assert.equal(res.statusCode, 303, res.body);
  assert.equal(res.headers.location, `/jobs/${id}?notice=job_retried`);
  assert.equal(await jobState(id), 'ready');
  const after = await browser.get(res.headers.location);
  assert.match(after.body, /The job is pending again/);
  assert.match(after.body, /state-ready/);
  assert.doesNotMatch(after.body, /\/retry"/, 'no retry button for a live job');
});

test('cancelling a running job fences its worker, and pgq.job says cancelled', async (t) => {
  const id = (await db.admin.query("SELECT pgq.enqueue('work', '{}') AS id")).rows[0].id;
  const claimed = await claim(id);
  assert.equal(await jobState(id), 'running');
  const app = await startDashboard(t, db, { role });
  const browser = new Browser(app);
  const token = await browser.csrf(`/jobs/${id}`);
  const res = await browser.post(`/jobs/${id}/cancel`, { _csrf: token });
  assert.equal(res.statusCode, 303, res.body);
  assert.equal(res.headers.location, `/jobs/${id}?notice=cancelled`);
  assert.equal(await jobState(id), 'cancelled');
  // The worker holding the claim can no longer complete it.
  const done = await db.admin.query('SELECT pgq.complete($1, $2) AS ok', [id, claimed.attempt]);
  assert.equal(done.rows[0].ok, false);
  // Cancelling again: nothing to cancel, and why (pgq.cancel_job's word).
  const again = await browser.post(`/jobs/${id}/cancel`, { _csrf: token });
  assert.equal(again.headers.location, `/jobs/${id}?notice=cancel_already_cancelled`);
  const shown = await browser.get(again.headers.location);
  assert.match(shown.body, /Nothing done: not cancelled: already cancelled\./);
  assert.match(shown.body, /<dt>Dead reason<\/dt><dd data-field="dead_reason">cancelled<\/dd>/);
});

test('the job buttons say why nothing happened: pgq.cancel_job and retry_dead_job outcomes', async (t) => {
  const app = await startDashboard(t, db, { role });
  const browser = new Browser(app);
  // Completed (its history kept): cancel answers already_completed.
  await db.admin.query("SELECT pgq.alter_queue('work', keep_completed => '1 hour')");
  const done = (await db.admin.query("SELECT pgq.enqueue('work', '{}') AS id")).rows[0].id;
  const c = await claim(done);
  await db.admin.query('SELECT pgq.complete($1, $2)', [done, c.attempt]);
  const token = await browser.csrf('/queues/work'); // a done job's page has no button
  let res = await browser.post(`/jobs/${done}/cancel`, { _csrf: token });
  assert.equal(res.headers.location, `/jobs/${done}?notice=cancel_already_completed`);
  assert.match((await browser.get(res.headers.location)).body, /not cancelled: already completed/);
  // Dead (exhausted): cancel answers already_dead; the page shows the reason.
  const dead = await deadJob();
  res = await browser.post(`/jobs/${dead}/cancel`, { _csrf: token });
  assert.equal(res.headers.location, `/jobs/${dead}?notice=cancel_already_dead`);
  const deadPage = await browser.get(res.headers.location);
  assert.match(deadPage.body, /not cancelled: already dead/);
  assert.match(deadPage.body, /<dd data-field="dead_reason">exhausted<\/dd>/);
  // Retrying a live job: not_dead.
  const live = (await db.admin.query("SELECT pgq.enqueue('work', '{}') AS id")).rows[0].id;
  res = await browser.post(`/jobs/${live}/retry`, { _csrf: token });
  assert.equal(res.headers.location, `/jobs/${live}?notice=retry_not_dead`);
  // A dead job whose dedupe key a live job holds: dedupe_key_taken.
  const keyed = (await db.admin.query("SELECT pgq.enqueue('work', '{}', dedupe_key => 'k1') AS id")).rows[0].id;
  await db.admin.query('SELECT pgq.cancel($1)', [keyed]);
  await db.admin.query("SELECT pgq.enqueue('work', '{}', dedupe_key => 'k1')");
  res = await browser.post(`/jobs/${keyed}/retry`, { _csrf: token });
  assert.equal(res.headers.location, `/jobs/${keyed}?notice=retry_dedupe_key_taken`);
  assert.match((await browser.get(res.headers.location)).body, /a live job holds its dedupe key/);
  // Unknown codes are not echoed: only the dashboard's own texts.
  const forged = await browser.get(`/jobs/${keyed}?notice=retry_%3Cb%3E`);
  assert.doesNotMatch(forged.body, /Nothing done/);
});

test('purging a dead job from its page deletes it and goes back to its queue', async (t) => {
  const app = await startDashboard(t, db, { role });
  const browser = new Browser(app);
  const id = await deadJob();
  const page = await browser.get(`/jobs/${id}`);
  assert.match(page.body, new RegExp(`action="/jobs/${id}/purge"`));
  const token = await browser.csrf(`/jobs/${id}`);
  const res = await browser.post(`/jobs/${id}/purge`, { _csrf: token });
  assert.equal(res.statusCode, 303, res.body);
  assert.equal(res.headers.location, `/queues/work?notice=job_purged&n=${id}`);
  assert.equal(await jobState(id), undefined);
  assert.match((await browser.get(res.headers.location)).body, new RegExp(`Dead job ${id} deleted\\.`));
  // Gone: its page is a 404, and purging again too.
  assert.equal((await browser.get(`/jobs/${id}`)).statusCode, 404);
  assert.equal((await browser.post(`/jobs/${id}/purge`, { _csrf: token })).statusCode, 404);
  // A live job has no purge button; posted anyway, not_dead.
  const live = (await db.admin.query("SELECT pgq.enqueue('work', '{}') AS id")).rows[0].id;
  assert.doesNotMatch((await browser.get(`/jobs/${live}`)).body, /\/purge"/);
  const again = await browser.post(`/jobs/${live}/purge`, { _csrf: token });
  assert.equal(again.headers.location, `/jobs/${live}?notice=purge_not_dead`);
  assert.equal(await jobState(live), 'ready');
  // Without the CSRF token: refused, nothing deleted.
  const other = await deadJob();
  const forged = await browser.post(`/jobs/${other}/purge`, {});
  assert.equal(forged.statusCode, 403);
  assert.equal(await jobState(other), 'dead');
});

test('pause and resume from the queue page', async (t) => {
  const app = await startDashboard(t, db, { role });
  const browser = new Browser(app);
  const page = await browser.get('/queues/work');
  assert.match(page.body, /action="\/queues\/work\/pause"/);
  const token = /name="_csrf" value="([^"]+)"/.exec(page.body)[1];
  let res = await browser.post('/queues/work/pause', { _csrf: token });
  assert.equal(res.statusCode, 303);
  assert.equal(res.headers.location, '/queues/work?notice=paused');
  const paused = async () =>
    (await db.admin.query("SELECT paused FROM pgq.queue_stats WHERE queue = 'work'")).rows[0].paused;
  assert.equal(await paused(), true);
  const shown = await browser.get(res.headers.location);
  assert.match(shown.body, /The queue is paused/);
  assert.match(shown.body, /action="\/queues\/work\/resume"/);
  res = await browser.post('/queues/work/resume', { _csrf: token });
  assert.equal(res.headers.location, '/queues/work?notice=resumed');
  assert.equal(await paused(), false);
});

test('retry all dead (up to a maximum) and purge dead', async (t) => {
  await db.admin.query("SELECT pgq.purge_dead('work')");
  for (let i = 0; i < 3; i++) await deadJob({ i });
  const app = await startDashboard(t, db, { role });
  const browser = new Browser(app);
  const token = await browser.csrf('/queues/work');
  const dead = async () =>
    Number((await db.admin.query("SELECT dead FROM pgq.queue_stats WHERE queue = 'work'")).rows[0].dead);
  assert.equal(await dead(), 3);

  let res = await browser.post('/queues/work/retry-dead', { _csrf: token, max: '2' });
  assert.equal(res.headers.location, '/queues/work?notice=retried&n=2');
  assert.equal(await dead(), 1);
  assert.match((await browser.get(res.headers.location)).body, /2 dead job\(s\) requeued/);

  res = await browser.post('/queues/work/retry-dead', { _csrf: token, max: '0' });
  assert.equal(res.statusCode, 400);
  assert.match(res.body, /max must be between 1 and 1000000/);

  res = await browser.post('/queues/work/purge-dead', { _csrf: token });
  assert.equal(res.headers.location, '/queues/work?notice=purged&n=1');
  assert.equal(await dead(), 0);
});

test('copy as SQL enqueues the same payload again when run', async (t) => {
  const payload = {
    quote: "it's",
    backslash: 'C:\\temp\\new',
    json: 'say "hi"\n',
    html: '</textarea><script>alert(1)</script>',
    unicode: 'ção ✓',
    exact: 1.1,
  };
  const id = (
    await db.admin.query(
      "SELECT pgq.enqueue('work', $1::jsonb, priority => 3, group_key => 'g''1', dedupe_key => 'k\\1') AS id",
      [JSON.stringify(payload).replace('1.1', '1.10')],
    )
  ).rows[0].id;
  const app = await startDashboard(t, db, { role });
  const page = await new Browser(app).get(`/jobs/${id}`);
  const sql = unescapeHtml(
    /<textarea class="sql" id="copy-sql" readonly rows="4">([^<]*)<\/textarea>/.exec(page.body)[1],
  );
  assert.match(sql, /^SELECT pgq\.enqueue\('work', E'/);
  assert.match(sql, /priority => 3/);
  // Its dedupe key is held by the original: cancel it first, as an operator would.
  await db.admin.query('SELECT pgq.cancel($1)', [id]);
  const copy = (await db.admin.query(sql)).rows[0].enqueue;
  assert.notEqual(copy, id);
  const { rows } = await db.admin.query(
    'SELECT a.payload::text = b.payload::text AS same, b.payload::text AS text, b.priority, b.group_key, b.dedupe_key FROM pgq.job($1) a, pgq.job($2) b',
    [id, copy],
  );
  assert.equal(rows[0].same, true, rows[0].text);
  assert.match(rows[0].text, /"exact": 1.10/);
  assert.equal(rows[0].priority, 3);
  assert.equal(rows[0].group_key, "g'1");
  assert.equal(rows[0].dedupe_key, 'k\\1');
});

test('quoteLiteral writes literals as quote_literal does', async () => {
  const { quoteLiteral } = require('../lib/copy_sql');
  for (const text of ['plain', "o'clock", 'back\\slash', "both\\'", '', '✓ ção', "'; DROP TABLE x; --"]) {
    const { rows } = await db.admin.query(`SELECT ${quoteLiteral(text)}::text AS v, quote_literal($1::text) AS q`, [
      text,
    ]);
    assert.equal(rows[0].v, text);
    assert.equal(quoteLiteral(text), rows[0].q);
  }
});
