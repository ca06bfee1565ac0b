'use strict';

// Schedules, workers (the claiming sessions of the queues the role
// administers, pgq.queue_workers(); pgq.workers for pg_monitor;
// pgq.running_jobs with the claimer and the lease left), and the read-only
// teams, switches, ladders (pgq.list_teams/list_switches/list_ladders); a
// job's trace id (linked with --trace-url, which the command line checks).

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const pg = require('pg');
const { createServer } = require('..');
const { parseCommandLine } = require('../lib/cli');
const views = require('../lib/views');
const { freshDatabase, startDashboard, Browser, waitFor } = require('./helpers');

let db;
let role;

test.before(async () => {
  db = await freshDatabase('pages');
  role = await db.createRole('ops');
  const q = (sql, params) => db.admin.query(sql, params);
  await q("SELECT pgq.create_queue('reports', lease => '10 minutes')");
  await q("SELECT pgq.create_queue('secret')");
  await q("SELECT pgq.grant($1, 'reports', 'admin')", [role]);
  await q("SELECT pgq.schedule('nightly', 'reports', '0 3 * * *', '{\"kind\": \"daily\"}', 'Europe/Lisbon')");
  await q("SELECT pgq.schedule('pulse', 'reports', '@every 1 hour')");
  await q("SELECT pgq.schedule('hush', 'secret', '@daily')");
  await q(
    "SELECT pgq.add_member('sellers', 'ana'), pgq.add_member('sellers', 'bruno'), pgq.add_member('sellers', 'carla')",
  );
  await q("SELECT pgq.set_member_active('sellers', 'carla', false)");
  await q("SELECT pgq.next_turn('sellers')");
  await q("SELECT pgq.set_switch('outbound_whatsapp', true), pgq.set_switch('maintenance', false)");
  await q("SELECT pgq.advance('lead:42', 3)");
});

test.after(() => db?.close());

