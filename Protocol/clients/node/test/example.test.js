'use strict';

// The example app (example/app.js, Express from Debian) as a child process over real HTTP,
// against a real keyholed and against a socket nobody listens on. Sign in with Apple on the web runs
// against a second keyholed whose Apple audience is a web client with the app's return URL.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { Client } = require('..');
const { startHarness, request, Lines, collect, exited, freshSocketPath, scriptedKeyholed, forgeSignature, answered } = require('./support');

const APP = path.join(__dirname, '..', 'example', 'app.js');
const RETURN_URL = 'https://example.com/auth/apple/callback';
let harness;
let appleHarness;
const apps = [];

test.before(async () => {
  harness = await startHarness();
  // The audience is the harness's (its ready line), read from the plain harness's.
  appleHarness = await startHarness({
    configExtra: `[apple]\nredirect_uris = { ${JSON.stringify(harness.audience)} = ${JSON.stringify(RETURN_URL)} }\n`,
  });
  assert.equal(appleHarness.audience, harness.audience);
});

test.after(async () => {
  for (const app of apps) {
    app.kill('SIGTERM');
    await exited(app, 10000).catch(() => app.kill('SIGKILL'));
  }
  if (appleHarness) await appleHarness.stop();
  if (harness) await harness.stop();
});

