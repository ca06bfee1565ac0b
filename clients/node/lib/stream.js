'use strict';

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
   * nothing. Resolves to the event id (a string, as pg returns bigint).
   */
  async append(client, payload) {
    const { rows } = await client.query('SELECT pgq.append($1, $2) AS id', [this.name, JSON.stringify(payload)]);
    return rows[0].id;
  }

  /** Appends one event per payload in one statement (pgq.append_many); resolves to their ids in input order. */
  async appendMany(client, payloads) {
    const { rows } = await client.query(
      'SELECT e.id FROM pgq.append_many($1, $2) WITH ORDINALITY AS e(id, n) ORDER BY e.n',
      [this.name, payloads.map((payload) => JSON.stringify(payload))],
    );
    return rows.map((row) => row.id);
  }
}

module.exports = { Stream };
