'use strict';

// An Express app that signs users in with keyhole (see README.md, "Example app").
//
//   NODE_PATH=/usr/share/nodejs KEYHOLE_SOCKET=/run/keyhole/keyhole.sock PORT=8080 node example/app.js
//
// GET /signin: the sign-in page (an identity token form, and a "Sign in with Apple" button).
// POST /signin (form field id_token): token.verify, then session.create for the token's issuer
// and sub, then the session cookie and 303 to /. GET /: the signed-in user's page, 401 when not
// signed in, 503 when keyholed cannot answer. POST /signout: session.revoke, cookie cleared.
// GET /auth/apple and POST /auth/apple/callback: Sign in with Apple on the web (apple.authorize,
// apple.callback); the callback is the return URL registered for the Services ID at Apple.

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

/**
 * The value of the first cookie `name` in the request's Cookie header, as the browser sent it (not
 * decoded), or '' when there is none. A malformed neighbour (no '=') is skipped.
 */
function cookieValue(req, name) {
  const header = req.headers.cookie;
  if (typeof header !== 'string') return '';
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq >= 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return '';
}

/**
 * Whether a failure is keyholed's being out of reach (the client's own codes: unavailable, timeout,
 * connection_lost, protocol_error; or no KeyholeError at all): 503. Any code keyholed sent is its
 * answer to this request, a refusal the browser is shown.
 */
function unreachable(error) {
  return !(error instanceof keyhole.KeyholeError) || keyhole.CLIENT_CODES.includes(error.code);
}

app.get('/signin', (req, res) => {
  // Only a code keyholed can send is shown: the query string is anyone's to write.
  const code = typeof req.query.error === 'string' && keyhole.SERVER_CODES.includes(req.query.error)
    ? req.query.error : null;
  const problem = code === null ? '' : `<p role="alert">Sign-in failed (${escapeHtml(code)}).</p>\n`;
  res.type('html').send(`<!doctype html>
<title>Sign in</title>
${problem}<p><a href="/auth/apple">Sign in with Apple</a></p>
<form method="post" action="/signin">
<label>Identity token <input name="id_token" autocomplete="off"></label>
<button>Sign in</button>
</form>
`);
});

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

// The binding cookie's name, as the last apple.authorize answer gave it (`[apple] web_cookie`).
let appleCookieName = '__Host-kh_apple';

app.get('/auth/apple', async (req, res) => {
  // The path the visitor wanted, as it is: keyholed refuses one off the site (bad_request: 400).
  const returnTo = req.query.return_to === undefined ? '/' : req.query.return_to;
  if (typeof returnTo !== 'string') return res.status(400).type('text').send('return_to must be given once\n');
  let answer;
  try {
    answer = await client.appleAuthorize({ returnTo });
  } catch (error) {
    if (error instanceof keyhole.KeyholeError && error.code === 'bad_request') {
      return res.status(400).type('text').send('return_to must be a path or URL on this site\n');
    }
    return res.status(503).type('text').send(`Sign in with Apple is unavailable (${error.code || 'internal'})\n`);
  }
  appleCookieName = answer.cookie.name;
  res.setHeader('Set-Cookie', answer.cookie.set_cookie);
  res.setHeader('Cache-Control', 'no-store');
  return res.redirect(302, answer.url);
});

// Apple POSTs its answer here (application/x-www-form-urlencoded, parsed above).
app.post('/auth/apple/callback', async (req, res) => {
  // The fields as strings: a repeated one (an array) is left out, and keyholed then refuses the form.
  const form = Object.fromEntries(Object.entries(req.body || {}).filter(([, value]) => typeof value === 'string'));
  let result;
  try {
    result = await client.appleCallback(form, cookieValue(req, appleCookieName));
  } catch (error) {
    if (unreachable(error)) {
      return res.status(503).type('text').send(`Sign-in is unavailable (${error.code || 'internal'})\n`);
    }
    // Refused (state_invalid: start again; apple_authorization_refused: the user cancelled; ...).
    return res.redirect(303, `/signin?error=${encodeURIComponent(error.code)}`);
  }
  res.setHeader('Set-Cookie', sessionCookie(result.session.session));
  return res.redirect(303, result.return_to);
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
