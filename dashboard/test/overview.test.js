'use strict';

// The overview after a known workload: the counts of pgq.queue_stats for
// the queues the dashboard's role holds a right on (and no other), paused,
// caps, rate limits, and the live JSON endpoint with its rates.

const test = require('node:test');
const assert = require('node:assert/strict');
const { freshDatabase, startDashboard, Browser, overviewCell, waitFor } = require('./helpers');

let db;
let role;

test.before(async () => {
  db = await freshDatabase('overview');
  role = await db.createRole('ops');
  const q = (sql, params) => db.admin.query(sql, params);
  await q("SELECT pgq.create_queue('emails', max_attempts => 1)");
  await q("SELECT pgq.create_queue('capped', max_running => 5, rate_limit => 10)");
  await q("SELECT pgq.create_queue('hidden')");
  await q("SELECT pgq.pause('capped')");
  for (const queue of ['emails', 'capped']) await q('SELECT pgq.grant($1, $2, $3)', [role, queue, 'admin']);
  // Counters through pg_monitor; rate limits through pgq.queue_settings()
  // (3.0): no grant beyond the queue rights.
  await q(`GRANT pg_monitor TO ${role}`);

  // emails: 6 ready, 2 scheduled; 3 claimed: 1 completed, 1 failed (dead), 1 running;
  // 1 waiting for a parent. capped: 4 ready. hidden: 7 ready.
  const ids = [];
  for (let i = 0; i < 6; i++) ids.push((await q("SELECT pgq.enqueue('emails', $1) AS id", [{ i }])).rows[0].id);
  await q("SELECT pgq.enqueue('emails', '{}', run_at => now() + interval '1 hour') FROM generate_series(1, 2)");
  const claimed = (await q("SELECT id, attempt FROM pgq.claim('emails', 3)")).rows;
  assert.equal(claimed.length, 3);
  assert.equal((await q('SELECT pgq.complete($1, $2) AS ok', [claimed[0].id, claimed[0].attempt])).rows[0].ok, true);
  assert.equal(
    (await q("SELECT pgq.fail($1, $2, 'boom') AS r", [claimed[1].id, claimed[1].attempt])).rows[0].r,
    'dead',
  );
  const readyId = ids.find((id) => !claimed.some((c) => c.id === id));
  await q("SELECT pgq.enqueue('emails', '{}', after => ARRAY[$1::bigint])", [readyId]);
  await q("SELECT pgq.enqueue('capped', '{}') FROM generate_series(1, 4)");
  await q("SELECT pgq.enqueue('hidden', '{}') FROM generate_series(1, 7)");
});

test.after(() => db?.close());

test('the overview lists the counts of the queues the role may see', async (t) => {
  const app = await startDashboard(t, db, { role });
  const browser = new Browser(app);
  // done_recent counts a completion by its commit callback: wait until it shows.
  const res = await waitFor('the completion in done_recent', async () => {
    const r = await browser.get('/');
    return overviewCell(r.body, 'emails', 'done_recent') === '1' ? r : null;
  });
  assert.equal(res.statusCode, 200);
  const cell = (queue, field) => overviewCell(res.body, queue, field);
  assert.deepEqual(
    ['ready', 'scheduled', 'running', 'expired', 'dead', 'awaiting_parents', 'done_recent', 'paused'].map((f) =>
      cell('emails', f),
    ),
    ['3', '2', '1', '0', '1', '1', '1', 'no'],
  );
  assert.match(cell('emails', 'oldest_ready'), /^\d+(\.\d)? s$/);
  assert.equal(cell('emails', 'rate_limit'), '—');
  assert.equal(cell('capped', 'ready'), '4');
  assert.equal(cell('capped', 'running'), '0 / 5');
  assert.equal(cell('capped', 'paused'), 'paused');
  assert.equal(cell('capped', 'rate_limit'), '10/s');
  assert.equal(cell('hidden', 'ready'), undefined, 'a queue without a right is not listed');
  assert.doesNotMatch(res.body, /hidden/);
  assert.match(res.body, new RegExp(`As role <b>${role}</b>`));
});

test('without pg_monitor the overview says what it cannot show; rate limits need no grant', async (t) => {
  const plain = await db.createRole('plain');
  await db.admin.query("SELECT pgq.create_queue('throttled', rate_limit => 5)");
  await db.admin.query("SELECT pgq.grant($1, 'emails', 'consume'), pgq.grant($1, 'throttled', 'consume')", [plain]);
  const app = await startDashboard(t, db, { role: plain });
  const res = await new Browser(app).get('/');
  assert.equal(res.statusCode, 200);
  assert.equal(overviewCell(res.body, 'emails', 'ready'), '3');
  assert.equal(overviewCell(res.body, 'capped', 'ready'), undefined);
  assert.equal(overviewCell(res.body, 'emails', 'rate_limit'), '—');
  // a consume right is enough to see the queue's rate limit (pgq.queue_settings)
  assert.equal(overviewCell(res.body, 'throttled', 'rate_limit'), '5/s');
  assert.doesNotMatch(res.body, /Rate limits are not shown/);
  assert.match(res.body, /not in pg_monitor/);
  await db.admin.query("SELECT pgq.drop_queue('throttled', force => true)");
});

