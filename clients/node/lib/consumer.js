'use strict';

const { setTimeout: delay } = require('node:timers/promises');
const pg = require('pg');
const {
  CLAIM_GRACE_MS,
  FIRST_BACKOFF_MS,
  MAX_BACKOFF_MS,
  cancelUntilEnded,
  connect,
  isConnectionError,
  isQueryCanceled,
  jitter,
  onceOnSignals,
  retryConnectionErrors,
} = require('./connection');
const { interval } = require('./sql');
const tracing = require('./tracing');

// Retrying finish_batch after a lost connection: the backoff doubles from the
// first to the cap, until it works or the consumer stops.
const FIRST_FINISH_RETRY_MS = 100;
const MAX_FINISH_RETRY_MS = 2_000;

// In the function's order: grouped by transaction, each one's in append order.
// (WITH ORDINALITY numbers the rows in a column after the function's own:
// the alias list names every one of them, so `n` is that number.)
const NEXT_BATCH_SQL = `SELECT b.batch_id, b.event_id, b.payload, b.appended_at
  FROM pgq.next_batch($1, $2, $3, $4::interval) WITH ORDINALITY AS b(batch_id, event_id, payload, appended_at, n)
 ORDER BY b.n`;
// While an OpenTelemetry SDK is registered (./tracing): the same batch, with
// each event's trace context (pgq_cpp 3.1), two more columns before `n`.
const NEXT_BATCH_TRACED_SQL = `SELECT b.batch_id, b.event_id, b.payload, b.appended_at, b.traceparent, b.tracestate
  FROM pgq.next_batch_traced($1, $2, $3, $4::interval)
       WITH ORDINALITY AS b(batch_id, event_id, payload, appended_at, traceparent, tracestate, n)
 ORDER BY b.n`;

/**
 * Reads a stream as one consumer, batch by batch, and runs `handler(batch)`
 * on each; finishes the batch (pgq.finish_batch) once the handler has
 * resolved. See README.md for the lifecycle.
 */
class StreamConsumer {
  #stream; // the name
  #consumer;
  #label; // "consumer c of stream s": for the log
  #handler;
  #maxEvents;
  #wait; // seconds
  #register;
  #logger;
  #tracing; // {consumerParent}
  #connection; // pg.Client config, also used for the pool

