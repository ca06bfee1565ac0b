'use strict';

// Who may open the dashboard: one of
//   - a password (a login form, then a signed, HttpOnly, SameSite=Strict
//     session cookie naming a session kept in this process's memory),
//   - a reverse proxy that authenticates and passes the user in a header,
//   - nobody checked (insecureNoAuth, for local use only).
// What the user may then do is the dashboard's database role's business.

const crypto = require('node:crypto');
const { Signer } = require('@fastify/cookie');

const SESSION_COOKIE = 'pgq_dashboard_session';

/** Compares two strings in time that depends on neither's content (hashes of equal length). */
function constantTimeEqual(a, b) {
  const ha = crypto.createHash('sha256').update(String(a)).digest();
  const hb = crypto.createHash('sha256').update(String(b)).digest();
  return crypto.timingSafeEqual(ha, hb);
}

/** The sessions of the password mode: random ids, in memory, until they expire or log out. */
class SessionStore {
  constructor({ ttlMs = 12 * 3600_000, max = 10_000 } = {}) {
    this.ttlMs = ttlMs;
    this.max = max;
    this.sessions = new Map(); // id -> expiry (ms)
  }

  create() {
    this.prune();
    if (this.sessions.size >= this.max) this.sessions.delete(this.sessions.keys().next().value);
    const id = crypto.randomBytes(32).toString('base64url');
    this.sessions.set(id, Date.now() + this.ttlMs);
    return id;
  }

  valid(id) {
    const expiry = this.sessions.get(id);
    if (expiry === undefined) return false;
    if (expiry < Date.now()) {
      this.sessions.delete(id);
      return false;
    }
    return true;
  }

  destroy(id) {
    this.sessions.delete(id);
  }

  prune() {
    const now = Date.now();
    for (const [id, expiry] of this.sessions) if (expiry < now) this.sessions.delete(id);
  }
}

/**
 * The authentication of one dashboard: its mode, and user(request) → the
 * user's name, or null when the request is not authenticated.
 */
function createAuth({ password, proxyHeader, insecureNoAuth, sessionSecret, sessionTtlMs, secureCookies, cookiePath }) {
  const modes = [Boolean(password), Boolean(proxyHeader), Boolean(insecureNoAuth)].filter(Boolean).length;
  if (modes === 0) {
    throw new Error(
      'pgq dashboard: no authentication configured: set a password (PGQ_DASHBOARD_PASSWORD), ' +
        'trust a reverse proxy header (--trust-proxy-header), or pass --insecure-no-auth for local use',
    );
  }
  if (modes > 1) {
    throw new Error('pgq dashboard: choose one of a password, a trusted proxy header and --insecure-no-auth');
  }
  if (password !== undefined && password !== null && typeof password !== 'string') {
    throw new Error('pgq dashboard: the password must be a string');
  }
  if (proxyHeader && !/^[A-Za-z0-9-]{1,100}$/.test(proxyHeader)) {
    throw new Error(`pgq dashboard: ${JSON.stringify(proxyHeader)} is not a header name`);
  }

  if (password) {
    const signer = new Signer(sessionSecret || crypto.randomBytes(32));
    const store = new SessionStore({ ttlMs: sessionTtlMs });
    const cookieOptions = {
      path: cookiePath,
      httpOnly: true,
      sameSite: 'strict',
      secure: Boolean(secureCookies),
    };
    const sessionId = (request) => {
      const raw = request.cookies?.[SESSION_COOKIE];
      if (!raw) return null;
      const { valid, value } = signer.unsign(raw);
      return valid && store.valid(value) ? value : null;
    };
    return {
      mode: 'password',
      user: (request) => (sessionId(request) ? 'operator' : null),
      checkPassword: (given) => typeof given === 'string' && constantTimeEqual(given, password),
      login(reply) {
        reply.setCookie(SESSION_COOKIE, signer.sign(store.create()), {
          ...cookieOptions,
          maxAge: Math.floor(store.ttlMs / 1000),
        });
      },
      logout(request, reply) {
        const id = sessionId(request);
        if (id) store.destroy(id);
        reply.clearCookie(SESSION_COOKIE, cookieOptions);
      },
    };
  }
  if (proxyHeader) {
    const name = proxyHeader.toLowerCase();
    return {
      mode: 'proxy',
      header: proxyHeader,
      user: (request) => {
        const value = request.headers[name];
        return typeof value === 'string' && value.trim() !== '' ? value.trim() : null;
      },
    };
  }
  return { mode: 'none', user: () => 'local' };
}

module.exports = { createAuth, constantTimeEqual, SessionStore, SESSION_COOKIE };
