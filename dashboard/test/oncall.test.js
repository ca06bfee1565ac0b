'use strict';

// What the person on call uses (3.0): find a job by id, dedupe key or group
// key; a job's workflow (its parents, its children, what a dead parent took
// with it); a queue's jobs filtered by dead reason; bulk retry, cancel and
// purge of selected jobs (bounded, confirmed, CSRF-protected, decided per
// job by the database with the role's rights, each saying what happened or
// why not); the streams page. Each shown only as far as the role's rights go: team A's
// role never sees team B's jobs or streams.

const test = require('node:test');
const assert = require('node:assert/strict');
const { freshDatabase, startDashboard, Browser, csrfToken, jobIds } = require('./helpers');

let db;
let teamA; // produce + admin on queue a, consume on stream sa
let plainA; // produce on queue a
const ids = {};

const enqueue = async (queue, { dedupe = null, group = null, after = null, priority = 0 } = {}) =>
  (
    await db.admin.query(
      "SELECT pgq.enqueue($1, '{}', priority => $2, dedupe_key => $3, group_key => $4, after => $5::bigint[]) AS id",
      [queue, priority, dedupe, group, after],
    )
  ).rows[0].id;

/** A dead job of `queue`: enqueued first in line (the highest priority), claimed alone, failed. */
let firstInLine = 1000; // jobs retried keep theirs: each new one comes before them
async function deadJob(queue) {
  const id = await enqueue(queue, { priority: ++firstInLine });
  const { rows } = await db.admin.query('SELECT c.id, c.attempt FROM pgq.claim($1, 1) c', [queue]);
  assert.equal(rows[0]?.id, id, `job ${id} claimed`);
  await db.admin.query("SELECT pgq.fail($1, $2, 'it broke')", [id, rows[0].attempt]);
  return id;
}

test.before(async () => {
  db = await freshDatabase('oncall');
  teamA = await db.createRole('team_a');
  plainA = await db.createRole('plain_a');
  await db.admin.query("SELECT pgq.create_queue('a', max_attempts => 1), pgq.create_queue('b', max_attempts => 1)");
  await db.admin.query("SELECT pgq.grant($1, 'a', 'admin'), pgq.grant($1, 'a', 'produce')", [teamA]);
  await db.admin.query("SELECT pgq.grant($1, 'a', 'produce')", [plainA]);
  // No table grant: pgq.find_jobs and pgq.job_dependencies (3.0) need none.

  ids.keyedA = await enqueue('a', { dedupe: 'order-42', group: 'cust-7' });
  ids.groupedA = await enqueue('a', { group: 'cust-7' });
  ids.keyedB = await enqueue('b', { dedupe: 'order-42', group: 'cust-7' });

  // A parent that will die, with a child in each queue.
  ids.doomed = await enqueue('a', { priority: 1000 });
  ids.doomedChildA = await enqueue('a', { after: [ids.doomed] });
  ids.doomedChildB = await enqueue('b', { after: [ids.doomed] });
  const { rows } = await db.admin.query("SELECT c.id, c.attempt FROM pgq.claim('a', 1) c");
  assert.equal(rows[0].id, ids.doomed);
  await db.admin.query("SELECT pgq.fail($1, $2, 'it broke')", [ids.doomed, rows[0].attempt]);

  // A parent still pending, with a child in each queue.
  ids.parent = await enqueue('a');
  ids.childA = await enqueue('a', { after: [ids.parent] });
  ids.childB = await enqueue('b', { after: [ids.parent] });

  await db.admin.query("SELECT pgq.create_stream('sa'), pgq.create_stream('sb')");
  await db.admin.query(
    "SELECT pgq.register_consumer('sa', 'billing'), pgq.register_consumer('sb', 'shipping'), pgq.append('sa', '{}'), pgq.append('sa', '{}')",
  );
  await db.admin.query("SELECT pgq.grant_stream($1, 'sa', 'consume')", [teamA]);
});