/** Starts the app with KEYHOLE_SOCKET=socket and PORT=0; resolves with the port it printed. */
async function startApp(socket, timeoutMs = 5000) {
  const app = spawn(process.execPath, [APP], {
    env: { ...process.env, KEYHOLE_SOCKET: socket, PORT: '0', KEYHOLE_TIMEOUT_MS: String(timeoutMs) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  apps.push(app);
  const stderr = collect(app.stderr);
  const line = await new Lines(app.stdout, 'example app').next(20000).catch((error) => {
    throw new Error(`${error.message}\n${stderr()}`);
  });
  const match = /^listening (\d+)$/.exec(line);
  assert.ok(match, `the app printed ${JSON.stringify(line)}`);
  return Number(match[1]);
}

function signIn(port, idToken) {
  return request(port, {
    method: 'POST', path: '/signin', body: new URLSearchParams({ id_token: idToken }).toString(),
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
  });
}

test('sign in, see the page, sign out; the old cookie no longer signs in', async () => {
  const port = await startApp(harness.socket);

  const signedIn = await signIn(port, harness.token);
  assert.equal(signedIn.status, 303, signedIn.body);
  assert.equal(signedIn.headers.location, '/');
  const setCookie = signedIn.headers['set-cookie'][0];
  const match = /^kh_session=(kh_[A-Za-z0-9_-]{43}); HttpOnly; Secure; SameSite=Lax; Path=\/$/.exec(setCookie);
  assert.ok(match, setCookie);
  const cookie = { Cookie: `kh_session=${match[1]}` };

  const page = await request(port, { headers: cookie });
  assert.equal(page.status, 200);
  assert.ok(page.body.includes(harness.sub), page.body);

  const signedOut = await request(port, { method: 'POST', path: '/signout', headers: cookie });
  assert.equal(signedOut.status, 303);
  assert.equal(signedOut.headers.location, '/');
  assert.match(signedOut.headers['set-cookie'][0], /^kh_session=; .*Max-Age=0/);

  const after = await request(port, { headers: cookie });
  assert.equal(after.status, 401);
  assert.equal(after.headers['www-authenticate'], 'Bearer realm="keyhole"');
  assert.ok(!after.body.includes(harness.sub));
});

test('GET / without a cookie is 401', async () => {
  const port = await startApp(harness.socket);
  const res = await request(port, {});
  assert.equal(res.status, 401);
});

test('a forged identity token is 401 and makes no session', async () => {
  const port = await startApp(harness.socket);
  const forged = forgeSignature(harness.token);
  const res = await signIn(port, forged);
  assert.equal(res.status, 401, res.body);
  assert.equal(res.headers['set-cookie'], undefined);
  assert.equal((await signIn(port, '')).status, 401);
  const client = new Client({ socketPath: harness.socket });
  try {
    assert.deepStrictEqual(await client.listSessions(harness.sub), { sessions: [] });
  } finally {
    await client.close();
  }
});

test('keyholed unreachable: GET / with a session cookie is 503, sign-in is 503', async () => {
  const { socket } = freshSocketPath('none');
  const port = await startApp(socket, 300);
  const res = await request(port, { headers: { Cookie: 'kh_session=kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' } });
  assert.equal(res.status, 503, res.body);
  assert.equal((await signIn(port, harness.token)).status, 503);
});

test('an identity token longer than 16 384 bytes is 401, and keyholed is not asked', async () => {
  const port = await startApp(harness.socket);
  const before = await answered(harness.socket, 'token.verify');
  for (const bytes of [16385, 40000, 100000]) {
    const res = await signIn(port, 'x'.repeat(bytes));
    assert.equal(res.status, 401, `${bytes} bytes: ${res.body}`);
    assert.equal(res.headers['set-cookie'], undefined);
  }
  assert.equal(await answered(harness.socket, 'token.verify'), before, 'keyholed was asked to verify an oversized token');
  const limit = await signIn(port, 'x'.repeat(16384)); // keyholed's to refuse: token_malformed
  assert.equal(limit.status, 401, limit.body);
  assert.match(limit.body, /token_malformed/);
  assert.equal(await answered(harness.socket, 'token.verify'), before + 1);
});

test('sign-out revokes only a cookie of a token\'s shape', async () => {
  const port = await startApp(harness.socket);
  const before = await answered(harness.socket, 'session.revoke');
  for (const value of ['x'.repeat(5000), `kh_${'A'.repeat(44)}`, 'kh_short']) {
    const res = await request(port, { method: 'POST', path: '/signout', headers: { Cookie: `kh_session=${value}` } });
    assert.equal(res.status, 303, res.body);
    assert.match(res.headers['set-cookie'][0], /^kh_session=; .*Max-Age=0/);
  }
  assert.equal(await answered(harness.socket, 'session.revoke'), before, 'keyholed was asked to revoke a value that is not a token');
});

test('bad_request from token.verify is 401, not 503', async () => {
  const fake = await scriptedKeyholed((req) => (req.op === 'token.verify'
    ? { ok: false, error: { code: 'bad_request', message: "'token' is required and must be a string" } }
    : { ok: false, error: { code: 'internal', message: 'not scripted' } }));
  try {
    const port = await startApp(fake.socket);
    const res = await signIn(port, harness.token);
    assert.equal(res.status, 401, res.body);
    assert.equal(res.headers['set-cookie'], undefined);
    assert.deepStrictEqual(fake.requests.map((r) => r.op), ['token.verify']);
  } finally {
    await fake.close();
  }
});

// Sign in with Apple on the web. No Apple is reachable: every callback here is refused by keyholed.

/** GET /auth/apple (with `query`): the answer, and the state and binding cookie it carries. */
async function authorize(port, query = '') {
  const res = await request(port, { path: `/auth/apple${query}` });
  const location = res.headers.location || '';
  const state = location ? new URL(location).searchParams.get('state') : null;
  const setCookie = (res.headers['set-cookie'] || [])[0] || '';
  const match = /^([^=;]+)=([^;]*);/.exec(setCookie);
  return { res, state, cookie: match ? { name: match[1], value: match[2] } : null, setCookie };
}

function callback(port, fields, cookieHeader) {
  const headers = { 'Content-Type': 'application/x-www-form-urlencoded' };
  if (cookieHeader !== undefined) headers.Cookie = cookieHeader;
  return request(port, {
    method: 'POST', path: '/auth/apple/callback', body: new URLSearchParams(fields).toString(), headers,
  });
}

/** A value of the cookie's shape that is not `value`: its first character changed. */
function otherValue(value) {
  return `${value.startsWith('A') ? 'B' : 'A'}${value.slice(1)}`;
}

test('the sign-in page has a "Sign in with Apple" button: a link to /auth/apple', async () => {
  const port = await startApp(appleHarness.socket);
  const page = await request(port, { path: '/signin' });
  assert.equal(page.status, 200, page.body);
  assert.match(page.headers['content-type'], /^text\/html/);
  assert.match(page.body, /<a href="\/auth\/apple">Sign in with Apple<\/a>/);
  assert.ok(!page.body.includes('Sign-in failed'), page.body);
});

test('GET /auth/apple: 302 to Apple with the app\'s return URL, and the binding cookie as keyholed gave it', async () => {
  const port = await startApp(appleHarness.socket);
  const before = await answered(appleHarness.socket, 'apple.authorize');
  const { res, state, cookie, setCookie } = await authorize(port);
  assert.equal(res.status, 302, res.body);
  const location = res.headers.location;
  assert.ok(location.startsWith('http://127.0.0.1:9/auth/authorize?'), location);
  assert.ok(location.includes('redirect_uri=https%3A%2F%2Fexample.com%2Fauth%2Fapple%2Fcallback'), location);
  assert.equal(new URL(location).searchParams.get('client_id'), appleHarness.audience);
  assert.match(state, /^[A-Za-z0-9_-]{43}$/);
  assert.ok(setCookie.startsWith('__Host-kh_apple='), setCookie);
  assert.equal(cookie.name, '__Host-kh_apple');
  assert.match(cookie.value, /^[A-Za-z0-9_-]{43}$/);
  // keyholed's set_cookie, sent as it is: the attributes a cross-site form_post needs.
  assert.equal(setCookie, `__Host-kh_apple=${cookie.value}; Max-Age=600; Path=/; Secure; HttpOnly; SameSite=None`);
  assert.equal(res.headers['set-cookie'].length, 1);
  assert.equal(res.headers['cache-control'], 'no-store');
  assert.equal(await answered(appleHarness.socket, 'apple.authorize'), before + 1);

  const wanted = await authorize(port, `?return_to=${encodeURIComponent('/account?tab=1')}`);
  assert.equal(wanted.res.status, 302, wanted.res.body);
});

test('GET /auth/apple?return_to=//evil.example is 400 (keyholed refuses it) and sets no cookie', async () => {
  const port = await startApp(appleHarness.socket);
  for (const query of ['?return_to=//evil.example', '?return_to=https%3A%2F%2Fevil.example%2F', '?return_to=/a&return_to=/b']) {
    const { res } = await authorize(port, query);
    assert.equal(res.status, 400, `${query}: ${res.body}`);
    assert.equal(res.headers['set-cookie'], undefined, query);
    assert.equal(res.headers.location, undefined, query);
  }
});

test('a callback with Apple\'s error: 303 to the sign-in page with error=apple_authorization_refused, no session', async () => {
  const port = await startApp(appleHarness.socket);
  const { state, cookie } = await authorize(port);
  const res = await callback(port, { state, error: 'user_cancelled_authorize' }, `${cookie.name}=${cookie.value}`);
  assert.equal(res.status, 303, res.body);
  assert.equal(res.headers.location, '/signin?error=apple_authorization_refused');
  assert.equal(res.headers['set-cookie'], undefined);
  assert.ok(!res.body.includes(state) && !res.body.includes(cookie.value), res.body);

  const page = await request(port, { path: res.headers.location });
  assert.equal(page.status, 200, page.body);
  assert.match(page.body, /Sign-in failed \(apple_authorization_refused\)/);
  assert.match(page.body, /<a href="\/auth\/apple">/);
});

test('a callback with another browser\'s cookie, or none: error=state_invalid, no session', async () => {
  const port = await startApp(appleHarness.socket);
  const { state, cookie } = await authorize(port);
  const wrong = await callback(port, { state, code: 'c', id_token: 'x' }, `${cookie.name}=${otherValue(cookie.value)}`);
  assert.equal(wrong.status, 303, wrong.body);
  assert.equal(wrong.headers.location, '/signin?error=state_invalid');
  assert.equal(wrong.headers['set-cookie'], undefined);
  const page = await request(port, { path: wrong.headers.location });
  assert.match(page.body, /Sign-in failed \(state_invalid\)/);

  // No cookie at all (the app sends ''): refused too, and the state is used up by either.
  const fresh = await authorize(port);
  const none = await callback(port, { state: fresh.state, code: 'c', id_token: 'x' });
  assert.equal(none.status, 303, none.body);
  assert.equal(none.headers.location, '/signin?error=state_invalid');
  assert.equal(none.headers['set-cookie'], undefined);
  const again = await callback(port, { state: fresh.state, error: 'user_cancelled_authorize' },
    `${fresh.cookie.name}=${fresh.cookie.value}`);
  assert.equal(again.headers.location, '/signin?error=state_invalid');
});

test('the sign-in page shows only an error code keyholed can send, escaped', async () => {
  const port = await startApp(appleHarness.socket);
  for (const value of ['<script>alert(1)</script>', 'Your account is locked: call 555', '']) {
    const page = await request(port, { path: `/signin?error=${encodeURIComponent(value)}` });
    assert.equal(page.status, 200);
    assert.ok(!page.body.includes('Sign-in failed'), page.body);
    assert.ok(!page.body.includes('<script>') && !page.body.includes('call 555'), page.body);
  }
});

test('Sign in with Apple: keyholed unreachable is 503; keyholed without [apple] is 503 for /auth/apple', async () => {
  const { socket } = freshSocketPath('none');
  const port = await startApp(socket, 300);
  const start = await authorize(port);
  assert.equal(start.res.status, 503, start.res.body);
  assert.equal(start.res.headers['set-cookie'], undefined);
  const res = await callback(port, { state: 's', code: 'c', id_token: 'x' }, '__Host-kh_apple=v');
  assert.equal(res.status, 503, res.body);
  assert.equal(res.headers['set-cookie'], undefined);
  assert.equal(res.headers.location, undefined);

  const plain = await startApp(harness.socket);
  const notConfigured = await authorize(plain);
  assert.equal(notConfigured.res.status, 503, notConfigured.res.body);
  assert.match(notConfigured.res.body, /not_configured/);
});
