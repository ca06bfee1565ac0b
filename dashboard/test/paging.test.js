'use strict';

// A queue page pages through its jobs with before_id (pgq.list_jobs): every
// job once, newest first, in pages of the size asked, with a state filter.

const test = require('node:test');
const assert = require('node:assert/strict');
const { freshDatabase, startDashboard, Browser, jobIds, olderLink } = require('./helpers');

let db;
let all; // the 1,000 job ids, newest first

test.before(async () => {
  db = await freshDatabase('paging');
  await db.admin.query("SELECT pgq.create_queue('bulk')");
  const { rows } = await db.admin.query(
    "SELECT pgq.enqueue_many('bulk', array_agg(jsonb_build_object('n', i))) AS id FROM generate_series(1, 1000) i",
  );
  all = rows.map((r) => r.id).sort((a, b) => Number(b) - Number(a));
  assert.equal(all.length, 1000);
});

test.after(() => db?.close());

async function pageThrough(browser, firstUrl) {
  const pages = [];
  let url = firstUrl;
  while (url) {
    const res = await browser.get(url);
    assert.equal(res.statusCode, 200, `${url}: ${res.body.slice(0, 300)}`);
    pages.push(jobIds(res.body));
    url = olderLink(res.body);
    assert.ok(pages.length <= 1000, 'paging does not end');
  }
  return pages;
}

test('paging through 1,000 jobs with before_id returns every job once, newest first', async (t) => {
  const app = await startDashboard(t, db);
  const pages = await pageThrough(new Browser(app), '/queues/bulk');
  assert.equal(pages.length, 10);
  assert.ok(pages.every((p) => p.length === 100));
  const ids = pages.flat();
  assert.equal(new Set(ids).size, 1000);
  assert.deepEqual(ids, all);
});

test('pages of an uneven size, and the link back to the newest', async (t) => {
  const app = await startDashboard(t, db);
  const browser = new Browser(app);
  const pages = await pageThrough(browser, '/queues/bulk?limit=37');
  assert.equal(pages.length, Math.ceil(1000 / 37));
  assert.equal(pages.at(-1).length, 1000 % 37);
  assert.deepEqual(pages.flat(), all);
  const second = await browser.get(`/queues/bulk?limit=37&before_id=${all[36]}`);
  assert.deepEqual(jobIds(second.body), all.slice(37, 74));
  assert.match(second.body, /<a href="\/queues\/bulk\?limit=37">Newest<\/a>/);
});

test('a state filter pages through that state only', async (t) => {
  const claimed = (await db.admin.query("SELECT id FROM pgq.claim('bulk', 250)")).rows.map((r) => r.id);
  const app = await startDashboard(t, db);
  const browser = new Browser(app);
  const running = (await pageThrough(browser, '/queues/bulk?state=running')).flat();
  assert.equal(running.length, 250);
  assert.deepEqual(new Set(running), new Set(claimed));
  const ready = (await pageThrough(browser, '/queues/bulk?state=ready&limit=500')).flat();
  assert.equal(ready.length, 750);
  assert.equal(new Set([...ready, ...running]).size, 1000);
  const page = await browser.get('/queues/bulk?state=running');
  assert.match(page.body, /<option value="running" selected>/);
});
