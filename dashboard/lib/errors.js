'use strict';

// What a person sees when something is refused or fails: the database's own
// message, detail, hint and SQLSTATE, or a plain sentence. Never a stack
// trace (those go to the log).

/** Whether err is an error the PostgreSQL server sent (it has a SQLSTATE). */
function isServerError(err) {
  return Boolean(err && typeof err.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code) && err.severity);
}

// SQLSTATE class or code to the HTTP status of the page that shows it.
function statusFor(code) {
  if (code === '42501') return 403;
  if (code === '42704') return 404;
  if (code === '57014') return 503; // statement timeout, cancelled
  if (code.startsWith('22') || code === '42883') return 400;
  if (code.startsWith('08') || code.startsWith('53') || code.startsWith('57')) return 503;
  if (code === '40001' || code === '40P01' || code.startsWith('55')) return 409;
  return 500;
}

// ---- Database unavailable ----------------------------------------------------
//
// Every way the dashboard's database can be out of reach, each a 503 page
// that says which way and what to check (never a stack trace, never the
// DSN's password). Errors of the socket (Node's codes), of node-postgres
// (its connect timeout, a connection that ends) and the SQLSTATEs a server
// answers a connection attempt with.

const UNAVAILABLE = {
  socket_missing: {
    message: 'There is no PostgreSQL socket where the dashboard looks for it.',
    checks: [
      'Is the PostgreSQL server running (pg_lsclusters, systemctl status postgresql)?',
      'Does the host setting of the DSN name the directory of the server’s socket (unix_socket_directories, often /var/run/postgresql)?',
      'Is the port right? The socket file is named after it (.s.PGSQL.<port>).',
    ],
  },
  refused: {
    message: 'Nothing accepts connections at the address the dashboard connects to.',
    checks: [
      'Is the PostgreSQL server running?',
      'Does it listen on that address and port (listen_addresses, port in postgresql.conf)?',
      'Does a firewall or a container network stand in between?',
    ],
  },
  socket_denied: {
    message: 'The dashboard may not open the PostgreSQL socket.',
    checks: [
      'May the dashboard’s operating-system user enter the socket directory and open the socket (its mode and group, unix_socket_permissions, unix_socket_group)?',
    ],
  },
  tls: {
    message: 'The TLS connection to the database could not be set up.',
    checks: [
      'Does the server accept TLS (ssl = on in postgresql.conf), if the DSN asks for it (sslmode)?',
      'Does the CA the dashboard trusts sign the server’s certificate, and does the certificate name the host the DSN connects to?',
      'Has the server’s certificate expired?',
    ],
  },
  host_unknown: {
    message: 'The database host’s name does not resolve.',
    checks: ['Is the host name in the DSN spelled right?', 'Does DNS answer from where the dashboard runs?'],
  },
  unreachable: {
    message: 'The database host cannot be reached from the dashboard.',
    checks: ['Is the host up and routed from here?', 'Does a firewall drop the connection?'],
  },
  auth: {
    message: 'The server refused the dashboard’s role.',
    checks: [
      'Are the user and password of the DSN right (PGPASSWORD, ~/.pgpass, the URL)?',
      'Does the role exist and may it log in (CREATE ROLE ... LOGIN)?',
      'Does pg_hba.conf allow this role, database and address, with that method?',
    ],
  },
  no_database: {
    message: 'The database the dashboard is configured for does not exist on that server.',
    checks: [
      'Is the database name of the DSN right (dbname=, or the path of the URL)?',
      'Is this the right server (host, port)? The database may live on another cluster.',
    ],
  },
  not_ready: {
    message: 'The server is starting up, shutting down or in recovery and accepts no connections now.',
    checks: [
      'Wait a moment and reload: a starting server accepts connections once it is ready.',
      'If it is shutting down, is that planned (a restart, a failover)? Check the server’s log.',
    ],
  },
  too_many: {
    message: 'The server has no connection slot left for the dashboard.',
    checks: [
      'Which clients hold the connections (pg_stat_activity)?',
      'Is max_connections, or a pooler in front of the server, sized for them?',
    ],
  },
  timeout: {
    message: 'The database did not answer the connection attempt in time.',
    checks: [
      'Is the server overloaded, or stuck (its log, pg_stat_activity)?',
      'Does the network drop packets between the dashboard and the server?',
    ],
  },
  lost: {
    message: 'The connection to the database ended unexpectedly.',
    checks: [
      'Did the server restart or crash (its log)?',
      'Was the dashboard’s session terminated (pg_terminate_backend), or cut by a proxy’s idle timeout?',
    ],
  },
};

