'use strict';

const net = require('node:net');
const { KeyholeError } = require('./errors');

/** Largest response payload a client must accept (PROTOCOL.md section 2). */
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * One request frame: 4-byte big-endian length, then `{"v":1,"id":id,"op":op,"args":args}`, with
 * `argsJson` the args already encoded (once per call: a re-send only changes the id).
 */
function encodeFrame(id, op, argsJson) {
  const json = `{"v":1,"id":${id},"op":${JSON.stringify(op)},"args":${argsJson}}`;
  const length = Buffer.byteLength(json);
  const frame = Buffer.allocUnsafe(4 + length);
  frame.writeUInt32BE(length, 0);
  frame.write(json, 4, 'utf8');
  return frame;
}

function isObject(value) {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A response payload checked against section 4: a UTF-8 JSON object with `ok` true and an object
 * `result`, or `ok` false and an `error` object with a string `code`; `id` a string, an integer or
 * null. Throws a protocol_error KeyholeError otherwise.
 */
function decodeResponse(payload) {
  let message;
  try {
    message = JSON.parse(utf8.decode(payload));
  } catch (e) {
    throw new KeyholeError('protocol_error', `keyholed sent a frame that is not UTF-8 JSON: ${e.message}`);
  }
  if (!isObject(message)) throw new KeyholeError('protocol_error', 'keyholed sent a frame that is not a JSON object');
  const id = message.id;
  if (!(id === undefined || id === null || typeof id === 'string' || Number.isInteger(id))) {
    throw new KeyholeError('protocol_error', 'keyholed sent a response whose id is neither a string, an integer nor null');
  }
  if (message.ok === true) {
    if (!isObject(message.result)) throw new KeyholeError('protocol_error', 'keyholed sent an ok response without a result object');
  } else if (message.ok === false) {
    if (!isObject(message.error) || typeof message.error.code !== 'string') {
      throw new KeyholeError('protocol_error', 'keyholed sent an error response without an error object and code');
    }
  } else {
    throw new KeyholeError('protocol_error', 'keyholed sent a JSON object that is not a response (ok is neither true nor false)');
  }
  return message;
}

/**
 * One connection to keyholed: the socket, the frames read from it, and the calls waiting on it
 * (`pending`, by request id). The client decides what becomes of those calls when it ends: the
 * connection only reports each response (`onResponse`) and its end, once (`onEnd`, with the
 * protocol_error that ended it, or null for end of stream, a reset or a close).
 */
class Connection {
  constructor(socket, { onResponse, onEnd }) {
    this.socket = socket;
    this.pending = new Map();
    this.retired = false; // answered shutting_down or a null-id error: nothing more is sent on it
    this.connectionError = null; // the null-id error keyholed sent about this connection (rule 4)
    this.answered = false; // whether any frame came in
    this.ended = false;
    this.onResponse = onResponse;
    this.onEnd = onEnd;
    this.chunks = [];
    this.buffered = 0;
    this.need = -1; // payload length of the frame being read, -1 while reading its header
    this.closed = new Promise((resolve) => socket.once('close', resolve));
    socket.on('data', (chunk) => this.receive(chunk));
    socket.on('end', () => this.end(null));
    socket.on('error', () => this.end(null));
    socket.on('close', () => this.end(null));
  }

  /** Connects to `path`; resolves with a Connection, or rejects with the socket's error. */
  static open(path, handlers) {
    return new Promise((resolve, reject) => {
      const socket = net.createConnection({ path });
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.removeListener('error', reject);
        // Pending calls' deadline timers keep the process alive; an idle connection does not.
        socket.unref();
        resolve(new Connection(socket, handlers));
      });
    });
  }

  get usable() {
    return !this.ended && !this.retired;
  }

  /** Writes one frame; `written(error)` tells whether it reached the kernel (see Client). */
  write(frame, written) {
    this.socket.write(frame, written);
  }

  receive(chunk) {
    if (this.ended) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    while (!this.ended) {
      if (this.need < 0) {
        if (this.buffered < 4) return;
        const length = this.take(4).readUInt32BE(0);
        if (length === 0 || length > MAX_RESPONSE_BYTES) {
          this.end(new KeyholeError('protocol_error',
            `keyholed sent a frame length of ${length} (allowed: 1 to ${MAX_RESPONSE_BYTES})`));
          return;
        }
        this.need = length;
      }
      if (this.buffered < this.need) return;
      const payload = this.take(this.need);
      this.need = -1;
      this.answered = true;
      let message;
      try {
        message = decodeResponse(payload);
      } catch (error) {
        this.end(error);
        return;
      }
      this.onResponse(this, message);
    }
  }

  /** The next `n` buffered bytes (n <= this.buffered). */
  take(n) {
    const first = this.chunks[0];
    let out;
    if (first.length >= n) {
      out = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
    } else {
      out = Buffer.allocUnsafe(n);
      let at = 0;
      while (at < n) {
        const chunk = this.chunks[0];
        const part = Math.min(chunk.length, n - at);
        chunk.copy(out, at, 0, part);
        at += part;
        if (part === chunk.length) this.chunks.shift();
        else this.chunks[0] = chunk.subarray(part);
      }
    }
    this.buffered -= n;
    return out;
  }

  /** Ends the connection once: the socket is closed and the client told why. */
  end(error) {
    if (this.ended) return;
    this.ended = true;
    this.chunks = [];
    this.buffered = 0;
    this.onEnd(this, error);
    this.socket.destroy();
  }

  /** Closes a connection that has nothing left to answer (retired or closed by the client). */
  close() {
    this.end(null);
    return this.closed;
  }
}

module.exports = { Connection, encodeFrame, MAX_RESPONSE_BYTES };
