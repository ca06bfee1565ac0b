'use strict';

// The dashboard in a real browser: Debian's chromium, headless, driven by
// puppeteer-core (which downloads nothing). The dashboard listens on a free
// port of 127.0.0.1 with a password; each role logs in through the form in
// a browser context of its own. Every page a test opens must log no console
// error, throw no uncaught exception, fail no request and open no dialog it
// does not expect; each is saved as a screenshot under dashboard/test-artifacts/.
// A running job is cancelled under a real worker: clients/node's Worker.
//
// Chromium: /usr/bin/chromium (scripts/lib.sh ensure_packages installs it),
// or PGQ_CHROMIUM.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const puppeteer = require('puppeteer-core');
const { createServer } = require('..');
// The Node client, from this repository (its own node_modules: run_tests.sh installs them).
const { CancelledError, Worker } = require('../../clients/node');
const { freshDatabase } = require('./helpers');

const CHROMIUM = process.env.PGQ_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = path.join(__dirname, '..', 'test-artifacts');
const PASSWORD = 'correct horse battery staple';
const XSS_SCRIPT = '<script>window.__xss = 1</script>';
const XSS_IMG = '<img src=x onerror="window.__xss = 2; alert(2)">';
const TEST_TIMEOUT = 90_000; // each test; every wait inside is bounded more tightly
const WAIT = 10_000; // a selector, a navigation, a function

let db;
let browser;
const servers = []; // {app, url}
let opsRole;
let viewerRole;
const ids = {}; // jobs made in before()
let bulkIds; // the 1,000 jobs of 'bulk', newest first

// ---- The browser, the servers, the pages ---------------------------------------

async function launchBrowser() {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(
      `no chromium at ${CHROMIUM}: apt-get install chromium (scripts/lib.sh ensure_packages), or set PGQ_CHROMIUM`,
    );
  }
  // Chromium refuses to start its sandbox as root; an unprivileged user keeps it.
  const args = process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [];
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [...args, '--disable-gpu', '--no-first-run', '--no-default-browser-check'],
    timeout: 30_000, // the launch
    protocolTimeout: 30_000, // every DevTools call
    defaultViewport: { width: 1400, height: 900 },
  });
}

async function closeBrowser() {
  if (!browser) return;
  const b = browser;
  browser = null;
  const closed = b.close().then(
    () => true,
    () => false,
  );
  let timer;
  const late = new Promise((resolve) => (timer = setTimeout(() => resolve(false), 10_000)));
  const inTime = await Promise.race([closed, late]);
  clearTimeout(timer);
  if (!inTime) b.process()?.kill('SIGKILL');
}

/** A dashboard listening on 127.0.0.1 (a free port), acting as `role`, with the password login. */
async function startServer(role, { database = null } = {}) {
  const app = await createServer({
    database: database || db.roleConfig(role),
    password: PASSWORD,
    loginFailureDelayMs: 0,
    sampleIntervalMs: 1000, // the overview refreshes every second (from a sample taken on demand)
    sample: false,
  });
  const server = { app, url: null };
  servers.push(server);
  await app.listen({ host: '127.0.0.1', port: 0 });
  server.url = `http://127.0.0.1:${app.server.address().port}`;
  return server;
}

let shotCount = 0;

/**
 * A page in a fresh browser context (its own cookies), logged in to `server`.
 * It records every problem: console errors, uncaught exceptions, failed
 * requests, responses >= 400 other than those allowed, unexpected dialogs.
 */
async function openTab(t, server, name, { allowedStatus = [] } = {}) {
  const context = await browser.createBrowserContext();
  t.after(() => context.close().catch(() => {}));
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  page.setDefaultNavigationTimeout(WAIT);
  const tab = {
    page,
    server,
    name,
    problems: [],
    allowedStatus: [...allowedStatus], // [{url: RegExp, status}] responses >= 400 the test provokes itself
    dialogs: [], // queue of {message, accept} the test expects
    seenDialogs: [],
  };
  const allowed = (url, status) => tab.allowedStatus.some((a) => a.url.test(url) && a.status === status);
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const url = msg.location()?.url || '';
    const status = /status of (\d{3})/.exec(msg.text());
    if (status && allowed(url, Number(status[1]))) return;
    tab.problems.push(`console error: ${msg.text()} (${url})`);
  });
  page.on('pageerror', (err) => tab.problems.push(`uncaught exception: ${err.message}`));
  page.on('requestfailed', (req) => {
    tab.problems.push(`request failed: ${req.method()} ${req.url()}: ${req.failure()?.errorText}`);
  });
  page.on('response', (res) => {
    if (res.status() >= 400 && !allowed(res.url(), res.status())) {
      tab.problems.push(`response ${res.status()} for ${res.request().method()} ${res.url()}`);
    }
  });
  page.on('dialog', async (dialog) => {
    tab.seenDialogs.push(dialog.message());
    const expected = tab.dialogs.shift();
    if (expected && expected.message === dialog.message()) {
      await (expected.accept ? dialog.accept() : dialog.dismiss());
    } else {
      tab.problems.push(`unexpected dialog (${dialog.type()}): ${dialog.message()}`);
      await dialog.dismiss();
    }
  });
  await login(tab);
  return tab;
}

