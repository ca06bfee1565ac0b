'use strict';

// pgq_cpp's Node client: enqueue in your transaction (Queue), run jobs
// (Worker), read them back (getJob, listJobs); append to a stream in your
// transaction (Stream) and read it batch by batch (StreamConsumer); publish to
// a topic's subscribers (Topic). A full queue (max_pending, pgq_cpp 3.1)
// refuses producers with a QueueFullError. With an OpenTelemetry SDK, each
// of them records spans and carries the trace context (lib/tracing.js).
module.exports = {
  ...require('./lib/queue'),
  QueueFullError: require('./lib/errors').QueueFullError,
  ...require('./lib/worker'),
  ...require('./lib/jobs'),
  ...require('./lib/outcomes'),
  ...require('./lib/stream'),
  ...require('./lib/topic'),
  ...require('./lib/consumer'),
};
