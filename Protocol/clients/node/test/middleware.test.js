'use strict';

// The middleware over real HTTP, with node:http and with Express (Debian's, NODE_PATH), against a
// real keyholed, an unreachable socket, and scripted servers answering errors or nothing.

const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { Client, middleware } = require('..');
const { startHarness, startScenario, request, listen, freshSocketPath } = require('./support');

let harness;
let client;
let token;
const servers = [];

test.before(async () => {
  harness = await startHarness();
  client = new Client({ socketPath: harness.socket });
  token = (await client.createSession('node-mw')).session;
});

test.after(async () => {
  for (const server of servers) server.close();
  if (client) await client.close();
  if (harness) await harness.stop();
});

/** A node:http server behind the middleware; its handler answers what req.keyhole holds. */
async function plainServer(options) {
  const guard = middleware(options);
  const server = http.createServer((req, res) => {
    guard(req, res, () => {
      const { session, user } = req.keyhole;
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ sub: session && session.sub, user: user && user.sub }));
    });
  });
  servers.push(server);
  return listen(server);
}

const cookie = (value, name = 'kh_session') => ({ Cookie: `theme=dark; ${name}=${value}; other=1` });
const bearer = (value) => ({ Authorization: `Bearer ${value}` });
const ANONYMOUS = { sub: null, user: null };
const SIGNED_IN = { sub: 'node-mw', user: 'node-mw' };
const UNKNOWN = 'kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';

test('node:http: the session and its user from the cookie, or anonymous', async () => {
  const port = await plainServer({ client });
  const asked = async (headers, path = '/') => {
    const res = await request(port, { headers, path });
    assert.equal(res.status, 200, res.body);
    return JSON.parse(res.body);
  };
  assert.deepStrictEqual(await asked(cookie(token)), SIGNED_IN);
  assert.deepStrictEqual(await asked({}), ANONYMOUS);
  assert.deepStrictEqual(await asked(cookie(UNKNOWN)), ANONYMOUS);
  assert.deepStrictEqual(await asked(cookie('not-a-token')), ANONYMOUS);
  assert.deepStrictEqual(await asked({}, `/?kh_session=${token}`), ANONYMOUS, 'a token in the query string counts');
});

test('node:http: Authorization Bearer kh_ wins over the cookie', async () => {
  const port = await plainServer({ client });
  const asked = async (headers) => JSON.parse((await request(port, { headers })).body);
  assert.deepStrictEqual(await asked(bearer(token)), SIGNED_IN);
  assert.deepStrictEqual(await asked({ ...bearer(token), ...cookie(UNKNOWN) }), SIGNED_IN);
  assert.deepStrictEqual(await asked({ ...bearer(UNKNOWN), ...cookie(token) }), ANONYMOUS);
  assert.deepStrictEqual(await asked({ ...bearer('eyJhbGciOi.not.keyhole'), ...cookie(token) }), SIGNED_IN,
    'a bearer token that is not keyhole\'s leaves the cookie in use');
});

test('node:http: the cookie name is an option', async () => {
  const port = await plainServer({ client, cookieName: 'app_sid' });
  assert.deepStrictEqual(JSON.parse((await request(port, { headers: cookie(token, 'app_sid') })).body), SIGNED_IN);
  assert.deepStrictEqual(JSON.parse((await request(port, { headers: cookie(token) })).body), ANONYMOUS);
});

test('required: anonymous is 401 with WWW-Authenticate, a session passes', async () => {
  const port = await plainServer({ client, required: true });
  for (const headers of [{}, cookie(UNKNOWN)]) {
    const res = await request(port, { headers });
    assert.equal(res.status, 401);
    assert.equal(res.headers['www-authenticate'], 'Bearer realm="keyhole"');
  }
  const res = await request(port, { headers: cookie(token) });
  assert.equal(res.status, 200);
  assert.deepStrictEqual(JSON.parse(res.body), SIGNED_IN);
});

test('keyholed unreachable: 503, never signed in (required or not); no credential stays anonymous', async () => {
  const { socket } = freshSocketPath('gone');
  const gone = new Client({ socketPath: socket, timeoutMs: 200 });
  for (const required of [false, true]) {
    const port = await plainServer({ client: gone, required });
    const res = await request(port, { headers: cookie(token) });
    assert.equal(res.status, 503, res.body);
    assert.match(res.body, /unavailable/);
    assert.equal((await request(port, {})).status, required ? 401 : 200);
  }
  await gone.close();
});

test('the socketPath option makes the middleware its own client', async () => {
  const port = await plainServer({ socketPath: harness.socket });
  assert.deepStrictEqual(JSON.parse((await request(port, { headers: cookie(token) })).body), SIGNED_IN);
});

for (const [scenario, code] of [['known-error-code', 'storage_unavailable'], ['unknown-error-code', 'internal']]) {
  test(`any other error fails closed: ${code} from keyholed is 503 (${scenario})`, async () => {
    const server = await startScenario(scenario);
    const scripted = new Client({ socketPath: server.socket, timeoutMs: 2000 });
    try {
      const port = await plainServer({ client: scripted });
      const res = await request(port, { headers: cookie(UNKNOWN) });
      assert.equal(res.status, 503);
      assert.match(res.body, new RegExp(code));
    } finally {
      await scripted.close();
      const { code: status, stderr } = await server.finish();
      assert.equal(status, 0, stderr);
    }
  });
}

test('past the deadline fails closed: 503 (timeout-late-answer-dropped)', async () => {
  const server = await startScenario('timeout-late-answer-dropped');
  const scripted = new Client({ socketPath: server.socket, timeoutMs: 300 });
  try {
    const port = await plainServer({ client: scripted });
    const res = await request(port, { headers: cookie(UNKNOWN) });
    assert.equal(res.status, 503);
    assert.match(res.body, /timeout/);
    assert.equal((await scripted.ping()).protocol, 1); // the script's second call
  } finally {
    await scripted.close();
    const { code: status, stderr } = await server.finish();
    assert.equal(status, 0, stderr);
  }
});

test('Express: app.use(middleware) and a route that requires a session', async () => {
  const express = require('express');
  const app = express();
  app.use(middleware({ client }));
  app.get('/', (req, res) => res.json({ sub: req.keyhole.session && req.keyhole.session.sub }));
  app.get('/private', middleware({ client, required: true }), (req, res) => res.json({ user: req.keyhole.user.sub }));
  const server = http.createServer(app);
  servers.push(server);
  const port = await listen(server);
  assert.deepStrictEqual(JSON.parse((await request(port, { headers: cookie(token) })).body), { sub: 'node-mw' });
  assert.deepStrictEqual(JSON.parse((await request(port, {})).body), { sub: null });
  const denied = await request(port, { path: '/private' });
  assert.equal(denied.status, 401);
  assert.equal(denied.headers['www-authenticate'], 'Bearer realm="keyhole"');
  const allowed = await request(port, { path: '/private', headers: bearer(token) });
  assert.deepStrictEqual(JSON.parse(allowed.body), { user: 'node-mw' });
});