async function login(tab) {
  const { page, server } = tab;
  const res = await page.goto(`${server.url}/`, { waitUntil: 'load' });
  assert.equal(res.status(), 200);
  assert.equal(new URL(page.url()).pathname, '/login', 'an anonymous visitor is sent to the login form');
  await shot(tab, 'login');
  await page.type('input[name="password"]', PASSWORD);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('form.login button[type="submit"]')]);
  assert.equal(new URL(page.url()).pathname, '/', `logged in (at ${page.url()})`);
}

async function shot(tab, what, { fullPage = true } = {}) {
  shotCount += 1;
  const file = path.join(ARTIFACTS, `${String(shotCount).padStart(3, '0')}-${tab.name}-${what}.png`);
  await tab.page.screenshot({ path: file, fullPage });
  return file;
}

/** Opens `url` (a path) in the tab: 200, loaded, screenshot taken. */
async function visit(tab, url, what) {
  const res = await tab.page.goto(`${tab.server.url}${url}`, { waitUntil: 'load' });
  assert.equal(res.status(), 200, `GET ${url}`);
  await shot(tab, what);
  return res;
}

/** Clicks `selector` and waits for the page it leads to (a form post's redirect, or a link). */
async function clickAndLoad(tab, selector, what, shotOptions) {
  const [res] = await Promise.all([tab.page.waitForNavigation({ waitUntil: 'load' }), tab.page.click(selector)]);
  assert.ok(res, `a navigation after clicking ${selector}`);
  assert.equal(res.status(), 200, `after clicking ${selector}: ${res.url()}`);
  if (what) await shot(tab, what, shotOptions);
  return res;
}

function assertClean(tab) {
  assert.deepEqual(tab.problems, [], `${tab.name}: the pages logged no error`);
  assert.deepEqual(tab.dialogs, [], `${tab.name}: every expected dialog opened`);
}