test.after(() => db?.close());

const state = async (id) => (await db.admin.query('SELECT state FROM pgq.job($1)', [id])).rows[0]?.state;

// ---- Search ----------------------------------------------------------------------

test('a job id found goes to its page; the header of every page has the search box', async (t) => {
  const app = await startDashboard(t, db, { role: teamA });
  const front = await app.inject({ url: '/' });
  assert.match(front.body, /<form method="get" action="\/search" class="search" role="search">/);
  const res = await app.inject({ url: `/search?q=${ids.keyedA}` });
  assert.equal(res.statusCode, 303);
  assert.equal(res.headers.location, `/jobs/${ids.keyedA}`);
});

test('a job id of a queue the role holds no right on is not found', async (t) => {
  const app = await startDashboard(t, db, { role: teamA });
  const res = await app.inject({ url: `/search?q=${ids.keyedB}` });
  assert.equal(res.statusCode, 200);
  assert.match(res.body, new RegExp(`No job ${ids.keyedB} that this role may read`));
  assert.deepEqual(jobIds(res.body), []);
});

test('a dedupe key or a group key finds the role’s jobs only', async (t) => {
  const app = await startDashboard(t, db, { role: teamA });
  const byDedupe = await app.inject({ url: '/search?q=order-42' });
  assert.equal(byDedupe.statusCode, 200);
  assert.deepEqual(jobIds(byDedupe.body), [ids.keyedA]);
  const byGroup = await app.inject({ url: '/search?q=%20cust-7%20' });
  assert.deepEqual(jobIds(byGroup.body), [ids.groupedA, ids.keyedA]);
  // the superuser sees both queues' jobs
  const su = await startDashboard(t, db);
  assert.deepEqual(jobIds((await su.inject({ url: '/search?q=order-42' })).body), [ids.keyedB, ids.keyedA]);
  // a queue narrows it
  assert.deepEqual(jobIds((await su.inject({ url: '/search?q=order-42&queue=b' })).body), [ids.keyedB]);
});

test('a live job is found by its key however many newer jobs its queue has (pgq.find_jobs)', async (t) => {
  await db.admin.query("SELECT pgq.create_queue('deep')");
  await db.admin.query("SELECT pgq.grant($1, 'deep', 'produce')", [teamA]);
  const old = await enqueue('deep', { dedupe: 'deep-key' });
  await db.admin.query("SELECT pgq.enqueue_many('deep', array_fill('{}'::jsonb, ARRAY[1500]))");
  const app = await startDashboard(t, db, { role: teamA });
  assert.deepEqual(jobIds((await app.inject({ url: '/search?q=deep-key' })).body), [old]);
  assert.deepEqual(jobIds((await app.inject({ url: '/search?q=deep-key&queue=deep' })).body), [old]);
  // a dead job, found among the newest of its queue
  const dead = await enqueue('a', { dedupe: 'dead-key' });
  await db.admin.query('SELECT pgq.cancel($1)', [dead]);
  const page = await app.inject({ url: '/search?q=dead-key' });
  assert.deepEqual(jobIds(page.body), [dead]);
  assert.match(page.body, /pgq\.find_jobs/);
});

test('a search text too long or repeated is refused (400)', async (t) => {
  const app = await startDashboard(t, db, { role: teamA });
  assert.equal((await app.inject({ url: `/search?q=${'x'.repeat(201)}` })).statusCode, 400);
  assert.equal((await app.inject({ url: '/search?q=a&q=b' })).statusCode, 400);
  assert.equal((await app.inject({ url: '/search?q=' })).statusCode, 200);
});

// ---- Workflow ----------------------------------------------------------------------

const workflow = (body) => {
  const m = /<section id="workflow">([\s\S]*?)<\/section>/.exec(body);
  return m ? m[1] : null;
};
const listed = (text, heading) => {
  const m = new RegExp(`<h3>${heading}</h3>(?:<ul class="workflow">([\\s\\S]*?)</ul>)?`).exec(text);
  return m ? [...(m[1] || '').matchAll(/<li data-job-id="(\d+)">/g)].map((x) => x[1]) : null;
};

