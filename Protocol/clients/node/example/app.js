'use strict';

// An Express app that signs users in with keyhole (see README.md, "Example app").
//
//   NODE_PATH=/usr/share/nodejs KEYHOLE_SOCKET=/run/keyhole/keyhole.sock PORT=8080 node example/app.js
//
// POST /signin (form field id_token): token.verify, then session.create for the token's issuer
// and sub, then the session cookie and 303 to /. GET /: the signed-in user's page, 401 when not
// signed in, 503 when keyholed cannot answer. POST /signout: session.revoke, cookie cleared.

const express = require('express');
const keyhole = require('..');

const COOKIE = 'kh_session';
const client = new keyhole.Client({
  socketPath: process.env.KEYHOLE_SOCKET,
  timeoutMs: Number(process.env.KEYHOLE_TIMEOUT_MS || 5000),
});
const app = express();

// An identity token longer than this is refused before keyholed is asked (keyholed's own limit).
const MAX_ID_TOKEN_BYTES = 16384;

app.use(express.urlencoded({ extended: false, limit: '64kb' }));

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function sessionCookie(value, extra = '') {
  return `${COOKIE}=${value}; HttpOnly; Secure; SameSite=Lax; Path=/${extra}`;
}

app.post('/signin', async (req, res) => {
  const idToken = req.body && typeof req.body.id_token === 'string' ? req.body.id_token : '';
  if (idToken === '') return res.status(401).type('text').send('No identity token\n');
  if (Buffer.byteLength(idToken) > MAX_ID_TOKEN_BYTES) {
    return res.status(401).type('text').send('The identity token is too long\n');
  }
  let identity;
  try {
    identity = await client.verifyToken(idToken);
  } catch (error) {
    // token_*: the token does not verify; bad_request: keyholed would not take it as a token.
    // Either way no session, and the answer is the client's fault (401), not keyholed's (503).
    if (error instanceof keyhole.KeyholeError && (error.code.startsWith('token_') || error.code === 'bad_request')) {
      return res.status(401).type('text').send(`The identity token does not verify (${error.code})\n`);
    }
    return res.status(503).type('text').send(`Sign-in is unavailable (${error.code || 'internal'})\n`);
  }
  try {
    const created = await client.createSession(identity.sub, { issuer: identity.issuer });
    res.setHeader('Set-Cookie', sessionCookie(created.session));
    return res.redirect(303, '/');
  } catch (error) {
    return res.status(503).type('text').send(`Sign-in is unavailable (${error.code || 'internal'})\n`);
  }
});

app.get('/', keyhole.middleware({ client, cookieName: COOKIE, required: true }), (req, res) => {
  const { session } = req.keyhole;
  res.type('html').send(`<!doctype html>
<title>Signed in</title>
<p>Signed in as <strong>${escapeHtml(session.sub)}</strong> (${escapeHtml(session.issuer)}).</p>
<form method="post" action="/signout"><button>Sign out</button></form>
`);
});

app.post('/signout', async (req, res) => {
  // null unless the cookie has a token's shape: nothing else is sent to keyholed to revoke.
  const token = keyhole.tokenFromRequest(req, { cookieName: COOKIE });
  if (token !== null) {
    try {
      await client.revokeSession(token);
    } catch (error) {
      return res.status(503).type('text').send(`Sign-out is unavailable (${error.code || 'internal'})\n`);
    }
  }
  res.setHeader('Set-Cookie', sessionCookie('', '; Max-Age=0'));
  return res.redirect(303, '/');
});

// A form body past the parser's limit can only hold an identity token far too long: 401 on
// /signin, as for one past MAX_ID_TOKEN_BYTES. Other errors go to Express's default handler.
app.use((error, req, res, next) => {
  if (req.path === '/signin' && error && error.type === 'entity.too.large') {
    return res.status(401).type('text').send('The identity token is too long\n');
  }
  return next(error);
});

const port = Number(process.env.PORT || 0);
const server = app.listen(port, '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});

function stop() {
  server.close();
  server.closeAllConnections?.();
  client.close();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