/** Resolves when check() is true, polling; rejects after `ms`. */
async function waitUntil(what, check, ms = WAIT) {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Resolves to what `promise` resolves to; rejects if that takes longer than `ms`. */
async function within(what, promise, ms = WAIT) {
  let timer;
  const late = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

const jobState = async (id) => (await db.admin.query('SELECT state FROM pgq.job($1)', [id])).rows[0]?.state;

// ---- The data ---------------------------------------------------------------------

test.before(async () => {
  fs.rmSync(ARTIFACTS, { recursive: true, force: true });
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  db = await freshDatabase('browser');
  const q = (sql, params) => db.admin.query(sql, params);
  opsRole = await db.createRole('ops');
  viewerRole = await db.createRole('viewer');

  await q("SELECT pgq.create_queue('emails', max_attempts => 1)");
  await q("SELECT pgq.create_queue('bulk')");
  await q("SELECT pgq.create_queue('work', max_attempts => 1)");
  await q("SELECT pgq.create_queue('xss', max_attempts => 1)");
  await q("SELECT pgq.create_queue('slow')");
  await q("SELECT pgq.create_queue('hidden')");
  for (const queue of ['emails', 'bulk', 'work', 'xss', 'slow']) {
    await q("SELECT pgq.grant($1, $2, 'admin'), pgq.grant($1, $2, 'produce')", [opsRole, queue]);
  }
  await q(`GRANT pg_monitor TO ${opsRole}`);
  await q("SELECT pgq.grant($1, 'work', 'consume')", [viewerRole]);

  // emails: 8 due and 2 scheduled; 3 claimed: 1 completed, 1 dead, 1 running.
  // Left: ready 5, scheduled 2, running 1, dead 1, done 1. hidden: 4 ready (not the role's).
  await q("SELECT pgq.enqueue('emails', jsonb_build_object('i', i)) FROM generate_series(1, 8) i");
  await q("SELECT pgq.enqueue('emails', '{}', run_at => now() + interval '1 hour') FROM generate_series(1, 2)");
  const claimed = (await q("SELECT id, attempt FROM pgq.claim('emails', 3)")).rows;
  assert.equal(claimed.length, 3);
  assert.equal((await q('SELECT pgq.complete($1, $2) AS ok', [claimed[0].id, claimed[0].attempt])).rows[0].ok, true);
  assert.equal(
    (await q("SELECT pgq.fail($1, $2, 'boom') AS r", [claimed[1].id, claimed[1].attempt])).rows[0].r,
    'dead',
  );
  await q("SELECT pgq.enqueue('hidden', '{}') FROM generate_series(1, 4)");

  const { rows } = await q(
    "SELECT pgq.enqueue_many('bulk', array_agg(jsonb_build_object('n', i))) AS id FROM generate_series(1, 1000) i",
  );
  bulkIds = rows.map((r) => r.id).sort((a, b) => Number(b) - Number(a));
  assert.equal(bulkIds.length, 1000);

  // work: dead jobs (retry by button, retry by fetch), a ready one (for the viewer).
  const dead = async (queue, payload, error) => {
    const id = (await q('SELECT pgq.enqueue($1, $2) AS id', [queue, payload])).rows[0].id;
    const c = (await q('SELECT id, attempt FROM pgq.claim($1)', [queue])).rows[0];
    assert.equal(c.id, id);
    assert.equal((await q('SELECT pgq.fail($1, $2, $3) AS r', [c.id, c.attempt, error])).rows[0].r, 'dead');
    return id;
  };
  ids.deadRetry = await dead('work', { to: 'ana@example.com' }, 'smtp: 554 rejected');
  ids.deadCsrf = await dead('work', { to: 'bo@example.com' }, 'smtp: timeout');
  ids.readyWork = (await q('SELECT pgq.enqueue(\'work\', \'{"to": "cy@example.com"}\') AS id')).rows[0].id;

  // xss: a dead job whose payload, progress and last error carry markup; a schedule too.
  const payload = { [XSS_SCRIPT]: XSS_SCRIPT, img: XSS_IMG, attr: '" onmouseover="window.__xss = 3' };
  ids.xss = (await q("SELECT pgq.enqueue('xss', $1) AS id", [payload])).rows[0].id;
  const x = (await q("SELECT id, attempt FROM pgq.claim('xss')")).rows[0];
  await q('SELECT pgq.progress($1, $2, $3)', [x.id, x.attempt, { step: XSS_IMG }]);
  await q('SELECT pgq.fail($1, $2, $3)', [x.id, x.attempt, `failed: ${XSS_SCRIPT} ${XSS_IMG}`]);
  await q("SELECT pgq.schedule('nightly', 'xss', '0 3 * * *', $1)", [{ html: XSS_SCRIPT, img: XSS_IMG }]);

  // On call (3.0): keyed jobs, a workflow with a dead parent, dead jobs to
  // select, a stream with a consumer behind. 'flow' is the ops role's;
  // 'hidden' is not: its jobs (a keyed one, a child of each parent) must never show.
  await q("SELECT pgq.create_queue('flow', max_attempts => 1)");
  await q("SELECT pgq.grant($1, 'flow', 'admin'), pgq.grant($1, 'flow', 'produce')", [opsRole]);
  ids.flowDead1 = await dead('flow', { n: 1 }, 'boom 1');
  ids.flowDead2 = await dead('flow', { n: 2 }, 'boom 2');
  ids.flowPurge1 = await dead('flow', { n: 3 }, 'boom 3');
  ids.flowPurge2 = await dead('flow', { n: 4 }, 'boom 4');
  ids.keyed = (await q("SELECT pgq.enqueue('flow', '{}', dedupe_key => 'invoice-2026-0042') AS id")).rows[0].id;
  ids.hiddenKeyed = (await q("SELECT pgq.enqueue('hidden', '{}', dedupe_key => 'invoice-2026-0042') AS id")).rows[0].id;
  ids.parent = (await q("SELECT pgq.enqueue('flow', '{\"step\": \"extract\"}', priority => 100) AS id")).rows[0].id;
  ids.child = (await q("SELECT pgq.enqueue('flow', '{\"step\": \"load\"}', after => ARRAY[$1::bigint]) AS id", [ids.parent])).rows[0].id;
  ids.hiddenChild = (await q("SELECT pgq.enqueue('hidden', '{}', after => ARRAY[$1::bigint]) AS id", [ids.parent])).rows[0].id;
  ids.doomed = (await q("SELECT pgq.enqueue('flow', '{\"step\": \"fetch\"}', priority => 200) AS id")).rows[0].id;
  ids.doomedChild = (await q("SELECT pgq.enqueue('flow', '{\"step\": \"report\"}', after => ARRAY[$1::bigint]) AS id", [ids.doomed])).rows[0].id;
  ids.hiddenDoomedChild = (await q("SELECT pgq.enqueue('hidden', '{}', after => ARRAY[$1::bigint]) AS id", [ids.doomed])).rows[0].id;
  const d = (await q("SELECT id, attempt FROM pgq.claim('flow')")).rows[0];
  assert.equal(d.id, ids.doomed);
  await q("SELECT pgq.fail($1, $2, 'upstream 502')", [d.id, d.attempt]);
  await q("SELECT pgq.create_stream('orders'), pgq.create_stream('audit')");
  await q("SELECT pgq.register_consumer('orders', 'billing'), pgq.register_consumer('orders', 'search-index')");
  await q("SELECT pgq.append('orders', jsonb_build_object('n', i)) FROM generate_series(1, 25) i");
  await q("SELECT pgq.register_consumer('audit', 'archiver'), pgq.append('audit', '{}')");
  const batch = (await q("SELECT DISTINCT batch_id FROM pgq.next_batch('audit', 'archiver')")).rows[0].batch_id;
  await q('SELECT pgq.finish_batch($1)', [batch]);
  // One rotation of both rings (made due as sql/streams.sql does: a 1 s
  // rotation and a wait just over it), then a pass that truncates what every
  // consumer finished: audit's segment 0 goes, orders' stays sealed (its
  // consumers are behind).
  await q("SELECT pgq.alter_stream('audit', rotation => '1 second'), pgq.alter_stream('orders', rotation => '1 second')");
  await q('SELECT pg_sleep(1.1)');
  await q('SELECT pgq.maintain()');
  await q("SELECT pgq.alter_stream('audit', rotation => '1 hour'), pgq.alter_stream('orders', rotation => '1 hour')");
  await q("SELECT pgq.append('audit', '{}'), pgq.append('orders', '{}')");
  await q('SELECT pgq.maintain()');
  await q("SELECT count(*) FROM pgq.next_batch('orders', 'billing', 10)"); // an open batch
  await q("SELECT pgq.grant_stream($1, 'orders', 'consume')", [opsRole]);
  // audit's ring is shown through a right on it (pgq.stream_segments), no table grant
  await q("SELECT pgq.grant_stream($1, 'audit', 'consume')", [opsRole]);

  browser = await launchBrowser();
});

test.after(async () => {
  await closeBrowser();
  for (const s of servers.splice(0)) await s.app.close().catch(() => {});
  await db?.close();
});

// ---- The tests --------------------------------------------------------------------

/** The overview's table as the browser shows it: {queue: {field: text}}. */
function readOverview(page) {
  return page.$$eval('#queues tbody tr', (rows) =>
    Object.fromEntries(
      rows.map((row) => [
        row.getAttribute('data-queue'),
        Object.fromEntries(
          [...row.querySelectorAll('td[data-field]')].map((td) => [
            td.getAttribute('data-field'),
            td.textContent.trim(),
          ]),
        ),
      ]),
    ),
  );
}

test(
  'the overview shows the counts of a known workload, and refreshes them live',
  { timeout: TEST_TIMEOUT },
  async (t) => {
    const server = await startServer(opsRole);
    const tab = await openTab(t, server, 'overview');
    // done_recent counts a completion by its commit callback: reload until it shows (bounded).
    const deadline = Date.now() + WAIT;
    let table;
    for (;;) {
      await visit(tab, '/', 'overview');
      table = await readOverview(tab.page);
      if (table.emails?.done_recent === '1' || Date.now() > deadline) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.deepEqual(
      Object.keys(table).sort(),
      ['bulk', 'emails', 'flow', 'slow', 'work', 'xss'],
      'the queues the role holds a right on',
    );
    const pick = (row, fields) => Object.fromEntries(fields.map((f) => [f, row[f]]));
    const fields = ['ready', 'scheduled', 'running', 'expired', 'dead', 'awaiting_parents', 'done_recent', 'paused'];
    assert.deepEqual(pick(table.emails, fields), {
      ready: '5',
      scheduled: '2',
      running: '1',
      expired: '0',
      dead: '1',
      awaiting_parents: '0',
      done_recent: '1',
      paused: 'no',
    });
    assert.equal(table.bulk.ready, '1000');
    assert.match(table.emails.oldest_ready, /^\d+(\.\d)? s$/);
    // The same numbers as pgq.queue_stats.
    const stats = (await db.admin.query("SELECT * FROM pgq.queue_stats WHERE queue = 'emails'")).rows[0];
    for (const f of ['ready', 'scheduled', 'running', 'dead']) assert.equal(table.emails[f], String(stats[f]), f);

    // The sparklines: uPlot (a static file, allowed by the CSP) drew a canvas per cell.
    const charts = await tab.page.$$eval('.spark', (els) => els.map((el) => Boolean(el.querySelector('canvas'))));
    assert.equal(charts.length, 12); // two per queue
    assert.ok(charts.every(Boolean), 'every sparkline drawn');

    // Live: more jobs show up without a reload (overview.js polls /api/overview).
    await db.admin.query("SELECT pgq.enqueue('emails', '{}') FROM generate_series(1, 3)");
    await tab.page.waitForFunction(
      () => document.querySelector('tr[data-queue="emails"] td[data-field="ready"]')?.textContent === '8',
      { timeout: WAIT },
    );
    await shot(tab, 'overview-refreshed');
    assertClean(tab);
  },
);

test('paging through 1,000 jobs by clicking "Older" reaches every job once', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(opsRole);
  const tab = await openTab(t, server, 'paging');
  await visit(tab, '/queues/bulk', 'bulk-page-01');
  const seen = [];
  for (let n = 1; ; n++) {
    assert.ok(n <= 20, 'paging ends');
    const pageIds = await tab.page.$$eval('tr[data-job-id]', (rows) => rows.map((r) => r.getAttribute('data-job-id')));
    assert.equal(pageIds.length, 100, `page ${n}`);
    seen.push(...pageIds);
    const older = await tab.page.$('a[rel="next"]');
    if (!older) break;
    // The window only: a full page of 100 rows takes long to capture, ten times.
    await clickAndLoad(tab, 'a[rel="next"]', `bulk-page-${String(n + 1).padStart(2, '0')}`, { fullPage: false });
    assert.match(tab.page.url(), /before_id=\d+/);
  }
  assert.equal(seen.length, 1000);
  assert.equal(new Set(seen).size, 1000, 'no job twice');
  assert.deepEqual(seen, bulkIds, 'every job, newest first');
  // The last page links back to the newest.
  await clickAndLoad(tab, 'nav.pager a:not([rel])', 'bulk-back-to-newest');
  assert.equal(new URL(tab.page.url()).search, '');
  assertClean(tab);
});

test('retrying a dead job by its button moves it back to pending', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(opsRole);
  const tab = await openTab(t, server, 'retry');
  const id = ids.deadRetry;
  await visit(tab, `/jobs/${id}`, 'dead-job');
  assert.equal(await tab.page.$eval('h1 .state', (el) => el.textContent), 'dead');
  assert.equal(await tab.page.$eval('pre.error-text', (el) => el.textContent), 'smtp: 554 rejected');
  const form = `form[action="/jobs/${id}/retry"]`;
  const token = await tab.page.$eval(`${form} input[name="_csrf"]`, (el) => el.value);
  assert.ok(token.length > 10, 'the form carries the CSRF token');
  await clickAndLoad(tab, `${form} button[type="submit"]`, 'dead-job-retried');
  assert.equal(new URL(tab.page.url()).pathname, `/jobs/${id}`);
  assert.equal(
    await tab.page.$eval('p.notice', (el) => el.textContent),
    'The job is pending again, with fresh attempts.',
  );
  assert.equal(await tab.page.$eval('h1 .state', (el) => el.textContent), 'ready');
  assert.equal(await tab.page.$(form), null, 'no retry button for a live job');
  assert.equal(await jobState(id), 'ready');
  assertClean(tab);
});

test('cancelling a running job from its page reaches its worker', { timeout: TEST_TIMEOUT }, async (t) => {
  const id = (await db.admin.query("SELECT pgq.enqueue('slow', '{\"slow\": true}') AS id")).rows[0].id;
  // A real worker (the Node client's) claims it; its handler runs until the
  // job's signal is aborted, then resolves to a result that, were it
  // recorded, would complete the job.
  const runs = []; // {id, attempt, aborted: Promise<the signal's reason>}, one per handler call
  const logged = []; // the worker's warnings and errors
  let endHandlers;
  const testOver = new Promise((resolve) => (endHandlers = resolve)); // a handler never waits past the test
  const worker = new Worker({
    ...db.config,
    queue: 'slow',
    lease: 3, // a heartbeat every second: the cancel is seen within about one
    handler: async (job) => {
      const aborted = new Promise((resolve) =>
        job.signal.addEventListener('abort', () => resolve(job.signal.reason), { once: true }),
      );
      runs.push({ id: job.id, attempt: job.attempt, aborted });
      await Promise.race([aborted, testOver]);
      return { would: 'be its result' };
    },
    logger: {
      warn: (...args) => logged.push(`warn: ${args.join(' ')}`),
      error: (...args) => logged.push(`error: ${args.join(' ')}`),
    },
  });
  t.after(() => {
    endHandlers();
    return worker.stop();
  });
  await worker.start();
  await waitUntil('the handler to start', () => runs.length > 0);
  assert.equal(runs[0].id, id);
  assert.equal(await jobState(id), 'running');

  const server = await startServer(opsRole);
  const tab = await openTab(t, server, 'cancel');
  await visit(tab, `/jobs/${id}`, 'running-job');
  assert.equal(await tab.page.$eval('h1 .state', (el) => el.textContent), 'running');
  const button = `form[action="/jobs/${id}/cancel"] button[type="submit"]`;

  // The confirmation, declined: nothing is posted.
  tab.dialogs.push({ message: 'Cancel this job?', accept: false });
  await tab.page.click(button);
  await waitUntil('the confirmation', () => tab.seenDialogs.length === 1);
  await new Promise((resolve) => setTimeout(resolve, 300)); // a post would have started by now
  assert.deepEqual(tab.seenDialogs, ['Cancel this job?']);
  assert.equal(new URL(tab.page.url()).pathname, `/jobs/${id}`);
  assert.equal(new URL(tab.page.url()).search, '');
  assert.equal(await jobState(id), 'running');

  // Accepted: cancelled.
  tab.dialogs.push({ message: 'Cancel this job?', accept: true });
  await clickAndLoad(tab, button, 'running-job-cancelled');
  assert.equal(await tab.page.$eval('p.notice', (el) => el.textContent), 'The job is cancelled.');
  assert.equal(await tab.page.$eval('h1 .state', (el) => el.textContent), 'cancelled');
  assert.equal(await jobState(id), 'cancelled');

  // The worker's next heartbeat finds the claim gone and the job cancelled: the signal is aborted.
  const reason = await within("the handler's signal to be aborted", runs[0].aborted);
  assert.ok(reason instanceof CancelledError, `aborted with ${reason}`);
  // It stops cleanly (its waiting claim cancelled), having recorded nothing for the job.
  await within('the worker to stop', worker.stop());
  assert.equal(runs.length, 1, 'the handler ran once');
  assert.equal(await jobState(id), 'cancelled', 'neither completed nor failed');
  assert.equal(logged.length, 1, logged.join('\n'));
  assert.match(logged[0], new RegExp(`^warn: pgq: job ${id} attempt ${runs[0].attempt} was cancelled`));
  const done = await db.admin.query('SELECT pgq.complete($1, $2) AS ok', [id, runs[0].attempt]);
  assert.equal(done.rows[0].ok, false, "the claim's complete is refused");
  assertClean(tab);
});

test('a role without the admin right is shown no admin button', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(viewerRole);
  const tab = await openTab(t, server, 'viewer');
  await visit(tab, '/', 'viewer-overview');
  assert.deepEqual(Object.keys(await readOverview(tab.page)), ['work']);
  await visit(tab, '/queues/work', 'viewer-queue');
  assert.match(await tab.page.$eval('main', (el) => el.textContent), /rights on the queue: consume/);
  const postForms = async () =>
    tab.page.$$eval('form[method="post"]', (forms) => forms.map((f) => new URL(f.action).pathname));
  assert.deepEqual(await postForms(), ['/logout'], 'only the logout form');
  assert.equal(await tab.page.$$eval('.actions button', (b) => b.length), 0);
  for (const id of [ids.deadCsrf, ids.readyWork]) {
    await visit(tab, `/jobs/${id}`, `viewer-job-${id}`);
    assert.deepEqual(await postForms(), ['/logout'], `job ${id}: no cancel, no retry`);
  }
  assertClean(tab);
});

