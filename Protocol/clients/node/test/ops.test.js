'use strict';

// The safe-to-repeat table embedded in the client is Protocol/ops.json's, op for op, every
// non-debug operation has a typed helper, and the client knows PROTOCOL.md section 6's codes.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Client, KeyholeError, OPERATIONS, HELPER_OPS, SERVER_CODES, CLIENT_CODES, safeToRepeat } = require('..');
const { OPS, PROTOCOL } = require('./support');

const file = JSON.parse(fs.readFileSync(OPS, 'utf8'));

test('the embedded operations table equals ops.json', () => {
  const fromFile = {};
  for (const entry of file.operations) {
    fromFile[entry.op] = { group: entry.group, safeToRepeat: entry.safe_to_repeat, debug: entry.debug };
  }
  assert.deepStrictEqual({ ...OPERATIONS }, fromFile);
  assert.deepStrictEqual(Object.keys(OPERATIONS), file.operations.map((entry) => entry.op));
});

test('safeToRepeat follows ops.json and refuses operations it does not know', () => {
  for (const entry of file.operations) assert.equal(safeToRepeat(entry.op), entry.safe_to_repeat, entry.op);
  assert.equal(safeToRepeat('session.frobnicate'), false);
  assert.equal(safeToRepeat('toString'), false);
  assert.equal(safeToRepeat('__proto__'), false);
});

test('every non-debug operation has a typed helper, and no debug one does', () => {
  const nonDebug = file.operations.filter((entry) => !entry.debug).map((entry) => entry.op).sort();
  assert.deepStrictEqual(Object.values(HELPER_OPS).sort(), nonDebug);
  for (const name of Object.keys(HELPER_OPS)) {
    assert.equal(typeof Client.prototype[name], 'function', name);
  }
});

test('each helper sends its operation, with its arguments under their wire names', async () => {
  const client = new Client({ socketPath: '/nonexistent' });
  const sent = [];
  client.call = (op, args) => { sent.push([op, args]); return Promise.resolve({}); };
  await client.ping();
  await client.verifyToken('t', { audience: 'a', nonce: undefined });
  await client.createSession('alice', { issuer: 'local', ttlSeconds: 60, idleSeconds: 120, data: { a: 1 } });
  await client.revokeSession('kh_x');
  await client.revokeSession({ id: 'abc' });
  await client.updateUser('bob', { email: null });
  await client.appleSignIn('idt', { authorizationCode: 'c', clientId: 'com.example' });
  await client.appleAuthorize();
  await client.appleAuthorize({ clientId: 'com.example.web', redirectUri: 'https://example.com/cb', scope: '',
    returnTo: '/account' });
  await client.appleCallback({}, 'ck');
  await client.appleCallback(new URLSearchParams('state=s&code=c'), 'ck', { session: { ttl_s: 60 } });
  await client.appleTransferExport('s', 'ABCDE12345', {});
  await client.listSessions('carol');
  assert.deepStrictEqual(sent, [
    ['ping', {}],
    ['token.verify', { token: 't', audience: 'a' }],
    ['session.create', { sub: 'alice', issuer: 'local', ttl_s: 60, idle_s: 120, data: { a: 1 } }],
    ['session.revoke', { session: 'kh_x' }],
    ['session.revoke', { id: 'abc' }],
    ['user.update', { sub: 'bob', email: null }],
    ['apple.sign_in', { identity_token: 'idt', authorization_code: 'c', client_id: 'com.example' }],
    ['apple.authorize', {}],
    ['apple.authorize', { client_id: 'com.example.web', redirect_uri: 'https://example.com/cb', scope: '',
      return_to: '/account' }],
    ['apple.callback', { form: {}, cookie: 'ck' }],
    ['apple.callback', { form: { state: 's', code: 'c' }, cookie: 'ck', session: { ttl_s: 60 } }],
    ['apple.transfer.export', { sub: 's', target_team_id: 'ABCDE12345' }],
    ['session.list', { sub: 'carol' }],
  ]);
  await assert.rejects(client.getUser('dave', 'not-an-object'), TypeError);
  await assert.rejects(client.appleCallback('state=s', 'ck'), TypeError);
  await assert.rejects(client.appleCallback(null, 'ck'), TypeError);
  assert.equal(sent.length, 13, 'a helper refusing its arguments sent something');
});

/** The codes of PROTOCOL.md section 6's table, in its order. */
function protocolCodes() {
  const text = fs.readFileSync(path.join(PROTOCOL, 'PROTOCOL.md'), 'utf8');
  const section = text.slice(text.indexOf('\n## 6. Error codes'), text.indexOf('\n## 7. '));
  return [...section.matchAll(/^\| `([a-z_]+)` \|/gm)].map((match) => match[1]);
}

test('SERVER_CODES are PROTOCOL.md section 6\'s codes, and the declarations\' ServerErrorCode too', () => {
  const codes = protocolCodes();
  assert.ok(codes.includes('state_invalid') && codes.length > 20, `section 6 read as ${codes}`);
  assert.deepStrictEqual([...SERVER_CODES], codes);
  for (const code of CLIENT_CODES) assert.ok(!codes.includes(code), code);
  const declarations = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');
  const union = declarations.match(/export type ServerErrorCode =([^;]*);/)[1];
  assert.deepStrictEqual([...union.matchAll(/'([a-z_]+)'/g)].map((match) => match[1]), codes);
});

test('each of section 6\'s codes reaches the caller as sent; an unknown one is internal', () => {
  for (const code of protocolCodes()) {
    const error = KeyholeError.fromResponse({ code, message: 'm' });
    assert.equal(error.code, code);
    assert.equal(error.reportedCode, null);
  }
  const unknown = KeyholeError.fromResponse({ code: 'state_frobnicated', message: 'm' });
  assert.equal(unknown.code, 'internal');
  assert.equal(unknown.reportedCode, 'state_frobnicated');
});
