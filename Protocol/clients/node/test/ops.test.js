'use strict';

// The safe-to-repeat table embedded in the client is Protocol/ops.json's, op for op, and every
// non-debug operation has a typed helper.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { Client, OPERATIONS, HELPER_OPS, safeToRepeat } = require('..');
const { OPS } = require('./support');

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
    ['apple.transfer.export', { sub: 's', target_team_id: 'ABCDE12345' }],
    ['session.list', { sub: 'carol' }],
  ]);
  await assert.rejects(client.getUser('dave', 'not-an-object'), TypeError);
});
