'use strict';

// How the client writes its pgq calls: named arguments for the options given,
// so that an option left out keeps the server's default (and a call that uses
// no new option still runs on an older server).

/**
 * `pgq.fn($1, $2, name => $3, ...)`: the values so far, then one named
 * argument per option given (not null), whose value is appended to `values`.
 * `names` maps each option to its argument, or to [argument, convert, type]
 * when the value needs converting first (`type`, if given, is the cast the
 * parameter gets: 'bigint[]'). An unknown option is a TypeError before
 * anything is sent. `trace` ({traceparent, tracestate}, from ./tracing), if
 * given, adds `traceparent => $n` and `tracestate => $m` (pgq_cpp 3.1; the
 * tracestate only when there is one): an untraced call is the same SQL as
 * before.
 */
function pgqCall(fn, values, options, names, trace = null) {
  const args = values.map((_, i) => `$${i + 1}`);
  const named = (name, value, type) => {
    values.push(value);
    args.push(`${name} => $${values.length}${type ? `::${type}` : ''}`);
  };
  for (const [option, value] of Object.entries(options)) {
    if (!Object.hasOwn(names, option)) throw new TypeError(`unknown option of ${fn}: ${option}`);
    if (value == null) continue;
    const [name, convert = (v) => v, type] = [].concat(names[option]);
    named(name, convert(value), type);
  }
  if (trace) {
    named('traceparent', trace.traceparent);
    if (trace.tracestate) named('tracestate', trace.tracestate);
  }
  return `pgq.${fn}(${args.join(', ')})`;
}

/**
 * An interval argument as text: a number is seconds (how `lease` and `wait`
 * have always been given), a string is PostgreSQL interval text ('1 hour')
 * passed on as is; null stays null (the server's default).
 */
function interval(value) {
  if (value == null) return null;
  if (typeof value === 'number' && Number.isFinite(value)) return `${value} seconds`;
  if (typeof value === 'string') return value;
  throw new TypeError(`an interval is a number of seconds or interval text such as '5 minutes', not ${String(value)}`);
}

/**
 * Job ids as an array for a bigint[] parameter: ids are strings (as pg
 * returns bigint), numbers or BigInts. Anything but an array is a TypeError;
 * the server checks the ids themselves (a null one is 22004, an unknown one
 * 23503).
 */
function jobIds(value) {
  if (!Array.isArray(value)) throw new TypeError(`after is an array of job ids, not ${String(value)}`);
  return value.map((id) => (id == null ? null : String(id)));
}

/**
 * Keys for enqueueMany's jobs as a text[] parameter: a string is one key
 * for every job, an array one per job (a null element: that job has none).
 * The server checks the count and each key (22023).
 */
function keysOfJobs(value) {
  if (typeof value === 'string') return [value];
  if (!Array.isArray(value)) throw new TypeError(`keys are a string or an array of them, not ${String(value)}`);
  return value.map((key) => (key == null ? null : String(key)));
}

module.exports = { pgqCall, interval, jobIds, keysOfJobs };
