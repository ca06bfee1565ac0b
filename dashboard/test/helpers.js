'use strict';

// Shared by the tests: the server to test against (as clients/node's tests
// do), a fresh database per test file, roles for the dashboard to act as, a
// dashboard app to send requests to (fastify's inject(), no socket), and a
// small browser that keeps cookies and reads CSRF tokens from forms.

const pg = require('pg');
const { createServer } = require('..');

// The server, as node-postgres settings: PGQ_TEST_URL (postgres://...) or
// PGQ_TEST_DSN, a libpq conninfo such as "host=/tmp/x port=5432 user=postgres
// dbname=db". A superuser: the tests create databases and roles.
function serverConfig() {
  if (process.env.PGQ_TEST_URL) return { connectionString: process.env.PGQ_TEST_URL };
  if (process.env.PGQ_TEST_DSN) return parseConninfo(process.env.PGQ_TEST_DSN);
  throw new Error('set PGQ_TEST_DSN (libpq conninfo) or PGQ_TEST_URL to a superuser connection');
}

const CONNINFO_KEYS = { host: 'host', port: 'port', user: 'user', password: 'password', dbname: 'database' };

// key=value pairs; a value may be 'single quoted' with \' and \\ inside.
function parseConninfo(dsn) {
  const config = {};
  const pair = /\s*(\w+)\s*=\s*(?:'((?:\\.|[^'\\])*)'|([^\s']*))\s*/y;
  while (pair.lastIndex < dsn.length) {
    const match = pair.exec(dsn);
    if (!match) throw new Error(`cannot parse the conninfo ${JSON.stringify(dsn)}`);
    const [, key, quoted, bare] = match;
    if (!CONNINFO_KEYS[key]) throw new Error(`conninfo key ${key} is not supported here`);
    config[CONNINFO_KEYS[key]] = quoted === undefined ? bare : quoted.replace(/\\(.)/g, '$1');
  }
  return config;
}

async function withClient(config, fn) {
  const client = new pg.Client(config);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const ROLE_PASSWORD = 'pgq_dash_test';

/**
 * A new database `pgq_dash_<name>` with pgq_cpp installed. Resolves to
 * {name, config, admin, roleConfig(role), createRole(role), close}: its
 * settings as the superuser, a superuser client connected to it, the
 * settings to connect as a role, a role made here (LOGIN, dropped by
 * close), and the function that drops it all.
 */
async function freshDatabase(name) {
  const server = serverConfig();
  const database = `pgq_dash_${name}`;
  const roles = [];
  await withClient(server, async (client) => {
    await client.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await client.query(`CREATE DATABASE ${database}`);
  });
  const config = server.connectionString
    ? { connectionString: withUrl(server.connectionString, { database }) }
    : { ...server, database };
  const roleConfig = (role) =>
    server.connectionString
      ? { connectionString: withUrl(server.connectionString, { database, user: role, password: ROLE_PASSWORD }) }
      : { ...server, database, user: role, password: ROLE_PASSWORD };
  const admin = new pg.Client(config);
  const close = async () => {
    await admin.end();
    await withClient(server, async (client) => {
      await client.query(`DROP DATABASE ${database} WITH (FORCE)`);
      for (const role of roles) await client.query(`DROP ROLE IF EXISTS ${role}`);
    });
  };
  const createRole = async (suffix) => {
    const role = `pgq_dash_${name}_${suffix}`;
    await admin.query(`DROP ROLE IF EXISTS ${role}`);
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${ROLE_PASSWORD}'`);
    roles.push(role);
    return role;
  };
  try {
    await admin.connect();
    await admin.query('CREATE EXTENSION pgq_cpp');
  } catch (err) {
    await close(); // an open connection would keep the test process alive
    throw err;
  }
  return { name: database, config, admin, roleConfig, createRole, close };
}

function withUrl(url, { database, user, password }) {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  if (user) parsed.username = user;
  if (password) parsed.password = password;
  return parsed.href;
}

/** Resolves to check()'s first truthy value, polling; rejects after the deadline. */
async function waitFor(what, check, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * A dashboard app acting as `role` (default: the superuser) in `db`, closed
 * when test context `t` ends. No sampling timer (tests call
 * app.dashboard.sampler.sampleNow()); no login unless options say so.
 */
async function startDashboard(t, db, { role = null, ...options } = {}) {
  const auth = options.password || options.proxyHeader ? {} : { insecureNoAuth: true };
  const app = await createServer({
    database: role ? db.roleConfig(role) : db.config,
    sample: false,
    loginFailureDelayMs: 0,
    ...auth,
    ...options,
  });
  t.after(() => app.close());
  return app;
}

/** Requests to an app, as a browser would send them: cookies kept, forms posted urlencoded. */
class Browser {
  constructor(app, headers = {}) {
    this.app = app;
    this.headers = headers;
    this.cookies = new Map();
  }

  async request({ method = 'GET', url, form = null, headers = {} }) {
    const all = { ...this.headers, ...headers };
    if (this.cookies.size) all.cookie = [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
    if (form) all['content-type'] = 'application/x-www-form-urlencoded';
    const res = await this.app.inject({
      method,
      url,
      headers: all,
      payload: form ? new URLSearchParams(form).toString() : undefined,
    });
    for (const c of res.cookies) {
      const expired = c.maxAge === 0 || (c.expires && new Date(c.expires).getTime() <= Date.now());
      if (expired || c.value === '') this.cookies.delete(c.name);
      else this.cookies.set(c.name, c.value);
    }
    return res;
  }

  get(url, headers) {
    return this.request({ url, headers });
  }

  post(url, form = {}, headers) {
    return this.request({ method: 'POST', url, form, headers });
  }

  /** The CSRF token of the first form of the page at url (a GET that also sets the CSRF cookie). */
  async csrf(url) {
    const res = await this.get(url);
    const token = csrfToken(res.body);
    if (!token) throw new Error(`no CSRF token in ${url} (status ${res.statusCode})`);
    return token;
  }

  /** Logs in with the password (the login form's token first). */
  async login(password) {
    const token = await this.csrf('/login');
    return this.post('/login', { _csrf: token, password, next: '/' });
  }
}

function csrfToken(body) {
  const match = /name="_csrf" value="([^"]+)"/.exec(body);
  return match ? match[1] : null;
}

/** The text of a queue's overview cell (`field`: ready, dead, ...), or undefined. */
function overviewCell(body, queue, field) {
  const row = new RegExp(`<tr data-queue="${queue}"[^>]*>([\\s\\S]*?)</tr>`).exec(body);
  if (!row) return undefined;
  const cell = new RegExp(`<td data-field="${field}">([^<]*)</td>`).exec(row[1]);
  return cell ? cell[1] : undefined;
}

/** What &lt; and friends stand for (to read text back out of a page). */
function unescapeHtml(text) {
  return text
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&amp;/g, '&');
}

