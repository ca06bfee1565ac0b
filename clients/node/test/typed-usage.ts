// A typed use of the client, for `tsc --noEmit` (test/types.test.js): it must
// compile, and each @ts-expect-error line must be an error.
import { Pool } from 'pg';
import {
  CancelledError,
  getJob,
  listJobs,
  OutcomeUnknown,
  Queue,
  QueueFullError,
  Snooze,
  Stream,
  StreamConsumer,
  Topic,
  Worker,
  type BatchId,
  type EventId,
  type Job,
  type JobInfo,
  type JobState,
  type StreamBatch,
  type StreamEvent,
} from 'pgq-cpp';

interface WelcomeEmail {
  userId: number;
  email: string;
}

const welcome = new Queue<WelcomeEmail>('welcome_email');

export async function signUp(pool: Pool, email: string): Promise<string> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{ id: number }>('INSERT INTO users (email) VALUES ($1) RETURNING id', [email]);
    const jobId: string = await welcome.enqueue(
      client,
      { userId: rows[0].id, email },
      {
        runAt: new Date(Date.now() + 60_000),
        priority: 1,
        dedupeKey: `welcome:${email}`,
        maxAttempts: 3,
        groupKey: email,
      },
    );
    await client.query('COMMIT');
    return jobId;
  } finally {
    client.release();
  }
}

export async function misuse(pool: Pool): Promise<void> {
  const ids: string[] = await welcome.enqueueMany(pool, [{ userId: 1, email: 'a@example.com' }], { priority: 2 });
  // @ts-expect-error the payload has the queue's type
  await welcome.enqueue(pool, { userId: 'one', email: 'b@example.com' });
  // @ts-expect-error enqueueMany takes keys for its jobs (dedupeKeys), not one dedupeKey
  await welcome.enqueueMany(pool, [], { dedupeKey: 'k' });
  await welcome.enqueueMany(pool, [{ userId: 2, email: 'b@example.com' }], {
    groupKeys: 'tenant-a',
    dedupeKeys: ['signup:2'],
  });
  await welcome.enqueueMany(pool, [], { groupKeys: ['tenant-a', null] });
  // @ts-expect-error enqueue takes one groupKey, not groupKeys
  await welcome.enqueue(pool, { userId: 3, email: 'c@example.com' }, { groupKeys: 'tenant-a' });
  // @ts-expect-error job ids are strings (bigint)
  const id: number = await welcome.enqueue(pool, { userId: 1, email: 'c@example.com' });
  // @ts-expect-error a worker needs a handler
  new Worker({ queue: 'welcome_email' });
  (void ids, id);
}

async function send(job: Job<WelcomeEmail>): Promise<void> {
  const to: string = job.payload.email;
  const attempt: number = job.attempt;
  const until: Date = job.leaseUntil;
  // @ts-expect-error a job is read-only
  job.attempt = attempt + 1;
  (void to, until);
}

export async function runWorker(): Promise<void> {
  const worker = new Worker<WelcomeEmail>({
    connectionString: 'postgres://mail_worker@localhost/app',
    max: 4,
    application_name: 'welcome-email-worker',
    queue: welcome,
    handler: send,
    concurrency: 4,
    batch: 8,
    lease: 30,
    wait: 10,
    logger: console,
  });
  await worker.start();
  await worker.stopOnSignals(['SIGTERM']);
  await worker.stop();
}

// Results, progress, snooze, outcome unknown and cancellation (pgq_cpp 1.2).
async function sendAndReport(job: Job<WelcomeEmail>): Promise<{ messageId: string }> {
  const saved: boolean = await job.progress({ step: 'rendering', of: 2 });
  if (!saved) job.snooze('5 minutes'); // never returns
  if (job.attempt > 3) throw new Snooze(30);
  try {
    job.signal.throwIfAborted();
    return { messageId: `m-${job.id}` };
  } catch (err) {
    if (err instanceof CancelledError) throw err;
    throw new OutcomeUnknown('the mail API timed out', { cause: err });
  }
}