test('schedules of the queues the role may see: spec, time zone, next and last run, overlap', async (t) => {
  const app = await startDashboard(t, db, { role });
  const res = await new Browser(app).get('/schedules');
  assert.equal(res.statusCode, 200);
  const row = /<tr data-schedule="nightly">([\s\S]*?)<\/tr>/.exec(res.body)[1];
  assert.match(row, /<code>0 3 \* \* \*<\/code>/);
  assert.match(row, /Europe\/Lisbon/);
  assert.match(row, /<time datetime="20\d\d-/, 'the next run');
  assert.match(row, /&quot;kind&quot;: &quot;daily&quot;/);
  assert.match(res.body, /<tr data-schedule="pulse">/);
  assert.doesNotMatch(res.body, /hush/, 'not a schedule of a queue without a right');
});

test('schedule runs: each firing of the schedules of the queues the role administers, with its job', async (t) => {
  await db.admin.query("SELECT pgq.schedule('minutely', 'reports', '* * * * *'), pgq.schedule('hidden_tick', 'secret', '* * * * *')");
  t.after(() => db.admin.query("SELECT pgq.unschedule('minutely'), pgq.unschedule('hidden_tick')"));
  // fired as sql/read_surfaces.sql does: the clock two minutes ahead for one maintenance pass
  await db.admin.query("SET pgq.debug_clock_offset = '2min'; SELECT * FROM pgq.maintain(); RESET pgq.debug_clock_offset");
  const fired = (await db.admin.query("SELECT last_job_id FROM pgq.schedules WHERE name = 'minutely'")).rows[0];
  assert.ok(fired.last_job_id, 'the schedule fired');
  const app = await startDashboard(t, db, { role });
  const res = await new Browser(app).get('/schedules');
  assert.equal(res.statusCode, 200);
  assert.match(res.body, /<h2>Recent runs<\/h2>/);
  const run = /<table class="schedule-runs">[\s\S]*?<tr data-schedule="minutely">([\s\S]*?)<\/tr>/.exec(res.body);
  assert.ok(run, 'the run listed');
  assert.match(run[1], /<a href="\/queues\/reports">reports<\/a>/);
  assert.match(run[1], new RegExp(`<a href="/jobs/${fired.last_job_id}">${fired.last_job_id}</a>`));
  assert.doesNotMatch(res.body, /hidden_tick/, 'not a run of a queue it does not administer');
  // a role with a right but not admin sees the schedules, not their runs (nothing, no error)
  const reader = await db.createRole('reader');
  await db.admin.query("SELECT pgq.grant($1, 'reports', 'consume')", [reader]);
  const other = await startDashboard(t, db, { role: reader });
  const page = await new Browser(other).get('/schedules');
  assert.match(page.body, /<tr data-schedule="minutely">/);
  assert.doesNotMatch(page.body, /class="schedule-runs"/);
  assert.match(page.body, /No run of a schedule of a queue this role administers\./);
});

test('workers: the background workers for pg_monitor, running jobs with claimer and lease left', async (t) => {
  await db.admin.query(`GRANT pg_monitor TO ${role}`);
  t.after(() => db.admin.query(`REVOKE pg_monitor FROM ${role}`));
  const worker = new pg.Client({ ...db.config, application_name: 'report_worker' });
  await worker.connect();
  t.after(() => worker.end());
  await db.admin.query("SELECT pgq.enqueue('reports', '{}')");
  const job = (await worker.query("SELECT id FROM pgq.claim('reports')")).rows[0];
  await db.admin.query("SELECT pgq.enqueue('secret', '{}')");
  await worker.query("SELECT id FROM pgq.claim('secret')");

  const app = await startDashboard(t, db, { role });
  const browser = new Browser(app);
  // The maintenance worker of a new database starts within the launcher's scan.
  const res = await waitFor('the maintenance worker', async () => {
    const r = await browser.get('/workers');
    return /<td>maintenance<\/td><td>pgq_dash_pages<\/td>/.test(r.body) ? r : null;
  });
  assert.equal(res.statusCode, 200);
  assert.match(res.body, /<td>launcher<\/td>/);
  const row = new RegExp(`<tr data-job-id="${job.id}">([\\s\\S]*?)</tr>`).exec(res.body)[1];
  assert.match(row, /<td data-field="claimer">postgres \(pid \d+\)<\/td>/);
  assert.match(row, /<td>report_worker<\/td>/);
  assert.match(row, /<td data-field="lease_left">(9 min \d+ s|10 min 0 s)<\/td>/);
  assert.match(row, /<td>yes<\/td>/, 'the claimer is connected');
  // The claiming session, per queue the role administers (pgq.queue_workers).
  const pid = (await worker.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  const session = new RegExp(`<tr data-queue="reports" data-pid="${pid}">([\\s\\S]*?)</tr>`).exec(res.body);
  assert.ok(session, 'the worker’s session listed under Claiming sessions');
  assert.match(session[1], new RegExp(`<td data-field="claimer">postgres \\(pid ${pid}\\)</td>`));
  assert.match(session[1], /<td>report_worker<\/td>/);
  assert.match(session[1], /<td data-field="running">1<\/td>/);
  assert.doesNotMatch(res.body, /data-queue="secret"/, 'not the sessions of a queue it does not administer');
});

test('workers without pg_monitor: a readable refusal, and the running jobs still', async (t) => {
  const app = await startDashboard(t, db, { role });
  const res = await new Browser(app).get('/workers');
  assert.equal(res.statusCode, 200);
  assert.match(res.body, /permission denied for view workers <span class="code">\(SQLSTATE 42501\)<\/span>/);
  assert.match(res.body, /GRANT pg_monitor TO/);
  assert.match(res.body, /<tr data-job-id="\d+">/);
  // the claiming sessions need no pg_monitor: one refusal only, the workers'
  assert.equal(res.body.match(/SQLSTATE 42501/g).length, 1);
  assert.match(res.body, /<h2>Claiming sessions<\/h2>/);
});

test('teams, switches and ladders: refused without a grant, shown read-only with it', async (t) => {
  const app = await startDashboard(t, db, { role });
  const browser = new Browser(app);
  let res = await browser.get('/coordination');
  assert.equal(res.statusCode, 200);
  assert.equal(res.body.match(/SQLSTATE 42501/g).length, 3);
  assert.match(res.body, /GRANT EXECUTE ON FUNCTION pgq.list_teams\(text, integer\), pgq.list_switches/);

  await db.admin.query(
    `GRANT EXECUTE ON FUNCTION pgq.list_teams(text, integer), pgq.list_switches(text, integer), pgq.list_ladders(text, integer) TO ${role}`,
  );
  res = await browser.get('/coordination');
  assert.doesNotMatch(res.body, /SQLSTATE/);
  assert.match(
    res.body,
    /<tr data-team="sellers"><td>sellers<\/td><td>1<\/td><td>ana<\/td><td>ana, bruno<\/td><td>carla<\/td><\/tr>/,
  );
  assert.match(res.body, /<tr data-switch="outbound_whatsapp"><td>outbound_whatsapp<\/td><td>on<\/td>/);
  assert.match(res.body, /<tr data-switch="maintenance"><td>maintenance<\/td><td>off<\/td>/);
  assert.match(res.body, /<tr data-ladder="lead:42"><td>lead:42<\/td><td>3<\/td>/);
  assert.doesNotMatch(res.body, /method="post"[^>]*action="\/(?!logout)/, 'read-only: no forms');
});

test('a fair queue: its busiest group keys with weight, ready held, running, served and wait', async (t) => {
  const q = (sql, params) => db.admin.query(sql, params);
  await q("SELECT pgq.create_queue('tenants', lease => '10 minutes', group_concurrency => 100, fairness => 'group')");
  await q("SELECT pgq.grant($1, 'tenants', 'consume')", [role]);
  await q("SELECT pgq.set_group_weight('tenants', 'acme', 2)");
  await q("SELECT count(*) FROM pgq.enqueue_many('tenants', array_fill('{}'::jsonb, ARRAY[5]), group_keys => ARRAY['acme'])");
  await q("SELECT count(*) FROM pgq.enqueue_many('tenants', array_fill('{}'::jsonb, ARRAY[2]), group_keys => ARRAY['<globex>'])");
  // acme, <globex>, acme: two of acme's and one of globex's running
  assert.equal((await q("SELECT count(*)::int AS n FROM pgq.claim('tenants', 3)")).rows[0].n, 3);
  const app = await startDashboard(t, db, { role });
  const browser = new Browser(app);
  const res = await browser.get('/queues/tenants');
  assert.equal(res.statusCode, 200);
  assert.match(res.body, /<h2>Group keys in fair order<\/h2>/);
  const acme = /<tr data-key="acme">([\s\S]*?)<\/tr>/.exec(res.body)[1];
  assert.deepEqual([...acme.matchAll(/<td>(.*?)<\/td>/g)].slice(0, 5).map((m) => m[1]), ['acme', '2', '3', '2', '2']);
  const globex = /<tr data-key="&lt;globex&gt;">([\s\S]*?)<\/tr>/.exec(res.body)[1];
  assert.deepEqual([...globex.matchAll(/<td>(.*?)<\/td>/g)].slice(0, 5).map((m) => m[1]), ['&lt;globex&gt;', '1', '1', '1', '1']);
  assert.ok(res.body.indexOf('data-key="acme"') < res.body.indexOf('data-key="&lt;globex&gt;"'), 'the busiest first');
  const plain = await browser.get('/queues/reports');
  assert.equal(plain.statusCode, 200);
  assert.doesNotMatch(plain.body, /fair-keys/, 'a queue without fairness shows no keys');
});

// ---- A job's trace (ADR 0030): pgq.job_info.trace_id on the job page ----------

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const TRACEPARENT = `00-${TRACE_ID}-b7ad6b7169203331-01`;

/** The job page's Trace field (its markup), for a job id. */
async function traceField(app, id) {
  const res = await new Browser(app).get(`/jobs/${id}`);
  assert.equal(res.statusCode, 200);
  const field = /<dt>Trace<\/dt><dd data-field="trace_id">([\s\S]*?)<\/dd>/.exec(res.body);
  assert.ok(field, 'the job page has a Trace field');
  return field[1];
}

test('a job’s trace id: a link with --trace-url, text without, “—” when untraced', async (t) => {
  const enqueue = async (traceparent) =>
    (await db.admin.query("SELECT pgq.enqueue('reports', '{}', traceparent => $1) AS id", [traceparent])).rows[0].id;
  const traced = await enqueue(TRACEPARENT);
  const untraced = await enqueue(null);

  // The role holds admin only: it reads trace_id (not trace_context).
  const linked = await startDashboard(t, db, {
    role,
    traceUrl: 'https://tracing.example/trace/{trace_id}?from=pgq&q="{trace_id}"',
  });
  const href = `https://tracing.example/trace/${TRACE_ID}?from=pgq&amp;q=&quot;${TRACE_ID}&quot;`;
  assert.equal(await traceField(linked, traced), `<a href="${href}" rel="noreferrer"><code>${TRACE_ID}</code></a>`);
  assert.equal(await traceField(linked, untraced), '—');

  const plain = await startDashboard(t, db, { role });
  assert.equal(await traceField(plain, traced), `<code>${TRACE_ID}</code>`);
  assert.equal(await traceField(plain, untraced), '—');
});

test('a trace id that is not 32 lowercase hex digits is never put into the link', () => {
  const traceUrl = 'https://tracing.example/trace/{trace_id}';
  const ctx = { base: '', user: 'u', readOnly: true, traceUrl, csrf: () => 'x' };
  const job = { id: '1', queue: 'reports', state: 'ready', attempt: 0, max_attempts: 5, priority: 0, last_error: null };
  const rights = { produce: false, consume: false, admin: false };
  const field = (traceId) => {
    const page = views.jobPage(ctx, { job: { ...job, trace_id: traceId }, rights }).toString();
    return /<dd data-field="trace_id">([\s\S]*?)<\/dd>/.exec(page)[1];
  };
  assert.match(field(TRACE_ID), /^<a href="https:\/\/tracing\.example\/trace\/0af7/);
  assert.equal(field('"><script>alert(1)</script>'), '<code>&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;</code>');
  assert.equal(field(TRACE_ID.toUpperCase()), `<code>${TRACE_ID.toUpperCase()}</code>`);
  assert.equal(field(`${TRACE_ID}0`), `<code>${TRACE_ID}0</code>`);
});

test('--trace-url: refused at start unless an http(s) URL with {trace_id}', async (t) => {
  const args = (url) => ['--insecure-no-auth', '--trace-url', url];
  assert.equal(
    parseCommandLine(args('https://tracing.example/trace/{trace_id}'), {}).options.traceUrl,
    'https://tracing.example/trace/{trace_id}',
  );
  assert.equal(parseCommandLine(['--insecure-no-auth'], {}).options.traceUrl, undefined);
  assert.match(parseCommandLine(['--help'], {}).help, /--trace-url TEMPLATE/);
  const refusals = [
    ['https://tracing.example/trace/', /does not contain \{trace_id\}/],
    ['javascript:alert({trace_id})', /does not start with http:\/\/ or https:\/\//],
    ['JavaScript://%0aalert(1)//{trace_id}', /does not start with http:\/\/ or https:\/\//],
    ['data:text/html,{trace_id}', /does not start with http:\/\/ or https:\/\//],
    ['//tracing.example/{trace_id}', /does not start with http:\/\/ or https:\/\//],
    [' https://tracing.example/{trace_id}', /whitespace or a control character/],
    ['https://tracing.example/\n{trace_id}', /whitespace or a control character/],
    ['https://[tracing/{trace_id}', /not a valid URL/],
  ];
  for (const [url, why] of refusals) {
    assert.throws(() => parseCommandLine(args(url), {}), why, url);
    // The plugin's option too (createServer, the plugin, expressMiddleware).
    await assert.rejects(
      createServer({ database: db.config, sample: false, insecureNoAuth: true, traceUrl: url }),
      why,
    );
  }

  // The command: a clear error, exit status 2, before connecting anywhere.
  const bin = path.join(__dirname, '..', 'bin', 'pgq-cpp-dashboard.js');
  for (const url of ['https://tracing.example/trace/', 'javascript:alert({trace_id})']) {
    const result = spawnSync(process.execPath, [bin, '--insecure-no-auth', '--trace-url', url], {
      env: { PATH: process.env.PATH },
      encoding: 'utf8',
      timeout: 15_000,
    });
    assert.equal(result.status, 2, result.stderr);
    assert.match(
      result.stderr,
      /^pgq-cpp-dashboard: --trace-url .*expected an http\(s\) URL such as https:\/\/tracing\.example\/trace\/\{trace_id\}\n$/,
    );
  }
});