test('a button whose right was revoked meanwhile is refused with the database’s message', { timeout: TEST_TIMEOUT }, async (t) => {
  const role = await db.createRole('revoked');
  await db.admin.query("SELECT pgq.grant($1, 'bulk', 'admin')", [role]);
  const server = await startServer(role);
  const tab = await openTab(t, server, 'revoked');
  await visit(tab, '/queues/bulk', 'revoked-queue');
  const pause = 'form[action="/queues/bulk/pause"] button[type="submit"]';
  assert.ok(await tab.page.$(pause), 'admin: the Pause button is shown');

  // The grant goes while the page is open; the click is the database's to refuse.
  await db.admin.query("SELECT pgq.revoke($1, 'bulk', 'admin')", [role]);
  tab.allowedStatus.push({ url: /\/queues\/bulk\/pause$/, status: 403 });
  const [res] = await Promise.all([tab.page.waitForNavigation({ waitUntil: 'load' }), tab.page.click(pause)]);
  assert.equal(res.status(), 403);
  await shot(tab, 'revoked-refused');
  const alert = await tab.page.$eval('div.error[role="alert"]', (el) => el.textContent);
  assert.match(alert, /Refused by the database/);
  assert.match(alert, /permission denied/);
  assert.match(alert, /42501/);
  const paused = await db.admin.query("SELECT paused FROM pgq.queues WHERE name = 'bulk'");
  assert.equal(paused.rows[0].paused, false, 'the queue is not paused');
  assertClean(tab);
});