export async function lifecycle(pool: Pool, id: string): Promise<void> {
  const payload = { userId: 1, email: 'd@example.com' };
  await welcome.enqueue(pool, payload, { dedupeKey: 'd', dedupeFor: '1 day', onDuplicate: 'replace' });
  await welcome.enqueue(pool, payload, { dedupeKey: 'd', dedupeFor: 3600, onDuplicate: 'ignore' });
  // @ts-expect-error onDuplicate is 'ignore' or 'replace'
  await welcome.enqueue(pool, payload, { onDuplicate: 'merge' });
  // @ts-expect-error dedupeFor is seconds or interval text
  await welcome.enqueue(pool, payload, { dedupeFor: new Date() });
  // @ts-expect-error the delay is seconds or interval text
  new Snooze(new Date());

  const info = await getJob<WelcomeEmail>(pool, id);
  if (info !== null) {
    const state: JobState = info.state;
    const email: string | undefined = info.payload?.email;
    const finished: Date | null = info.finishedAt;
    const lastError: string | null = info.lastError;
    // @ts-expect-error a result is whatever the handler resolved to: narrow it first
    const messageId: string = info.result.messageId;
    (void state, email, finished, lastError, messageId);
  }
  const page: JobInfo<WelcomeEmail>[] = await listJobs<WelcomeEmail>(pool, 'welcome_email', {
    state: 'dead',
    max: 50,
    beforeId: id,
  });
  // @ts-expect-error the states are the server's
  await listJobs(pool, 'welcome_email', { state: 'failed' });
  // @ts-expect-error listJobs takes state, max and beforeId
  await listJobs(pool, 'welcome_email', { limit: 10 });
  void page;
  new Worker<WelcomeEmail>({ queue: welcome, handler: sendAndReport });
}

// Several queues in one worker, and jobs that wait for others (pgq_cpp 1.2).
interface Render {
  template: string;
}
interface Send {
  to: string;
}
const render = new Queue<Render>('render');
const sendQueue = new Queue<Send>('send');

export async function renderThenSend(pool: Pool): Promise<void> {
  const renderId = await render.enqueue(pool, { template: 'welcome' });
  const sendId: string = await sendQueue.enqueue(pool, { to: 'a@example.com' }, { after: [renderId] });
  await sendQueue.enqueueMany(pool, [{ to: 'b@example.com' }], { after: [renderId, 42, 7n] });
  // @ts-expect-error after is an array of job ids
  await sendQueue.enqueue(pool, { to: 'c@example.com' }, { after: renderId });
  const info = await getJob(pool, sendId);
  const open: number | null | undefined = info?.openParents;
  void open;

  const worker = new Worker<Render | Send>({
    queue: [render, sendQueue, 'audit'],
    handler: (job) => {
      const from: string = job.queue;
      return from === 'render' ? { rendered: (job.payload as Render).template } : undefined;
    },
  });
  await worker.start();
  new Worker({ queue: ['render'] as const, handler() {} });
  // @ts-expect-error the queues are names or Queues
  new Worker({ queue: ['render', 7], handler() {} });
}

// Streams (pgq_cpp 2.0): append in the business transaction, read in batches.
interface Audit {
  account: number;
  op: 'debit' | 'credit';
}
const audit = new Stream<Audit>('audit');

export async function debit(pool: Pool): Promise<string[]> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('UPDATE accounts SET balance = balance - 10 WHERE id = 7');
    const id: EventId = await audit.append(client, { account: 7, op: 'debit' });
    const more: string[] = await audit.appendMany(client, [{ account: 8, op: 'credit' }]);
    await client.query('COMMIT');
    return [id, ...more];
  } finally {
    client.release();
  }
}

