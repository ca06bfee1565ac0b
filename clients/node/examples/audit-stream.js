#!/usr/bin/env node
'use strict';

// An audit trail fed by the outbox. A transfer moves money between two
// accounts and publishes a `transfer_made` event (pgq.publish) in ONE
// transaction: a transfer that fails (not enough money) rolls back the
// balances and the event alike, so the trail never shows a transfer that did
// not happen, nor misses one that did. The topic is subscribed to the stream
// `audit` (pgq.subscribe(topic, stream => 'audit')), so publishing appends the
// event to the stream in that same transaction.
//
// A StreamConsumer reads the stream in batches and records each event in a
// table keyed by the stream's event id: a batch comes again if the consumer
// dies between recording it and finishing it (at-least-once), and the key
// makes the second time a no-op. The demo shows it: the audit store "drops
// the connection" once, after recording its first batch.
//
//   node examples/audit-stream.js          the consumer, until SIGTERM or Ctrl-C
//   node examples/audit-stream.js --demo   resets the demo (schema audit_demo, topic
//                                          transfer_made, stream audit), makes three
//                                          transfers (one declined), records them, exits
//
// It connects with DATABASE_URL, or else the PG* variables (PGHOST, PGPORT,
// PGUSER, PGPASSWORD, PGDATABASE), to a database with pgq_cpp 2.0 installed, as
// a role with the admin right on every queue and stream (a superuser) for the
// setup.
const pg = require('pg');
const { Stream, StreamConsumer } = require('pgq-cpp');

const TOPIC = 'transfer_made';
const audit = new Stream('audit');

async function setUp(pool, { reset }) {
  if (reset) {
    await pool.query('DROP SCHEMA IF EXISTS audit_demo CASCADE');
    await pool.query('SELECT pgq.drop_stream($1, if_exists => true)', [audit.name]);
    await pool.query('SELECT pgq.drop_topic($1)', [TOPIC]); // false when there is none
  }
  await pool.query('CREATE SCHEMA IF NOT EXISTS audit_demo');
  await pool.query(`CREATE TABLE IF NOT EXISTS audit_demo.accounts (
    owner text PRIMARY KEY,
    balance numeric(12, 2) NOT NULL CHECK (balance >= 0))`);
  await pool.query("INSERT INTO audit_demo.accounts VALUES ('ana', 100), ('bo', 50), ('cy', 0) ON CONFLICT DO NOTHING");
  // One row per stream event: the event id is the idempotency key.
  await pool.query(`CREATE TABLE IF NOT EXISTS audit_demo.trail (
    event_id bigint PRIMARY KEY,
    transfer_id bigint NOT NULL,
    from_owner text NOT NULL,
    to_owner text NOT NULL,
    amount numeric(12, 2) NOT NULL,
    appended_at timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now())`);
  await pool.query('SELECT pgq.create_topic($1, if_not_exists => true)', [TOPIC]);
  await pool.query('SELECT pgq.create_stream($1, if_not_exists => true)', [audit.name]);
  await pool.query('SELECT pgq.subscribe($1, stream => $2)', [TOPIC, audit.name]);
}

/**
 * One transaction: both balances and the event. Resolves to the event's
 * outbox id (pgq.publish); rejects (23514, the balance check) having changed
 * nothing.
 */
async function transfer(pool, from, to, amount) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('UPDATE audit_demo.accounts SET balance = balance - $1 WHERE owner = $2', [amount, from]);
    await client.query('UPDATE audit_demo.accounts SET balance = balance + $1 WHERE owner = $2', [amount, to]);
    const { rows } = await client.query('SELECT pgq.publish($1, $2) AS id', [
      TOPIC,
      JSON.stringify({ from, to, amount }),
    ]);
    await client.query('COMMIT');
    return rows[0].id;
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
}

/**
 * The handler: records a batch in one transaction of its own. Recording an
 * event twice does nothing (ON CONFLICT on the event id), which is what
 * at-least-once delivery needs. `failOnce`: the first batch throws after its
 * transaction committed, as when the consumer dies before finishing the
 * batch: the batch comes again, and finds its events recorded.
 */
function auditRecorder(pool, { failOnce = false, onRecorded = () => {} } = {}) {
  let fail = failOnce;
  return async (batch) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      for (const event of batch.events) {
        // The envelope publish appends: {event_id, topic, payload}.
        const { event_id: transferId, payload: change } = event.payload;
        const { rowCount } = await client.query(
          `INSERT INTO audit_demo.trail (event_id, transfer_id, from_owner, to_owner, amount, appended_at)
           VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (event_id) DO NOTHING`,
          [event.id, transferId, change.from, change.to, change.amount, event.appendedAt],
        );
        const what =
          rowCount === 0
            ? ' was recorded already'
            : `: ${change.from} paid ${change.to} ${change.amount} (transfer ${transferId})`;
        console.log(`batch ${batch.id}: event ${event.id}${what}`);
      }
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK');
      throw err;
    } finally {
      client.release();
    }
    if (fail) {
      fail = false;
      throw new Error('the audit store dropped the connection before it answered');
    }
    onRecorded(batch.events.length);
  };
}

async function demo(pool, connection) {
  let recorded = 0;
  let wake = () => {};
  // Registered by start(): it reads every event committed from then on.
  const consumer = new StreamConsumer({
    ...connection,
    stream: audit,
    consumer: 'audit_trail',
    handler: auditRecorder(pool, {
      failOnce: true,
      onRecorded: (count) => {
        recorded += count;
        wake();
      },
    }),
  });
  await consumer.start();

  let made = 0;
  let declined = 0;
  for (const [from, to, amount] of [
    ['ana', 'bo', '30.00'],
    ['bo', 'cy', '10.00'],
    ['cy', 'ana', '500.00'],
  ]) {
    try {
      const id = await transfer(pool, from, to, amount);
      made += 1;
      console.log(`${from} paid ${to} ${amount} (transfer ${id})`);
    } catch (err) {
      if (err.code !== '23514') throw err;
      declined += 1;
      console.log(`declined (${err.code}): ${from} cannot pay ${amount}; no balance changed, no event`);
    }
  }
  while (recorded < made) await new Promise((resolve) => (wake = resolve));
  await consumer.stop();

  const { rows } = await pool.query('SELECT count(*)::int AS n FROM audit_demo.trail');
  console.log(`${made} transfers made, ${declined} declined; ${rows[0].n} in the audit trail`);
}

async function main() {
  const connection = process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL } : {};
  const pool = new pg.Pool(connection);
  const isDemo = process.argv.includes('--demo');
  await setUp(pool, { reset: isDemo });
  if (isDemo) {
    await demo(pool, connection);
  } else {
    const consumer = new StreamConsumer({
      ...connection,
      stream: audit,
      consumer: 'audit_trail',
      handler: auditRecorder(pool),
    });
    await consumer.start();
    console.log('recording the audit stream (SIGTERM or Ctrl-C stops)');
    await consumer.stopOnSignals();
  }
  await pool.end();
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
