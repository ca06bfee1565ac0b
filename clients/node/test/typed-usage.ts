// A typed use of the client, for `tsc --noEmit` (test/types.test.js): it must
// compile, and each @ts-expect-error line must be an error.
import { Pool } from 'pg';
import { Queue, Worker, type Job } from 'pgq-cpp';

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
  // @ts-expect-error enqueueMany takes only runAt and priority
  await welcome.enqueueMany(pool, [], { dedupeKey: 'k' });
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
