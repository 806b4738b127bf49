'use strict';

const { Client } = require('./client');
const { KeyholeError } = require('./errors');

const DEFAULT_COOKIE = 'kh_session';

/** A session token's shape: `kh_` and 43 base64url characters (PROTOCOL.md section 8). */
const TOKEN_SHAPE = /^kh_[A-Za-z0-9_-]{43}$/;
const TOKEN_LENGTH = 46;

/** Whether `value` has a session token's shape; anything else is no session, keyholed unasked. */
function isSessionToken(value) {
  return typeof value === 'string' && value.length === TOKEN_LENGTH && TOKEN_SHAPE.test(value);
}

/** The value of `Authorization: Bearer <value>` (trimmed), or null for another scheme. */
function bearerValue(authorization) {
  const trimmed = authorization.trim();
  const scheme = /^bearer[ \t]+/i.exec(trimmed);
  return scheme ? trimmed.slice(scheme[0].length) : null;
}

/**
 * The value of the first cookie named `name` in a Cookie header, or null. One pass over the
 * header: each `;`-separated part is looked at once, and a malformed neighbour (no `=`, spaces,
 * non-ASCII, JSON) is only skipped, so it never hides the cookie asked for.
 */
function cookieValue(header, name) {
  let start = 0;
  let eq = -1; // the first '=' at or after start (kept across parts, so each search is not redone)
  while (start <= header.length) {
    let end = header.indexOf(';', start);
    if (end < 0) end = header.length;
    if (eq !== Infinity && eq < start) {
      eq = header.indexOf('=', start);
      if (eq < 0) eq = Infinity;
    }
    if (eq < end && header.slice(start, eq).trim() === name) {
      let value = header.slice(eq + 1, end).trim();
      if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
      return value;
    }
    start = end + 1;
  }
  return null;
}

/**
 * The session token of a request: `Authorization: Bearer kh_...` when present, else the cookie
 * `cookieName` (default kh_session; the first of that name). Never the query string. null when
 * there is none, or when the value is not a token's shape (`kh_` and 43 base64url characters):
 * such a value is no session, and keyholed need not be asked about it. A Bearer value not starting
 * `kh_` is another scheme's token, and the cookie is used.
 */
function tokenFromRequest(req, { cookieName = DEFAULT_COOKIE } = {}) {
  const headers = req.headers || {};
  const authorization = headers.authorization;
  if (typeof authorization === 'string') {
    const value = bearerValue(authorization);
    if (value !== null && value.startsWith('kh_')) return isSessionToken(value) ? value : null;
  }
  const cookie = headers.cookie;
  if (typeof cookie !== 'string') return null;
  const value = cookieValue(cookie, cookieName);
  return isSessionToken(value) ? value : null;
}

function answer(res, status, text, headers = {}) {
  res.statusCode = status;
  res.setHeader('Content-Type', 'text/plain; charset=utf-8');
  res.setHeader('Cache-Control', 'no-store');
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  res.end(text + '\n');
}

/** What becomes of an error thrown by the handler after the middleware, unless `onError` is given. */
function reportHandlerError(error) {
  console.error('keyhole middleware: the handler after it threw:', error);
}

/**
 * Express/Connect middleware `(req, res, next)`, which also works with node:http (call it with a
 * `next` of your own). It sets `req.keyhole = {session, user}`: session.get's whole result and
 * its `user` (may be null), or both null for an anonymous request (no credential, a value that is
 * not a token's shape, or session_not_found). With `required`, an anonymous request is answered
 * 401 with `WWW-Authenticate: Bearer realm="keyhole"`. Any other failure (keyholed unreachable,
 * past the deadline, any other error) is answered 503: fail closed, never signed in.
 *
 * `next` runs outside any promise chain, and an exception it throws (a node:http handler's; Express
 * catches its own) is answered 500 and handed to `onError(error, req, res)` (default: logged with
 * console.error): it never becomes an unhandled rejection that ends the process.
 *
 * Options: `client` (a Client) or `socketPath` (one is made for it), `cookieName`, `required`,
 * `onError`.
 */
function middleware({
  client, socketPath, cookieName = DEFAULT_COOKIE, required = false, onError = reportHandlerError,
} = {}) {
  const keyhole = client || new Client({ socketPath });
  return function keyholeSession(req, res, next) {
    const proceed = () => {
      try {
        next();
      } catch (error) {
        if (!res.headersSent) answer(res, 500, 'Internal Server Error');
        else res.destroy();
        try {
          onError(error, req, res);
        } catch {
          // an onError that throws has nobody left to tell
        }
      }
    };
    const anonymous = () => {
      req.keyhole = { session: null, user: null };
      if (required) {
        answer(res, 401, 'Sign in required', { 'WWW-Authenticate': 'Bearer realm="keyhole"' });
      } else {
        proceed();
      }
    };
    const token = tokenFromRequest(req, { cookieName });
    if (token === null) {
      anonymous();
      return;
    }
    // The outcome is settled inside the promise chain; what follows (next, the app) runs outside
    // it, from a macrotask of its own, so that nothing the app does is taken for a rejection.
    keyhole.getSession(token).then(
      (session) => setImmediate(() => {
        req.keyhole = { session, user: session.user ?? null };
        proceed();
      }),
      (error) => setImmediate(() => {
        if (error instanceof KeyholeError && error.code === 'session_not_found') {
          anonymous();
          return;
        }
        req.keyhole = { session: null, user: null };
        const code = error instanceof KeyholeError ? error.code : 'internal';
        answer(res, 503, `Authentication is unavailable (${code})`);
      }),
    );
  };
}

module.exports = { middleware, tokenFromRequest, isSessionToken, DEFAULT_COOKIE };
