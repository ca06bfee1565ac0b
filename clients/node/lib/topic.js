'use strict';

const { pgqCall } = require('./sql');
const tracing = require('./tracing');

const PUBLISH_OPTIONS = {
  dedupeKey: 'dedupe_key',
  groupKey: 'group_key',
};

/** A topic to publish events to (pgq.publish), on the caller's connection and in its transaction. */
class Topic {
  constructor(name) {
    if (typeof name !== 'string') throw new TypeError('the topic name must be a string');
    this.name = name;
  }

  /**
   * Publishes one event with `client.query`: in the caller's transaction, the
   * event and one job per subscribed queue (one event per subscribed stream)
   * exist if and only if it commits. Begins and commits nothing. Resolves to
   * the event id (a string). `dedupeKey`: a key published before gives that
   * event's id and nothing new; `groupKey`: every subscriber job joins that
   * group of its queue. With an OpenTelemetry SDK, runs in a `send <topic>`
   * span whose context every subscriber's job and event keeps (./tracing).
   */
  async publish(client, payload, options = {}) {
    return tracing.producing(
      this.name,
      null,
      async (trace) => {
        const values = [this.name, JSON.stringify(payload)];
        const call = pgqCall('publish', values, options, PUBLISH_OPTIONS, trace);
        const { rows } = await client.query(`SELECT ${call} AS id`, values);
        return rows[0].id;
      },
      (id) => id,
    );
  }
}

module.exports = { Topic };
