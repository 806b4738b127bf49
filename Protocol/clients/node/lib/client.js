'use strict';

const { Connection } = require('./connection');
const { Deadlines, monotonicNow } = require('./deadlines');
const { KeyholeError } = require('./errors');
const { requestTail, requestFrame, isAscii } = require('./frames');
const { safeToRepeat } = require('./operations');

const DEFAULT_SOCKET = '/run/keyhole/keyhole.sock';
const DEFAULT_TIMEOUT_MS = 5000;
const BACKOFF_FIRST_MS = 10;
const BACKOFF_MAX_MS = 500;

/** The socket the caller gives, else $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock. */
function resolveSocketPath(given) {
  if (given) return given;
  const env = process.env.KEYHOLE_SOCKET;
  return env ? env : DEFAULT_SOCKET;
}

/**
 * A client of keyholed over one pipelined connection (PROTOCOL.md section 8): every call gets a
 * fresh id and its answer is matched by id; a dropped connection is replaced on the next need,
 * and a call lost with it is sent again when the rules of section 8 allow.
 *
 * A call's life: waiting for a connection (`this.waiting`), then pending on one
 * (`connection.pending`, by id) until answered, expired, keyholed's goodbye on that connection
 * (back to waiting, see goodbye), or the connection ends. Its `written` state says whether its
 * frame reached the kernel: 'pending' until the socket's write callback, then 'done' or 'failed'
 * (a write that failed never delivered a whole frame, so keyholed never acted on it: rule 1).
 *
 * Every unfinished call is in `this.deadlines` (one timer for all of them, see Deadlines), from
 * the moment it is made until it finishes, however it does.
 */
class Client {
  constructor({ socketPath, timeoutMs = DEFAULT_TIMEOUT_MS, retryOverloaded = false } = {}) {
    if (!(Number.isFinite(timeoutMs) && timeoutMs > 0)) throw new TypeError('timeoutMs must be a positive number');
    this.socketPath = resolveSocketPath(socketPath);
    this.timeoutMs = timeoutMs;
    this.retryOverloaded = Boolean(retryOverloaded);
    this.nextId = 1;
    this.current = null; // the connection new calls are written on
    this.connections = new Set();
    this.waiting = new Set();
    this.connecting = false;
    this.backoffMs = BACKOFF_FIRST_MS;
    this.pauseFirst = false; // the last connection ended without answering anything
    this.sleeper = null;
    this.closed = false;
    this.deadlines = new Deadlines((call) => this.expire(call));
    this.handlers = {
      onResponse: (connection, message) => this.onResponse(connection, message),
      onEnd: (connection, error) => this.onEnd(connection, error),
    };
  }

  /**
   * Sends `op` with `args` and resolves with the result object, or rejects with a KeyholeError.
   * @param {string} op
   * @param {object} [args]
   */
  call(op, args = {}) {
    if (typeof op !== 'string' || op === '') return Promise.reject(new TypeError('op must be a non-empty string'));
    if (args === null || args === undefined) args = {};
    if (typeof args !== 'object' || Array.isArray(args)) return Promise.reject(new TypeError('args must be an object'));
    let argsJson;
    try {
      argsJson = JSON.stringify(args);
    } catch (e) {
      return Promise.reject(new TypeError(`args cannot be sent as JSON: ${e.message}`));
    }
    if (typeof argsJson !== 'string' || argsJson[0] !== '{') {
      return Promise.reject(new TypeError('args must encode as a JSON object'));
    }
    return this.request(op, argsJson);
  }

  /** `call` once `op` is known to be a non-empty string and `argsJson` a JSON object's text. */
  request(op, argsJson) {
    return new Promise((resolve, reject) => {
      const tail = requestTail(op, argsJson);
      const call = {
        op, tail, ascii: isAscii(tail), resolve, reject,
        safe: safeToRepeat(op),
        deadline: monotonicNow() + this.timeoutMs,
        older: null, newer: null,
        resent: false, everWritten: false, everWrittenBefore: false, finished: false,
        connection: null, id: null, written: null, decideOnWrite: false,
        retryTimer: null, retryError: null, lastError: null,
      };
      this.deadlines.add(call);
      this.dispatch(call);
    });
  }

