// Types of pgq_cpp's Node client (index.js). Errors from the server are pg's
// DatabaseError with the SQLSTATE in `.code`: 42501 (no right on the queue),
// 42704 (unknown queue), 22023 (invalid value), 22004 (null value), 54000
// (oversized payload), 23503 (an `after` job that does not exist).
//
// Handlers may also end with a Snooze (job.snooze) or an OutcomeUnknown, and a
// cancelled job's signal is aborted with a CancelledError; getJob and listJobs
// read jobs back. Streams (pgq_cpp 2.0): Stream appends in your transaction,
// StreamConsumer reads batches (42704 also for an unknown stream or consumer).
// A queue with max_pending (pgq_cpp 3.1) refuses producers with a
// QueueFullError (53400) instead of a DatabaseError. Topic publishes to the
// queues and streams subscribed to it.
//
// Tracing (pgq_cpp 3.1): with @opentelemetry/api (an optional peer dependency)
// and an SDK registered, producers record `send <name>` spans and pass their
// W3C trace context to the server; Worker and StreamConsumer record `process
// <name>` spans continuing it. Nothing here names the API's types, so these
// declarations do not need the package.
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
  /**
   * Job ids the job waits for (state 'waiting') until every one is done; if one dies or is cancelled, the
   * job is dead-lettered with reason 'dependency_failed'. An id the server does not know rejects (23503).
   */
  after?: readonly (JobId | number | bigint)[] | null;
  /**
   * Group keys (pgq_cpp 3.1): one for every job (a string) or one per job (an array; null: that job has
   * none). The queue's group_concurrency applies to each key.
   */
  groupKeys?: string | readonly (string | null)[] | null;
  /**
   * Dedupe keys (pgq_cpp 3.1): one for every job or one per job. A taken key gives its holder's id in
   * that job's place (an earlier job of the same call included), as enqueue does.
   */
  dedupeKeys?: string | readonly (string | null)[] | null;
  /**
   * Milliseconds to wait for room when the queue is full (its max_pending, pgq_cpp 3.1): each refusal is
   * followed by `queue.waitForRoom` and another try until this time has passed; then the QueueFullError.
   * Only where the call is in no transaction of the caller's: a pg.Pool, or a client in no transaction
   * block (the statement commits by itself). In the caller's transaction (after BEGIN) the refusal aborted
   * it: the QueueFullError at once. Not sent to the server.
   */
  waitForRoomMs?: number | null;
}

export interface EnqueueOptions extends Omit<EnqueueManyOptions, 'groupKeys' | 'dedupeKeys'> {
  /** While a pending or running job of the queue holds this key, enqueue returns its id and adds nothing. */
  dedupeKey?: string | null;
  /**
   * The dedupe key stays taken this long after its job finished (done or dead): seconds, or interval text
   * such as '1 hour'. "At most once per period".
   */
  dedupeFor?: number | string | null;
  /**
   * 'ignore' (default): return the holder's id. 'replace': a holder that has not started gets this payload,
   * runAt and priority (debounce); a running one gets a new job queued behind it under the same key.
   */
  onDuplicate?: 'ignore' | 'replace' | null;
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
  /**
   * Runs `SELECT pgq.enqueue(...)` on `client`, in its open transaction if any; never commits. A full queue
   * rejects with a QueueFullError (see `waitForRoomMs`).
   */
  enqueue(client: Queryable, payload: Payload, options?: EnqueueOptions): Promise<JobId>;
  /** One statement; the ids in input order. A full queue refuses all of them (QueueFullError). */
  enqueueMany(client: Queryable, payloads: readonly Payload[], options?: EnqueueManyOptions): Promise<JobId[]>;
  /**
   * pgq.wait_for_room (pgq_cpp 3.1): true at once when the queue has no max_pending or holds fewer unfinished
   * jobs than its low-water mark (nine tenths of max_pending, rounded up); otherwise the server sleeps until
   * completions take it below the mark or `timeoutMs` (default 0) have passed, and answers whether it is
   * below now. Holds the connection while it waits. Needs produce or admin on the queue (42501); 42704 for
   * an unknown queue.
   */
  waitForRoom(client: Queryable, timeoutMs?: number): Promise<boolean>;
}

/**
 * The queue is full (pgq_cpp 3.1): the call would take it past its max_pending, and the server refused all
 * of it (nothing was kept); the transaction it ran in is aborted, as after any failed statement.
 */
export class QueueFullError extends Error {
  constructor(queue: string, cause?: Error);
  /** The queue's name. */
  readonly queue: string;
  /** The SQLSTATE: configuration_limit_exceeded. */
  readonly code: '53400';
  /** The server's detail: how many unfinished jobs the queue holds, of its max_pending, and how many the call adds. */
  readonly detail: string | undefined;
  /** The server's hint (pgq.wait_for_room). */
  readonly hint: string | undefined;
  /** pg's DatabaseError, as the server sent it. */
  readonly cause: unknown;
}

