'use strict';

// "Copy as SQL": the statement that enqueues a job again, for an operator to
// paste into psql. Text shown to a person, never run by the dashboard.

/**
 * A string as an SQL literal, as PostgreSQL's quote_literal() writes it:
 * quotes doubled, and with a backslash in it an E'' literal with the
 * backslashes doubled, so it reads the same whatever
 * standard_conforming_strings says.
 */
function quoteLiteral(text) {
  const s = String(text);
  if (s.includes('\0')) throw new Error('a NUL character cannot be in an SQL literal');
  const quoted = s.replace(/'/g, "''");
  return s.includes('\\') ? `E'${quoted.replace(/\\/g, '\\\\')}'` : `'${quoted}'`;
}

/**
 * The pgq.enqueue call that re-enqueues `job` (a row of data.job with its
 * payload as text), or null when the role may not read the payload.
 */
function reenqueueSql(job) {
  if (job.payload === null || job.payload === undefined) return null;
  const args = [quoteLiteral(job.queue), `${quoteLiteral(job.payload)}::jsonb`];
  if (job.priority) args.push(`priority => ${Number(job.priority)}`);
  if (job.max_attempts !== null && job.max_attempts !== undefined)
    args.push(`max_attempts => ${Number(job.max_attempts)}`);
  if (job.group_key !== null && job.group_key !== undefined) args.push(`group_key => ${quoteLiteral(job.group_key)}`);
  if (job.dedupe_key !== null && job.dedupe_key !== undefined)
    args.push(`dedupe_key => ${quoteLiteral(job.dedupe_key)}`);
  return `SELECT pgq.enqueue(${args.join(', ')});`;
}

module.exports = { quoteLiteral, reenqueueSql };