test('a queue deeper than the exact count shows the estimate from the statistics', async (t) => {
  const deep = await db.createRole('deep');
  await db.admin.query("SELECT pgq.create_queue('deep')");
  await db.admin.query("SELECT pgq.grant($1, 'deep', 'consume')", [deep]);
  await db.admin.query("SELECT pgq.enqueue_many('deep', array_agg(jsonb_build_object('i', g))) FROM generate_series(1, 3000) g");
  t.after(() => db.admin.query("SELECT pgq.drop_queue('deep', force => true)"));
  const app = await startDashboard(t, db, { role: deep });
  const browser = new Browser(app);
  // Never analyzed since the jobs came: "1,000+", or autovacuum's
  // estimate if it was quicker; never a count of all 3,000.
  const before = overviewCell((await browser.get('/')).body, 'deep', 'ready');
  assert.match(before, /^(1,000\+|≈ [0-9,]+)$/);

  await db.admin.query('ANALYZE pgq.job_rows');
  const res = await browser.get('/');
  const ready = overviewCell(res.body, 'deep', 'ready');
  assert.match(ready, /^≈ [0-9,]+$/);
  const estimate = Number(ready.replace(/[^0-9]/g, ''));
  assert.ok(estimate >= 2500 && estimate <= 3500, `estimate ${estimate} of 3000`);
  assert.equal(overviewCell(res.body, 'deep', 'scheduled'), '0', 'a count below the limit stays exact');
  assert.match(res.body, /Counts are exact up to 1,000/);
  const page = await browser.get('/queues/deep');
  assert.equal(page.statusCode, 200);
  assert.match(page.body, /<dt>Ready<\/dt><dd>≈ [0-9,]+<\/dd>/);
});

test('a role with no right on any queue gets an empty overview, not an error', async (t) => {
  const nobody = await db.createRole('nobody');
  const app = await startDashboard(t, db, { role: nobody });
  const res = await new Browser(app).get('/');
  assert.equal(res.statusCode, 200);
  assert.match(res.body, /No queue to show/);
});

test('the JSON endpoint serves the latest sample, with completions per second', async (t) => {
  const app = await startDashboard(t, db, { role });
  const { sampler } = app.dashboard;
  await sampler.sampleNow();
  await db.admin.query("SELECT pgq.enqueue('capped', '{}') FROM generate_series(1, 3)");
  await db.admin.query("SELECT pgq.resume('capped')");
  const jobs = (await db.admin.query("SELECT id, attempt FROM pgq.claim('capped', 5)")).rows;
  for (const j of jobs) await db.admin.query('SELECT pgq.complete($1, $2)', [j.id, j.attempt]);
  await db.admin.query("SELECT pgq.pause('capped')");
  await new Promise((resolve) => setTimeout(resolve, 50)); // a time step between the samples
  // The counters count at commit: sample until the five completions show.
  await waitFor('five completions in the counters', async () => {
    await sampler.sampleNow();
    const series = sampler.series().queues.capped;
    return series.completed.at(-1) > 0 && sampler.latest().counters.get('capped').completions >= 5;
  });

  const res = await new Browser(app).get('/api/overview');
  assert.equal(res.statusCode, 200);
  assert.match(res.headers['content-type'], /application\/json/);
  const body = res.json();
  const capped = body.queues.find((q) => q.queue === 'capped');
  assert.equal(capped.cells.ready, '2');
  assert.equal(capped.cells.paused, 'paused');
  assert.ok(Number(capped.cells.completed_rate) > 0, `completed/s ${capped.cells.completed_rate}`);
  assert.equal(capped.cells.failed_rate, '0.00');
  assert.equal(
    body.queues.find((q) => q.queue === 'hidden'),
    undefined,
  );
  assert.ok(body.series.t.length >= 2);
  assert.equal(body.series.queues.capped.depth.at(-1), 2);
  assert.equal(body.series.queues.capped.depth.length, body.series.t.length);

  // The page embeds the same series for the charts, in a JSON script element.
  const page = await new Browser(app).get('/');
  const embedded = /<script type="application\/json" id="overview-data">([^<]*)<\/script>/.exec(page.body);
  assert.ok(embedded, 'the overview embeds its data');
  const data = JSON.parse(embedded[1]);
  assert.equal(data.api, '/api/overview');
  assert.ok(data.series.queues.capped);
});

test('the sampler keeps a window of samples', async (t) => {
  const { Sampler } = require('../lib/sampler');
  const sampler = new Sampler(db.admin, { intervalMs: 1000, windowMs: 3000 });
  for (let i = 0; i < 6; i++) await sampler.sampleNow();
  assert.equal(sampler.samples.length, 4);
  t.after(() => sampler.stop());
});
