'use strict';

// The frame codec on its own: the hand-made request frames against JSON.stringify, and the reader
// fed the way a socket's onread feeds it (one buffer, overwritten after every piece).

const test = require('node:test');
const assert = require('node:assert/strict');
const { KeyholeError } = require('..');
const { FrameReader, MAX_RESPONSE_BYTES, jsonString, requestTail, requestFrame, isAscii, payloadText } = require('../lib/frames');

/** Strings that JSON.stringify escapes, or writes as they are, one of each kind and their mixes. */
function awkwardStrings() {
  const strings = ['', 'session.get', 'kh_' + 'A'.repeat(43), ' ', '~', '"', '\\', '\\"', 'a"b\\c',
    '\u007f', '\u0080', 'é', 'Ωmega', '日本', '\u2028', '\u2029', '\ufeff', '\ufffd', '😀',
    '\ud800', '\udfff', 'a\ud800b', '\udc00\ud800', '\ud83d\ude00\ud83d', '</script>', '{}', "'"];
  for (let c = 0; c < 0x20; c++) strings.push(String.fromCharCode(c), `a${String.fromCharCode(c)}b`);
  for (let c = 0x20; c < 0x7f; c++) strings.push(String.fromCharCode(c));
  return strings;
}

test('jsonString writes every string as JSON.stringify does: quotes, backslashes, control characters, non-ASCII, lone surrogates', () => {
  for (const value of awkwardStrings()) {
    assert.equal(jsonString(value), JSON.stringify(value), `for ${JSON.stringify(value)}`);
  }
  // Random strings over the characters that matter, long ones included.
  const alphabet = ['a', 'Z', '0', ' ', '"', '\\', '\n', '\u0000', '\u001f', '\u007f', 'é', '\u2028', '\ud800', '\udc00', '😀'];
  let seed = 7;
  for (let n = 0; n < 2000; n++) {
    let value = '';
    const length = n % 40;
    for (let i = 0; i < length; i++) {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      value += alphabet[seed % alphabet.length];
    }
    assert.equal(jsonString(value), JSON.stringify(value), `for ${JSON.stringify(value)}`);
  }
});

/** The payload a request frame carries, checked against its length prefix. */
function framePayload(frame) {
  const bytes = typeof frame === 'string' ? Buffer.from(frame, 'latin1') : frame;
  assert.equal(bytes.readUInt32BE(0), bytes.length - 4);
  return bytes.subarray(4).toString('utf8');
}

test('a request frame is the length and {"v":1,"id","op","args"} as JSON.stringify writes it, ASCII or not', () => {
  for (const value of awkwardStrings()) {
    const args = { session: value, nested: { list: [value, 1, null] } };
    for (const op of ['session.get', value === '' ? 'x' : value]) {
      const tail = requestTail(op, JSON.stringify(args));
      const ascii = isAscii(tail);
      for (const id of [1, 42, 2 ** 40]) {
        const frame = requestFrame(id, tail, ascii);
        assert.equal(typeof frame === 'string', ascii);
        const expected = JSON.stringify({ v: 1, id, op, args });
        assert.equal(framePayload(frame), expected, `for ${JSON.stringify(value)}`);
      }
    }
  }
  // Lone surrogates are escaped by JSON.stringify, so the frame is ASCII and valid UTF-8.
  assert.equal(isAscii(requestTail('x', JSON.stringify({ s: '\ud800' }))), true);
  assert.equal(isAscii(requestTail('x', JSON.stringify({ s: 'é' }))), false);
  assert.equal(isAscii(requestTail('x', JSON.stringify({ s: '\u007f' }))), true);
  assert.equal(isAscii(requestTail('x', JSON.stringify({ s: '\u0080' }))), false);
});

/** Frames for `payloads` (strings), one after the other, as keyholed writes them. */
function frames(payloads) {
  return Buffer.concat(payloads.map((payload) => {
    const body = Buffer.from(payload, 'utf8');
    const header = Buffer.alloc(4);
    header.writeUInt32BE(body.length);
    return Buffer.concat([header, body]);
  }));
}

