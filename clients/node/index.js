'use strict';

// pgq_cpp's Node client: enqueue in your transaction (Queue), run jobs (Worker).
module.exports = {
  ...require('./lib/queue'),
  ...require('./lib/worker'),
};
