#!/usr/bin/env node
'use strict';

// Screenshots of a running dashboard, for `make demo` (scripts/demo.sh): the
// overview once its charts have drawn, and the page of a dead job found the
// way a person would find it (the queue's jobs filtered by state dead, then
// the first one's link). As in the browser tests (test/browser.test.js), a
// page that logs a console error, throws, fails a request, gets an answer
// >= 400 or opens a dialog fails the run (exit 1), and so does a missing
// dead job.
//
//   node scripts/screenshot.js --url http://127.0.0.1:55460/ --out DIR [--queue NAME]
//
// The dashboard must ask for no login (--insecure-no-auth). Without --queue:
// the first queue of the overview with dead jobs. Writes
// DIR/dashboard-overview.png and DIR/dashboard-dead-job.png. Chromium:
// /usr/bin/chromium, or PGQ_CHROMIUM. Every wait is bounded, and so is the
// whole run.

const fs = require('node:fs');
const path = require('node:path');
const { parseArgs } = require('node:util');
const puppeteer = require('puppeteer-core');

const CHROMIUM = process.env.PGQ_CHROMIUM || '/usr/bin/chromium';
const WAIT = 10_000; // a navigation, a selector, a function
const RUN_LIMIT = 90_000; // everything, the browser's start included
const VIEWPORT = { width: 1400, height: 900 };

let browser = null;
const openTabs = new Set(); // their problems are reported when a wait fails

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
    defaultViewport: VIEWPORT,
  });
}

async function closeBrowser() {
  if (!browser) return;
  const b = browser;
  browser = null;
  let timer;
  const late = new Promise((resolve) => (timer = setTimeout(() => resolve(false), 10_000)));
  const inTime = await Promise.race([b.close().then(() => true, () => false), late]);
  clearTimeout(timer);
  if (!inTime) b.process()?.kill('SIGKILL');
}

/** A new page ({page, problems, closing}) that records every problem it sees until it is closed. */
async function openTab() {
  const page = await browser.newPage();
  page.setDefaultTimeout(WAIT);
  page.setDefaultNavigationTimeout(WAIT);
  const tab = { page, problems: [], closing: false };
  openTabs.add(tab);
  const problem = (text) => {
    if (!tab.closing) tab.problems.push(text);
  };
  page.on('console', (msg) => {
    if (msg.type() === 'error') problem(`console error: ${msg.text()} (${msg.location()?.url || ''})`);
  });
  page.on('pageerror', (err) => problem(`uncaught exception: ${err.message}`));
  page.on('requestfailed', (req) => {
    problem(`request failed: ${req.method()} ${req.url()}: ${req.failure()?.errorText}`);
  });
  page.on('response', (res) => {
    if (res.status() >= 400) problem(`response ${res.status()} for ${res.request().method()} ${res.url()}`);
  });
  page.on('dialog', async (dialog) => {
    problem(`unexpected dialog (${dialog.type()}): ${dialog.message()}`);
    await dialog.dismiss();
  });
  return tab;
}

/** Closes the tab, not counting what closing it aborts (the overview's pending refresh); throws its problems. */
async function closeTab(tab, what) {
  tab.closing = true;
  openTabs.delete(tab);
  await tab.page.close();
  if (tab.problems.length > 0) throw new Error(`${what}:\n  ${tab.problems.join('\n  ')}`);
}

async function goto(page, url) {
  const res = await page.goto(url, { waitUntil: 'load' });
  if (!res || res.status() !== 200) throw new Error(`GET ${url}: status ${res ? res.status() : 'none'}`);
}