test('a parent’s page lists its waiting children of the role’s queues, linked', async (t) => {
  const app = await startDashboard(t, db, { role: teamA });
  const page = await app.inject({ url: `/jobs/${ids.parent}` });
  assert.equal(page.statusCode, 200);
  assert.match(page.body, /<a href="#workflow">Workflow<\/a>/);
  const w = workflow(page.body);
  assert.ok(w, 'a workflow section');
  assert.deepEqual(listed(w, 'Children waiting for it'), [ids.childA]); // not team B's child
  assert.match(w, new RegExp(`<a href="/jobs/${ids.childA}">Job ${ids.childA}</a> <span class="state state-waiting">waiting</span>`));
  assert.doesNotMatch(page.body, new RegExp(`Job ${ids.childB}\\b`));
});

test('a waiting child’s page lists the parent it waits for', async (t) => {
  const app = await startDashboard(t, db, { role: teamA });
  const w = workflow((await app.inject({ url: `/jobs/${ids.childA}` })).body);
  assert.deepEqual(listed(w, 'Waits for'), [ids.parent]);
});

test('a dead parent’s page lists the dependents it took with it, the role’s only', async (t) => {
  const app = await startDashboard(t, db, { role: teamA });
  assert.equal(await state(ids.doomedChildB), 'dead');
  const w = workflow((await app.inject({ url: `/jobs/${ids.doomed}` })).body);
  assert.deepEqual(listed(w, 'Dependents it took with it'), [ids.doomedChildA]);
  // and the child links back to the parent that did not complete
  const child = workflow((await app.inject({ url: `/jobs/${ids.doomedChildA}` })).body);
  assert.match(child, new RegExp(`its parent <a href="/jobs/${ids.doomed}">job ${ids.doomed}</a> did not complete`));
  // the superuser sees both
  const su = await startDashboard(t, db);
  const all = workflow((await su.inject({ url: `/jobs/${ids.doomed}` })).body);
  assert.deepEqual(listed(all, 'Dependents it took with it'), [ids.doomedChildA, ids.doomedChildB]);
});

test('a role with one right and no table grant sees the same workflow (pgq.job_dependencies)', async (t) => {
  const app = await startDashboard(t, db, { role: plainA });
  const waiting = workflow((await app.inject({ url: `/jobs/${ids.childA}` })).body);
  assert.deepEqual(listed(waiting, 'Waits for'), [ids.parent]);
  const parent = workflow((await app.inject({ url: `/jobs/${ids.parent}` })).body);
  assert.deepEqual(listed(parent, 'Children waiting for it'), [ids.childA]);
  const dead = workflow((await app.inject({ url: `/jobs/${ids.doomed}` })).body);
  assert.deepEqual(listed(dead, 'Dependents it took with it'), [ids.doomedChildA]);
  assert.doesNotMatch(dead, new RegExp(`Job ${ids.doomedChildB}\\b`));
});

// ---- Bulk actions ---------------------------------------------------------------------

/** A form with one `ids` field per job, as the checkboxes post it. */
function bulkForm(fields, idList) {
  return [...Object.entries(fields), ...idList.map((id) => ['ids', String(id)])];
}

async function bulkSetup(t, role, options = {}) {
  const app = await startDashboard(t, db, { role, ...options });
  const browser = new Browser(app);
  const page = await browser.get('/queues/a?state=dead');
  return { app, browser, page, token: csrfToken(page.body) };
}