/**
 * Feeds `stream` to a reader in pieces of the given sizes through one reused buffer (overwritten
 * with garbage after each piece, as a socket's onread buffer is read into again); the payloads.
 */
function readInPieces(stream, sizes) {
  const got = [];
  const reader = new FrameReader((bytes, start, end) => got.push(payloadText(bytes, start, end)));
  const shared = Buffer.alloc(Math.max(...sizes, 1));
  let at = 0;
  let i = 0;
  while (at < stream.length) {
    const size = Math.min(sizes[i++ % sizes.length], stream.length - at);
    stream.copy(shared, 0, at, at + size);
    reader.feed(shared, 0, size);
    shared.fill(0xa5);
    at += size;
  }
  return got;
}

test('the reader finds every frame whatever the pieces: split at every byte, coalesced, a large one over many reads', () => {
  const payloads = ['{"id":1,"ok":true,"result":{}}', '{"id":2,"ok":true,"result":{"s":"é日本😀"}}', 'x',
    JSON.stringify({ id: 3, ok: true, result: { padding: 'p'.repeat(200000) } }), '{"id":4}'];
  const stream = frames(payloads);
  for (const sizes of [[1], [2], [3], [4], [5], [7, 1], [4096], [65536], [stream.length], [1, 65536, 3]]) {
    assert.deepStrictEqual(readInPieces(stream, sizes), payloads, `pieces of ${sizes}`);
  }
  // Every split point of a short stream of three frames, in two pieces.
  const short = frames(payloads.slice(0, 3));
  for (let cut = 1; cut < short.length; cut++) {
    const got = [];
    const reader = new FrameReader((bytes, start, end) => got.push(payloadText(bytes, start, end)));
    reader.feed(short, 0, cut);
    reader.feed(short, cut, short.length);
    assert.deepStrictEqual(got, payloads.slice(0, 3), `cut at ${cut}`);
  }
});

test('a frame length of 0 or past 16 MiB is a protocol_error, and the reader stops', () => {
  for (const length of [0, MAX_RESPONSE_BYTES + 1, 0xffffffff]) {
    const header = Buffer.alloc(4);
    header.writeUInt32BE(length);
    for (const pieces of [[header], [header.subarray(0, 1), header.subarray(1)]]) {
      const got = [];
      const reader = new FrameReader((bytes, start, end) => got.push(payloadText(bytes, start, end)));
      assert.throws(() => { for (const piece of pieces) reader.feed(piece, 0, piece.length); }, (error) => {
        assert.ok(error instanceof KeyholeError);
        assert.equal(error.code, 'protocol_error');
        assert.ok(error.message.includes(`frame length of ${length}`), error.message);
        return true;
      });
      reader.feed(frames(['{}']), 0, 6); // stopped: nothing more is read
      assert.deepStrictEqual(got, []);
    }
  }
});

test('payloadText accepts UTF-8 (a U+FFFD keyholed sent included) and refuses malformed UTF-8 with protocol_error', () => {
  for (const text of ['{}', '{"s":"é日本😀"}', '{"s":"\ufffd"}', '\ufeff{}', '{"s":"a\ufffdb\ufffd"}']) {
    const bytes = Buffer.from(`..${text}..`, 'utf8');
    assert.equal(payloadText(bytes, 2, bytes.length - 2), text);
  }
  const malformed = ['ff', 'c080', 'c1bf', 'e08080', 'eda080', 'edbfbf', 'f4908080', 'f8', 'c3', 'e6', 'f09f98', '80',
    '7b22ff7d', 'efbfbdff'];
  for (const hex of malformed) {
    const bytes = Buffer.from(`2e${hex}2e`, 'hex');
    assert.throws(() => payloadText(bytes, 1, bytes.length - 1), (error) => {
      assert.ok(error instanceof KeyholeError, hex);
      assert.equal(error.code, 'protocol_error', hex);
      assert.ok(error.message.includes('not UTF-8'), error.message);
      return true;
    }, hex);
  }
});
