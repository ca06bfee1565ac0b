'use strict';

const { pgqCall } = require('./sql');
const tracing = require('./tracing');

/** A stream to append events to, on the caller's connection and in its transaction. */
class Stream {
  constructor(name) {
    if (typeof name !== 'string') throw new TypeError('the stream name must be a string');
    this.name = name;
  }

  /**
   * Appends one event (pgq.append) with `client.query`, so inside the
   * caller's transaction when one is open: the event exists, and consumers
   * see it, if and only if that transaction commits. Begins and commits
   * nothing. Resolves to the event id (a string, as pg returns bigint). With
   * an OpenTelemetry SDK, runs in a `send <stream>` span whose context the
   * event keeps (./tracing).
   */
  async append(client, payload) {
    return tracing.producing(
      this.name,
      null,
      async (trace) => {
        const values = [this.name, JSON.stringify(payload)];
        const { rows } = await client.query(`SELECT ${pgqCall('append', values, {}, {}, trace)} AS id`, values);
        return rows[0].id;
      },
      (id) => id,
    );
  }

  /**
   * Appends one event per payload in one statement (pgq.append_many); resolves to their ids in input order.
   * One trace context for all of them.
   */
  async appendMany(client, payloads) {
    return tracing.producing(this.name, payloads.length, async (trace) => {
      const values = [this.name, payloads.map((payload) => JSON.stringify(payload))];
      const { rows } = await client.query(
        `SELECT e.id FROM ${pgqCall('append_many', values, {}, {}, trace)} WITH ORDINALITY AS e(id, n) ORDER BY e.n`,
        values,
      );
      return rows.map((row) => row.id);
    });
  }
}

module.exports = { Stream };
