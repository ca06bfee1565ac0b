'use strict';

// The dashboard as a fastify plugin: pages, actions, the live JSON endpoint
// and the static assets, under the prefix it is registered with.
//
//   app.register(require('pgq-cpp-dashboard').plugin, { prefix: '/pgq', database: '...', password: '...' })

const fs = require('node:fs');
const path = require('node:path');
const pg = require('pg');

const data = require('./data');
const views = require('./views');
const validate = require('./validate');
const { createAuth } = require('./auth');
const { describe, isServerError, httpError } = require('./errors');
const { reenqueueSql } = require('./copy_sql');
const { Sampler } = require('./sampler');
const { sameOriginPath } = require('./redirect');

const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');

const PAGE_LIMIT = 100;
const LIST_MAX = 500; // rows of the workers', streams' and coordination pages
const WORKFLOW_MAX = 100; // parents, children, dependents taken along, each
const SEARCH_MAX = 100; // jobs a search shows
const BULK_MAX = 100; // jobs one bulk action may select
const NO_JOB = (id) =>
  `No job ${id}: it never existed, its history was not kept, or this role holds no right on its queue.`;

function staticAssets() {
  const uplotDir = path.join(path.dirname(require.resolve('uplot/package.json')), 'dist');
  const publicDir = path.join(__dirname, '..', 'public');
  const js = 'text/javascript; charset=utf-8';
  const css = 'text/css; charset=utf-8';
  const files = {
    'app.js': [path.join(publicDir, 'app.js'), js],
    'overview.js': [path.join(publicDir, 'overview.js'), js],
    'style.css': [path.join(publicDir, 'style.css'), css],
    'favicon.svg': [path.join(publicDir, 'favicon.svg'), 'image/svg+xml'],
    'uPlot.iife.min.js': [path.join(uplotDir, 'uPlot.iife.min.js'), js],
    'uPlot.min.css': [path.join(uplotDir, 'uPlot.min.css'), css],
  };
  const assets = new Map();
  for (const [name, [file, type]] of Object.entries(files)) assets.set(name, { body: fs.readFileSync(file), type });
  return assets;
}

function createPool(database) {
  const config = typeof database === 'string' ? { connectionString: database } : { ...(database || {}) };
  const pool = new pg.Pool({
    max: 4,
    application_name: 'pgq-cpp-dashboard',
    statement_timeout: 15_000,
    connectionTimeoutMillis: 10_000,
    ...config,
  });
  return pool;
}