/** The job ids listed on a queue page, in order. */
function jobIds(body) {
  return [...body.matchAll(/<tr data-job-id="(\d+)">/g)].map((m) => m[1]);
}

/** The href of the page's "Older" link, unescaped, or null. */
function olderLink(body) {
  const match = /<a href="([^"]+)" rel="next">/.exec(body);
  return match ? unescapeHtml(match[1]) : null;
}

// What an attacker puts in a login link's `next` to send the browser elsewhere
// after the login: every one must end on the dashboard's front page.
const OFFSITE_NEXTS = [
  'https://evil.example/',
  'http:evil.example',
  '//evil.example/',
  '///evil.example/',
  '////evil.example/',
  '/\\evil.example',
  '\\\\evil.example',
  '/\\/evil.example',
  '\\/evil.example',
  '/\t/evil.example', // browsers drop tabs and newlines: "//evil.example"
  '/\n/evil.example',
  '/\r/evil.example',
  '/\r\n/evil.example',
  '\t//evil.example',
  '/%09/evil.example',
  '/%0a/evil.example',
  '/%0D/evil.example',
  '/%2F/evil.example',
  '/%2f%2fevil.example',
  '/%5Cevil.example',
  '/%5c%5cevil.example',
  '%2F%2Fevil.example',
  '/%252F/evil.example', // decoded twice
  '/%255Cevil.example',
  '/%2509/evil.example',
  '/%25252F/evil.example',
  ' //evil.example',
  ' /queues/q',
  '/queues/q ',
  '/queues/q\n',
  '/\u0000/evil.example',
  '/\u3000/evil.example',
  '/\uff0f/evil.example', // fullwidth solidus
  '\uff0f\uff0fevil.example',
  '/\u2028/evil.example',
  'javascript:alert(1)',
  'JavaScript:alert(1)',
  'data:text/html,<script>alert(1)</script>',
  'http://dashboard.invalid/queues/q',
  '',
];

module.exports = {
  OFFSITE_NEXTS,
  serverConfig,
  freshDatabase,
  waitFor,
  startDashboard,
  Browser,
  csrfToken,
  overviewCell,
  unescapeHtml,
  jobIds,
  olderLink,
  withClient,
};