test('retrying selected dead jobs: a confirmation first, then what happened to each', async (t) => {
  const d1 = await deadJob('a');
  const d2 = await deadJob('a');
  const dB = await deadJob('b');
  const { browser, page, token } = await bulkSetup(t, teamA);
  assert.match(page.body, /<form method="post" action="\/queues\/a\/bulk" id="bulk" class="bulk">/);
  assert.match(page.body, new RegExp(`<input type="checkbox" name="ids" value="${d1}" form="bulk"`));

  const confirm = await browser.post('/queues/a/bulk', bulkForm({ _csrf: token, action: 'retry' }, [d1, d2, dB]));
  assert.equal(confirm.statusCode, 200, confirm.body);
  assert.match(confirm.body, /<h1>Retry 3 jobs\?<\/h1>/);
  assert.match(confirm.body, new RegExp(`<tr data-job-id="${dB}">[\\s\\S]*?not found`)); // team B's: not shown
  assert.equal(await state(d1), 'dead', 'nothing done before the confirmation');

  const run = await browser.post('/queues/a/bulk/run', bulkForm({ _csrf: csrfToken(confirm.body), action: 'retry' }, [d1, d2, dB]));
  assert.equal(run.statusCode, 200, run.body);
  assert.match(run.body, /<h1>Retry: 2 of 3 jobs<\/h1>/);
  assert.match(run.body, new RegExp(`<tr data-job-id="${d1}" data-outcome="done" data-word="retried">`));
  assert.match(run.body, new RegExp(`<tr data-job-id="${d2}" data-outcome="done" data-word="retried">`));
  // team B's job: not found, exactly like an unknown id
  assert.match(
    run.body,
    new RegExp(`<tr data-job-id="${dB}" data-outcome="unchanged" data-word="not_found">[\\s\\S]*?not requeued: not found`),
  );
  assert.equal(await state(d1), 'ready');
  assert.equal(await state(d2), 'ready');
  assert.equal(await state(dB), 'dead', 'team B’s job untouched');
});

test('cancelling selected jobs; one finished already is said so', async (t) => {
  const finished = await deadJob('a');
  const live = await enqueue('a');
  const { browser, token } = await bulkSetup(t, teamA);
  const confirm = await browser.post('/queues/a/bulk', bulkForm({ _csrf: token, action: 'cancel' }, [live, finished]));
  const run = await browser.post('/queues/a/bulk/run', bulkForm({ _csrf: csrfToken(confirm.body), action: 'cancel' }, [live, finished]));
  assert.match(run.body, new RegExp(`<tr data-job-id="${live}" data-outcome="done" data-word="cancelled">`));
  assert.match(
    run.body,
    new RegExp(`<tr data-job-id="${finished}" data-outcome="unchanged" data-word="already_dead">[\\s\\S]*?not cancelled: already dead`),
  );
  assert.equal(await state(live), 'cancelled');
});

test('bulk outcomes say why nothing happened: already completed, not dead, dedupe key taken', async (t) => {
  await db.admin.query("SELECT pgq.alter_queue('a', keep_completed => '1 hour')"); // a done job is kept
  const completed = await enqueue('a', { priority: 5000 });
  const c = (await db.admin.query("SELECT c.id, c.attempt FROM pgq.claim('a', 1) c")).rows[0];
  assert.equal(c.id, completed);
  await db.admin.query('SELECT pgq.complete($1, $2)', [c.id, c.attempt]);
  const keyed = await enqueue('a', { dedupe: 'bulk-key' });
  await db.admin.query('SELECT pgq.cancel($1)', [keyed]);
  const holder = await enqueue('a', { dedupe: 'bulk-key' });
  const { browser, token } = await bulkSetup(t, teamA);
  const list = [completed, keyed, holder];
  const confirm = await browser.post('/queues/a/bulk', bulkForm({ _csrf: token, action: 'retry' }, list));
  const run = await browser.post('/queues/a/bulk/run', bulkForm({ _csrf: csrfToken(confirm.body), action: 'retry' }, list));
  assert.match(run.body, /<h1>Retry: 0 of 3 jobs<\/h1>/);
  assert.match(run.body, new RegExp(`data-job-id="${completed}" data-outcome="unchanged" data-word="already_completed">[\\s\\S]*?not requeued: already completed`));
  assert.match(run.body, new RegExp(`data-job-id="${keyed}" data-outcome="unchanged" data-word="dedupe_key_taken">[\\s\\S]*?a live job holds its dedupe key`));
  assert.match(run.body, new RegExp(`data-job-id="${holder}" data-outcome="unchanged" data-word="not_dead">`));
  const cancel = await browser.post('/queues/a/bulk/run', bulkForm({ _csrf: token, action: 'cancel' }, [completed, keyed]));
  assert.match(cancel.body, new RegExp(`data-job-id="${completed}" data-outcome="unchanged" data-word="already_completed">`));
  assert.match(cancel.body, new RegExp(`data-job-id="${keyed}" data-outcome="unchanged" data-word="already_cancelled">[\\s\\S]*?not cancelled: already cancelled`));
  await db.admin.query('SELECT pgq.cancel($1)', [holder]);
});