async function overview(base, file) {
  const tab = await openTab();
  const { page } = tab;
  await goto(page, base);
  if (new URL(page.url()).pathname.endsWith('/login')) {
    throw new Error(`${base} asks for a login: start the dashboard with --insecure-no-auth`);
  }
  await page.waitForSelector('#queues tbody tr');
  // The table scrolls in a box of its own when wider than the window: widen
  // the window so that the screenshot shows the charts at its right end.
  const overflow = await page.evaluate(() => {
    const box = document.querySelector('#queues').parentElement;
    return box.scrollWidth - box.clientWidth;
  });
  if (overflow > 0) {
    await page.setViewport({ width: Math.min(VIEWPORT.width + overflow + 20, 2560), height: VIEWPORT.height });
  }
  // Every sparkline drawn (uPlot puts a canvas into each .spark).
  await page.waitForFunction(
    () => {
      const sparks = document.querySelectorAll('.spark');
      return sparks.length > 0 && document.querySelectorAll('.spark canvas').length === sparks.length;
    },
    { timeout: WAIT },
  );
  await page.screenshot({ path: file, fullPage: true });
  const deadQueues = await page.$$eval('#queues tbody tr', (rows) =>
    rows
      .filter((r) => /[1-9]/.test(r.querySelector('td[data-field="dead"]')?.textContent || '')) // "3", "≈ 1,200,000"
      .map((r) => r.getAttribute('data-queue')),
  );
  await closeTab(tab, `the overview (${base})`);
  return deadQueues;
}

async function deadJob(base, queue, file) {
  const tab = await openTab();
  const { page } = tab;
  const list = new URL(`queues/${encodeURIComponent(queue)}?state=dead`, base).href;
  await goto(page, list);
  const link = await page.$('table.jobs tbody tr[data-job-id] a');
  if (!link) throw new Error(`no dead job in queue ${queue} (${list})`);
  const [res] = await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), link.click()]);
  if (!res || res.status() !== 200) throw new Error(`the dead job's page: status ${res ? res.status() : 'none'}`);
  await page.waitForSelector('h1 .state-dead');
  const id = await page.$eval('h1', (h) => h.textContent.replace(/\s+/g, ' ').trim());
  if (!(await page.$('pre.error-text'))) throw new Error(`${page.url()}: the dead job shows no last error`);
  await page.screenshot({ path: file, fullPage: true });
  await closeTab(tab, `the dead job's page (${page.url()})`);
  return id;
}

async function main() {
  const { values } = parseArgs({
    options: { url: { type: 'string' }, out: { type: 'string' }, queue: { type: 'string' } },
    strict: true,
    allowPositionals: false,
  });
  if (!values.url || !values.out) throw new Error('usage: screenshot.js --url URL --out DIR [--queue NAME]');
  const base = values.url.endsWith('/') ? values.url : `${values.url}/`;
  fs.mkdirSync(values.out, { recursive: true });
  const files = {
    overview: path.resolve(values.out, 'dashboard-overview.png'),
    dead: path.resolve(values.out, 'dashboard-dead-job.png'),
  };
  for (const file of Object.values(files)) fs.rmSync(file, { force: true }); // none left from an earlier run

  browser = await launchBrowser();
  const deadQueues = await overview(base, files.overview);
  console.log(`overview: ${files.overview}`);
  const queue = values.queue || deadQueues[0];
  if (!queue) throw new Error('no queue with dead jobs on the overview');
  if (!deadQueues.includes(queue)) throw new Error(`the overview shows no dead job in queue ${queue}`);
  const title = await deadJob(base, queue, files.dead);
  console.log(`${title} (queue ${queue}): ${files.dead}`);
}

/** What the open pages saw before a failure: often its cause. */
function reportOpenTabs() {
  for (const tab of openTabs) {
    if (tab.problems.length > 0) console.error(`  seen by ${tab.page.url()}:\n    ${tab.problems.join('\n    ')}`);
  }
}

const watchdog = setTimeout(() => {
  console.error(`screenshot.js: not done after ${RUN_LIMIT / 1000} s`);
  reportOpenTabs();
  browser?.process()?.kill('SIGKILL');
  process.exit(1);
}, RUN_LIMIT);

main()
  .catch((err) => {
    console.error(`screenshot.js: ${err.message}`);
    reportOpenTabs();
    process.exitCode = 1;
  })
  .finally(async () => {
    await closeBrowser();
    clearTimeout(watchdog);
  });
