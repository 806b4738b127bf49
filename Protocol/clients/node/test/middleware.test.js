'use strict';

// The middleware over real HTTP, with node:http and with Express (Debian's, NODE_PATH), against a
// real keyholed, an unreachable socket, and scripted servers answering errors or nothing.

const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { Client, middleware, tokenFromRequest } = require('..');
const { startHarness, startScenario, request, listen, freshSocketPath, answered } = require('./support');

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
  // Headers up to 256 KiB, so that oversized cookies reach the middleware (node's default is 16 KiB).
  const server = http.createServer({ maxHeaderSize: 256 * 1024 }, (req, res) => {
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

test('a credential not of a token\'s shape is anonymous, and keyholed is not asked', async () => {
  const open = await plainServer({ client });
  const closed = await plainServer({ client, required: true });
  const misshapen = [
    cookie('x'.repeat(70000)),
    cookie(`kh_${'A'.repeat(1022)}`), // 1 025 bytes
    cookie(`${UNKNOWN}A`),
    cookie(UNKNOWN.slice(0, -1)),
    cookie(`${UNKNOWN.slice(0, -1)}+`),
    cookie(`${UNKNOWN.slice(0, -1)}=`),
    bearer(`kh_${'A'.repeat(1022)}`),
    { ...bearer(`${token}.`), ...cookie(token) }, // a kh_ Bearer is the credential: no fall back
  ];
  const before = await answered(harness.socket, 'session.get');
  for (const headers of misshapen) {
    const anonymous = await request(open, { headers });
    assert.equal(anonymous.status, 200, anonymous.body);
    assert.deepStrictEqual(JSON.parse(anonymous.body), ANONYMOUS);
    const denied = await request(closed, { headers });
    assert.equal(denied.status, 401, denied.body);
    assert.equal(denied.headers['www-authenticate'], 'Bearer realm="keyhole"');
  }
  assert.equal(await answered(harness.socket, 'session.get'), before, 'keyholed was asked about a value that is not a token');
  // The same servers do ask keyholed about a token's shape.
  assert.deepStrictEqual(JSON.parse((await request(open, { headers: cookie(token) })).body), SIGNED_IN);
  assert.equal(await answered(harness.socket, 'session.get'), before + 1);
});

test('cookies: a malformed neighbour does not hide the session\'s, and the first of the name wins', async () => {
  const port = await plainServer({ client });
  const asked = async (header) => JSON.parse((await request(port, { headers: { Cookie: header } })).body);
  for (const neighbour of ['a=b c', 'a=é', 'a={"j":1}', 'nothing', '=', ';;', 'kh_session', 'a="b;c"']) {
    assert.deepStrictEqual(await asked(`${neighbour}; kh_session=${token}`), SIGNED_IN, neighbour);
    assert.deepStrictEqual(await asked(`kh_session=${token}; ${neighbour}`), SIGNED_IN, neighbour);
  }
  assert.deepStrictEqual(await asked(`kh_session=${token}; kh_session=${UNKNOWN}`), SIGNED_IN);
  assert.deepStrictEqual(await asked(`kh_session=${UNKNOWN}; kh_session=${token}`), ANONYMOUS);
  assert.deepStrictEqual(await asked(`kh_session="${token}"`), SIGNED_IN);
  assert.deepStrictEqual(await asked(`xkh_session=${UNKNOWN}; kh_session=${token}`), SIGNED_IN);
});

test('tokenFromRequest reads a long Cookie header of many parts in linear time', () => {
  const many = `${'a;'.repeat(200000)}${'b=c d;'.repeat(100000)}kh_session=${token}`;
  const started = process.hrtime.bigint();
  assert.equal(tokenFromRequest({ headers: { cookie: many } }), token);
  assert.equal(tokenFromRequest({ headers: { cookie: ';'.repeat(500000) } }), null);
  // Quadratic work over 1.1 MB would take minutes; linear takes milliseconds.
  assert.ok(process.hrtime.bigint() - started < 2_000_000_000n);
});

test('node:http: a handler after the middleware that throws is answered 500, and the server goes on', async () => {
  const thrown = [];
  const guard = middleware({ client, onError: (error) => thrown.push(error.message) });
  const server = http.createServer((req, res) => {
    guard(req, res, () => {
      if (req.url === '/throw') throw new Error(`the app failed (${req.keyhole.session ? 'signed in' : 'anonymous'})`);
      res.end(JSON.stringify({ sub: req.keyhole.session && req.keyhole.session.sub }));
    });
  });
  servers.push(server);
  const port = await listen(server);
  for (let round = 0; round < 2; round++) {
    const signedIn = await request(port, { path: '/throw', headers: cookie(token) });
    assert.equal(signedIn.status, 500);
    const anonymous = await request(port, { path: '/throw' });
    assert.equal(anonymous.status, 500);
    assert.deepStrictEqual(JSON.parse((await request(port, { headers: cookie(token) })).body), { sub: 'node-mw' });
  }
  assert.deepStrictEqual(thrown, [
    'the app failed (signed in)', 'the app failed (anonymous)', 'the app failed (signed in)', 'the app failed (anonymous)',
  ]);
});
