'use strict';

// Client behaviour the scripted scenarios do not reach: the deadline covering reconnection,
// close(), bad arguments, a process that is not held open by an idle client, and keyholed's
// goodbye (PROTOCOL.md section 8, rule 3) beyond the scenarios: several calls at once, a write
// that fails after it, a call it leaves without a connection.

const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { Client, KeyholeError } = require('..');
const { freshSocketPath, exited, collect, Lines } = require('./support');

/**
 * A server answering every request with {"echo": op}, its requests recorded in `seen` and their
 * payloads' bytes in `frames`.
 */
function answeringServer(socketPath) {
  const seen = [];
  const frames = [];
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    let buffer = Buffer.alloc(0);
    socket.on('data', (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      while (buffer.length >= 4 && buffer.length >= 4 + buffer.readUInt32BE(0)) {
        const length = buffer.readUInt32BE(0);
        frames.push(Buffer.from(buffer.subarray(4, 4 + length)));
        const request = JSON.parse(buffer.subarray(4, 4 + length).toString('utf8'));
        buffer = buffer.subarray(4 + length);
        seen.push(request);
        if (request.op === 'hold') continue; // never answered
        const payload = Buffer.from(JSON.stringify({ id: request.id, ok: true, result: { echo: request.op } }));
        const header = Buffer.alloc(4);
        header.writeUInt32BE(payload.length);
        socket.write(Buffer.concat([header, payload]));
      }
    });
  });
  return new Promise((resolve) => server.listen(socketPath, () => resolve({
    seen,
    frames,
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((done) => server.close(done));
    },
  })));
}

test('a call waits for the socket to appear, within its deadline, backing off between attempts', async () => {
  const { socket } = freshSocketPath('late');
  const client = new Client({ socketPath: socket, timeoutMs: 3000 });
  const started = Date.now();
  const answer = client.call('ping', {});
  let server;
  await new Promise((resolve) => setTimeout(resolve, 150)); // the outage under test
  server = await answeringServer(socket);
  try {
    assert.deepStrictEqual(await answer, { echo: 'ping' });
    assert.ok(Date.now() - started < 1000, 'reconnection waited more than the backoff cap allows');
    assert.equal(server.seen.length, 1);
  } finally {
    await client.close();
    await server.close();
  }
});

test('nothing listening: unavailable at the deadline, naming the socket', async () => {
  const { socket } = freshSocketPath('none');
  const client = new Client({ socketPath: socket, timeoutMs: 250 });
  const started = Date.now();
  await assert.rejects(client.ping(), (error) => {
    assert.ok(error instanceof KeyholeError);
    assert.equal(error.code, 'unavailable');
    assert.ok(error.message.includes(socket), error.message);
    assert.equal(error.retryAfterMs, null);
    return true;
  });
  const took = Date.now() - started;
  assert.ok(took >= 240 && took < 1000, `took ${took} ms`);
});

test('close() fails the calls in flight with connection_lost, and later calls with unavailable', async () => {
  const { socket } = freshSocketPath('close');
  const server = await answeringServer(socket);
  const client = new Client({ socketPath: socket });
  try {
    assert.deepStrictEqual(await client.call('first', {}), { echo: 'first' });
    const held = client.call('hold', {}).then(() => null, (error) => error);
    while (server.seen.length < 2) await new Promise((resolve) => setImmediate(resolve));
    await client.close();
    const error = await held;
    assert.ok(error instanceof KeyholeError);
    assert.equal(error.code, 'connection_lost');
    await assert.rejects(client.ping(), { code: 'unavailable' });
    await client.close(); // twice is fine
  } finally {
    await server.close();
  }
});

/** When `promise` settles, in ms after `started`, and its error (or null). */
function settled(promise, started) {
  return promise.then(() => ({ at: Date.now() - started, error: null }), (error) => ({ at: Date.now() - started, error }));
}