async function dashboardPlugin(fastify, options) {
  const base = fastify.prefix || '';
  const readOnly = Boolean(options.readOnly);
  const traceUrl = validate.traceUrlTemplate(options.traceUrl);
  const auth = createAuth({
    password: options.password,
    proxyHeader: options.proxyHeader,
    insecureNoAuth: options.insecureNoAuth,
    sessionSecret: options.sessionSecret,
    sessionTtlMs: options.sessionTtlMs,
    secureCookies: options.secureCookies,
    cookiePath: base || '/',
  });
  const loginFailureDelayMs = options.loginFailureDelayMs ?? 1000;

  const ownPool = !options.pool;
  const db = options.pool || createPool(options.database);
  if (ownPool) db.on('error', (err) => fastify.log.warn(`pgq dashboard: idle connection: ${err.message}`));
  const ownSampler = !options.sampler;
  const sampler =
    options.sampler ||
    new Sampler(db, {
      intervalMs: options.sampleIntervalMs ?? 5000,
      windowMs: options.sampleWindowMs ?? 600_000,
      logger: { warn: (m) => fastify.log.warn(m) },
    });
  const live = { intervalMs: sampler.intervalMs, windowMs: (sampler.capacity - 1) * sampler.intervalMs };

  // Cookies, form bodies and CSRF tokens: ours, unless the app mounting the
  // dashboard registered them already (registering twice is an error).
  if (!fastify.hasReplyDecorator('setCookie')) {
    await fastify.register(require('@fastify/cookie'), {
      secret: options.sessionSecret || require('node:crypto').randomBytes(32),
    });
  }
  if (!fastify.hasContentTypeParser('application/x-www-form-urlencoded')) {
    await fastify.register(require('@fastify/formbody'), { bodyLimit: 64 * 1024 });
  }
  if (!fastify.hasReplyDecorator('generateCsrf')) {
    await fastify.register(require('@fastify/csrf-protection'), {
      cookieKey: 'pgq_dashboard_csrf',
      cookieOpts: {
        path: base || '/',
        httpOnly: true,
        sameSite: 'strict',
        secure: Boolean(options.secureCookies),
        signed: fastify.hasReplyDecorator('unsignCookie'),
      },
      getToken: (request) =>
        typeof request.body?._csrf === 'string' ? request.body._csrf : request.headers['x-csrf-token'],
    });
  }

  const assets = staticAssets();

  if (ownSampler) {
    fastify.addHook('onReady', async () => sampler.start());
  }
  fastify.addHook('onClose', async () => {
    if (ownSampler) await sampler.stop();
    if (ownPool) await db.end();
  });

  // Every response: the security headers; pages and JSON are never cached.
  // A redirect goes to a page of the dashboard's own or to its front page:
  // every Location here is built from checked values, and one that is not
  // what lib/redirect.js accepts is a bug, not an open redirect.
  fastify.addHook('onSend', async (request, reply, payload) => {
    const location = reply.getHeader('location');
    if (location !== undefined && sameOriginPath(location, base) !== location) {
      request.log.error(`pgq dashboard: refused to redirect to ${JSON.stringify(location)}`);
      reply.header('location', `${base}/`);
    }
    reply.header('content-security-policy', CONTENT_SECURITY_POLICY);
    reply.header('x-content-type-options', 'nosniff');
    reply.header('referrer-policy', 'no-referrer');
    reply.header('x-frame-options', 'DENY');
    reply.header('cross-origin-opener-policy', 'same-origin');
    if (!request.routeOptions.config?.static) reply.header('cache-control', 'no-store');
    return payload;
  });

  // Who is asking: every route but the static files and the login form needs
  // an authenticated user; every action is refused in read-only mode.
  fastify.addHook('onRequest', async (request, reply) => {
    const config = request.routeOptions.config || {};
    request.dashboardUser = auth.user(request);
    if (config.public) return;
    if (request.dashboardUser === null) {
      if (auth.mode === 'password' && request.method === 'GET' && !config.json) {
        // (URLSearchParams: form encoding, which also encodes ', as the URL parser does in a query)
        return reply.redirect(`${base}/login?${new URLSearchParams({ next: request.url })}`, 303);
      }
      const message =
        auth.mode === 'proxy'
          ? `The reverse proxy did not say who you are (no ${auth.header} header).`
          : 'Log in first.';
      throw httpError(401, message);
    }
    if (config.action && readOnly) throw httpError(403, 'The dashboard is read-only: it changes nothing.');
  });

  fastify.setErrorHandler(async (err, request, reply) => {
    const e = describe(err);
    if (e.kind) request.log.warn(`pgq dashboard: database unavailable (${e.kind}): ${err.message}`);
    else if (e.status >= 500) request.log.error(err);
    reply.code(e.status);
    if (e.kind) reply.header('retry-after', '10');
    if (request.routeOptions.config?.json) {
      return { error: e.message, code: e.code, ...(e.kind ? { unavailable: e.kind } : {}) };
    }
    return sendPage(reply, views.errorPage(ctxOf(request, reply), e), e.status);
  });

  fastify.setNotFoundHandler(async (request, reply) => {
    request.dashboardUser = auth.user(request);
    return sendPage(reply, views.errorPage(ctxOf(request, reply), describe(httpError(404, 'No such page.'))), 404);
  });

  function ctxOf(request, reply) {
    let token = null;
    return {
      base,
      user: request.dashboardUser ?? null,
      readOnly,
      traceUrl,
      authMode: auth.mode,
      csrf: () => (token ??= reply.generateCsrf()),
    };
  }

  function sendPage(reply, page, status = 200) {
    return reply.code(status).type('text/html; charset=utf-8').send(page.toString());
  }

  const csrf = fastify.csrfProtection;
  const post = (url, handler, config = {}) =>
    fastify.post(url, { preHandler: csrf, config: { action: true, ...config } }, handler);

  // ---- Static files -----------------------------------------------------------

  fastify.get('/static/:name', { config: { public: true, static: true } }, async (request, reply) => {
    const asset = assets.get(request.params.name);
    if (!asset) throw httpError(404, 'No such file.');
    reply.header('cache-control', 'public, max-age=3600');
    return reply.type(asset.type).send(asset.body);
  });

  // ---- Login --------------------------------------------------------------------

  // Only a page of the dashboard's own (lib/redirect.js), whatever `next` says.
  const safeNext = (next) => sameOriginPath(next, base);

  fastify.get('/login', { config: { public: true } }, async (request, reply) => {
    if (auth.mode !== 'password' || request.dashboardUser) return reply.redirect(safeNext(request.query.next), 303);
    return sendPage(reply, views.loginPage(ctxOf(request, reply), { next: safeNext(request.query.next) }));
  });

  fastify.post('/login', { preHandler: csrf, config: { public: true } }, async (request, reply) => {
    if (auth.mode !== 'password') throw httpError(404, 'No login here.');
    const next = safeNext(request.body?.next);
    if (!auth.checkPassword(request.body?.password)) {
      if (loginFailureDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, loginFailureDelayMs));
      return sendPage(reply, views.loginPage(ctxOf(request, reply), { failed: true, next }), 401);
    }
    auth.login(reply);
    return reply.redirect(next, 303);
  });

  fastify.post('/logout', { preHandler: csrf, config: { public: true } }, async (request, reply) => {
    if (auth.mode !== 'password') throw httpError(404, 'No logout here.');
    auth.logout(request, reply);
    return reply.redirect(`${base}/login`, 303);
  });

  // ---- Overview -----------------------------------------------------------------

  function mergeRow(row, rateLimits) {
    const rates = sampler.latestRates(row.queue);
    return {
      ...row,
      rate_limit: rateLimits ? (rateLimits.get(row.queue) ?? null) : undefined,
      completed_rate: rates.completed,
      failed_rate: rates.failed,
    };
  }

  fastify.get('/', async (request, reply) => {
    const [who, caps, rows] = await Promise.all([data.whoami(db), data.capabilities(db), data.overview(db)]);
    const rateLimits = await data.rateLimits(db);
    const notes = [];
    if (!caps.counters) {
      notes.push(`Failed/s is not shown and completed/s is counted from done_recent: the role is not in pg_monitor.`);
    }
    const page = views.overviewPage(ctxOf(request, reply), {
      rows: rows.map((r) => mergeRow(r, rateLimits)),
      who,
      live: { ...live, series: sampler.series() },
      notes,
    });
    return sendPage(reply, page);
  });

  fastify.get('/api/overview', { config: { json: true } }, async () => {
    let sample = sampler.latest();
    if (!sample || Date.now() - sample.at > 2 * sampler.intervalMs) sample = await sampler.sampleNow();
    return {
      at: sample.at,
      queues: sample.rows.map((r) => {
        const row = mergeRow(r, sample.rateLimits);
        return { queue: row.queue, paused: row.paused, cells: views.overviewCells(row) };
      }),
      series: sampler.series(),
    };
  });

  // ---- A queue ------------------------------------------------------------------

  async function renderQueue(request, reply, { error = null, status = 200, query = request.query || {} } = {}) {
    const queue = validate.queueName(request.params.queue);
    const q = query;
    const filter = {
      state: validate.optionalState(q.state),
      reason: validate.optionalReason(q.reason),
      limit: validate.optionalInt(q.limit, 'limit', 1, 1000, PAGE_LIMIT),
      beforeId: validate.optionalId(q.before_id, 'before_id'),
      defaultLimit: PAGE_LIMIT,
    };
    const rights = await data.queueRights(db, queue); // 42704: no such queue (404)
    const stats = await data.queueStats(db, queue);
    // Any right shows them (pgq.fair_keys checks it too).
    const keys = rights.produce || rights.consume || rights.admin ? await data.fairKeys(db, queue) : [];
    let jobs = null;
    let nextBeforeId = null;
    try {
      const rows = await data.listJobs(db, queue, {
        state: filter.state,
        max: filter.limit + 1,
        beforeId: filter.beforeId,
        reason: filter.reason,
      });
      jobs = rows.slice(0, filter.limit);
      if (rows.length > filter.limit) nextBeforeId = jobs[jobs.length - 1].id;
    } catch (err) {
      if (!isServerError(err) || describe(err).kind) throw err;
      if (!error) {
        error = describe(err);
        status = error.status;
      }
    }
    const page = views.queuePage(ctxOf(request, reply), {
      queue,
      stats,
      rights,
      jobs,
      filter,
      nextBeforeId,
      error,
      notice: error ? null : views.notice(q),
      keys,
    });
    return sendPage(reply, page, status);
  }

  fastify.get('/queues/:queue', (request, reply) => renderQueue(request, reply));

  /** Runs an action on the queue; redirects with a notice, or shows the queue with the database's refusal. */
  function queueAction(run) {
    return async (request, reply) => {
      const queue = validate.queueName(request.params.queue);
      let outcome;
      try {
        outcome = await run(queue, request.body || {});
      } catch (err) {
        if (!isServerError(err) || describe(err).kind) throw err;
        const e = describe(err);
        if (e.status === 404) throw err; // no such queue
        return renderQueue(request, reply, { error: e, status: e.status, query: {} });
      }
      const params = new URLSearchParams(outcome);
      return reply.redirect(`${base}/queues/${encodeURIComponent(queue)}?${params}`, 303);
    };
  }

  post(
    '/queues/:queue/pause',
    queueAction(async (queue) => {
      await data.pause(db, queue);
      return { notice: 'paused' };
    }),
  );
  post(
    '/queues/:queue/resume',
    queueAction(async (queue) => {
      await data.resume(db, queue);
      return { notice: 'resumed' };
    }),
  );
  post(
    '/queues/:queue/retry-dead',
    queueAction(async (queue, body) => {
      const max = validate.optionalInt(body.max, 'max', 1, 1_000_000, 1000);
      return { notice: 'retried', n: String(await data.retryDeadJobs(db, queue, max)) };
    }),
  );
  post(
    '/queues/:queue/purge-dead',
    queueAction(async (queue) => ({ notice: 'purged', n: String(await data.purgeDead(db, queue)) })),
  );

  // ---- A job --------------------------------------------------------------------

  async function renderJob(request, reply, { error = null, status = 200, query = request.query || {} } = {}) {
    const id = validate.jobId(request.params.id);
    const job = await data.job(db, id);
    if (!job) throw httpError(404, NO_JOB(id));
    const rights = await data.queueRights(db, job.queue);
    const workflow = await jobWorkflow(job);
    const page = views.jobPage(ctxOf(request, reply), {
      job,
      rights,
      workflow,
      copySql: reenqueueSql(job),
      error,
      notice: error ? null : views.notice(query),
    });
    return sendPage(reply, page, status);
  }

  fastify.get('/jobs/:id', (request, reply) => renderJob(request, reply));

  // Its parents and children (SPEC §8) and, once it is dead or cancelled,
  // the dependents it took with it: pgq.job_dependencies (3.0), which shows
  // the jobs of the role's queues only.
  async function jobWorkflow(job) {
    const failedParent = /^parent job ([0-9]+) did not complete$/.exec(job.last_error || '');
    const related = await data.workflow(db, job.id, WORKFLOW_MAX);
    const dead = job.state === 'dead' || job.state === 'cancelled';
    return {
      max: WORKFLOW_MAX,
      failedParent: failedParent ? failedParent[1] : null,
      parents: related.parents,
      children: related.children,
      taken: dead ? related.taken : null,
    };
  }

  // ---- Search -------------------------------------------------------------------

  // A job id goes straight to its page (when pgq.job shows it to the role);
  // otherwise the jobs whose dedupe or group key is the text.
  fastify.get('/search', async (request, reply) => {
    const q = validate.searchText(request.query.q);
    const queue = request.query.queue ? validate.queueName(request.query.queue) : null;
    if (q === null) return sendPage(reply, views.searchPage(ctxOf(request, reply), { q: '', queue, jobs: null }));
    const id = validate.parseId(q);
    if (id !== null && !queue && (await data.job(db, id))) return reply.redirect(`${base}/jobs/${id}`, 303);
    const jobs = await data.searchKeys(db, q, { max: SEARCH_MAX + 1, queue });
    const page = views.searchPage(ctxOf(request, reply), {
      q,
      queue,
      id,
      jobs: jobs.slice(0, SEARCH_MAX),
      more: jobs.length > SEARCH_MAX,
      window: data.SEARCH_WINDOW,
    });
    return sendPage(reply, page);
  });

  // ---- Bulk actions on selected jobs ----------------------------------------------

  // Two steps, each a POST with the CSRF token: the selection from a queue's
  // page shows what would be done (the jobs as pgq.job shows them); the
  // confirmation does it, job by job, each call its own statement, so the
  // server's answer for each (done, the outcome word saying why nothing
  // happened, refused) is shown.
  const BULK = {
    retry: { label: 'Retry', run: (id) => data.retryDeadJob(db, id), done: 'retried' },
    cancel: { label: 'Cancel', run: (id) => data.cancelJob(db, id), done: 'cancelled' },
    purge: { label: 'Purge', run: (id) => data.purgeDeadJob(db, id), done: 'purged' },
  };

  function bulkRequest(request) {
    const queue = validate.queueName(request.params.queue);
    const action = request.body?.action;
    if (typeof action !== 'string' || !Object.hasOwn(BULK, action)) {
      throw httpError(400, `action must be one of ${Object.keys(BULK).join(', ')}.`);
    }
    const ids = validate.idList(request.body?.ids, BULK_MAX);
    return { queue, action, ids };
  }

  post('/queues/:queue/bulk', async (request, reply) => {
    const { queue, action, ids } = bulkRequest(request);
    const jobs = await Promise.all(ids.map(async (id) => ({ id, job: await data.job(db, id) })));
    const page = views.bulkConfirmPage(ctxOf(request, reply), { queue, action, label: BULK[action].label, jobs });
    return sendPage(reply, page);
  });

  post('/queues/:queue/bulk/run', async (request, reply) => {
    const { queue, action, ids } = bulkRequest(request);
    const spec = BULK[action];
    const results = [];
    for (const id of ids) {
      try {
        const outcome = await spec.run(id);
        results.push({ id, ok: outcome === spec.done, outcome, text: views.outcomeText(action, outcome) });
      } catch (err) {
        if (!isServerError(err) || describe(err).kind) throw err;
        results.push({ id, ok: false, error: describe(err) });
      }
    }
    const page = views.bulkResultPage(ctxOf(request, reply), { queue, action, label: spec.label, results });
    return sendPage(reply, page);
  });

  // ---- Streams --------------------------------------------------------------------

  fastify.get('/streams', async (request, reply) => {
    const [consumers, segments] = await Promise.all([
      attempt(() => data.streamStats(db, LIST_MAX)),
      attempt(() => data.streamSegments(db, LIST_MAX)),
    ]);
    const page = views.streamsPage(ctxOf(request, reply), { consumers, segments, max: LIST_MAX });
    return sendPage(reply, page);
  });

  function jobAction(run) {
    return async (request, reply) => {
      const id = validate.jobId(request.params.id);
      let notice;
      try {
        notice = await run(id);
      } catch (err) {
        if (!isServerError(err) || describe(err).kind) throw err;
        const e = describe(err);
        return renderJob(request, reply, { error: e, status: e.status, query: {} });
      }
      return reply.redirect(`${base}/jobs/${id}?notice=${notice}`, 303);
    };
  }

  // The notice names the outcome word (views.jobNoticeCode): done, or why
  // nothing happened.
  post(
    '/jobs/:id/cancel',
    jobAction(async (id) => views.jobNoticeCode('cancel', await data.cancelJob(db, id))),
  );
  post(
    '/jobs/:id/retry',
    jobAction(async (id) => views.jobNoticeCode('retry', await data.retryDeadJob(db, id))),
  );
  // A purged job has no page left: back to its queue's page, which says so.
  post('/jobs/:id/purge', async (request, reply) => {
    const id = validate.jobId(request.params.id);
    const job = await data.job(db, id);
    if (!job) throw httpError(404, NO_JOB(id));
    let outcome;
    try {
      outcome = await data.purgeDeadJob(db, id);
    } catch (err) {
      if (!isServerError(err) || describe(err).kind) throw err;
      const e = describe(err);
      return renderJob(request, reply, { error: e, status: e.status, query: {} });
    }
    const code = views.jobNoticeCode('purge', outcome);
    if (outcome === 'not_dead') return reply.redirect(`${base}/jobs/${id}?notice=${code}`, 303);
    const params = new URLSearchParams({ notice: code, n: String(id) });
    return reply.redirect(`${base}/queues/${encodeURIComponent(job.queue)}?${params}`, 303);
  });

  // ---- Schedules, workers, coordination -------------------------------------

  async function attempt(run) {
    try {
      return { rows: await run(), error: null };
    } catch (err) {
      if (!isServerError(err) || describe(err).kind) throw err; // the database unavailable: its page
      return { rows: null, error: describe(err) };
    }
  }

  fastify.get('/schedules', async (request, reply) => {
    const [{ rows, error }, runs] = await Promise.all([
      attempt(() => data.schedules(db)),
      attempt(() => data.scheduleRuns(db, LIST_MAX)),
    ]);
    return sendPage(reply, views.schedulesPage(ctxOf(request, reply), { rows, error, runs, runsMax: LIST_MAX }));
  });

  fastify.get('/workers', async (request, reply) => {
    const [w, r, c] = await Promise.all([
      attempt(() => data.workers(db)),
      attempt(() => data.runningJobs(db, LIST_MAX)),
      attempt(() => data.claimers(db, LIST_MAX)),
    ]);
    if (w.error && w.error.code === '42501') {
      w.error.hint = 'pgq.workers is for pg_monitor: GRANT pg_monitor TO the dashboard’s role.';
    }
    const page = views.workersPage(ctxOf(request, reply), {
      workers: w.rows,
      workersError: w.error,
      running: r.rows,
      runningError: r.error,
      runningMax: LIST_MAX,
      claimers: c.rows,
      claimersError: c.error,
    });
    return sendPage(reply, page);
  });

  fastify.get('/coordination', async (request, reply) => {
    const [teams, switches, ladders] = await Promise.all([
      attempt(() => data.teams(db, LIST_MAX)),
      attempt(() => data.switches(db, LIST_MAX)),
      attempt(() => data.ladders(db, LIST_MAX)),
    ]);
    for (const part of [teams, switches, ladders]) {
      if (part.error?.code === '42501') {
        part.error.hint =
          'GRANT EXECUTE ON FUNCTION pgq.list_teams(text, integer), pgq.list_switches(text, integer), ' +
          'pgq.list_ladders(text, integer) TO the dashboard’s role.';
      }
    }
    const page = views.coordinationPage(ctxOf(request, reply), { teams, switches, ladders, max: LIST_MAX });
    return sendPage(reply, page);
  });
}

module.exports = { dashboardPlugin, createPool };
