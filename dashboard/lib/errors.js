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

/**
 * {status, title, message, detail, hint, code} for any error: a PostgreSQL
 * error as the server worded it; a connection failure as "database
 * unavailable"; an HTTP error of ours or of fastify (statusCode < 500) with
 * its message; anything else as an internal error, without its text.
 */
function describe(err) {
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
  if (
    err &&
    typeof err.code === 'string' &&
    /^(ECONNREFUSED|ENOTFOUND|ETIMEDOUT|ECONNRESET|EHOSTUNREACH)$/.test(err.code)
  ) {
    return {
      status: 503,
      title: 'Database unavailable',
      message: 'The dashboard cannot reach its database.',
      code: null,
    };
  }
  if (err && /timeout exceeded when trying to connect|Connection terminated/i.test(err.message || '')) {
    return {
      status: 503,
      title: 'Database unavailable',
      message: 'The dashboard cannot reach its database.',
      code: null,
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

module.exports = { describe, isServerError, httpError };