test('purging selected dead jobs: confirmed, then deleted per job; live, other teams’ and unknown ones are not', async (t) => {
  const d1 = await deadJob('a');
  const d2 = await deadJob('a');
  const dB = await deadJob('b');
  const live = await enqueue('a');
  const { browser, page, token } = await bulkSetup(t, teamA);
  assert.match(page.body, /<button type="submit" name="action" value="purge" class="danger">Purge…<\/button>/);
  const list = [d1, d2, dB, live, 99999999];
  const confirm = await browser.post('/queues/a/bulk', bulkForm({ _csrf: token, action: 'purge' }, list));
  assert.equal(confirm.statusCode, 200, confirm.body);
  assert.match(confirm.body, /<h1>Purge 5 jobs\?<\/h1>/);
  assert.match(confirm.body, /<button type="submit" class="danger">Purge 5 jobs<\/button>/);
  assert.match(confirm.body, new RegExp(`<tr data-job-id="${d1}">[\\s\\S]*?state-dead[\\s\\S]*?data-reason="exhausted"`));
  assert.equal(await state(d1), 'dead', 'nothing done before the confirmation');

  const run = await browser.post('/queues/a/bulk/run', bulkForm({ _csrf: csrfToken(confirm.body), action: 'purge' }, list));
  assert.equal(run.statusCode, 200, run.body);
  assert.match(run.body, /<h1>Purge: 2 of 5 jobs<\/h1>/);
  assert.match(run.body, new RegExp(`data-job-id="${d1}" data-outcome="done" data-word="purged">[\\s\\S]*?deleted`));
  assert.match(run.body, new RegExp(`data-job-id="${d2}" data-outcome="done" data-word="purged">`));
  assert.match(run.body, new RegExp(`data-job-id="${dB}" data-outcome="unchanged" data-word="not_found">[\\s\\S]*?not deleted: not found`));
  assert.match(run.body, new RegExp(`data-job-id="${live}" data-outcome="unchanged" data-word="not_dead">[\\s\\S]*?not deleted: not dead`));
  assert.match(run.body, /data-job-id="99999999" data-outcome="unchanged" data-word="not_found">/);
  assert.equal(await state(d1), undefined);
  assert.equal(await state(d2), undefined);
  assert.equal(await state(dB), 'dead', 'team B’s job untouched');
  assert.equal(await state(live), 'ready');
  await db.admin.query('SELECT pgq.cancel($1)', [live]);
});

test('purge needs admin: a producer gets no purge button and each job’s refusal', async (t) => {
  const dead = await deadJob('a');
  const { browser, page, token } = await bulkSetup(t, plainA);
  assert.doesNotMatch(page.body, /value="purge"/);
  const run = await browser.post('/queues/a/bulk/run', bulkForm({ _csrf: token, action: 'purge' }, [dead]));
  assert.equal(run.statusCode, 200);
  assert.match(run.body, new RegExp(`<tr data-job-id="${dead}" data-outcome="refused" data-word="42501">[\\s\\S]*?SQLSTATE 42501`));
  assert.equal(await state(dead), 'dead');
});

