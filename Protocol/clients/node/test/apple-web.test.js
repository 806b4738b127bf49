'use strict';

// Sign in with Apple on the web (apple.authorize, apple.callback) through the typed helpers, against
// a real keyholed whose Apple audience is a web client with a redirect URI. No Apple is reachable,
// so every callback here is refused, each at a different step: the state, Apple's error, the token.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, KeyholeError } = require('..');
const { startHarness } = require('./support');

const REDIRECT_URI = 'https://example.com/apple/callback';

let harness;
let client;

test.before(async () => {
  // The audience is the harness's (its ready line): learnt from a first harness, then configured.
  const probe = await startHarness();
  const { audience } = probe;
  await probe.stop();
  harness = await startHarness({
    configExtra: `[apple]\nredirect_uris = { ${JSON.stringify(audience)} = ${JSON.stringify(REDIRECT_URI)} }\n`,
  });
  assert.equal(harness.audience, audience);
  client = new Client({ socketPath: harness.socket });
});

test.after(async () => {
  if (client) await client.close();
  if (harness) await harness.stop();
});

async function rejectsWith(promise, code) {
  let caught;
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof KeyholeError, `not a KeyholeError: ${error}`);
    assert.equal(error.code, code, error.message);
    caught = error;
    return true;
  });
  return caught;
}

/** A value of the cookie's shape that is not `value`: its first character changed. */
function otherCookie(value) {
  return `${value.startsWith('A') ? 'B' : 'A'}${value.slice(1)}`;
}

test('apple.authorize with defaults: Apple\'s URL for a form_post answer, and the binding cookie', async () => {
  const answer = await client.appleAuthorize();
  assert.match(answer.state, /^[A-Za-z0-9_-]{43}$/);
  assert.ok(answer.url.startsWith('http://127.0.0.1:9/auth/authorize?'), answer.url);
  assert.ok(answer.url.includes(`state=${answer.state}`), answer.url);
  assert.ok(answer.url.includes('response_mode=form_post'), answer.url);
  const query = new URL(answer.url).searchParams;
  assert.equal(query.get('client_id'), harness.audience);
  assert.equal(query.get('redirect_uri'), REDIRECT_URI);
  assert.ok(Number.isInteger(answer.expires_at), String(answer.expires_at));

  const { cookie } = answer;
  assert.equal(cookie.name, '__Host-kh_apple');
  assert.match(cookie.value, /^[A-Za-z0-9_-]{43}$/);
  assert.notEqual(cookie.value, answer.state);
  assert.equal(cookie.max_age, 600);
  assert.ok(cookie.set_cookie.startsWith(`__Host-kh_apple=${cookie.value};`), cookie.set_cookie);
  const attributes = cookie.set_cookie.split(';').map((part) => part.trim());
  for (const attribute of ['Secure', 'HttpOnly', 'SameSite=None']) {
    assert.ok(attributes.includes(attribute), `${attribute} missing: ${cookie.set_cookie}`);
  }
});

test('apple.authorize refuses a return_to that would make keyholed an open redirect', async () => {
  await rejectsWith(client.appleAuthorize({ returnTo: '//evil.example' }), 'bad_request');
});

test('apple.callback with another browser\'s cookie is state_invalid, and uses the state up', async () => {
  const { state, cookie } = await client.appleAuthorize();
  const form = { state, code: 'c', id_token: 'x' };
  await rejectsWith(client.appleCallback(form, otherCookie(cookie.value)), 'state_invalid');
  await rejectsWith(client.appleCallback(form, cookie.value), 'state_invalid');
});

test('apple.callback with Apple\'s error instead of a code is apple_authorization_refused', async () => {
  const { state, cookie } = await client.appleAuthorize();
  const error = await rejectsWith(client.appleCallback({ state, error: 'user_cancelled_authorize' }, cookie.value),
    'apple_authorization_refused');
  assert.ok(error.message.includes('user_cancelled_authorize'), error.message);
});

test('apple.callback with the right state and cookie verifies the id_token: token_malformed', async () => {
  const { state, cookie } = await client.appleAuthorize({ returnTo: '/account' });
  await rejectsWith(client.appleCallback({ state, code: 'c', id_token: 'not-a-token' }, cookie.value,
    { session: { ttl_s: 3600 } }), 'token_malformed');
});
