// Types of pgq_cpp's Node client (index.js). Errors from the server are pg's
// DatabaseError with the SQLSTATE in `.code`: 42501 (no right on the queue),
// 42704 (unknown queue), 22023 (invalid value), 22004 (null value), 54000
// (oversized payload).
import type { PoolConfig } from 'pg';

/** Anything that runs a query: a pg.Client, a pg.PoolClient inside your transaction, or a pg.Pool. */
export interface Queryable {
  query(text: string, values?: any[]): Promise<{ rows: any[] }>;
}

export interface EnqueueManyOptions {
  /** When the jobs become ready (default: now). */
  runAt?: Date | null;
  /** Higher runs first (default 0). */
  priority?: number | null;
}

export interface EnqueueOptions extends EnqueueManyOptions {
  /** While a pending or running job of the queue holds this key, enqueue returns its id and adds nothing. */
  dedupeKey?: string | null;
  /** Overrides the queue's max_attempts for this job. */
  maxAttempts?: number | null;
  /** Jobs sharing a group key run one at a time, in enqueue order. */
  groupKey?: string | null;
}

/** A job id: pg returns bigint as a string. */
export type JobId = string;

export class Queue<Payload = unknown> {
  constructor(name: string);
  readonly name: string;
  /** Runs `SELECT pgq.enqueue(...)` on `client`, in its open transaction if any; never commits. */
  enqueue(client: Queryable, payload: Payload, options?: EnqueueOptions): Promise<JobId>;
  /** One statement; the ids in input order. */
  enqueueMany(client: Queryable, payloads: readonly Payload[], options?: EnqueueManyOptions): Promise<JobId[]>;
}

export interface Job<Payload = unknown> {
  readonly id: JobId;
  readonly queue: string;
  readonly payload: Payload;
  /** How many times the job was claimed, this claim included: the fencing token. */
  readonly attempt: number;
  readonly maxAttempts: number;
  /** When the lease ends; moved on by every heartbeat. */
  readonly leaseUntil: Date;
  readonly enqueuedAt: Date;
  readonly priority: number;
}

export interface Logger {
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

/** pg.Pool settings (connectionString, or host, port, user, ...) plus the worker's own. */
export interface WorkerOptions<Payload = unknown> extends PoolConfig {
  queue: string | Queue<Payload>;
  /** Resolves: the job is completed. Throws or rejects: the job fails (retry with backoff, or dead-letter). */
  handler: (job: Job<Payload>) => unknown;
  /** Jobs run at once (default 1). */
  concurrency?: number;
  /** Jobs taken per claim (default: concurrency). */
  batch?: number;
  /** Seconds each claim and heartbeat leases a job for (default: the queue's lease). */
  lease?: number | null;
  /** Seconds a claim waits on the server for a job before asking again (default 30). */
  wait?: number;
  /** Where failures and lost leases are reported (default: console). */
  logger?: Logger;
}

export class Worker<Payload = unknown> {
  constructor(options: WorkerOptions<Payload>);
  /** Connects and claims once: rejects on a bad connection, an unknown queue (42704) or no consume right (42501). */
  start(): Promise<void>;
  /**
   * Gives back claimed jobs not started, lets running ones finish, closes the connections. Waits for
   * their outcomes to be recorded: after a lost connection, retried for up to a lease (README.md).
   */
  stop(): Promise<void>;
  /** stop() on the first of these signals (default SIGTERM and SIGINT); resolves once the worker has stopped. */
  stopOnSignals(signals?: NodeJS.Signals[]): Promise<void>;
}
