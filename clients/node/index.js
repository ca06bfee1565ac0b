'use strict';

// pgq_cpp's Node client: enqueue in your transaction (Queue), run jobs
// (Worker), read them back (getJob, listJobs).
module.exports = {
  ...require('./lib/queue'),
  ...require('./lib/worker'),
  ...require('./lib/jobs'),
  ...require('./lib/outcomes'),
};