test('markup in a payload, a progress, an error and a schedule renders inert', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(opsRole);
  const tab = await openTab(t, server, 'xss');
  const pages = [
    [`/jobs/${ids.xss}`, 'xss-job'],
    ['/queues/xss', 'xss-queue'],
    ['/queues/xss?state=dead', 'xss-queue-dead'],
    ['/schedules', 'xss-schedules'],
    ['/', 'xss-overview'],
  ];
  for (const [url, what] of pages) {
    await visit(tab, url, what);
    // Give an injected handler (an <img> error) the time to run, were there one.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const state = await tab.page.evaluate(() => ({
      xss: window.__xss,
      imgs: document.querySelectorAll('img').length,
      scripts: [...document.scripts].map((s) => s.src || s.type),
      handlers: document.querySelectorAll('[onerror], [onmouseover]').length,
    }));
    assert.equal(state.xss, undefined, `${url}: window.__xss stays undefined`);
    assert.equal(state.imgs, 0, `${url}: no <img> element`);
    assert.equal(state.handlers, 0, `${url}: no inline handler`);
    for (const s of state.scripts)
      assert.match(s, /^(http:\/\/127\.0\.0\.1:\d+\/static\/[\w.]+\.js|application\/json)$/, url);
  }
  assert.deepEqual(tab.seenDialogs, [], 'no dialog opened');
  // And the text is shown as text.
  await visit(tab, `/jobs/${ids.xss}`, 'xss-job-again');
  const text = await tab.page.evaluate(() => ({
    error: document.querySelector('pre.error-text').textContent,
    json: [...document.querySelectorAll('pre.json')].map((p) => p.textContent).join('\n'),
  }));
  assert.equal(text.error, `failed: ${XSS_SCRIPT} ${XSS_IMG}`);
  assert.ok(text.json.includes(XSS_SCRIPT) && text.json.includes('onerror'), 'the payload shown as text');
  assert.equal(await tab.page.evaluate(() => window.__xss), undefined);
  assertClean(tab);
});

