'use strict';

// OpenTelemetry spans and W3C trace context (SPEC §13, ADR 0030). The API is
// an optional peer dependency: without it, or without an SDK that records
// spans, every call here is a no-op and the client sends today's SQL.
//
// Producers (Queue, Topic, Stream) run their statement inside a `send <name>`
// span and pass that span's context to the server as the named arguments
// `traceparent => $n, tracestate => $m`. The context is formatted from the
// span itself, not through the global propagator, which may speak B3 only:
// the server stores W3C trace context. Readers (Worker, StreamConsumer) read
// it back with pgq.claim_traced / pgq.next_batch_traced while an SDK is
// registered, and run each job (each batch) in a `process <name>` span.

let api = null;
try {
  api = require('@opentelemetry/api');
} catch {
  // Not installed (or unusable): no tracing.
}

const TRACER_NAME = 'pgq-cpp';
const TRACER_VERSION = require('../package.json').version;
// OpenTelemetry's default span link limit (and the server's, for `after`).
const MAX_LINKS = 128;
const CONSUMER_PARENTS = ['parent', 'link'];

function tracer() {
  return api.trace.getTracer(TRACER_NAME, TRACER_VERSION);
}

/**
 * Whether readers should ask the server for trace context: the API loads and
 * an SDK has registered a tracer provider. (API 1.x hands out a proxy whose
 * delegate an SDK sets; a provider of unknown shape counts as registered.)
 * Asked before every claim and next_batch, so an SDK registered after start()
 * is seen.
 */
function enabled() {
  if (!api) return false;
  const provider = api.trace.getTracerProvider();
  if (typeof api.ProxyTracerProvider === 'function' && provider instanceof api.ProxyTracerProvider) {
    return provider.getDelegateTracer(TRACER_NAME, TRACER_VERSION) !== undefined;
  }
  return true;
}

/** The `tracing` option of a Worker or StreamConsumer, checked: {consumerParent}. */
function readerOptions(option) {
  if (option == null) return { consumerParent: 'parent' };
  if (typeof option !== 'object') throw new TypeError('tracing must be an object: { consumerParent }');
  const { consumerParent: given, ...rest } = option;
  const unknown = Object.keys(rest);
  if (unknown.length > 0) throw new TypeError(`unknown option of tracing: ${unknown[0]}`);
  const consumerParent = given ?? 'parent';
  if (!CONSUMER_PARENTS.includes(consumerParent)) {
    throw new RangeError(`tracing.consumerParent is 'parent' or 'link', not ${String(consumerParent)}`);
  }
  return { consumerParent };
}

function baseAttributes(destination, operation) {
  return {
    'messaging.system': 'pgq',
    'messaging.destination.name': destination,
    'messaging.operation.type': operation,
    'messaging.operation.name': operation,
  };
}

/**
 * The context to send for `span`, {traceparent, tracestate}, or null. A
 * recording span's own. A span that does not record: the context an SDK's
 * sampler dropped it with (an id of its own, flags 00), sent so that the
 * consumers follow that decision; without an SDK the API's span only carries
 * the caller's context on (same span id) or none, and nothing is sent.
 */
function contextToSend(span, parent) {
  const spanContext = span.spanContext();
  if (!api.trace.isSpanContextValid(spanContext)) return null;
  const carried = api.trace.getSpanContext(parent);
  if (!span.isRecording() && carried?.traceId === spanContext.traceId && carried.spanId === spanContext.spanId) {
    return null;
  }
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
  const tracestate = w3cTracestate(spanContext.traceState?.serialize());
  return { traceparent: `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`, tracestate };
}

