'use strict';

// Request values are checked here before any of them reaches a statement
// (as a parameter: never as SQL text).

const { httpError } = require('./errors');

// As pgq checks them: 1-63 characters of [a-z0-9_.-] starting with a letter or digit.
const QUEUE_NAME = /^[a-z0-9][a-z0-9_.-]{0,62}$/;
const BIGINT_MAX = 9223372036854775807n;
const JOB_STATES = ['scheduled', 'ready', 'waiting', 'running', 'done', 'dead', 'cancelled'];

/** A queue name from a path: 404 when it cannot be one. */
function queueName(value) {
  if (typeof value !== 'string' || !QUEUE_NAME.test(value)) throw httpError(404, 'No such queue.');
  return value;
}

/** A positive bigint as a string of digits, or null if it is not one. */
function parseId(value) {
  if (typeof value !== 'string' || !/^[1-9][0-9]{0,18}$/.test(value)) return null;
  return BigInt(value) <= BIGINT_MAX ? value : null;
}

/** A job id from a path: 404 when it cannot be one. */
function jobId(value) {
  const id = parseId(value);
  if (id === null) throw httpError(404, 'No such job.');
  return id;
}

/** An optional query parameter `name` that must be a job id: 400 otherwise. */
function optionalId(value, name) {
  if (value === undefined || value === '') return null;
  const id = parseId(value);
  if (id === null) throw httpError(400, `${name} must be a job id (a positive integer).`);
  return id;
}

/** An optional job state filter: one of JOB_STATES, 400 otherwise. */
function optionalState(value) {
  if (value === undefined || value === '' || value === 'all') return null;
  if (typeof value !== 'string' || !JOB_STATES.includes(value)) {
    throw httpError(400, `state must be one of ${JOB_STATES.join(', ')}.`);
  }
  return value;
}

// Why a job is dead (pgq.job_info.dead_reason, list_jobs' reason filter).
const DEAD_REASONS = ['exhausted', 'cancelled', 'expired', 'dependency_failed'];

/** An optional dead reason filter: one of DEAD_REASONS, 400 otherwise. */
function optionalReason(value) {
  if (value === undefined || value === '' || value === 'all') return null;
  if (typeof value !== 'string' || !DEAD_REASONS.includes(value)) {
    throw httpError(400, `reason must be one of ${DEAD_REASONS.join(', ')}.`);
  }
  return value;
}

/** An optional integer in [min, max] (digits only), `fallback` when absent; 400 otherwise. */
function optionalInt(value, name, min, max, fallback) {
  if (value === undefined || value === '') return fallback;
  if (typeof value !== 'string' || !/^[0-9]{1,9}$/.test(value)) throw httpError(400, `${name} must be a number.`);
  const n = Number(value);
  if (n < min || n > max) throw httpError(400, `${name} must be between ${min} and ${max}.`);
  return n;
}

/** A search text: trimmed, 1-200 characters, or null when empty; 400 when too long. */
function searchText(value) {
  if (value === undefined) return null;
  if (typeof value !== 'string') throw httpError(400, 'q must be a single text.');
  const text = value.trim();
  if (text === '') return null;
  if (text.length > 200) throw httpError(400, 'q must be at most 200 characters.');
  return text;
}

// A trace id as pgq.job_info shows it (W3C: 32 lowercase hex digits); only
// such an id is put into a trace link.
const TRACE_ID = /^[0-9a-f]{32}$/;
const TRACE_ID_PLACEHOLDER = '{trace_id}';

/**
 * The --trace-url template (option traceUrl), or undefined when not given;
 * throws an Error for the operator otherwise. It must be an absolute http://
 * or https:// URL as written (so that no other scheme, such as javascript:,
 * can ever be a link's target), hold {trace_id}, and no whitespace or control
 * character.
 */
function traceUrlTemplate(value) {
  if (value === undefined || value === null) return undefined;
  const refuse = (why) => {
    throw new Error(
      `--trace-url ${JSON.stringify(String(value))}: ${why}; expected an http(s) URL such as ` +
        `https://tracing.example/trace/${TRACE_ID_PLACEHOLDER}`,
    );
  };
  if (typeof value !== 'string') refuse('not a string');
  if (!value.includes(TRACE_ID_PLACEHOLDER)) refuse(`it does not contain ${TRACE_ID_PLACEHOLDER}`);
  if (/[\s\x00-\x1f\x7f]/.test(value)) refuse('it contains whitespace or a control character');
  if (!/^https?:\/\//i.test(value)) refuse('it does not start with http:// or https://');
  let url = null;
  try {
    url = new URL(traceLink(value, '0'.repeat(32)));
  } catch {
    refuse('it is not a valid URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') refuse('it is not an http(s) URL');
  return value;
}

/** The template with every {trace_id} replaced by the id (checked by the caller). */
function traceLink(template, traceId) {
  return template.split(TRACE_ID_PLACEHOLDER).join(traceId);
}

/** Job ids from a form (one or many `ids` fields): 1 to max distinct ids, 400 otherwise. */
function idList(value, max) {
  const list = value === undefined ? [] : Array.isArray(value) ? value : [value];
  const ids = [];
  for (const v of list) {
    const id = parseId(v);
    if (id === null) throw httpError(400, 'ids must be job ids (positive integers).');
    if (!ids.includes(id)) ids.push(id);
  }
  if (ids.length === 0) throw httpError(400, 'Select at least one job.');
  if (ids.length > max) throw httpError(400, `At most ${max} jobs at a time (${ids.length} selected).`);
  return ids;
}

module.exports = {
  queueName,
  parseId,
  searchText,
  idList,
  jobId,
  optionalId,
  optionalState,
  optionalReason,
  optionalInt,
  traceUrlTemplate,
  traceLink,
  TRACE_ID,
  JOB_STATES,
  DEAD_REASONS,
  QUEUE_NAME,
};