export async function readAudit(): Promise<void> {
  const seen = new Set<EventId>();
  const consumer = new StreamConsumer<Audit>({
    connectionString: 'postgres://archiver@localhost/app',
    stream: audit,
    consumer: 'archiver',
    maxEvents: 500,
    wait: 5,
    register: true,
    logger: console,
    handler: async (batch: StreamBatch<Audit>) => {
      const id: BatchId = batch.id;
      for (const event of batch.events) {
        const op: 'debit' | 'credit' = event.payload.op;
        const at: Date = event.appendedAt;
        if (!seen.has(event.id)) seen.add(event.id); // idempotent per event id
        (void op, at);
      }
      void id;
    },
  });
  await consumer.start();
  await consumer.stopOnSignals();
  await consumer.stop();
  new StreamConsumer({ stream: 'audit', consumer: 'other', handler: (batch) => batch.events.length });
  // @ts-expect-error the payload has the stream's type
  await audit.append(consumer as unknown as Pool, { account: 'seven', op: 'debit' });
  // @ts-expect-error a stream consumer needs a consumer name
  new StreamConsumer({ stream: audit, handler() {} });
  // @ts-expect-error events are read-only
  (null as unknown as StreamEvent<Audit>).id = '1';
}

// Backpressure (pgq_cpp 3.1): a full queue refuses with a QueueFullError.
export async function produceWithBackpressure(pool: Pool): Promise<string | null> {
  const room: boolean = await welcome.waitForRoom(pool, 5_000);
  await welcome.waitForRoom(pool);
  // @ts-expect-error the timeout is milliseconds, a number
  await welcome.waitForRoom(pool, '5 seconds');
  const ids: string[] = await welcome.enqueueMany(pool, [{ userId: 5, email: 'e@example.com' }], { waitForRoomMs: 0 });
  // @ts-expect-error waitForRoomMs is milliseconds, a number
  await welcome.enqueue(pool, { userId: 6, email: 'f@example.com' }, { waitForRoomMs: '1 minute' });
  try {
    return await welcome.enqueue(pool, { userId: 6, email: 'f@example.com' }, { waitForRoomMs: 2_000, priority: 1 });
  } catch (err) {
    if (!(err instanceof QueueFullError)) throw err;
    const queue: string = err.queue;
    const code: '53400' = err.code;
    const detail: string | undefined = err.detail;
    // @ts-expect-error the error is read-only
    err.queue = 'other';
    (void room, ids, queue, code, detail, err.cause);
    return null;
  }
}

// Topics and tracing (pgq_cpp 3.1): publish in the business transaction; the
// readers' spans continue the producer's trace, or link to it.
const accountEvents = new Topic<Audit>('account_events');

export async function publishAndTrace(pool: Pool): Promise<EventId> {
  const id: EventId = await accountEvents.publish(
    pool,
    { account: 7, op: 'debit' },
    { dedupeKey: 'd7', groupKey: '7' },
  );
  // @ts-expect-error the payload has the topic's type
  await accountEvents.publish(pool, { account: 'seven', op: 'debit' });
  // @ts-expect-error publish takes dedupeKey and groupKey
  await accountEvents.publish(pool, { account: 7, op: 'debit' }, { priority: 1 });
  new Worker<WelcomeEmail>({ queue: welcome, handler: send, tracing: { consumerParent: 'link' } });
  // @ts-expect-error consumerParent is 'parent' or 'link'
  new Worker<WelcomeEmail>({ queue: welcome, handler: send, tracing: { consumerParent: 'child' } });
  new StreamConsumer<Audit>({
    stream: audit,
    consumer: 'tracer',
    tracing: { consumerParent: 'parent' },
    handler: (batch) => {
      for (const event of batch.events) {
        const traceparent: string | null | undefined = event.traceparent;
        const tracestate: string | null | undefined = event.tracestate;
        (void traceparent, tracestate);
      }
    },
  });
  return id;
}