test('each call times out at its own deadline, whatever the calls around it (one timer serves them all)', { timeout: 10000 }, async () => {
  const { socket } = freshSocketPath('deadlines');
  const server = await answeringServer(socket);
  const client = new Client({ socketPath: socket, timeoutMs: 300 });
  try {
    assert.deepStrictEqual(await client.ping(), { echo: 'ping' }); // connected
    const started = Date.now();
    const first = settled(client.call('hold', {}), started);
    await new Promise((resolve) => setTimeout(resolve, 150));
    const second = settled(client.call('hold', {}), started);
    const answered = await client.ping(); // answered meanwhile: leaves the others' deadlines alone
    assert.deepStrictEqual(answered, { echo: 'ping' });
    const a = await first;
    const b = await second;
    for (const { error } of [a, b]) {
      assert.ok(error instanceof KeyholeError);
      assert.equal(error.code, 'timeout');
    }
    // Never before the deadline; the bounds after it leave room for a busy machine.
    assert.ok(a.at >= 295 && a.at < 1000, `first timed out after ${a.at} ms`);
    assert.ok(b.at >= 445 && b.at < 1150, `second timed out after ${b.at} ms`);
    // A shorter timeoutMs set later: the new call's deadline comes before an older call's.
    client.timeoutMs = 600;
    const later = Date.now();
    const long = settled(client.call('hold', {}), later);
    client.timeoutMs = 100;
    const short = settled(client.call('hold', {}), later);
    const s = await short;
    assert.equal(s.error.code, 'timeout');
    assert.ok(s.at >= 95 && s.at < 450, `short timed out after ${s.at} ms, not before the longer call's deadline`);
    const l = await long;
    assert.equal(l.error.code, 'timeout');
    assert.ok(l.at >= 595, `long timed out after ${l.at} ms`);
    assert.deepStrictEqual(await client.ping(), { echo: 'ping' }); // the connection stays open
  } finally {
    await client.close();
    await server.close();
  }
});

test('a client whose calls timed out or were answered does not keep the process alive', async () => {
  const { socket } = freshSocketPath('idle-after');
  const server = await answeringServer(socket);
  const script = `const { Client } = require(${JSON.stringify(path.join(__dirname, '..'))});
    const client = new Client({ socketPath: ${JSON.stringify(socket)}, timeoutMs: 60000 });
    const short = new Client({ socketPath: ${JSON.stringify(socket)}, timeoutMs: 100 });
    (async () => {
      for (let i = 0; i < 100; i++) await client.ping();
      const timedOut = await short.call('hold', {}).catch((e) => e.code);
      console.log(timedOut);
    })();`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stdout = collect(child.stdout);
  try {
    // The 60 s deadline timer of the answered calls must not hold the process.
    assert.equal(await exited(child, 5000), 0);
    assert.equal(stdout().trim(), 'timeout');
  } finally {
    if (child.exitCode === null) child.kill();
    await server.close();
  }
});

test('bad arguments reject with a TypeError and send nothing', async () => {
  const { socket } = freshSocketPath('args');
  const server = await answeringServer(socket);
  const client = new Client({ socketPath: socket });
  try {
    await assert.rejects(client.call('ping', [1, 2]), TypeError);
    await assert.rejects(client.call('', {}), TypeError);
    await assert.rejects(client.call('debug.echo', { n: 1n }), TypeError);
    const cyclic = {};
    cyclic.self = cyclic;
    await assert.rejects(client.call('debug.echo', cyclic), TypeError);
    await assert.rejects(client.call('debug.echo', new Date()), TypeError);
    assert.deepStrictEqual(await client.call('ping'), { echo: 'ping' });
    assert.deepStrictEqual(server.seen.map((r) => [r.v, r.op, r.args]), [[1, 'ping', {}]]);
    assert.throws(() => new Client({ timeoutMs: 0 }), TypeError);
  } finally {
    await client.close();
    await server.close();
  }
});

