'use strict';

const { Client } = require('./client');
const { KeyholeError } = require('./errors');

const DEFAULT_COOKIE = 'kh_session';

/**
 * The session token of a request: `Authorization: Bearer kh_...` when present, else the cookie
 * `cookieName` (default kh_session). Never the query string. null when there is none.
 */
function tokenFromRequest(req, { cookieName = DEFAULT_COOKIE } = {}) {
  const headers = req.headers || {};
  const authorization = headers.authorization;
  if (typeof authorization === 'string') {
    const match = /^\s*bearer\s+(kh_\S+)\s*$/i.exec(authorization);
    if (match) return match[1];
  }
  const cookie = headers.cookie;
  if (typeof cookie !== 'string') return null;
  for (const part of cookie.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() !== cookieName) continue;
    let value = part.slice(eq + 1).trim();
    if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    return value === '' ? null : value;
  }
  return null;
}

function answer(res, status, text, headers = {}) {
  res.statusCode = status;
  res.setHeader('Content-Type', 'text/plain; charset=utf-8');
  res.setHeader('Cache-Control', 'no-store');
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  res.end(text + '\n');
}

/**
 * Express/Connect middleware `(req, res, next)`, which also works with node:http (call it with a
 * `next` of your own). It sets `req.keyhole = {session, user}`: session.get's whole result and
 * its `user` (may be null), or both null for an anonymous request (no credential, or
 * session_not_found). With `required`, an anonymous request is answered 401 with
 * `WWW-Authenticate: Bearer realm="keyhole"`. Any other failure (keyholed unreachable, past the
 * deadline, any other error) is answered 503: fail closed, never signed in.
 *
 * Options: `client` (a Client) or `socketPath` (one is made for it), `cookieName`, `required`.
 */
function middleware({ client, socketPath, cookieName = DEFAULT_COOKIE, required = false } = {}) {
  const keyhole = client || new Client({ socketPath });
  return function keyholeSession(req, res, next) {
    const token = tokenFromRequest(req, { cookieName });
    const anonymous = () => {
      req.keyhole = { session: null, user: null };
      if (required) {
        answer(res, 401, 'Sign in required', { 'WWW-Authenticate': 'Bearer realm="keyhole"' });
      } else {
        next();
      }
    };
    if (token === null) {
      anonymous();
      return;
    }
    keyhole.getSession(token).then(
      (session) => {
        req.keyhole = { session, user: session.user === undefined ? null : session.user };
        next();
      },
      (error) => {
        if (error instanceof KeyholeError && error.code === 'session_not_found') {
          anonymous();
          return;
        }
        req.keyhole = { session: null, user: null };
        const code = error instanceof KeyholeError ? error.code : 'internal';
        answer(res, 503, `Authentication is unavailable (${code})`);
      },
    );
  };
}

module.exports = { middleware, tokenFromRequest, DEFAULT_COOKIE };