// ---- Dead reason ------------------------------------------------------------------

test('a queue’s jobs filtered by dead reason, the reason shown in the list', async (t) => {
  const exhausted = await deadJob('a');
  const cancelled = await enqueue('a');
  await db.admin.query('SELECT pgq.cancel($1)', [cancelled]);
  const app = await startDashboard(t, db, { role: teamA });
  const all = await app.inject({ url: '/queues/a?state=dead' });
  assert.match(all.body, /<select name="reason"><option value="">any<\/option><option value="exhausted">exhausted<\/option>/);
  assert.match(all.body, new RegExp(`<tr data-job-id="${exhausted}">[\\s\\S]*?<span class="reason" data-reason="exhausted">exhausted</span>`));
  const byReason = await app.inject({ url: '/queues/a?reason=exhausted' });
  assert.equal(byReason.statusCode, 200);
  const listed = jobIds(byReason.body);
  assert.ok(listed.includes(exhausted), 'the exhausted job listed');
  assert.ok(!listed.includes(cancelled), 'not the cancelled one');
  assert.ok(listed.includes(ids.doomed), 'every exhausted job of the queue');
  assert.ok(!listed.includes(ids.doomedChildA), 'not its dependency_failed child');
  assert.match(byReason.body, /<option value="exhausted" selected>exhausted<\/option>/);
  const deps = jobIds((await app.inject({ url: '/queues/a?reason=dependency_failed' })).body);
  assert.deepEqual(deps, [ids.doomedChildA]);
  const cancelledOnly = jobIds((await app.inject({ url: '/queues/a?state=cancelled&reason=cancelled' })).body);
  assert.ok(cancelledOnly.includes(cancelled));
  assert.ok(!cancelledOnly.includes(exhausted));
  // with a state it cannot be in: none, said so
  const none = await app.inject({ url: '/queues/a?state=ready&reason=exhausted' });
  assert.match(none.body, /No job in state ready dead for reason exhausted\./);
  // the paging link keeps the filter
  const paged = await app.inject({ url: '/queues/a?reason=exhausted&limit=20' });
  assert.equal(paged.statusCode, 200);
  // an unknown reason: 400, with the reasons
  const bad = await app.inject({ url: '/queues/a?reason=lost' });
  assert.equal(bad.statusCode, 400);
  assert.match(bad.body, /reason must be one of exhausted, cancelled, expired, dependency_failed/);
  // the job's page says why
  const jobPage = await app.inject({ url: `/jobs/${ids.doomedChildA}` });
  assert.match(jobPage.body, /<dd data-field="dead_reason">dependency_failed<\/dd>/);
});

test('a role without the right is refused per job with the database’s message', async (t) => {
  const dead = await deadJob('a');
  const { browser, token } = await bulkSetup(t, plainA); // produce only: retry_dead needs admin
  const run = await browser.post('/queues/a/bulk/run', bulkForm({ _csrf: token, action: 'retry' }, [dead]));
  assert.equal(run.statusCode, 200);
  assert.match(run.body, new RegExp(`<tr data-job-id="${dead}" data-outcome="refused" data-word="42501">[\\s\\S]*?SQLSTATE 42501`));
  assert.equal(await state(dead), 'dead');
});

