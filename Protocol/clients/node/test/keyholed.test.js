'use strict';

// Against a real keyholed ($KEYHOLED) under Protocol/testing/keyholed_harness.py: the operations
// an app uses, one pipelined connection, and the two restart tests of Protocol/testing/README.md.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, KeyholeError } = require('..');
const { startHarness, forgeSignature } = require('./support');

let harness;
let client;

test.before(async () => {
  harness = await startHarness();
  client = new Client({ socketPath: harness.socket });
});

test.after(async () => {
  if (client) await client.close();
  if (harness) await harness.stop();
});

async function rejectsWith(promise, code) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof KeyholeError, `not a KeyholeError: ${error}`);
    assert.ok(error instanceof Error);
    assert.equal(error.code, code, error.message);
    return true;
  });
}

test('ping', async () => {
  const result = await client.ping();
  assert.equal(result.protocol, 1);
  assert.equal(typeof result.version, 'string');
  assert.ok(Number.isInteger(result.uptime_ms));
});

test('token.verify accepts the harness token and names its issuer and sub', async () => {
  const result = await client.verifyToken(harness.token, { audience: harness.audience });
  assert.equal(result.issuer, harness.issuer);
  assert.equal(result.sub, harness.sub);
});

test('token.verify refuses a token whose signature is not the issuer\'s', async () => {
  const forged = forgeSignature(harness.token);
  await assert.rejects(client.verifyToken(forged), (error) => error.code.startsWith('token_'));
});

test('session create, get, list and revoke; user.get', async () => {
  const created = await client.createSession('node-alice', { data: { theme: 'dark' } });
  assert.match(created.session, /^kh_[A-Za-z0-9_-]{43}$/);
  assert.equal(typeof created.id, 'string');

  const session = await client.getSession(created.session);
  assert.equal(session.id, created.id);
  assert.equal(session.sub, 'node-alice');
  assert.equal(session.issuer, harness.issuer);
  assert.deepStrictEqual(session.data, { theme: 'dark' });
  assert.equal(session.user.sub, 'node-alice');

  const listed = await client.listSessions('node-alice');
  assert.deepStrictEqual(listed.sessions.map((s) => s.id), [created.id]);

  const user = await client.getUser('node-alice');
  assert.equal(user.sub, 'node-alice');
  assert.equal(user.issuer, harness.issuer);

  assert.deepStrictEqual(await client.revokeSession(created.session), { revoked: true });
  await rejectsWith(client.getSession(created.session), 'session_not_found');
  assert.deepStrictEqual(await client.revokeSession({ id: created.id }), { revoked: false });
  assert.deepStrictEqual(await client.listSessions('node-alice'), { sessions: [] });
});

test('keyholed\'s errors reach the caller with their codes', async () => {
  await rejectsWith(client.getSession('kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'), 'session_not_found');
  await rejectsWith(client.getUser('node-nobody'), 'user_not_found');
  await rejectsWith(client.call('session.frobnicate', {}), 'unknown_op');
  await rejectsWith(client.createSession('node-bob', { ttlSeconds: 1 }), 'bad_request');
});

test('two hundred calls in flight together share one connection, answers matched by id', async () => {
  const before = (await client.stats()).connections.total;
  const answers = await Promise.all(Array.from({ length: 200 }, (_, n) =>
    n % 2 ? client.call('debug.echo', { n }) : client.call('debug.sleep', { ms: (n % 7) * 3 })));
  answers.forEach((answer, n) => assert.deepStrictEqual(answer, n % 2 ? { n } : { slept_ms: (n % 7) * 3 }));
  assert.equal((await client.stats()).connections.total, before);
});