  #client = null; // register, next_batch, finish_batch: a waiting next_batch blocks it
  #pool = null; // only for the cancel at stop
  #fetchEnded = null; // while a next_batch runs: settles when it ends
  #stopping = false;
  #abort = new AbortController(); // cuts backoff sleeps short at stop
  #starting = null; // start()'s promise
  #loop = null;
  #removeSignalHandlers = () => {};
  #markStopped;
  #stopped = new Promise((resolve) => {
    this.#markStopped = resolve;
  });

  constructor(options) {
    const {
      stream,
      consumer,
      handler,
      maxEvents = 1000,
      wait = 5,
      register = true,
      logger = console,
      tracing: tracingOptions = null,
      ...connection
    } = options;
    this.#stream = typeof stream === 'string' ? stream : stream?.name;
    if (typeof this.#stream !== 'string') throw new TypeError('stream must be a name or a Stream');
    if (typeof consumer !== 'string') throw new TypeError('consumer must be a name');
    if (typeof handler !== 'function') throw new TypeError('handler must be a function');
    if (!Number.isInteger(maxEvents) || maxEvents < 1) throw new RangeError('maxEvents must be an integer >= 1');
    // A next_batch that never waits would return at once, again and again: a busy loop.
    if (!(wait > 0)) throw new RangeError('wait must be a number of seconds > 0');
    this.#consumer = consumer;
    this.#label = `consumer ${consumer} of stream ${this.#stream}`;
    this.#handler = handler;
    this.#maxEvents = maxEvents;
    this.#wait = wait;
    this.#register = register;
    this.#logger = logger;
    this.#tracing = tracing.readerOptions(tracingOptions);
    this.#connection = connection;
  }

  /**
   * Connects, registers the consumer (unless `register: false`) and reads
   * once, so that a wrong connection, an unknown stream or consumer (42704) or
   * a missing consume right (42501) rejects here; then runs in the background
   * until stop().
   */
  start() {
    if (this.#starting || this.#stopping) {
      return Promise.reject(new Error('a stream consumer starts once, and not after stop()'));
    }
    this.#starting = this.#begin();
    return this.#starting;
  }

  async #begin() {
    this.#pool = new pg.Pool(this.#connection);
    this.#pool.on('error', () => {});
    let first;
    try {
      this.#client = await connect(this.#connection);
      if (this.#register) {
        await this.#client.query('SELECT pgq.register_consumer($1, $2)', [this.#stream, this.#consumer]);
      }
      first = await this.#nextBatch(0);
    } catch (err) {
      await this.#close();
      throw err;
    }
    this.#loop = this.#run(first);
  }

  /**
   * Stops reading after the current batch: a running handler finishes and its
   * batch is finished (not retried after a lost connection any more, though:
   * it then comes again), a next_batch waiting on the server is cancelled, and
   * the connections are closed. Resolves when all that is done; the same
   * promise for every call.
   */
  stop() {
    if (!this.#stopping) this.#shutdown();
    return this.#stopped;
  }

  /**
   * Calls stop() on the first of these signals (a second one then kills the
   * process as usual). Resolves once the consumer has stopped, however.
   */
  stopOnSignals(signals = ['SIGTERM', 'SIGINT']) {
    this.#removeSignalHandlers();
    this.#removeSignalHandlers = onceOnSignals(signals, (signal) => {
      this.#logger.warn(`pgq: ${signal}: stopping the ${this.#label}`);
      this.stop();
    });
    return this.#stopped;
  }

  async #run(first) {
    let batch = first;
    let reconnect = FIRST_BACKOFF_MS; // after a failed next_batch
    let again = FIRST_BACKOFF_MS; // after a failed handler
    while (!this.#stopping) {
      if (batch === null) {
        try {
          this.#client ??= await connect(this.#connection);
          if (this.#stopping) break;
          batch = await this.#nextBatch(this.#wait);
          reconnect = FIRST_BACKOFF_MS;
        } catch (err) {
          if (this.#stopping) break; // cancelled by stop()
          const pause = jitter(reconnect);
          if (isQueryCanceled(err)) {
            // Not by us (pg_cancel_backend, a statement_timeout): the
            // next_batch rolled back and took nothing; ask again on the same
            // connection.
            this.#logger.warn(`pgq: next_batch of ${this.#label} was cancelled (57014); asking again in ${pause} ms`);
          } else {
            this.#logger.error(`pgq: next_batch of ${this.#label} failed; retrying in ${pause} ms:`, err);
            this.#dropClient();
          }
          await this.#sleep(pause);
          reconnect = Math.min(2 * reconnect, MAX_BACKOFF_MS);
          continue;
        }
      }
      if (batch === null) continue; // nothing within wait
      // A batch read after stop() (its cancel came too late) is left open: it
      // comes again to the next reader.
      if (this.#stopping) break;
      const current = batch;
      batch = null;
      const pause = jitter(again); // if the handler fails
      const processing = this.#startProcessing(current);
      const failed = await this.#handle(current, pause, processing);
      if (!failed) {
        again = FIRST_BACKOFF_MS;
        const finished = await this.#finish(current);
        tracing.endProcessing(processing, finished ? 'finished' : 'unfinished');
      } else {
        tracing.endProcessing(processing, 'failed', [failed.error]);
        await this.#sleep(pause);
        again = Math.min(2 * again, MAX_BACKOFF_MS);
      }
    }
  }

  // The consumer's next batch, null when there is none; an unfinished one again.
  async #nextBatch(waitSeconds) {
    const traced = tracing.enabled();
    const fetch = this.#client.query({
      text: traced ? NEXT_BATCH_TRACED_SQL : NEXT_BATCH_SQL,
      values: [this.#stream, this.#consumer, this.#maxEvents, interval(waitSeconds)],
      query_timeout: waitSeconds * 1000 + CLAIM_GRACE_MS,
    });
    this.#fetchEnded = fetch.catch(() => {});
    try {
      const { rows } = await fetch;
      if (rows.length === 0) return null;
      return {
        id: rows[0].batch_id,
        stream: this.#stream,
        consumer: this.#consumer,
        events: rows.map((row) => {
          const event = { id: row.event_id, payload: row.payload, appendedAt: row.appended_at };
          if (traced) Object.assign(event, { traceparent: row.traceparent, tracestate: row.tracestate });
          return event;
        }),
      };
    } finally {
      this.#fetchEnded = null;
    }
  }

  // A `process <stream>` span for the batch, when its events were read with
  // their trace contexts (null otherwise): the child of the event's context
  // for a batch of one event, else linked to each event's.
  #startProcessing(batch) {
    const { events } = batch;
    if (!events.every((event) => 'traceparent' in event)) return null;
    const attributes = {
      'messaging.batch.message_count': events.length,
      'messaging.consumer.group.name': this.#consumer,
      'pgq.batch_id': String(batch.id),
    };
    if (events.length === 1) {
      attributes['messaging.message.id'] = String(events[0].id);
      return tracing.startProcessing(this.#stream, {
        parent: events[0],
        consumerParent: this.#tracing.consumerParent,
        attributes,
      });
    }
    return tracing.startProcessing(this.#stream, { links: events, attributes });
  }

  // Runs the handler (in `processing`'s span, if any); null when it resolved,
  // else {error}: what it threw. `pause`: the backoff before the batch comes
  // again if it did not, for the log.
  async #handle(batch, pause, processing) {
    try {
      await tracing.within(processing, () => this.#handler(batch));
      return null;
    } catch (err) {
      this.#logger.warn(
        `pgq: batch ${batch.id} (${batch.events.length} event(s)) of ${this.#label}: the handler failed; ` +
          `the batch is not finished and comes again in about ${pause} ms:`,
        err,
      );
      return { error: err };
    }
  }

  // pgq.finish_batch, retried after a lost connection until it works or the
  // consumer stops. Never rejects: any other error is logged (the batch then
  // comes again), and it resolves to false.
  async #finish(batch) {
    const name = `batch ${batch.id} of ${this.#label}`;
    try {
      const { result, tries } = await retryConnectionErrors(
        `finish_batch of ${name}`,
        () =>
          this.#query('SELECT pgq.finish_batch($1)', [batch.id]).catch((err) => {
            if (err.code === '55000' && !isConnectionError(err)) return null; // already finished
            throw err;
          }),
        {
          firstMs: FIRST_FINISH_RETRY_MS,
          maxMs: MAX_FINISH_RETRY_MS,
          giveUp: () => this.#stopping,
          logger: this.#logger,
          signal: this.#abort.signal,
        },
      );
      if (result === null && tries > 1) {
        this.#logger.warn(`pgq: ${name}: finished by the try before the connection was lost`);
      } else if (result === null) {
        this.#logger.warn(`pgq: ${name} was finished already (is another process reading as this consumer?)`);
      }
      return true;
    } catch (err) {
      this.#logger.error(`pgq: could not finish ${name}; it comes again:`, err);
      return false;
    }
  }

  // A statement on the consumer's connection, opened again if it was lost.
  async #query(text, values) {
    this.#client ??= await connect(this.#connection);
    try {
      return await this.#client.query(text, values);
    } catch (err) {
      if (isConnectionError(err)) this.#dropClient();
      throw err;
    }
  }

  #dropClient() {
    this.#client?.end().catch(() => {});
    this.#client = null;
  }

  #sleep(ms) {
    return delay(ms, undefined, { signal: this.#abort.signal }).catch(() => {});
  }

  // Never rejects: every step catches and logs its own failure.
  async #shutdown() {
    this.#stopping = true;
    this.#removeSignalHandlers();
    this.#abort.abort();
    await this.#starting?.catch(() => {}); // its first next_batch does not wait
    // A waiting next_batch is cancelled: it ends at once and, rolled back,
    // takes nothing.
    await cancelUntilEnded(
      this.#pool,
      () => this.#fetchEnded && { ended: this.#fetchEnded, processID: this.#client.processID },
      this.#logger,
      'the waiting next_batch',
    );
    await this.#loop;
    await this.#close();
    this.#markStopped();
  }

  async #close() {
    const [client, pool] = [this.#client, this.#pool];
    this.#client = this.#pool = null;
    await Promise.all([client?.end(), pool?.end()]).catch((err) =>
      this.#logger.warn('pgq: closing the connections failed:', err),
    );
  }
}

module.exports = { StreamConsumer };