test('a POST from the page without the CSRF token is refused (403)', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(opsRole);
  const tab = await openTab(t, server, 'csrf');
  const id = ids.deadCsrf;
  await visit(tab, `/jobs/${id}`, 'csrf-job');
  const action = `/jobs/${id}/retry`;
  tab.allowedStatus.push({ url: new RegExp(`/jobs/${id}/retry$`), status: 403 });
  const post = (body) =>
    tab.page.evaluate(
      async (url, form) => {
        const res = await fetch(url, {
          method: 'POST',
          credentials: 'same-origin',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams(form).toString(),
        });
        return { status: res.status, redirected: res.redirected, url: res.url, text: await res.text() };
      },
      action,
      body,
    );
  const none = await post({});
  assert.equal(none.status, 403, 'no token');
  const forged = await post({ _csrf: 'forged' });
  assert.equal(forged.status, 403, 'a forged token');
  assert.equal(await jobState(id), 'dead', 'nothing retried');

  // The page's own token, sent the same way, works: the refusals were the token's.
  const token = await tab.page.$eval(`form[action="${action}"] input[name="_csrf"]`, (el) => el.value);
  const ok = await post({ _csrf: token });
  assert.equal(ok.status, 200);
  assert.ok(ok.redirected && ok.url.endsWith(`/jobs/${id}?notice=job_retried`), ok.url);
  assert.equal(await jobState(id), 'ready');
  assertClean(tab);
});

// ---- On call (3.0): search, workflow, dead reasons, bulk actions, streams, database unavailable ----

const texts = (page, selector) => page.$$eval(selector, (els) => els.map((el) => el.textContent.trim()));

test('the header’s search box finds a job by id and by dedupe key, the role’s only', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(opsRole);
  const tab = await openTab(t, server, 'search');
  const search = async (text, what) => {
    await tab.page.type('header form.search input[name="q"]', text);
    await clickAndLoad(tab, 'header form.search button[type="submit"]', what);
  };
  await search('invoice-2026-0042', 'search-by-key');
  assert.equal(new URL(tab.page.url()).pathname, '/search');
  assert.deepEqual(await tab.page.$$eval('table.jobs tbody tr', (rows) => rows.map((r) => r.dataset.jobId)), [
    String(ids.keyed),
  ]);
  await clickAndLoad(tab, `table.jobs a[href="/jobs/${ids.keyed}"]`, 'search-result-job');
  assert.equal(await tab.page.$eval('h1', (el) => el.textContent.trim().split(' ')[1]), String(ids.keyed));
  await search(String(ids.child), 'search-by-id');
  assert.equal(new URL(tab.page.url()).pathname, `/jobs/${ids.child}`);
  await search(String(ids.hiddenKeyed), 'search-hidden-id');
  assert.equal(new URL(tab.page.url()).pathname, '/search');
  assert.match(await tab.page.$eval('main', (el) => el.textContent), new RegExp(`No job ${ids.hiddenKeyed} that this role may read`));
  assertClean(tab);
});

