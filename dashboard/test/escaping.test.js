'use strict';

// Payloads, errors, schedules and header values are user data: a <script>
// in any of them renders as text, never as markup.

const test = require('node:test');
const assert = require('node:assert/strict');
const { freshDatabase, startDashboard, Browser } = require('./helpers');
const { html, jsonScript, escapeHtml } = require('../lib/html');

const XSS = '<script>alert(1)</script>';
const IMG = '<img src=x onerror=alert(1)>';

let db;
let jobId;

test.before(async () => {
  db = await freshDatabase('escaping');
  await db.admin.query("SELECT pgq.create_queue('xss', max_attempts => 1, keep_completed => '1 hour')");
  const payload = { [XSS]: XSS, img: IMG, attr: '" onmouseover="alert(1)', quote: "' onclick='alert(1)" };
  jobId = (await db.admin.query("SELECT pgq.enqueue('xss', $1) AS id", [payload])).rows[0].id;
  const c = (await db.admin.query("SELECT id, attempt FROM pgq.claim('xss')")).rows[0];
  await db.admin.query('SELECT pgq.progress($1, $2, $3)', [c.id, c.attempt, { step: XSS }]);
  await db.admin.query('SELECT pgq.fail($1, $2, $3)', [c.id, c.attempt, `failed: ${XSS} ${IMG}`]);
  await db.admin.query("SELECT pgq.schedule('nightly', 'xss', '0 3 * * *', $1)", [{ html: XSS }]);
  // A completed job with a result.
  await db.admin.query("SELECT pgq.enqueue('xss', '{}')");
  const d = (await db.admin.query("SELECT id, attempt FROM pgq.claim('xss')")).rows[0];
  await db.admin.query('SELECT pgq.complete($1, $2, $3)', [d.id, d.attempt, { result: XSS }]);
});

test.after(() => db?.close());

// Every <script> element of a page is one of ours: a static file, or the
// overview's JSON data.
function assertInert(body, where) {
  assert.ok(!body.includes('<script>alert'), `${where}: raw <script>alert`);
  assert.ok(!body.includes('<img src=x'), `${where}: raw <img>`);
  assert.ok(!body.includes('" onmouseover="'), `${where}: an attribute broken out of`);
  assert.ok(!body.includes("' onclick='"), `${where}: an attribute broken out of`);
  for (const [tag] of body.matchAll(/<script[^>]*>/g)) {
    assert.match(
      tag,
      /^<script (src="\/static\/[\w.]+"|type="application\/json" id="overview-data")>$/,
      `${where}: ${tag}`,
    );
  }
}

test('a payload, a progress, a result and an error with <script> render escaped', async (t) => {
  const app = await startDashboard(t, db);
  const browser = new Browser(app);
  const job = await browser.get(`/jobs/${jobId}`);
  assert.equal(job.statusCode, 200);
  assertInert(job.body, 'job page');
  assert.ok(job.body.includes('&lt;script&gt;alert(1)&lt;/script&gt;'));
  assert.ok(job.body.includes('failed: &lt;script&gt;alert(1)&lt;/script&gt; &lt;img src=x onerror=alert(1)&gt;'));
  assert.ok(job.body.includes('&quot;step&quot;: &quot;&lt;script&gt;'), 'the progress');

  const queue = await browser.get('/queues/xss');
  assertInert(queue.body, 'queue page');
  assert.ok(queue.body.includes('failed: &lt;script&gt;alert(1)&lt;/script&gt;'));
  const done = await browser.get('/queues/xss?state=done');
  assert.match(done.body, /data-job-id/);
  const doneId = /data-job-id="(\d+)"/.exec(done.body)[1];
  const result = await browser.get(`/jobs/${doneId}`);
  assertInert(result.body, 'done job page');
  assert.ok(result.body.includes('&quot;result&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;'));

  for (const url of ['/', '/schedules', '/workers', '/coordination']) {
    const res = await browser.get(url);
    assert.equal(res.statusCode, 200, url);
    assertInert(res.body, url);
  }
  assert.ok((await browser.get('/schedules')).body.includes('&lt;script&gt;alert(1)&lt;/script&gt;'));
});

test('a header value shown on the page (the proxy user) renders escaped', async (t) => {
  const app = await startDashboard(t, db, { proxyHeader: 'X-Forwarded-User' });
  const res = await new Browser(app, { 'x-forwarded-user': XSS }).get('/');
  assert.equal(res.statusCode, 200);
  assertInert(res.body, 'overview as a user named <script>');
  assert.ok(res.body.includes('<span>&lt;script&gt;alert(1)&lt;/script&gt;</span>'));
});

test('JSON embedded in a page cannot close its script element', () => {
  const data = { s: `</script>${XSS}<!--`, u: '\u2028\u2029', a: '&' };
  const out = jsonScript('overview-data', data).toString();
  assert.equal(out.match(/<\/script>/g).length, 1, 'only its own end tag');
  assert.ok(!out.includes('<!--'));
  const inner = /^<script type="application\/json" id="overview-data">(.*)<\/script>$/s.exec(out)[1];
  assert.deepEqual(JSON.parse(inner), data);
});

test('html`` escapes every interpolation, once', () => {
  assert.equal(escapeHtml(`<>&"'`), '&lt;&gt;&amp;&quot;&#39;');
  const name = '<b>"x"</b>';
  assert.equal(
    html`<td title="${name}">${name}</td>`.toString(),
    '<td title="&lt;b&gt;&quot;x&quot;&lt;/b&gt;">&lt;b&gt;&quot;x&quot;&lt;/b&gt;</td>',
  );
  const inner = html`<i>${name}</i>`;
  assert.equal(
    html`<p>${inner}${[name, inner]}${null}${false}${0}</p>`.toString(),
    '<p><i>&lt;b&gt;&quot;x&quot;&lt;/b&gt;</i>&lt;b&gt;&quot;x&quot;&lt;/b&gt;<i>&lt;b&gt;&quot;x&quot;&lt;/b&gt;</i>0</p>',
  );
});