  /** Closes the connection; calls still waiting fail (connection_lost once written). */
  async close() {
    if (this.closed) return;
    this.closed = true;
    if (this.sleeper) this.sleeper.wake();
    for (const call of this.waiting) this.fail(call, new KeyholeError('unavailable', 'the client was closed'));
    this.waiting.clear();
    const closing = [];
    for (const connection of this.connections) {
      for (const call of connection.pending.values()) {
        this.fail(call, new KeyholeError('connection_lost',
          `the client was closed before keyholed answered ${call.op}: whether it took effect is unknown`));
      }
      connection.pending.clear();
      closing.push(connection.close());
    }
    await Promise.all(closing);
  }

  // Sending

  dispatch(call) {
    if (call.finished) return;
    if (this.closed) {
      this.fail(call, new KeyholeError('unavailable', 'the client was closed'));
      return;
    }
    const connection = this.current;
    if (connection && connection.usable) {
      this.write(connection, call);
      return;
    }
    this.waiting.add(call);
    this.connect();
  }

  write(connection, call) {
    const id = this.nextId++;
    call.connection = connection;
    call.id = id;
    call.written = 'pending';
    call.decideOnWrite = false;
    call.everWrittenBefore = call.everWritten;
    connection.pending.set(id, call);
    connection.write(requestFrame(id, call.tail, call.ascii), (error) => {
      if (call.connection !== connection || call.id !== id) return;
      call.written = error ? 'failed' : 'done';
      if (!error) call.everWritten = true;
      if (call.decideOnWrite) {
        call.decideOnWrite = false;
        this.lost(call);
      }
    });
  }

  /** Opens a connection for the waiting calls, backing off between failed attempts. */
  async connect() {
    if (this.connecting) return;
    this.connecting = true;
    try {
      let pause = this.pauseFirst;
      while (this.waiting.size > 0 && !this.closed) {
        if (pause) {
          await this.sleep(this.backoffMs);
          this.backoffMs = Math.min(this.backoffMs * 2, BACKOFF_MAX_MS);
          if (this.waiting.size === 0 || this.closed) break;
        }
        pause = true;
        let connection;
        try {
          connection = await Connection.open(this.socketPath, this.handlers);
        } catch (error) {
          const reason = `cannot connect to keyholed at ${this.socketPath}: ${error.code || error.message}`;
          for (const call of this.waiting) call.lastError = reason;
          continue;
        }
        if (this.closed) {
          connection.close();
          break;
        }
        this.connections.add(connection);
        this.current = connection;
        const calls = [...this.waiting];
        this.waiting.clear();
        for (const call of calls) this.write(connection, call);
      }
    } finally {
      this.connecting = false;
    }
  }

