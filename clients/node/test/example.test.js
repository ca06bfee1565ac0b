'use strict';

// The examples, --demo, end to end: welcome-email.js (signups and their
// emails), render-then-send.js (a job after another), audit-stream.js (an
// outbox-fed stream read by a StreamConsumer).
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const path = require('node:path');
const { after, before, test } = require('node:test');
const { promisify } = require('node:util');
const { freshDatabase, waitFor } = require('./helpers');

let db;
before(async () => {
  db = await freshDatabase('example');
});
after(() => db?.close());

// The example connects like any pg program: DATABASE_URL or the PG* variables.
function connectionEnv({ connectionString, host, port, user, password, database }) {
  if (connectionString) return { DATABASE_URL: connectionString };
  const env = { PGHOST: host, PGPORT: port, PGUSER: user, PGPASSWORD: password, PGDATABASE: database };
  return Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined));
}

// Runs examples/<name> --demo; resolves to its {stdout, stderr}.
function runDemo(name) {
  const script = path.join(__dirname, '..', 'examples', name);
  return promisify(execFile)(process.execPath, [script, '--demo'], {
    env: { ...process.env, ...connectionEnv(db.config) },
    timeout: 30_000,
  });
}

test('the welcome-email demo signs up three users and sends each one email', async () => {
  const { stdout, stderr } = await runDemo('welcome-email.js');
  assert.match(stdout, /signing up ana@example.com again failed \(23505\)/);
  assert.match(stdout, /3 users signed up, 3 welcome emails sent/);
  // bo's first try timed out after the email went out: outcome unknown, and
  // the job ran again (attempt 2, once its lease had run out) and found it sent.
  const timedOut = stdout.match(/^the mail API did not answer for bo@example.com within \d+ ms \(job (\d+)\)$/m);
  assert.ok(timedOut, stdout);
  const job = timedOut[1];
  const sentBefore = `^the welcome email to bo@example.com was already sent \\(job ${job}, attempt 2\\)$`;
  assert.match(stdout, new RegExp(sentBefore, 'm'));
  assert.match(stderr, new RegExp(`^pgq: job ${job} attempt 1: outcome unknown \\(the mail API did not answer`, 'm'));

  const { rows } = await db.admin.query(`SELECT u.email, count(e.email)::int AS sent
                                           FROM welcome_demo.users u LEFT JOIN welcome_demo.sent_emails e USING (email)
                                          GROUP BY u.email ORDER BY u.email`);
  assert.deepEqual(rows, [
    { email: 'ana@example.com', sent: 1 },
    { email: 'bo@example.com', sent: 1 },
    { email: 'cy@example.com', sent: 1 },
  ]);
  // Three jobs, all done: the failed signup's email was rolled back with it.
  // (Read until it holds: a maintenance flush can make done_recent read off
  // for a moment.)
  const expected = JSON.stringify({ ready: '0', scheduled: '0', running: '0', dead: '0', done_recent: '3' });
  let stats;
  await waitFor(`welcome_email stats ${expected}`, async () => {
    ({
      rows: [stats],
    } = await db.admin.query(
      "SELECT ready, scheduled, running, dead, done_recent FROM pgq.queue_stats WHERE queue = 'welcome_email'",
    ));
    return JSON.stringify(stats) === expected;
  }).catch((err) => assert.fail(`${err.message}; last seen ${JSON.stringify(stats)}`));
});

test('the render-then-send demo sends each email only after its render job is done', async () => {
  const { stdout, stderr } = await runDemo('render-then-send.js');
  assert.match(stdout, /3 newsletters rendered, then 3 sent/);
  const lines = stdout.split('\n');
  // Enqueued together, in one transaction: the send job waits for its render job.
  const waiting = [...stdout.matchAll(/^send job (\d+) is waiting for 1 job \(render job (\d+)\)$/gm)];
  assert.equal(waiting.length, 3, stdout);
  for (const [, sendId, renderId] of waiting) {
    // Rendered (logged when the render handler ended), then sent, in that order.
    const rendered = lines.findIndex((line) => line.endsWith(`(render job ${renderId})`));
    const sent = lines.findIndex((line) => line.startsWith('sent the email') && line.includes(`(send job ${sendId},`));
    assert.ok(rendered >= 0 && sent > rendered, stdout);
    assert.match(lines[sent], /, attempt 1\)$/); // the rendered body was there the first time
    // From the server: claimed after its parent was done.
    const started = stdout.match(
      new RegExp(`^send job ${sendId} \\(done\\) started (-?\\d+) ms after render job ${renderId} was done$`, 'm'),
    );
    assert.ok(started, stdout);
    assert.ok(Number(started[1]) >= 0, started[0]);
  }
  assert.equal(stderr, '');

  const { rows } = await db.admin.query(`
    SELECT s.email, s.body = r.body AS same_body, s.sent_at >= r.rendered_at AS after
      FROM render_demo.sent s JOIN render_demo.rendered r USING (email)
     ORDER BY s.email`);
  assert.deepEqual(rows, [
    { email: 'ana@example.com', same_body: true, after: true },
    { email: 'bo@example.com', same_body: true, after: true },
    { email: 'cy@example.com', same_body: true, after: true },
  ]);
  const { rows: stats } = await db.admin.query(
    "SELECT queue, dead, awaiting_parents FROM pgq.queue_stats WHERE queue IN ('render', 'send') ORDER BY queue",
  );
  assert.deepEqual(stats, [
    { queue: 'render', dead: '0', awaiting_parents: '0' },
    { queue: 'send', dead: '0', awaiting_parents: '0' },
  ]);
});

test('the audit-stream demo records each committed transfer once, the declined one never', async () => {
  const { stdout, stderr } = await runDemo('audit-stream.js');
  assert.match(stdout, /^2 transfers made, 1 declined; 2 in the audit trail$/m);
  assert.match(stdout, /^declined \(23514\): cy cannot pay 500\.00; no balance changed, no event$/m);
  // The first batch failed once after it was recorded, came again (the same
  // batch id) and found its events recorded already.
  const failed = stderr.match(
    /^pgq: batch (\d+) \((\d) event\(s\)\) of consumer audit_trail of stream audit: the handler failed/m,
  );
  assert.ok(failed, stderr);
  const [, batchId, size] = failed;
  const again = stdout.match(new RegExp(`^batch ${batchId}: event \\d+ was recorded already$`, 'gm')) ?? [];
  assert.equal(again.length, Number(size), stdout);
  const paid = stdout.match(/^batch \d+: event \d+: \w+ paid \w+ [\d.]+ \(transfer \d+\)$/gm) ?? [];
  assert.equal(paid.length, 2, stdout);

  const { rows: trail } = await db.admin.query(
    'SELECT from_owner, to_owner, amount::text FROM audit_demo.trail ORDER BY event_id',
  );
  assert.deepEqual(trail, [
    { from_owner: 'ana', to_owner: 'bo', amount: '30.00' },
    { from_owner: 'bo', to_owner: 'cy', amount: '10.00' },
  ]);
  const { rows: balances } = await db.admin.query(
    'SELECT owner, balance::text FROM audit_demo.accounts ORDER BY owner',
  );
  assert.deepEqual(balances, [
    { owner: 'ana', balance: '70.00' },
    { owner: 'bo', balance: '70.00' },
    { owner: 'cy', balance: '10.00' },
  ]);
  const { rows: stats } = await db.admin.query(
    "SELECT pending_events::int, batch_open, finished_events::int FROM pgq.stream_stats WHERE stream = 'audit'",
  );
  assert.deepEqual(stats, [{ pending_events: 0, batch_open: false, finished_events: 2 }]);
});