test('bulk actions are bounded, need the CSRF token, a known action, and are refused read-only', async (t) => {
  const { browser, token } = await bulkSetup(t, teamA);
  const many = Array.from({ length: 101 }, (_, i) => String(i + 1));
  const tooMany = await browser.post('/queues/a/bulk', bulkForm({ _csrf: token, action: 'retry' }, many));
  assert.equal(tooMany.statusCode, 400);
  assert.match(tooMany.body, /At most 100 jobs at a time \(101 selected\)/);
  assert.equal((await browser.post('/queues/a/bulk/run', bulkForm({ _csrf: token, action: 'retry' }, many))).statusCode, 400);
  assert.equal((await browser.post('/queues/a/bulk', { _csrf: token, action: 'retry' })).statusCode, 400);
  assert.equal((await browser.post('/queues/a/bulk', bulkForm({ _csrf: token, action: 'delete' }, ['1']))).statusCode, 400);
  assert.equal((await browser.post('/queues/a/bulk/run', bulkForm({ _csrf: token, action: 'purge' }, many))).statusCode, 400);
  const purgeNoToken = await browser.post('/queues/a/bulk/run', bulkForm({ action: 'purge' }, [String(ids.doomed)]));
  assert.equal(purgeNoToken.statusCode, 403);
  assert.equal(await state(ids.doomed), 'dead');
  assert.equal((await browser.post('/queues/a/bulk', bulkForm({ _csrf: token, action: 'retry' }, ['x']))).statusCode, 400);
  const noToken = await browser.post('/queues/a/bulk/run', bulkForm({ action: 'cancel' }, [String(ids.keyedA)]));
  assert.equal(noToken.statusCode, 403);
  assert.equal(await state(ids.keyedA), 'ready');

  const ro = await bulkSetup(t, teamA, { readOnly: true });
  assert.doesNotMatch(ro.page.body, /id="bulk"/);
  assert.doesNotMatch(ro.page.body, /type="checkbox"/);
  const refused = await ro.browser.post('/queues/a/bulk/run', bulkForm({ _csrf: ro.token, action: 'cancel' }, [String(ids.keyedA)]));
  assert.equal(refused.statusCode, 403);
  const roPurge = await ro.browser.post('/queues/a/bulk/run', bulkForm({ _csrf: ro.token, action: 'purge' }, [String(ids.doomed)]));
  assert.equal(roPurge.statusCode, 403);
  assert.equal(await state(ids.doomed), 'dead');
  assert.equal(await state(ids.keyedA), 'ready');
});

// ---- Streams -----------------------------------------------------------------------

test('the streams page: the role’s consumers with their lag and its rings, no table grant (pgq.stream_segments)', async (t) => {
  const app = await startDashboard(t, db, { role: teamA });
  const res = await app.inject({ url: '/streams' });
  assert.equal(res.statusCode, 200);
  const row = /<tr data-stream="sa" data-consumer="billing">([\s\S]*?)<\/tr>/.exec(res.body);
  assert.ok(row, 'sa’s consumer listed');
  assert.match(row[1], /<td>2<\/td>/); // two events behind
  assert.doesNotMatch(res.body, /data-stream="sb"/);
  assert.doesNotMatch(res.body, /shipping/);
  assert.doesNotMatch(res.body, /SQLSTATE 42501/);
  assert.match(res.body, /<h3 data-ring="sa">sa<\/h3>/);
  assert.match(res.body, /<tr data-stream="sa" data-segment="0">\s*<td>0<\/td>\s*<td><span class="badge">current<\/span>/);
  assert.doesNotMatch(res.body, /data-ring="sb"/);
});

test('the streams page: each ring’s segments, the current one, sizes and rotations', async (t) => {
  const app = await startDashboard(t, db);
  const res = await app.inject({ url: '/streams' });
  assert.equal(res.statusCode, 200);
  assert.match(res.body, /<tr data-stream="sb" data-consumer="shipping">/);
  assert.match(res.body, /<h3 data-ring="sa">sa<\/h3>\s*<p class="meta">Rotates every 02:00:00; 0 rotations so far/);
  const current = /<tr data-stream="sa" data-segment="0">([\s\S]*?)<\/tr>/.exec(res.body)[1];
  assert.match(current, /<span class="badge">current<\/span>/);
  assert.match(current, /<td>\d+(\.\d)? kB<\/td>/);
  assert.match(res.body, /<tr data-stream="sa" data-segment="1">\s*<td>1<\/td>\s*<td>empty<\/td>/);
});
