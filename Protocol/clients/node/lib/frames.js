'use strict';

const { KeyholeError } = require('./errors');

/** Largest response payload a client must accept (PROTOCOL.md section 2). */
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The payload `bytes[start, end)` as a string, or a protocol_error if it is not UTF-8.
 * Buffer's decoder replaces every malformed sequence with U+FFFD, so a text without U+FFFD came
 * from valid UTF-8 (the usual case: one decode, no copy); one with it is decoded again strictly,
 * which throws for malformed input and gives the same text for a U+FFFD keyholed really sent.
 */
function payloadText(bytes, start, end) {
  const text = bytes.toString('utf8', start, end);
  if (!text.includes('\uFFFD')) return text;
  try {
    return strictUtf8.decode(bytes.subarray(start, end));
  } catch (e) {
    throw new KeyholeError('protocol_error', `keyholed sent a frame that is not UTF-8 JSON: ${e.message}`);
  }
}

/**
 * Reads response frames (4-byte big-endian length, then that many bytes of payload) from a byte
 * stream given in pieces of any size. `feed` may be handed a buffer that is overwritten after it
 * returns (a socket's `onread` buffer): a frame whole in it is handed on in place, and only the
 * bytes of an unfinished frame are kept, copied into a buffer of the frame's size (one copy per
 * byte, a 16 MiB answer included).
 */
class FrameReader {
  /**
   * `onFrame(bytes, start, end)` gets each payload, in order, as a range of a buffer it must be
   * done with when it returns (see payloadText).
   */
  constructor(onFrame) {
    this.onFrame = onFrame;
    this.header = Buffer.alloc(4); // the first bytes of a header split across pieces
    this.headerBytes = 0;
    this.payload = null; // the unfinished payload, its length that of the frame
    this.payloadBytes = 0;
    this.stopped = false;
  }

  /** Stops reading: nothing more is decoded, and what was buffered is dropped. */
  stop() {
    this.stopped = true;
    this.payload = null;
  }

  /**
   * Takes `bytes[start, end)`. Throws a protocol_error KeyholeError (and stops) for a frame length
   * of 0 or above MAX_RESPONSE_BYTES; whatever `onFrame` throws goes to the caller too.
   */
  feed(bytes, start, end) {
    let at = start;
    while (at < end && !this.stopped) {
      if (this.payload !== null) {
        const part = Math.min(end - at, this.payload.length - this.payloadBytes);
        bytes.copy(this.payload, this.payloadBytes, at, at + part);
        this.payloadBytes += part;
        at += part;
        if (this.payloadBytes < this.payload.length) return;
        const payload = this.payload;
        this.payload = null;
        this.onFrame(payload, 0, payload.length);
        continue;
      }
      let length;
      if (this.headerBytes === 0 && end - at >= 4) {
        length = bytes.readUInt32BE(at);
        at += 4;
      } else {
        while (this.headerBytes < 4 && at < end) this.header[this.headerBytes++] = bytes[at++];
        if (this.headerBytes < 4) return;
        this.headerBytes = 0;
        length = this.header.readUInt32BE(0);
      }
      if (length === 0 || length > MAX_RESPONSE_BYTES) {
        this.stop();
        throw new KeyholeError('protocol_error',
          `keyholed sent a frame length of ${length} (allowed: 1 to ${MAX_RESPONSE_BYTES})`);
      }
      if (end - at >= length) {
        at += length;
        this.onFrame(bytes, at - length, at);
      } else {
        this.payload = Buffer.allocUnsafe(length);
        this.payloadBytes = 0;
      }
    }
  }

}

/** Printable ASCII but `"` and `\`: the characters JSON.stringify writes as they are. */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/**
 * JSON.stringify(value) for a string, without its general machinery when the string needs no
 * escaping (a session token, an op name); every other string goes to JSON.stringify itself.
 */
function jsonString(value) {
  return PLAIN.test(value) ? `"${value}"` : JSON.stringify(value);
}

/**
 * A request frame's payload after its id: `,"op":op,"args":args}`, made once per call (a re-send
 * only changes the id).
 */
function requestTail(op, argsJson) {
  return `,"op":${jsonString(op)},"args":${argsJson}}`;
}

/** Whether a string is all ASCII (its UTF-8 as long as it is), so that latin1 writes it the same. */
function isAscii(text) {
  return Buffer.byteLength(text) === text.length;
}

/**
 * One request frame, `{"v":1,"id":id` and the call's tail after a 4-byte big-endian length: a
 * string of single-byte characters (to be written as latin1) when the tail is ASCII, which spares
 * a buffer; else a Buffer.
 */
function requestFrame(id, tail, ascii) {
  const json = `{"v":1,"id":${id}${tail}`;
  if (ascii) {
    const n = json.length;
    return String.fromCharCode(n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff) + json;
  }
  const length = Buffer.byteLength(json);
  const frame = Buffer.allocUnsafe(4 + length);
  frame.writeUInt32BE(length, 0);
  frame.write(json, 4, 'utf8');
  return frame;
}

module.exports = { FrameReader, MAX_RESPONSE_BYTES, jsonString, requestTail, requestFrame, isAscii, payloadText };