test('a job’s workflow: one click from its page to its children and back to its parent', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(opsRole);
  const tab = await openTab(t, server, 'workflow');
  await visit(tab, `/jobs/${ids.parent}`, 'workflow-parent');
  await tab.page.click('a[href="#workflow"]');
  await tab.page.waitForFunction(() => location.hash === '#workflow');
  await shot(tab, 'workflow-section', { fullPage: false });
  assert.deepEqual(await tab.page.$$eval('#workflow li', (li) => li.map((l) => l.dataset.jobId)), [String(ids.child)]);
  await clickAndLoad(tab, `#workflow a[href="/jobs/${ids.child}"]`, 'workflow-child');
  assert.equal(await tab.page.$eval('h1 .state', (el) => el.textContent), 'waiting');
  assert.deepEqual(await texts(tab.page, '#workflow h3'), ['Waits for', 'Children waiting for it']);
  await clickAndLoad(tab, `#workflow a[href="/jobs/${ids.parent}"]`);
  assert.equal(new URL(tab.page.url()).pathname, `/jobs/${ids.parent}`);

  // the dead parent and what it took with it (not the hidden queue's child)
  await visit(tab, `/jobs/${ids.doomed}`, 'workflow-dead-parent');
  assert.deepEqual(await tab.page.$$eval('#workflow li', (li) => li.map((l) => l.dataset.jobId)), [
    String(ids.doomedChild),
  ]);
  assert.match(await tab.page.$eval('#workflow', (el) => el.textContent), /Dependents it took with it/);
  await clickAndLoad(tab, `#workflow a[href="/jobs/${ids.doomedChild}"]`, 'workflow-dead-child');
  assert.match(
    await tab.page.$eval('#workflow p.failed-parent', (el) => el.textContent),
    new RegExp(`its parent job ${ids.doomed} did not complete`),
  );
  assert.doesNotMatch(await tab.page.content(), new RegExp(`/jobs/(${ids.hiddenChild}|${ids.hiddenDoomedChild})"`));
  assertClean(tab);
});

test('retrying selected dead jobs: tick, confirm, and what happened to each', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(opsRole);
  const tab = await openTab(t, server, 'bulk');
  await visit(tab, '/queues/flow?state=dead', 'bulk-select');
  for (const id of [ids.flowDead1, ids.flowDead2]) await tab.page.click(`input[type="checkbox"][value="${id}"]`);
  await clickAndLoad(tab, 'form#bulk button[value="retry"]', 'bulk-confirm');
  assert.equal(await tab.page.$eval('h1', (el) => el.textContent), 'Retry 2 jobs?');
  assert.equal(await jobState(ids.flowDead1), 'dead', 'nothing done before the confirmation');
  await clickAndLoad(tab, 'form#bulk-confirm button[type="submit"]', 'bulk-result');
  assert.equal(await tab.page.$eval('h1', (el) => el.textContent), 'Retry: 2 of 2 jobs');
  assert.deepEqual(await tab.page.$$eval('table.bulk-result tbody tr', (rows) => rows.map((r) => r.dataset.outcome)), [
    'done',
    'done',
  ]);
  assert.equal(await jobState(ids.flowDead1), 'ready');
  assert.equal(await jobState(ids.flowDead2), 'ready');
  assertClean(tab);
});