test('getSession sends the token as JSON.stringify would, whatever its characters (its args are written by hand)', async () => {
  const { socket } = freshSocketPath('get');
  const server = await answeringServer(socket);
  const client = new Client({ socketPath: socket });
  const tokens = ['kh_' + 'A'.repeat(43), 'a"b', 'back\\slash', 'tab\tnew\nline\u0000', 'é日本😀', '\u2028',
    'lone \ud800 surrogate', '\udfff', '', 42, null, undefined];
  try {
    for (const token of tokens) assert.deepStrictEqual(await client.getSession(token), { echo: 'session.get' });
    assert.deepStrictEqual(server.seen.map((r) => r.op), tokens.map(() => 'session.get'));
    // What keyholed receives is what JSON.stringify makes of { session: token }.
    assert.deepStrictEqual(server.seen.map((r) => r.args), tokens.map((token) => JSON.parse(JSON.stringify({ session: token }))));
    assert.equal(server.frames.length, tokens.length);
    tokens.forEach((token, i) => {
      const expected = JSON.stringify({ v: 1, id: server.seen[i].id, op: 'session.get', args: { session: token } });
      assert.deepStrictEqual(server.frames[i], Buffer.from(expected, 'utf8'), `token ${JSON.stringify(token)}`);
    });
  } finally {
    await client.close();
    await server.close();
  }
});

test('every request has a fresh integer id, and v 1', async () => {
  const { socket } = freshSocketPath('ids');
  const server = await answeringServer(socket);
  const client = new Client({ socketPath: socket });
  try {
    await Promise.all([client.ping(), client.ping(), client.stats()]);
    await client.ping();
    const ids = server.seen.map((r) => r.id);
    assert.ok(ids.every(Number.isInteger));
    assert.equal(new Set(ids).size, ids.length);
    assert.ok(server.seen.every((r) => r.v === 1));
  } finally {
    await client.close();
    await server.close();
  }
});

test('an idle client does not keep the process alive', async () => {
  const { socket } = freshSocketPath('idle');
  const server = await answeringServer(socket);
  const script = `const { Client } = require(${JSON.stringify(path.join(__dirname, '..'))});
    new Client({ socketPath: ${JSON.stringify(socket)} }).ping().then((r) => console.log(JSON.stringify(r)));`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stdout = collect(child.stdout);
  try {
    assert.equal(await exited(child, 5000), 0);
    assert.equal(stdout().trim(), '{"echo":"ping"}');
  } finally {
    if (child.exitCode === null) child.kill();
    await server.close();
  }
});

test('import works as well as require (named exports of the CommonJS entry)', async () => {
  const entry = path.join(__dirname, '..', 'index.js');
  const script = `import { Client, KeyholeError, middleware } from ${JSON.stringify(entry)};
    import keyhole from ${JSON.stringify(entry)};
    console.log([typeof Client, typeof KeyholeError, typeof middleware, keyhole.Client === Client].join(' '));`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stdout = collect(child.stdout);
  const stderr = collect(child.stderr);
  assert.equal(await exited(child, 5000), 0, stderr());
  assert.equal(stdout().trim(), 'function function function true');
});

/** keyholed's goodbye (PROTOCOL.md section 5), as it sends it. */
const GOODBYE = {
  id: null, ok: false,
  error: {
    code: 'shutting_down',
    message: 'keyholed is shutting down: requests on this connection still unanswered were not read; send them again on a new connection',
  },
};

function frameOf(message) {
  const payload = Buffer.from(JSON.stringify(message));
  const header = Buffer.alloc(4);
  header.writeUInt32BE(payload.length);
  return Buffer.concat([header, payload]);
}

/**
 * A scripted keyholed playing connections one by one: `play(n, request)` (n counts connections
 * from 1) returns the messages to write after reading `request` (ids included) and whether to end
 * the connection after them, reading nothing more from it: {reply, end}. `greet(n)`, when given,
 * is the same for a connection just accepted, before anything is read. Every request read is in
 * `seen` as [n, op, id, args].
 */
function playedServer(socketPath, { play, greet }) {
  const seen = [];
  const sockets = new Set();
  let connections = 0;
  const server = net.createServer((socket) => {
    const n = ++connections;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let ended = false;
    const act = ({ reply = [], end = false }) => {
      for (const message of reply) socket.write(frameOf(message));
      if (end) {
        ended = true;
        socket.end();
      }
    };
    if (greet) act(greet(n));
    let buffer = Buffer.alloc(0);
    socket.on('data', (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      while (!ended && buffer.length >= 4 && buffer.length >= 4 + buffer.readUInt32BE(0)) {
        const length = buffer.readUInt32BE(0);
        const request = JSON.parse(buffer.subarray(4, 4 + length).toString('utf8'));
        buffer = buffer.subarray(4 + length);
        seen.push([n, request.op, request.id, request.args]);
        act(play(n, request));
      }
    });
  });
  return new Promise((resolve) => server.listen(socketPath, () => resolve({
    seen,
    stopListening() { return new Promise((done) => server.close(done)); },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((done) => server.close(done));
    },
  })));
}

