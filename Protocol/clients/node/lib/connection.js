'use strict';

const fs = require('node:fs');
const net = require('node:net');
const { KeyholeError } = require('./errors');
const { FrameReader, MAX_RESPONSE_BYTES, payloadText } = require('./frames');

/** Bytes a connection reads at once, into one buffer of its own reused for every read. */
const READ_BUFFER_BYTES = 64 * 1024;

function isObject(value) {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A response payload (its text, already checked to be UTF-8: payloadText) checked against
 * section 4: a JSON object with `ok` true and an object `result`, or `ok` false and an `error` object with a string
 * `code`; `id` a string, an integer or null. Throws a protocol_error KeyholeError otherwise.
 */
function decodeResponse(text) {
  let message;
  try {
    message = JSON.parse(text);
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
    this.reader = new FrameReader((bytes, start, end) => this.frame(bytes, start, end));
    this.closed = new Promise((resolve) => socket.once('close', resolve));
    socket.on('end', () => this.end(null));
    socket.on('error', () => this.end(null));
    socket.on('close', () => this.end(null));
  }

  /**
   * Connects to `path`; resolves with a Connection, or rejects with the socket's error. The socket
   * reads into one buffer of its own (`onread`), handed to the connection's reader as it comes:
   * no buffer made per read and no stream machinery ('data' events) between the two.
   */
  static open(path, handlers) {
    return new Promise((resolve, reject) => {
      let connection = null;
      const socket = net.createConnection({
        path,
        onread: {
          buffer: Buffer.allocUnsafe(READ_BUFFER_BYTES),
          // Reading starts once 'connect' has made the connection; `undefined` keeps it going.
          callback: (length, buffer) => { connection.receive(buffer, length); },
        },
      });
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.removeListener('error', reject);
        // Pending calls' deadline timer keeps the process alive; an idle connection does not.
        socket.unref();
        connection = new Connection(socket, handlers);
        resolve(connection);
      });
    });
  }

  get usable() {
    return !this.ended && !this.retired;
  }

  /**
   * Writes one frame (a Buffer, or a string of single-byte characters); `written(error)` tells
   * whether it reached the kernel (see Client). A write that failed has what keyholed sent before
   * it closed read first (drain), so that the client learns of keyholed's goodbye before it
   * learns of the failure.
   */
  write(frame, written) {
    const done = (error) => {
      if (error) this.drain();
      written(error);
    };
    if (typeof frame === 'string') this.socket.write(frame, 'latin1', done);
    else this.socket.write(frame, done);
  }

  /**
   * Reads at once what is left unread in the kernel, after a write failed (EPIPE: keyholed had
   * closed the connection). Node destroys a socket whose write failed right after the write's
   * callback, and the bytes still unread go with it; those may be keyholed's last answers and its
   * goodbye (PROTOCOL.md section 5), which arrived while the event loop was busy, and without
   * which the calls written before this one would be taken for lost with their answers (rule 2)
   * when keyholed promised it never read them (rule 3). The descriptor is the socket's own
   * (non-blocking): read until end of stream or until nothing more is there. Where the socket
   * has no descriptor to read (not a Unix platform), the failure is handled as before.
   */
  drain() {
    const handle = this.socket._handle;
    const fd = handle ? handle.fd : -1;
    if (!(Number.isInteger(fd) && fd >= 0)) return;
    const buffer = Buffer.allocUnsafe(READ_BUFFER_BYTES);
    while (!this.ended) {
      let length;
      try {
        length = fs.readSync(fd, buffer, 0, buffer.length, null);
      } catch {
        return; // EAGAIN (nothing more yet) or a reset after the last byte: nothing left to read
      }
      if (length === 0) return; // end of stream
      this.receive(buffer, length);
    }
  }

  /** `buffer[0, length)` just read; the buffer is read into again once this returns. */
  receive(buffer, length) {
    if (this.ended) return;
    try {
      this.reader.feed(buffer, 0, length);
    } catch (error) {
      if (!(error instanceof KeyholeError)) throw error;
      this.end(error); // a frame length of 0 or past the limit
    }
  }

  /** One whole payload, `bytes[start, end)`: decoded at once (the bytes are not kept). */
  frame(bytes, start, end) {
    this.answered = true;
    let message;
    try {
      message = decodeResponse(payloadText(bytes, start, end));
    } catch (error) {
      this.end(error);
      return;
    }
    this.onResponse(this, message);
  }

  /** Ends the connection once: the socket is closed and the client told why. */
  end(error) {
    if (this.ended) return;
    this.ended = true;
    this.reader.stop();
    this.onEnd(this, error);
    this.socket.destroy();
  }

  /** Closes a connection that has nothing left to answer (retired or closed by the client). */
  close() {
    this.end(null);
    return this.closed;
  }
}

module.exports = { Connection, MAX_RESPONSE_BYTES };
