'use strict';

// pgq-cpp-dashboard: an operator's web dashboard for pgq_cpp.
//
//   const { plugin, createServer, expressMiddleware } = require('pgq-cpp-dashboard');
//
// plugin: a fastify plugin (register it with a prefix in your fastify app);
// createServer: a fastify app with the dashboard alone (what the command runs);
// expressMiddleware: a handler to mount in an Express (or plain Node http) app.

const Fastify = require('fastify');
const { dashboardPlugin, createPool } = require('./lib/plugin');
const { Sampler } = require('./lib/sampler');

/**
 * A fastify app serving the dashboard at `prefix` (default: the root).
 * Options: those of the plugin (README.md, "Options"), and `logger`
 * (fastify's logger option, default off) and `prefix`.
 * Resolves to the app, ready (not listening): call app.listen().
 */
async function createServer(options = {}) {
  const { logger = false, prefix = '', ...pluginOptions } = options;
  const app = Fastify({ logger, bodyLimit: 64 * 1024 });
  const pool = pluginOptions.pool || createPool(pluginOptions.database);
  pool.on('error', (err) => app.log.warn(`pgq dashboard: idle connection: ${err.message}`));
  const sampler = new Sampler(pool, {
    intervalMs: pluginOptions.sampleIntervalMs ?? 5000,
    windowMs: pluginOptions.sampleWindowMs ?? 600_000,
    logger: { warn: (m) => app.log.warn(m) },
  });
  app.decorate('dashboard', { pool, sampler });
  app.addHook('onReady', async () => {
    if (options.sample !== false) sampler.start();
  });
  app.addHook('onClose', async () => {
    await sampler.stop();
    if (!pluginOptions.pool) await pool.end();
  });
  try {
    await app.register(dashboardPlugin, { ...pluginOptions, pool, sampler, prefix });
    await app.ready();
  } catch (err) {
    await app.close().catch(() => {});
    throw err;
  }
  return app;
}

/**
 * A request handler for Express (app.use(mountPath, handler)) or a plain
 * Node http server, serving the dashboard under `mountPath` (e.g. '/pgq';
 * required). Mount it before any body parser of the app: the dashboard reads
 * its own request bodies. handler.close() stops it (its sampler and pool).
 */
function expressMiddleware(options = {}) {
  const mountPath = options.mountPath;
  if (typeof mountPath !== 'string' || !/^\/[A-Za-z0-9_.\-/]*[^/]$/.test(mountPath)) {
    throw new Error("pgq dashboard: expressMiddleware needs mountPath, the path it is mounted at (e.g. '/pgq')");
  }
  const { mountPath: _, ...rest } = options;
  const app = createServer({ ...rest, prefix: mountPath });
  app.catch(() => {}); // reported to each request below
  const handler = (req, res, next) => {
    app.then(
      (fastify) => {
        // Express strips the mount path from req.url; the dashboard's routes include it.
        if (req.originalUrl) req.url = req.originalUrl;
        fastify.routing(req, res);
      },
      (err) => (next ? next(err) : ((res.statusCode = 500), res.end('pgq dashboard failed to start'))),
    );
  };
  handler.ready = () => app;
  handler.close = async () => (await app).close();
  return handler;
}

module.exports = { plugin: dashboardPlugin, dashboardPlugin, createServer, expressMiddleware };