test('goodbye: every call it left unanswered, changes too, is sent again on a new connection, however many goodbyes in a row', async () => {
  const { socket } = freshSocketPath('goodbye');
  // Connection 1 reads all three, answers the echo and says goodbye in one write; connection 2
  // says goodbye again before reading anything; connection 3 answers.
  const server = await playedServer(socket, {
    play(n, request) {
      if (n === 1) {
        if (request.op !== 'debug.echo') return {};
        return { reply: [{ id: request.id, ok: true, result: { echoed: true } }, GOODBYE], end: true };
      }
      if (n === 2) return { reply: [GOODBYE], end: true };
      return { reply: [{ id: request.id, ok: true, result: { op: request.op, args: request.args } }] };
    },
  });
  const client = new Client({ socketPath: socket, timeoutMs: 3000 });
  try {
    const [created, echoed, revoked] = await Promise.all([
      client.createSession('alice'),
      client.call('debug.echo', {}),
      client.call('session.revoke_all', { sub: 'alice' }),
    ].map((promise) => promise.catch((error) => error)));
    assert.deepStrictEqual(created, { op: 'session.create', args: { sub: 'alice' } });
    assert.deepStrictEqual(echoed, { echoed: true });
    assert.deepStrictEqual(revoked, { op: 'session.revoke_all', args: { sub: 'alice' } });
    // session.create was read on each connection (two goodbyes: not rule 2's one re-send), with
    // a new id each time; revoke_all, written on the first two too, was dropped unread there (the
    // scripted keyholed reads nothing after its goodbye) and read on the third; the echo once.
    const where = (op) => server.seen.filter(([, o]) => o === op).map(([n]) => n);
    assert.deepStrictEqual(where('session.create'), [1, 2, 3], JSON.stringify(server.seen));
    assert.deepStrictEqual(where('session.revoke_all'), [3], JSON.stringify(server.seen));
    assert.deepStrictEqual(where('debug.echo'), [1], JSON.stringify(server.seen));
    const creates = server.seen.filter(([, o]) => o === 'session.create').map(([, , id]) => id);
    assert.equal(new Set(creates).size, 3, `ids ${creates}`);
    assert.deepStrictEqual(await client.ping(), { op: 'ping', args: {} }); // on connection 3
    assert.ok(server.seen.every(([n]) => n <= 3), JSON.stringify(server.seen));
  } finally {
    await client.close();
    await server.close();
  }
});

test('a null-id error other than the goodbye (overloaded on connect) fails the calls unanswered, none sent again (rule 4)', async () => {
  const { socket } = freshSocketPath('null-id');
  const overloaded = { id: null, ok: false, error: { code: 'overloaded', message: 'too many connections', retry_after_ms: 900 } };
  const server = await playedServer(socket, {
    greet: (n) => (n === 1 ? { reply: [overloaded], end: true } : {}),
    play: (n, request) => ({ reply: [{ id: request.id, ok: true, result: { n } }] }),
  });
  const client = new Client({ socketPath: socket, timeoutMs: 3000 });
  try {
    const outcomes = await Promise.all([client.createSession('alice'), client.ping()]
      .map((promise) => promise.then(() => null, (error) => error)));
    for (const error of outcomes) {
      assert.ok(error instanceof KeyholeError, String(error));
      assert.equal(error.code, 'overloaded', error.message);
      assert.equal(error.retryAfterMs, 900);
    }
    assert.ok(server.seen.every(([n]) => n === 1), `sent again: ${JSON.stringify(server.seen)}`);
    assert.deepStrictEqual(await client.ping(), { n: 2 }); // the next call gets a new connection
  } finally {
    await client.close();
    await server.close();
  }
});