// Which way, from the error; null when the database was reachable.
function unavailableKind(err) {
  if (!err) return null;
  const code = typeof err.code === 'string' ? err.code : '';
  if (isServerError(err)) {
    if (code === '28000' || code === '28P01') return 'auth';
    if (code === '3D000') return 'no_database';
    if (code === '57P03') return 'not_ready';
    if (code === '57P01' || code === '57P02' || code.startsWith('08')) return 'lost';
    if (code === '53300') return 'too_many';
    return null;
  }
  // (a file error of the dashboard's own is no socket: only connect()'s count)
  const connecting = err.syscall === 'connect';
  if (connecting && (code === 'ENOENT' || code === 'ENOTDIR')) return 'socket_missing';
  if (connecting && (code === 'EACCES' || code === 'EPERM')) return 'socket_denied';
  if (/CERT|^ERR_TLS_|^ERR_SSL_|^UNABLE_TO_VERIFY_LEAF_SIGNATURE$/.test(code)) return 'tls';
  if (code === 'ECONNREFUSED') return 'refused';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'host_unknown';
  if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH' || code === 'ETIMEDOUT') return 'unreachable';
  if (code === 'ECONNRESET' || code === 'EPIPE') return 'lost';
  const message = err.message || '';
  if (/does not support SSL connections/i.test(message)) return 'tls';
  if (/timeout exceeded when trying to connect|Connection terminated due to connection timeout/i.test(message)) {
    return 'timeout';
  }
  if (/Connection terminated/i.test(message)) return 'lost';
  return null;
}

// Where the dashboard tried to connect, from the socket error (no password there).
function addressOf(err) {
  if (typeof err.address !== 'string') return null;
  return err.port ? `${err.address} port ${err.port}` : err.address;
}

function unavailability(err) {
  const kind = unavailableKind(err);
  if (!kind) return null;
  const server = isServerError(err);
  return {
    status: 503,
    title: 'Database unavailable',
    kind,
    message: UNAVAILABLE[kind].message,
    // The server's own words (e.g. "password authentication failed for user x"),
    // or where the socket was looked for.
    detail: server ? err.message : addressOf(err) ? `Tried: ${addressOf(err)}.` : null,
    hint: null,
    checks: UNAVAILABLE[kind].checks,
    code: server ? err.code : null,
  };
}

/**
 * {status, title, message, detail, hint, code} for any error: a PostgreSQL
 * error as the server worded it; a connection failure as "database
 * unavailable"; an HTTP error of ours or of fastify (statusCode < 500) with
 * its message; anything else as an internal error, without its text.
 */
function describe(err) {
  const unavailable = unavailability(err);
  if (unavailable) return unavailable;
  if (isServerError(err)) {
    const status = statusFor(err.code);
    return {
      status,
      title: status === 403 ? 'Refused by the database' : 'The database reported an error',
      message: err.message,
      detail: err.detail || null,
      hint: err.hint || null,
      code: err.code,
    };
  }
  if (err && typeof err.code === 'string' && err.code.startsWith('FST_CSRF_')) {
    return {
      status: 403,
      title: 'Refused: no valid form token',
      message:
        'This request did not come from a form of this dashboard (missing or invalid CSRF token). Reload the page and try again.',
      code: null,
    };
  }
  const status = err && Number.isInteger(err.statusCode) ? err.statusCode : 500;
  if (status >= 400 && status < 500) {
    return { status, title: titleFor(status), message: err.publicMessage || err.message, code: null };
  }
  return {
    status: 500,
    title: 'Internal error',
    message: 'The dashboard failed; the details are in its log.',
    code: null,
  };
}

function titleFor(status) {
  return (
    {
      400: 'Bad request',
      401: 'Not signed in',
      403: 'Forbidden',
      404: 'Not found',
      405: 'Method not allowed',
      413: 'Request too large',
      415: 'Unsupported request',
    }[status] || 'Request refused'
  );
}

/** An error with an HTTP status whose message may be shown to the user. */
function httpError(status, message) {
  const err = new Error(message);
  err.statusCode = status;
  err.publicMessage = message;
  return err;
}

module.exports = { describe, isServerError, httpError, unavailableKind };
