'use strict';

// What an app pays per auth check from Node: one process, one connection, depth 1.
// session.get through this client against keyholed, and GET of a 300-byte value through
// node-redis (Debian's, v4) against redis-server, in alternating rounds of the same length.
//
//   NODE_PATH=/usr/share/nodejs node bench/bench.js --keyhole SOCKET --redis-socket PATH --seconds S
//
// Prints one JSON line: {"client": "node", "keyhole_session_get_us", "redis_get_us", "floor_us",
// "keyhole_cpu_us", "redis_cpu_us", "keyhole_requests", "redis_requests", "calls"}: wall and this
// process's CPU microseconds per call, each the median over the rounds; floor_us, the same
// session.get with no client at all (the frame written on a plain node:net socket and its answer
// read whole, not decoded), the least any Node client could pay; the requests each server was sent (warm-up
// and setup included, so that the caller can divide the server's CPU time by them); calls: session.get
// calls timed.

const net = require('node:net');
const { Client } = require('..');

/** session.get with no client: a plain socket, the frame written, the answer read whole. */
async function floorCaller(socketPath, token) {
  const socket = net.createConnection(socketPath);
  await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const payload = Buffer.from(JSON.stringify({ id: 1, op: 'session.get', args: { session: token } }));
  const frame = Buffer.alloc(4 + payload.length);
  frame.writeUInt32BE(payload.length, 0);
  payload.copy(frame, 4);
  let resolveAnswer = null;
  let chunks = [];
  let got = 0;
  socket.on('data', (chunk) => {
    chunks.push(chunk);
    got += chunk.length;
    const head = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
    if (got >= 4 && got >= 4 + head.readUInt32BE(0)) {
      chunks = [];
      got = 0;
      resolveAnswer();
    }
  });
  const call = () => new Promise((resolve) => {
    resolveAnswer = resolve;
    socket.write(frame);
  });
  return { call, close: () => socket.destroy() };
}

function options(argv) {
  const given = {};
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i];
    if (!['--keyhole', '--redis-socket', '--seconds'].includes(name) || i + 1 >= argv.length) {
      throw new Error('usage: bench.js --keyhole SOCKET --redis-socket PATH --seconds S');
    }
    given[name.slice(2)] = argv[i + 1];
  }
  const seconds = Number(given.seconds || 10);
  if (!given.keyhole || !given['redis-socket'] || !(seconds > 0)) {
    throw new Error('usage: bench.js --keyhole SOCKET --redis-socket PATH --seconds S');
  }
  return { keyhole: given.keyhole, redis: given['redis-socket'], seconds };
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

/** Calls `once` one at a time for `ms`; resolves with [calls, µs per call, CPU µs per call]. */
async function round(once, ms) {
  let calls = 0;
  const cpu = process.cpuUsage();
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(ms * 1e6));
  let now = start;
  while (now < end) {
    await once();
    calls += 1;
    if ((calls & 15) === 0) now = process.hrtime.bigint();
  }
  now = process.hrtime.bigint();
  const used = process.cpuUsage(cpu);
  return [calls, Number(now - start) / 1000 / calls, (used.user + used.system) / calls];
}

async function main() {
  const { keyhole: keyholeSocket, redis: redisSocket, seconds } = options(process.argv.slice(2));
  const { createClient } = require('redis');

  const keyhole = new Client({ socketPath: keyholeSocket });
  const redis = createClient({ socket: { path: redisSocket } });
  redis.on('error', (error) => { throw error; });
  await redis.connect();

  const { session } = await keyhole.createSession(`bench-node-${process.pid}`);
  const key = `keyhole-bench:node:${process.pid}`;
  await redis.set(key, 'v'.repeat(300));

  const keyholeGet = async () => {
    const result = await keyhole.getSession(session);
    if (!result.id) throw new Error('session.get answered no session');
  };
  const redisGet = async () => {
    const value = await redis.get(key);
    if (value === null || value.length !== 300) throw new Error('GET answered no 300-byte value');
  };

  const floor = await floorCaller(keyholeSocket, session);
  const floorRounds = [];
  let floorRequests = (await round(floor.call, Math.min(1000, seconds * 100)))[0];

  const warmup = Math.min(1000, seconds * 100);
  let keyholeRequests = 2 + (await round(keyholeGet, warmup))[0]; // and create, revoke
  let redisRequests = 2 + (await round(redisGet, warmup))[0]; // and set, del

  const rounds = Math.max(5, Math.round(seconds * 2)) | 1;
  const roundMs = (seconds * 1000) / (2 * rounds);
  const keyholeUs = [];
  const redisUs = [];
  const keyholeCpu = [];
  const redisCpu = [];
  let calls = 0;
  for (let n = 0; n < rounds; n++) {
    const [made, us, cpu] = await round(keyholeGet, roundMs);
    calls += made;
    keyholeRequests += made;
    keyholeUs.push(us);
    keyholeCpu.push(cpu);
    const [redisMade, redisWall, redisCpuUs] = await round(redisGet, roundMs);
    redisRequests += redisMade;
    redisUs.push(redisWall);
    redisCpu.push(redisCpuUs);
    const [floorMade, floorUs] = await round(floor.call, roundMs / 2);
    floorRequests += floorMade;
    floorRounds.push(floorUs);
  }
  floor.close();

  await keyhole.revokeSession(session);
  await redis.del(key);
  await redis.quit();
  await keyhole.close();

  const fixed = (us) => Math.round(us * 10) / 10;
  process.stdout.write(JSON.stringify({
    client: 'node',
    keyhole_session_get_us: fixed(median(keyholeUs)),
    redis_get_us: fixed(median(redisUs)),
    floor_us: fixed(median(floorRounds)),
    keyhole_cpu_us: fixed(median(keyholeCpu)),
    redis_cpu_us: fixed(median(redisCpu)),
    keyhole_requests: keyholeRequests + floorRequests,
    redis_requests: redisRequests,
    calls,
  }) + '\n');
}

main().catch((error) => {
  process.stderr.write(`bench: ${error.stack || error}\n`);
  process.exit(1);
});
