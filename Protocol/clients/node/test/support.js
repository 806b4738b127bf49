'use strict';

// Shared by the tests: the scripted server of the conformance scenarios and a real keyholed
// under Protocol/testing/keyholed_harness.py, both as child processes.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const { Client } = require('..');

const PROTOCOL = path.resolve(__dirname, '..', '..', '..');
const SCENARIO_SERVER = path.join(PROTOCOL, 'testing', 'scenario_server.py');
const HARNESS = path.join(PROTOCOL, 'testing', 'keyholed_harness.py');
const SCENARIOS = path.join(PROTOCOL, 'vectors', 'client_scenarios.json');
const OPS = path.join(PROTOCOL, 'ops.json');
const LINE_TIMEOUT_MS = 60000;

/** The lines a child prints on stdout, one at a time, each awaited with a bound. */
class Lines {
  constructor(stream, what) {
    this.what = what;
    this.queue = [];
    this.waiters = [];
    this.ended = false;
    readline.createInterface({ input: stream }).on('line', (line) => {
      const waiter = this.waiters.shift();
      if (waiter) waiter.resolve(line);
      else this.queue.push(line);
    }).on('close', () => {
      this.ended = true;
      for (const waiter of this.waiters.splice(0)) waiter.reject(new Error(`${this.what} ended its output`));
    });
  }

  next(timeoutMs = LINE_TIMEOUT_MS) {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    if (this.ended) return Promise.reject(new Error(`${this.what} ended its output`));
    return new Promise((resolve, reject) => {
      const waiter = {};
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(new Error(`no line from ${this.what} within ${timeoutMs} ms`));
      }, timeoutMs);
      waiter.resolve = (line) => { clearTimeout(timer); resolve(line); };
      waiter.reject = (error) => { clearTimeout(timer); reject(error); };
      this.waiters.push(waiter);
    });
  }
}

/** The exit status of a child, or a rejection after `timeoutMs`. */
function exited(child, timeoutMs) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`child ${child.pid} did not exit within ${timeoutMs} ms`)), timeoutMs);
    child.once('exit', (code) => { clearTimeout(timer); resolve(code); });
  });
}

function collect(stream) {
  const parts = [];
  stream.on('data', (chunk) => parts.push(chunk));
  return () => Buffer.concat(parts).toString('utf8');
}

const madeDirs = [];
process.on('exit', () => {
  for (const dir of madeDirs) fs.rmSync(dir, { recursive: true, force: true });
});

/** A socket path in a fresh directory under /tmp (short, as socket paths must be), removed at exit. */
function freshSocketPath(tag) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `khn-${tag}-`));
  madeDirs.push(dir);
  return { dir, socket: path.join(dir, 's.sock') };
}

function loadScenarios() {
  return JSON.parse(fs.readFileSync(SCENARIOS, 'utf8'));
}

/** Starts scenario_server.py for `name` and waits for its ready line. */
async function startScenario(name) {
  const { dir, socket } = freshSocketPath('scn');
  const child = spawn('python3', [SCENARIO_SERVER, socket, name], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr = collect(child.stderr);
  const lines = new Lines(child.stdout, `scenario_server ${name}`);
  const ready = await lines.next(10000);
  if (ready !== 'ready') throw new Error(`scenario_server said ${JSON.stringify(ready)}`);
  return {
    socket,
    /** Exit status (0 required) within 10 s, and the server's stderr. */
    async finish() {
      try {
        const code = await exited(child, 12000);
        return { code, stderr: stderr() };
      } finally {
        if (child.exitCode === null) child.kill();
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

/** Starts keyholed_harness.py ($KEYHOLED) and resolves with its info line and its commands. */
async function startHarness({ configExtra } = {}) {
  const args = configExtra ? [HARNESS, '--config-extra', configExtra] : [HARNESS];
  const child = spawn('python3', args, { stdio: ['pipe', 'pipe', 'pipe'] });
  const stderr = collect(child.stderr);
  const lines = new Lines(child.stdout, 'keyholed_harness');
  let info;
  try {
    info = JSON.parse(await lines.next());
  } catch (error) {
    child.kill();
    throw new Error(`keyholed_harness did not start: ${error.message}\n${stderr()}`);
  }
  return {
    ...info,
    lines,
    command(text) { child.stdin.write(text + '\n'); },
    async nextMessage() { return JSON.parse(await lines.next()); },
    /** Stops keyholed; the harness must exit 0 (every keyholed exited 0 after SIGTERM). */
    async stop() {
      child.stdin.end('stop\n');
      const code = await exited(child, 30000).catch((error) => { child.kill(); throw error; });
      if (code !== 0) throw new Error(`keyholed_harness exited ${code}:\n${stderr()}`);
    },
  };
}

/** One HTTP request to 127.0.0.1:port; resolves with {status, headers, body}. */
function request(port, { method = 'GET', path: target = '/', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: target, headers, agent: false }, (res) => {
      const parts = [];
      res.on('data', (chunk) => parts.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Listens on 127.0.0.1 at any port; resolves with the port. */
function listen(server) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server.address().port));
  });
}

/**
 * A scripted keyholed on a real Unix socket: it reads request frames and answers each with
 * `respond(request)` (the answer's result or error object; the id is the request's). Resolves with
 * {socket, requests (every request read), close()}.
 */
async function scriptedKeyholed(respond) {
  const { socket: socketPath } = freshSocketPath('fake');
  const requests = [];
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let buffered = Buffer.alloc(0);
    socket.on('data', (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 4 && buffered.length >= 4 + buffered.readUInt32BE(0)) {
        const length = buffered.readUInt32BE(0);
        const request = JSON.parse(buffered.subarray(4, 4 + length).toString('utf8'));
        buffered = buffered.subarray(4 + length);
        requests.push(request);
        const json = Buffer.from(JSON.stringify({ v: 1, id: request.id, ...respond(request) }));
        const header = Buffer.alloc(4);
        header.writeUInt32BE(json.length, 0);
        socket.write(Buffer.concat([header, json]));
      }
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, resolve);
  });
  return {
    socket: socketPath,
    requests,
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The harness's identity token with its signature's first character changed: no longer the issuer's. */
function forgeSignature(jwt) {
  const [header, payload, signature] = jwt.split('.');
  return `${header}.${payload}.${signature.startsWith('A') ? 'B' : 'A'}${signature.slice(1)}`;
}

/** How many of `op` the keyholed at `socketPath` has answered so far (its stats). */
async function answered(socketPath, op) {
  const client = new Client({ socketPath });
  try {
    return (await client.stats()).requests[op];
  } finally {
    await client.close();
  }
}

module.exports = {
  PROTOCOL, OPS, SCENARIOS, Lines, exited, collect, freshSocketPath, loadScenarios, startScenario, startHarness,
  request, listen, scriptedKeyholed, forgeSignature, answered,
};
