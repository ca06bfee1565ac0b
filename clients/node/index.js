'use strict';

// pgq_cpp's Node client: enqueue in your transaction (Queue), run jobs
// (Worker), read them back (getJob, listJobs); append to a stream in your
// transaction (Stream) and read it batch by batch (StreamConsumer).
module.exports = {
  ...require('./lib/queue'),
  ...require('./lib/worker'),
  ...require('./lib/jobs'),
  ...require('./lib/outcomes'),
  ...require('./lib/stream'),
  ...require('./lib/consumer'),
};
