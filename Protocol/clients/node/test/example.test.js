'use strict';

// The example app (example/app.js, Express from Debian) as a child process over real HTTP,
// against a real keyholed and against a socket nobody listens on.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { Client } = require('..');
const { startHarness, request, Lines, collect, exited, freshSocketPath, scriptedKeyholed, forgeSignature, answered } = require('./support');

const APP = path.join(__dirname, '..', 'example', 'app.js');
let harness;
const apps = [];

test.before(async () => {
  harness = await startHarness();
});

test.after(async () => {
  for (const app of apps) {
    app.kill('SIGTERM');
    await exited(app, 10000).catch(() => app.kill('SIGKILL'));
  }
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