test('a call the goodbye turned away that gets no connection before its deadline is unavailable: it had no effect', async () => {
  const { socket } = freshSocketPath('goodbye-gone');
  let server = null;
  server = await playedServer(socket, {
    play() {
      server.stopListening(); // keyholed stopped and nothing took its place
      return { reply: [GOODBYE], end: true };
    },
  });
  const client = new Client({ socketPath: socket, timeoutMs: 400 });
  try {
    await assert.rejects(client.createSession('alice'), (error) => {
      assert.ok(error instanceof KeyholeError);
      assert.equal(error.code, 'unavailable', error.message);
      return true;
    });
    assert.deepStrictEqual(server.seen.map(([n, op]) => [n, op]), [[1, 'session.create']]);
  } finally {
    await client.close();
    await server.close();
  }
});

test('goodbye unread when a later write fails (EPIPE, the event loop busy meanwhile): read before the failure, the calls written before are sent again', async () => {
  const { dir, socket } = freshSocketPath('goodbye-epipe');
  const closedMark = path.join(dir, 'closed');
  // keyholed in another process: while this one is held up, it reads `a`, says goodbye and
  // closes the connection, then marks that it has.
  const script = `const net = require('node:net'); const fs = require('node:fs');
    const frame = (m) => { const p = Buffer.from(JSON.stringify(m)); const h = Buffer.alloc(4); h.writeUInt32BE(p.length); return Buffer.concat([h, p]); };
    let connections = 0;
    net.createServer((s) => {
      const n = ++connections; let buffer = Buffer.alloc(0); let done = false;
      s.on('error', () => {});
      s.on('data', (chunk) => {
        buffer = Buffer.concat([buffer, chunk]);
        while (!done && buffer.length >= 4 && buffer.length >= 4 + buffer.readUInt32BE(0)) {
          const length = buffer.readUInt32BE(0);
          const request = JSON.parse(buffer.subarray(4, 4 + length)); buffer = buffer.subarray(4 + length);
          console.log(JSON.stringify([n, request.op]));
          if (n === 1 && request.op === 'a') {
            done = true;
            s.on('close', () => fs.writeFileSync(${JSON.stringify(closedMark)}, ''));
            s.end(frame(${JSON.stringify(GOODBYE)}));
            s.destroy();
          } else s.write(frame({ id: request.id, ok: true, result: { op: request.op } }));
        }
      });
    }).listen(${JSON.stringify(socket)}, () => console.log('ready'));
    process.stdin.on('end', () => process.exit(0)).resume();`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'pipe'] });
  const lines = new Lines(child.stdout, 'the scripted keyholed');
  const stderr = collect(child.stderr);
  const client = new Client({ socketPath: socket, timeoutMs: 3000 });
  try {
    assert.equal(await lines.next(10000), 'ready', stderr());
    assert.deepStrictEqual(await client.ping(), { op: 'ping' }); // connected: `a` is written at once
    const a = client.call('a', {}).catch((error) => error); // an unknown operation: never repeated by rule 2
    // This process busy (its event loop held) until keyholed has closed: the goodbye waits unread.
    const until = Date.now() + 5000;
    const held = new Int32Array(new SharedArrayBuffer(4));
    while (!fs.existsSync(closedMark) && Date.now() < until) Atomics.wait(held, 0, 0, 2);
    assert.ok(fs.existsSync(closedMark), `the scripted keyholed did not close: ${stderr()}`);
    const b = client.call('b', {}).catch((error) => error); // written on the closed connection: EPIPE
    assert.deepStrictEqual(await a, { op: 'a' });
    assert.deepStrictEqual(await b, { op: 'b' });
    const seen = [];
    for (let i = 0; i < 4; i++) seen.push(JSON.parse(await lines.next(5000)));
    // `b` never reached the first connection; both went on the second.
    assert.deepStrictEqual(seen.slice(0, 2), [[1, 'ping'], [1, 'a']]);
    assert.deepStrictEqual(seen.slice(2).sort(), [[2, 'a'], [2, 'b']]);
  } finally {
    await client.close();
    child.stdin.end();
    await exited(child, 5000).catch(() => child.kill());
  }
});