  sleep(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(() => { this.sleeper = null; resolve(); }, ms);
      this.sleeper = { wake: () => { clearTimeout(timer); this.sleeper = null; resolve(); } };
    });
  }

  // Receiving

  onResponse(connection, message) {
    this.backoffMs = BACKOFF_FIRST_MS;
    const id = message.id;
    if (id === undefined || id === null) {
      // An error about the connection, not about a call. Only the first counts: keyholed gives
      // no goodbye to a connection it had stopped reading for a frame error (section 5), so a
      // rule 4 error stands whatever follows it.
      if (message.ok !== false || connection.connectionError !== null) return;
      if (message.error.code === 'shutting_down') {
        this.goodbye(connection); // rule 3: keyholed's goodbye
        return;
      }
      // Rule 4: any other (overloaded on connect, bad_frame, frame_too_large). keyholed still
      // answers the requests it had read before it closes the connection, so it goes on being
      // read; nothing more is sent on it, and the calls still unanswered when it ends fail with
      // this error (onEnd), not sent again.
      connection.connectionError = KeyholeError.fromResponse(message.error);
      this.retire(connection);
      if (connection.pending.size === 0) connection.close();
      return;
    }
    const call = connection.pending.get(id);
    if (call === undefined) return; // an answer nobody waits for (a call that timed out): dropped
    connection.pending.delete(id);
    call.connection = null;
    if (message.ok) {
      this.succeed(call, message.result);
    } else {
      const error = KeyholeError.fromResponse(message.error);
      if (error.code === 'shutting_down') this.retire(connection);
      this.answeredWithError(call, error, true);
    }
    if (connection.retired && connection.pending.size === 0) connection.close();
  }

  answeredWithError(call, error, mayResend) {
    call.lastError = error.message;
    if (mayResend && error.code === 'shutting_down' && call.safe && !call.resent) {
      // Rule 3: keyholed did not complete it; once more, on a new connection.
      call.resent = true;
      this.dispatch(call);
      return;
    }
    if (error.code === 'overloaded' && this.retryOverloaded && error.retryAfterMs !== null
        && monotonicNow() + error.retryAfterMs < call.deadline) {
      // Rule 5, when asked for: wait out the hint, then send again (it had no effect).
      call.retryError = error;
      call.retryTimer = setTimeout(() => { call.retryTimer = null; this.dispatch(call); }, error.retryAfterMs);
      return;
    }
    this.fail(call, error);
  }

  /**
   * Rule 3, keyholed's goodbye (shutting_down with a null id, the last frame of a connection its
   * shutdown drained): keyholed stopped reading the connection before every request it has not
   * answered, so each call still pending on it never reached keyholed, whatever its write callback
   * said or will say. Each is sent on a new connection as in rule 1, whatever its operation: this
   * is not rule 2's one re-send (`resent` is left alone), so a call turned away by several
   * restarts in a row goes each time, bounded by its deadline alone. A call written on the
   * connection after keyholed said goodbye, before the goodbye was read here, is among them: the
   * promise covers it too.
   */
  goodbye(connection) {
    this.retire(connection);
    const calls = [...connection.pending.values()];
    connection.pending.clear();
    connection.close(); // keyholed closes it too; nothing more comes on it
    for (const call of calls) {
      call.connection = null;
      call.id = null; // its write callback, if still to come, is then ignored
      call.written = null;
      call.decideOnWrite = false;
      // Nothing of it was read on this connection: a call that then never gets another one
      // before its deadline is unavailable (no effect), not timeout (unknown), unless an
      // earlier connection may have read it.
      call.everWritten = call.everWrittenBefore;
      this.dispatch(call);
    }
  }

  /** Rule 3: nothing more is sent on a connection that answered shutting_down. */
  retire(connection) {
    connection.retired = true;
    if (this.current === connection) this.current = null;
  }

  onEnd(connection, error) {
    this.connections.delete(connection);
    if (this.current === connection) this.current = null;
    this.pauseFirst = !connection.answered;
    const calls = [...connection.pending.values()];
    connection.pending.clear();
    for (const call of calls) {
      if (error) {
        // protocol_error: the connection is not to be trusted; its calls fail, unsent again.
        this.fail(call, error);
      } else if (connection.connectionError !== null) {
        // Rule 4: unanswered after an error about the connection; it fails with that error.
        call.connection = null;
        this.answeredWithError(call, connection.connectionError, false);
      } else if (call.written === 'pending') {
        call.decideOnWrite = true; // the write callback, which destroy() brings, decides
      } else {
        this.lost(call);
      }
    }
  }

  /** A call whose connection ended without its answer (rules 1 and 2). */
  lost(call) {
    if (call.finished) return;
    const written = call.written === 'done';
    call.connection = null;
    call.id = null;
    call.written = null;
    if (!written) {
      this.dispatch(call); // rule 1: it never reached keyholed
    } else if (call.safe && !call.resent) {
      call.resent = true; // rule 2: safe to repeat, once
      this.dispatch(call);
    } else {
      this.fail(call, new KeyholeError('connection_lost',
        `the connection to keyholed ended before it answered ${call.op}: whether it took effect is unknown`));
    }
  }

  // Ending a call

  expire(call) {
    if (call.finished) return;
    if (call.retryTimer) {
      this.fail(call, call.retryError);
      return;
    }
    if (this.waiting.delete(call)) {
      const why = call.lastError ? `: ${call.lastError}` : '';
      this.fail(call, call.everWritten
        ? new KeyholeError('timeout', `no answer to ${call.op} within ${this.timeoutMs} ms${why}`)
        : new KeyholeError('unavailable', `keyholed could not be reached within ${this.timeoutMs} ms${why}`));
      return;
    }
    if (call.connection) call.connection.pending.delete(call.id);
    this.fail(call, new KeyholeError('timeout', `no answer to ${call.op} within ${this.timeoutMs} ms`));
  }

  finish(call) {
    call.finished = true;
    this.deadlines.remove(call);
    if (call.retryTimer) clearTimeout(call.retryTimer);
    call.retryTimer = null;
    call.connection = null;
  }

  succeed(call, result) {
    if (call.finished) return;
    this.finish(call);
    call.resolve(result);
  }

  fail(call, error) {
    if (call.finished) return;
    this.finish(call);
    call.reject(error);
  }
}

module.exports = { Client, resolveSocketPath, DEFAULT_SOCKET, DEFAULT_TIMEOUT_MS };