export interface Job<Payload = unknown> {
  readonly id: JobId;
  /** The job's queue: one of the worker's. */
  readonly queue: string;
  readonly payload: Payload;
  /** How many times the job was claimed, this claim included: the fencing token. */
  readonly attempt: number;
  readonly maxAttempts: number;
  /** When the lease ends; moved on by every heartbeat. */
  readonly leaseUntil: Date;
  readonly enqueuedAt: Date;
  readonly priority: number;
  /**
   * Aborted, with a CancelledError as its reason, when the job is cancelled (pgq.cancel) while it runs; seen
   * within one heartbeat (a third of the lease). Its outcome is then not recorded: stop the work.
   */
  readonly signal: AbortSignal;
  /** Sets the job's progress (pgq.progress, any JSON value) at once; false when this claim no longer holds the job. */
  progress(value: unknown): Promise<boolean>;
  /** Throws a Snooze: the job is put back to run after `delay` (seconds or interval text), its attempt not spent. */
  snooze(delay: number | string): never;
}

/** Thrown by a handler (or job.snooze): not now; run again after `delay` without spending an attempt. */
export class Snooze extends Error {
  /** `delay`: seconds, or interval text such as '5 minutes'. */
  constructor(delay: number | string);
  readonly delay: number | string;
}

/**
 * Thrown by a handler that cannot know whether its effect happened (a timeout on a call that is not
 * idempotent): the job is neither completed, failed nor released, its heartbeat stops, and it runs again
 * once its lease has run out.
 */
export class OutcomeUnknown extends Error {
  constructor(message?: string, options?: ErrorOptions);
}

/** The reason a cancelled job's `signal` is aborted with. */
export class CancelledError extends Error {
  constructor(message?: string);
}

export type JobState = 'scheduled' | 'ready' | 'waiting' | 'running' | 'done' | 'dead' | 'cancelled';

/** One job as pgq.job and pgq.list_jobs show it (pgq.job_info). */
export interface JobInfo<Payload = unknown> {
  id: JobId;
  queue: string;
  state: JobState;
  /** The number the job's current or last claim carries (0 before the first; a snooze or release gives it back). */
  attempt: number;
  maxAttempts: number;
  priority: number;
  groupKey: string | null;
  dedupeKey: string | null;
  runAt: Date | null;
  enqueuedAt: Date | null;
  claimedAt: Date | null;
  leaseUntil: Date | null;
  finishedAt: Date | null;
  /** The last job.progress value (null for a role with only the admin right). */
  progress: unknown;
  /** The handler's resolved value, for a done job of a queue with keep_completed (null for admin only). */
  result: unknown;
  lastError: string | null;
  /** How many of the jobs it was enqueued `after` are not done yet; null unless it waits for them. */
  openParents: number | null;
  /** null for a role with only the admin right on the queue. */
  payload: Payload | null;
  /** Why a dead (or cancelled) job is dead; null in any other state (pgq_cpp 3.0). */
  deadReason: 'exhausted' | 'expired' | 'cancelled' | 'dependency_failed' | null;
}

export interface ListJobsOptions {
  state?: JobState | null;
  /** At most this many (the server's default: 100). */
  max?: number | null;
  /** Only ids below this one: the last id of the previous page. */
  beforeId?: JobId | number | null;
}

/** The job, or null when the server knows no such job (it never existed, or its history was purged). */
export function getJob<Payload = unknown>(client: Queryable, id: JobId | number): Promise<JobInfo<Payload> | null>;

/** The queue's jobs, newest first (by id), a page at a time: pass the last id as `beforeId` for the next. */
export function listJobs<Payload = unknown>(
  client: Queryable,
  queue: string,
  options?: ListJobsOptions,
): Promise<JobInfo<Payload>[]>;

