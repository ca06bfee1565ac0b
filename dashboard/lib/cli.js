'use strict';

// The command line of pgq-cpp-dashboard (bin/pgq-cpp-dashboard.js).

const { parseArgs } = require('node:util');
const { traceUrlTemplate } = require('./validate');

const USAGE = `Usage: pgq-cpp-dashboard [options]

  --database URL             postgres://user@host:port/dbname (default: the
                             PGQ_DASHBOARD_DATABASE environment variable, else
                             libpq's PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD)
  --listen HOST:PORT         where to listen (default 127.0.0.1:8080)
  --prefix PATH              serve under PATH (e.g. /pgq behind a proxy; default /)
  --read-only                show, never change: no buttons, every action refused (403)
  --trust-proxy-header NAME  trust a reverse proxy that authenticates users and
                             sends the user's name in header NAME (e.g. X-Forwarded-User);
                             requests without it are refused
  --insecure-no-auth         no login at all; only on a loopback address (local use)
  --secure-cookies           mark the cookies Secure (served over HTTPS, e.g. by a proxy)
  --sample-interval SECONDS  how often the overview's charts take a sample (default 5)
  --trace-url TEMPLATE       link a job's trace id to your tracing UI: an http(s) URL
                             with {trace_id} in it, e.g. https://tracing.example/trace/{trace_id}
  --help

Authentication: PGQ_DASHBOARD_PASSWORD set in the environment gives a login
form; or --trust-proxy-header; or --insecure-no-auth. Without any of them the
dashboard refuses to start. PGQ_DASHBOARD_SESSION_SECRET (optional) signs the
cookies, so that sessions survive a restart (default: a new random secret).`;

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|\[::1\]|localhost)$/;

/** {options for createServer, host, port} from argv and env; throws with a message for the user. */
function parseCommandLine(argv, env) {
  const { values } = parseArgs({
    args: argv,
    options: {
      database: { type: 'string' },
      listen: { type: 'string', default: '127.0.0.1:8080' },
      prefix: { type: 'string', default: '' },
      'read-only': { type: 'boolean', default: false },
      'trust-proxy-header': { type: 'string' },
      'insecure-no-auth': { type: 'boolean', default: false },
      'secure-cookies': { type: 'boolean', default: false },
      'sample-interval': { type: 'string', default: '5' },
      'trace-url': { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return { help: USAGE };

  const listen = /^(?:\[([0-9a-fA-F:]+)\]|([^:]+)):([0-9]{1,5})$/.exec(values.listen);
  if (!listen || Number(listen[3]) > 65535) throw new Error(`--listen ${values.listen}: expected HOST:PORT`);
  const host = listen[1] || listen[2];
  const port = Number(listen[3]);

  const prefix = values.prefix.replace(/\/+$/, '');
  if (prefix !== '' && !/^(\/[A-Za-z0-9_.-]+)+$/.test(prefix))
    throw new Error(`--prefix ${values.prefix}: expected a path such as /pgq`);

  const interval = Number(values['sample-interval']);
  if (!Number.isFinite(interval) || interval < 1 || interval > 3600) {
    throw new Error('--sample-interval: a number of seconds between 1 and 3600');
  }

  const traceUrl = traceUrlTemplate(values['trace-url']);

  const password = env.PGQ_DASHBOARD_PASSWORD || undefined;
  const proxyHeader = values['trust-proxy-header'];
  const insecureNoAuth = values['insecure-no-auth'];
  if (!password && !proxyHeader && !insecureNoAuth) {
    throw new Error(
      'no authentication: set PGQ_DASHBOARD_PASSWORD, or pass --trust-proxy-header NAME behind an ' +
        'authenticating reverse proxy, or --insecure-no-auth for local use (see README.md)',
    );
  }
  if ([Boolean(password), Boolean(proxyHeader), insecureNoAuth].filter(Boolean).length > 1) {
    throw new Error('choose one of PGQ_DASHBOARD_PASSWORD, --trust-proxy-header and --insecure-no-auth');
  }
  if (insecureNoAuth && !LOOPBACK.test(host)) {
    throw new Error(`--insecure-no-auth listens on a loopback address only (not ${host})`);
  }

  return {
    host,
    port,
    options: {
      database: values.database || env.PGQ_DASHBOARD_DATABASE || undefined,
      prefix,
      readOnly: values['read-only'],
      password,
      proxyHeader,
      insecureNoAuth,
      secureCookies: values['secure-cookies'],
      sessionSecret: env.PGQ_DASHBOARD_SESSION_SECRET || undefined,
      sampleIntervalMs: Math.round(interval * 1000),
      traceUrl,
    },
  };
}

module.exports = { parseCommandLine, USAGE };