test('a request keyholed read before an oversized frame is answered; only the later calls fail (rule 4)', async () => {
  await client.ping(); // the connection is up, so both calls go out on it, in order
  const errorsBefore = (await client.stats()).errors.frame_too_large ?? 0;
  const [slept, oversized] = await Promise.allSettled([
    client.call('debug.sleep', { ms: 200 }),
    client.call('debug.echo', { padding: 'x'.repeat(70000) }),
  ]);
  assert.equal(slept.status, 'fulfilled', slept.reason && `${slept.reason.code}: ${slept.reason.message}`);
  assert.deepStrictEqual(slept.value, { slept_ms: 200 });
  assert.equal(oversized.status, 'rejected');
  assert.equal(oversized.reason.code, 'frame_too_large', oversized.reason.message);
  const stats = await client.stats(); // on a new connection
  assert.equal(stats.errors.frame_too_large, errorsBefore + 1);
});

/** Runs `body(n)` in a loop from `chaos 6 200` until the harness says the chaos is done. */
async function duringChaos(body) {
  harness.command('chaos 6 200');
  assert.deepStrictEqual(await harness.nextMessage(), { ok: true });
  let done = null;
  const end = harness.nextMessage().then((message) => { done = message; });
  let n = 0;
  while (done === null) await body(n++);
  await end;
  assert.deepStrictEqual(done, { chaos: 'done', cycles: 6 });
  return n;
}

test('restart: session.get never fails while keyholed restarts and its socket comes and goes', async () => {
  const { session } = await client.createSession('node-reader');
  const failures = [];
  const calls = await duringChaos(async () => {
    try {
      assert.equal((await client.getSession(session)).sub, 'node-reader');
    } catch (error) {
      failures.push(`${error.code}: ${error.message}`);
    }
  });
  assert.deepStrictEqual(failures, []);
  assert.ok(calls > 6, `only ${calls} calls during the chaos`);
});

test('restart: every session.create succeeds, each applied exactly once', async () => {
  // A graceful restart fails no call (PROTOCOL.md section 8): keyholed answers every request it
  // read and says goodbye, and a create it did not read is sent again on a new connection.
  const outcomes = [];
  const failures = [];
  const calls = await duringChaos(async (n) => {
    const sub = `restart-${n}`;
    try {
      outcomes.push({ sub, id: (await client.createSession(sub)).id });
    } catch (error) {
      failures.push(`${sub}: ${error.code}: ${error.message}`);
    }
  });
  assert.deepStrictEqual(failures, []);
  assert.ok(calls > 6, `only ${calls} calls during the chaos`);
  // Nothing lost and nothing applied twice: each sub has its one session, the one created.
  for (const { sub, id } of outcomes) {
    const ids = (await client.listSessions(sub)).sessions.map((s) => s.id);
    assert.deepStrictEqual(ids, [id], sub);
  }
});

test('a new client finds its socket in $KEYHOLE_SOCKET', async () => {
  const saved = process.env.KEYHOLE_SOCKET;
  process.env.KEYHOLE_SOCKET = harness.socket;
  const fromEnv = new Client();
  try {
    assert.equal(fromEnv.socketPath, harness.socket);
    assert.equal((await fromEnv.ping()).protocol, 1);
  } finally {
    if (saved === undefined) delete process.env.KEYHOLE_SOCKET;
    else process.env.KEYHOLE_SOCKET = saved;
    await fromEnv.close();
  }
});

test('the socket from the constructor wins over $KEYHOLE_SOCKET, which wins over the default', () => {
  const saved = process.env.KEYHOLE_SOCKET;
  try {
    process.env.KEYHOLE_SOCKET = '/tmp/from-env.sock';
    assert.equal(new Client({ socketPath: '/tmp/given.sock' }).socketPath, '/tmp/given.sock');
    assert.equal(new Client().socketPath, '/tmp/from-env.sock');
    delete process.env.KEYHOLE_SOCKET;
    assert.equal(new Client().socketPath, '/run/keyhole/keyhole.sock');
  } finally {
    if (saved === undefined) delete process.env.KEYHOLE_SOCKET;
    else process.env.KEYHOLE_SOCKET = saved;
  }
});