export interface Logger {
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

/** How a Worker or StreamConsumer places its `process` spans (with an OpenTelemetry SDK registered). */
export interface TracingOptions {
  /**
   * 'parent' (default): each span is a child of the context stored with the job (the event of a one-event
   * batch), so it is in the producer's trace. 'link': each span starts a new trace, linked to that context.
   */
  consumerParent?: 'parent' | 'link' | null;
}

/** A queue to work on: its name, or the Queue. */
export type QueueRef<Payload = unknown> = string | Queue<Payload>;

/** pg.Pool settings (connectionString, or host, port, user, ...) plus the worker's own. */
export interface WorkerOptions<Payload = unknown> extends PoolConfig {
  /**
   * The queue, or several (at least one, none twice: a RangeError otherwise): one claim takes jobs from any
   * of them by priority, then run_at, and `job.queue` says which. The role needs consume on every one.
   */
  queue: QueueRef<Payload> | readonly QueueRef<Payload>[];
  /**
   * Resolves: the job is completed, with the resolved value (unless undefined or null) as its result.
   * Throws or rejects: the job fails (retry with backoff, or dead-letter); a Snooze puts it back for later,
   * an OutcomeUnknown leaves it to its lease.
   */
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
  /** Where each job's `process <queue>` span goes in the traces, with an OpenTelemetry SDK. */
  tracing?: TracingOptions | null;
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

/** A stream event id: pg returns bigint as a string. */
export type EventId = string;

/** A batch id, what pgq.finish_batch takes: pg returns bigint as a string. */
export type BatchId = string;

export class Stream<Payload = unknown> {
  constructor(name: string);
  readonly name: string;
  /** Runs `SELECT pgq.append(...)` on `client`, in its open transaction if any; never commits. */
  append(client: Queryable, payload: Payload): Promise<EventId>;
  /** One statement (pgq.append_many); the ids in input order. */
  appendMany(client: Queryable, payloads: readonly Payload[]): Promise<EventId[]>;
}

export interface PublishOptions {
  /** A key published before gives that event's id, and nothing new is published. */
  dedupeKey?: string | null;
  /** Every subscriber job joins this group of its queue (one at a time per key, in commit order). */
  groupKey?: string | null;
}

export class Topic<Payload = unknown> {
  constructor(name: string);
  readonly name: string;
  /**
   * Runs `SELECT pgq.publish(...)` on `client`, in its open transaction if any; never commits. The event and a
   * job per subscribed queue (an event per subscribed stream) exist if and only if it commits. Resolves to the
   * event id; needs the publish right on the topic (42501), 42704 for an unknown topic.
   */
  publish(client: Queryable, payload: Payload, options?: PublishOptions): Promise<EventId>;
}

/** One event of a batch, as pgq.next_batch returned it. */
export interface StreamEvent<Payload = unknown> {
  /** The event id (pgq.append's): the key that makes a handler idempotent. */
  readonly id: EventId;
  readonly payload: Payload;
  readonly appendedAt: Date;
  /**
   * The W3C traceparent the event was appended (or published) with, null for none; present only while an
   * OpenTelemetry SDK is registered (the batch was read with pgq.next_batch_traced).
   */
  readonly traceparent?: string | null;
  /** Its W3C tracestate, null for none; present as `traceparent` is. */
  readonly tracestate?: string | null;
}

/**
 * What a StreamConsumer's handler gets: one batch, its events in commit order (grouped by transaction, each
 * one's in append order). A batch that is not finished (the handler threw, or the process died first) comes
 * again with the same id and the same events.
 */
export interface StreamBatch<Payload = unknown> {
  readonly id: BatchId;
  readonly stream: string;
  readonly consumer: string;
  readonly events: readonly StreamEvent<Payload>[];
}

/** A stream to read: its name, or the Stream. */
export type StreamRef<Payload = unknown> = string | Stream<Payload>;

/**
 * pg settings (connectionString, or host, port, user, ...) plus the consumer's own. `stream` is the stream to
 * read, not pg's setting of that name (a socket factory), which a consumer does not take.
 */
export interface StreamConsumerOptions<Payload = unknown> extends Omit<PoolConfig, 'stream'> {
  stream: StreamRef<Payload>;
  /** The consumer's name: its position. Consumers of different names each get every event. */
  consumer: string;
  /**
   * Resolves: the batch is finished (pgq.finish_batch). Throws or rejects: it is not, and comes again after a
   * backoff (0.2 s doubling to 10 s). At-least-once: make it idempotent per event id.
   */
  handler: (batch: StreamBatch<Payload>) => unknown;
  /** Events per batch at most, 1 to 100000 (default 1000). */
  maxEvents?: number;
  /** Seconds one next_batch waits on the server for an event (default 5). */
  wait?: number;
  /** Register the consumer at start() (default true); false: it must be registered already (else 42704). */
  register?: boolean;
  /** Where handler failures and reconnections are reported (default: console). */
  logger?: Logger;
  /** Where each batch's `process <stream>` span goes in the traces, with an OpenTelemetry SDK. */
  tracing?: TracingOptions | null;
}

export class StreamConsumer<Payload = unknown> {
  constructor(options: StreamConsumerOptions<Payload>);
  /**
   * Connects, registers (unless `register: false`) and reads once: rejects on a bad connection, an unknown
   * stream or consumer (42704) or no consume right (42501).
   */
  start(): Promise<void>;
  /**
   * Lets the running handler finish and its batch be finished, cancels a waiting next_batch, closes the
   * connections; a batch whose finish fails for a lost connection then comes again.
   */
  stop(): Promise<void>;
  /** stop() on the first of these signals (default SIGTERM and SIGINT); resolves once the consumer has stopped. */
  stopOnSignals(signals?: NodeJS.Signals[]): Promise<void>;
}