test('filter by dead reason, purge the selected dead jobs, and each outcome said', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(opsRole);
  const tab = await openTab(t, server, 'purge');
  await visit(tab, '/queues/flow', 'reason-all');
  await tab.page.select('form.filter select[name="reason"]', 'exhausted');
  await clickAndLoad(tab, 'form.filter button[type="submit"]', 'reason-exhausted');
  assert.equal(new URL(tab.page.url()).searchParams.get('reason'), 'exhausted');
  const rows = await tab.page.$$eval('table.jobs tbody tr', (trs) =>
    trs.map((r) => [r.dataset.jobId, r.querySelector('.reason')?.textContent ?? null]),
  );
  const listed = new Map(rows);
  for (const id of [ids.flowPurge1, ids.flowPurge2, ids.doomed]) assert.equal(listed.get(String(id)), 'exhausted', `job ${id}`);
  assert.ok(!listed.has(String(ids.doomedChild)), 'its dependency_failed child is not exhausted');
  assert.ok(!listed.has(String(ids.keyed)), 'a live job has no dead reason');

  // Tick two; before the confirmation someone else retries one of them.
  for (const id of [ids.flowPurge1, ids.flowPurge2]) await tab.page.click(`input[type="checkbox"][value="${id}"]`);
  await clickAndLoad(tab, 'form#bulk button[value="purge"]', 'purge-confirm');
  assert.equal(await tab.page.$eval('h1', (el) => el.textContent), 'Purge 2 jobs?');
  assert.equal(await jobState(ids.flowPurge1), 'dead', 'nothing done before the confirmation');
  await db.admin.query('SELECT pgq.retry_dead($1::bigint)', [ids.flowPurge2]);
  await clickAndLoad(tab, 'form#bulk-confirm button[type="submit"]', 'purge-result');
  assert.equal(await tab.page.$eval('h1', (el) => el.textContent), 'Purge: 1 of 2 jobs');
  const outcomes = await tab.page.$$eval('table.bulk-result tbody tr', (trs) =>
    trs.map((r) => [r.dataset.jobId, r.dataset.word, r.children[1].textContent.trim()]),
  );
  assert.deepEqual(new Map(outcomes.map(([id, word]) => [id, word])), new Map([
    [String(ids.flowPurge1), 'purged'],
    [String(ids.flowPurge2), 'not_dead'],
  ]));
  assert.match(outcomes.find(([id]) => id === String(ids.flowPurge2))[2], /^not deleted: not dead/);
  assert.equal(await jobState(ids.flowPurge1), undefined);
  assert.equal(await jobState(ids.flowPurge2), 'ready');

  // The job page: cancelled, its reason shown; cancelling again says why not; purge it.
  await visit(tab, `/jobs/${ids.flowPurge2}`, 'purge-job-live');
  tab.dialogs.push({ message: 'Cancel this job?', accept: true });
  await clickAndLoad(tab, `form[action="/jobs/${ids.flowPurge2}/cancel"] button[type="submit"]`, 'purge-job-cancelled');
  assert.equal(await tab.page.$eval('dd[data-field="dead_reason"]', (el) => el.textContent), 'cancelled');
  // the same button posted again (a second tab's stale page): the outcome word's text
  const token = await tab.page.$eval('form[action$="/purge"] input[name="_csrf"]', (el) => el.value);
  const submitted = tab.page.waitForNavigation({ waitUntil: 'load' });
  await tab.page.evaluate(
    (action, csrf) => {
      const f = document.createElement('form');
      f.method = 'post';
      f.action = action;
      const i = document.createElement('input');
      i.type = 'hidden';
      i.name = '_csrf';
      i.value = csrf;
      f.append(i);
      document.body.append(f);
      f.submit();
    },
    `/jobs/${ids.flowPurge2}/cancel`,
    token,
  );
  assert.equal((await submitted).status(), 200);
  assert.equal(await tab.page.$eval('p.notice', (el) => el.textContent), 'Nothing done: not cancelled: already cancelled.');
  await shot(tab, 'purge-job-already-cancelled');
  tab.dialogs.push({ message: 'Delete this dead job? This cannot be undone.', accept: true });
  await clickAndLoad(tab, `form[action="/jobs/${ids.flowPurge2}/purge"] button[type="submit"]`, 'purge-job-purged');
  assert.equal(new URL(tab.page.url()).pathname, '/queues/flow');
  assert.equal(await tab.page.$eval('p.notice', (el) => el.textContent), `Dead job ${ids.flowPurge2} deleted.`);
  assert.equal(await jobState(ids.flowPurge2), undefined);
  assertClean(tab);
});

test('the streams page: consumers, their lag, the ring’s segments', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(opsRole);
  const tab = await openTab(t, server, 'streams');
  await visit(tab, '/', 'streams-front');
  await clickAndLoad(tab, 'header nav a[href="/streams"]', 'streams');
  const consumers = await tab.page.$$eval('table.consumers tbody tr', (rows) =>
    rows.map((r) => [r.dataset.stream, r.dataset.consumer, r.children[3].textContent.trim()]),
  );
  assert.deepEqual(consumers, [
    ['audit', 'archiver', '1'],
    ['orders', 'billing', '26'],
    ['orders', 'search-index', '26'],
  ]);
  const billing = await tab.page.$eval('tr[data-consumer="billing"]', (el) => el.children[4].textContent);
  assert.match(billing, /^open \d/, 'billing’s open batch and its age');
  assert.deepEqual(await texts(tab.page, 'h3[data-ring]'), ['audit', 'orders']);
  const segment = (stream, n) =>
    tab.page.$eval(`tr[data-stream="${stream}"][data-segment="${n}"]`, (el) => el.children[1].textContent.trim());
  // rotated once: segment 1 is current; orders' 0 waits for its consumers, audit's 0 was truncated
  assert.equal(await segment('orders', 1), 'current');
  assert.equal(await segment('orders', 0), 'sealed, awaiting its readers');
  assert.equal(await segment('audit', 1), 'current');
  assert.equal(await segment('audit', 0), 'empty (truncated)');
  assert.match(await tab.page.$eval('main', (el) => el.textContent), /1 rotation so far/);
  assertClean(tab);
});

test('a database out of reach: a 503 page that says what to check, no stack trace', { timeout: TEST_TIMEOUT }, async (t) => {
  const server = await startServer(null, {
    database: { host: '/nonexistent/pgq-browser-test', port: 5432, user: 'x', database: 'x' },
  });
  const tab = await openTab(t, server, 'unavailable', {
    allowedStatus: [{ url: new RegExp(`^${server.url}/(\\?.*)?$`), status: 503 }],
  });
  const res = await tab.page.goto(`${server.url}/`, { waitUntil: 'load' });
  assert.equal(res.status(), 503);
  await shot(tab, 'database-unavailable');
  const alert = await tab.page.$eval('div.error[role="alert"]', (el) => el.textContent);
  assert.match(alert, /Database unavailable/);
  assert.match(alert, /There is no PostgreSQL socket where the dashboard looks for it/);
  assert.match(alert, /What to check/);
  assert.doesNotMatch(await tab.page.content(), /ENOENT|    at /);
  assertClean(tab);
});