// A tracestate member as W3C Trace Context defines it (the server refuses
// anything else with 22023, which would abort the caller's transaction).
const TRACESTATE_MEMBER =
  /^(?:[a-z][_0-9a-z*/-]{0,255}|[a-z0-9][_0-9a-z*/-]{0,240}@[a-z][_0-9a-z*/-]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;
const MAX_TRACESTATE_MEMBERS = 32;
const MAX_TRACESTATE_BYTES = 512;

/**
 * `serialized` (a TraceState's) as the server takes it, or null for none:
 * members that are not W3C's dropped (an SDK's own TraceState has none), then
 * trimmed as W3C says a vendor trims: at most 32 members, and while over 512
 * bytes, members over 128 bytes first, then from the end.
 */
function w3cTracestate(serialized) {
  if (!serialized) return null;
  let members = serialized
    .split(',')
    .map((member) => member.trim())
    .filter((member) => TRACESTATE_MEMBER.test(member))
    .slice(0, MAX_TRACESTATE_MEMBERS);
  const bytes = () => members.join(',').length;
  if (bytes() > MAX_TRACESTATE_BYTES) members = members.filter((member) => member.length <= 128);
  while (bytes() > MAX_TRACESTATE_BYTES) members.pop();
  return members.length > 0 ? members.join(',') : null;
}

/**
 * Runs `run(trace)` (one producing call) in a `send <destination>` span
 * (PRODUCER) and resolves to its result; `trace` is the context to pass to
 * the server ({traceparent, tracestate}) or null: then the call is today's.
 * `count`: the number of messages of a batch call (null: one); `idOf(result)`
 * the message id of a single call.
 */
async function producing(destination, count, run, idOf = null) {
  if (!api) return run(null);
  const parent = api.context.active();
  const attributes = baseAttributes(destination, 'send');
  if (count !== null) attributes['messaging.batch.message_count'] = count;
  const span = tracer().startSpan(`send ${destination}`, { kind: api.SpanKind.PRODUCER, attributes }, parent);
  const trace = contextToSend(span, parent);
  if (!span.isRecording()) {
    span.end();
    return run(trace);
  }
  try {
    const result = await api.context.with(api.trace.setSpan(parent, span), () => run(trace));
    if (idOf) span.setAttribute('messaging.message.id', String(idOf(result)));
    return result;
  } catch (err) {
    recordFailure(span, err);
    throw err;
  } finally {
    span.end();
  }
}

// A stored context (what claim_traced and next_batch_traced return) as a
// remote SpanContext, or null when there is none.
function remoteContext(traceparent, tracestate) {
  if (typeof traceparent !== 'string' || traceparent.length < 55) return null;
  const spanContext = {
    traceId: traceparent.slice(3, 35),
    spanId: traceparent.slice(36, 52),
    traceFlags: parseInt(traceparent.slice(53, 55), 16),
    isRemote: true,
  };
  if (tracestate) spanContext.traceState = api.createTraceState(tracestate);
  return api.trace.isSpanContextValid(spanContext) ? spanContext : null;
}

/**
 * Starts a `process <destination>` span (CONSUMER) for one job or batch, or
 * returns null when tracing is off. `parent`: the stored context
 * ({traceparent, tracestate}) the span continues, or with consumerParent
 * 'link' links to (a new trace); `links`: more contexts to link, traceparents
 * or {traceparent, tracestate} (a job's parents of `after`, a batch's
 * events), the first 128 distinct ones. Never a child of whatever context the
 * worker was started in.
 */
function startProcessing(destination, { parent = null, links = [], consumerParent = 'parent', attributes = {} }) {
  if (!api || !enabled()) return null;
  const stored = parent && remoteContext(parent.traceparent, parent.tracestate);
  const linked = [];
  const seen = new Set();
  const link = (spanContext) => {
    if (!spanContext || seen.has(spanContext.spanId + spanContext.traceId) || linked.length >= MAX_LINKS) return;
    seen.add(spanContext.spanId + spanContext.traceId);
    linked.push({ context: spanContext });
  };
  let base = api.ROOT_CONTEXT;
  if (stored && consumerParent === 'link') link(stored);
  else if (stored) base = api.trace.setSpanContext(base, stored);
  for (const other of links) {
    link(typeof other === 'string' ? remoteContext(other, null) : remoteContext(other.traceparent, other.tracestate));
  }
  const span = tracer().startSpan(
    `process ${destination}`,
    {
      kind: api.SpanKind.CONSUMER,
      attributes: { ...baseAttributes(destination, 'process'), ...attributes },
      links: linked,
    },
    base,
  );
  return { span, context: api.trace.setSpan(base, span) };
}

/** Runs `fn()` in the span's context (so what it enqueues joins the trace); `fn()` alone without one. */
function within(processing, fn) {
  return processing ? api.context.with(processing.context, fn) : fn();
}

function recordFailure(span, failure) {
  const message = failure instanceof Error ? failure.message : String(failure);
  span.recordException(failure instanceof Error ? failure : message);
  span.setStatus({ code: api.SpanStatusCode.ERROR, message });
}

/**
 * Ends a span of startProcessing with its outcome (`pgq.outcome`); each of
 * `failures` (the handler's error, an error recording the outcome) is
 * recorded as an exception, and any sets the error status.
 */
function endProcessing(processing, outcome, failures = []) {
  if (!processing) return;
  processing.span.setAttribute('pgq.outcome', outcome);
  for (const failure of failures) recordFailure(processing.span, failure);
  processing.span.end();
}

module.exports = { enabled, readerOptions, producing, startProcessing, within, endProcessing };
