'use strict';

// Rule 5 of PROTOCOL.md section 8 against a real keyholed limited to 2 requests a second per
// user: overloaded reaches the caller with retry_after_ms, and is waited out only when asked.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, KeyholeError } = require('..');
const { startHarness } = require('./support');

let harness;

test.before(async () => {
  harness = await startHarness({
    configExtra: '[server]\nrequests_per_second_per_uid = 2\nrequest_burst_per_uid = 1\n',
  });
});

test.after(async () => {
  if (harness) await harness.stop();
});

test('overloaded is surfaced with retry_after_ms and not slept on by default', async () => {
  const client = new Client({ socketPath: harness.socket });
  try {
    const outcomes = await Promise.allSettled([client.ping(), client.ping()]);
    const refused = outcomes.filter((o) => o.status === 'rejected').map((o) => o.reason);
    assert.equal(refused.length, 1, JSON.stringify(outcomes));
    assert.ok(refused[0] instanceof KeyholeError);
    assert.equal(refused[0].code, 'overloaded');
    assert.ok(refused[0].retryAfterMs > 0 && refused[0].retryAfterMs <= 1000, String(refused[0].retryAfterMs));
  } finally {
    await client.close();
  }
});

test('with retryOverloaded, the call waits out retry_after_ms within its deadline and succeeds', async () => {
  const client = new Client({ socketPath: harness.socket, retryOverloaded: true });
  try {
    const started = Date.now();
    const answers = await Promise.all([client.ping(), client.ping(), client.ping()]);
    for (const answer of answers) assert.equal(answer.protocol, 1);
    assert.ok(Date.now() - started >= 400, 'three calls at 2 a second took less than 0.4 s');
  } finally {
    await client.close();
  }
});

test('with retryOverloaded, a wait that would pass the deadline is not begun: overloaded at once', async () => {
  const client = new Client({ socketPath: harness.socket, retryOverloaded: true, timeoutMs: 300 });
  try {
    const started = Date.now();
    const timed = (promise) => promise.then(() => null, (error) => ({ code: error.code, ms: Date.now() - started }));
    const refused = (await Promise.all([client.ping(), client.ping(), client.ping()].map(timed))).filter(Boolean);
    assert.ok(refused.length >= 1, 'no call was refused');
    for (const { code, ms } of refused) {
      assert.equal(code, 'overloaded');
      assert.ok(ms < 250, `refused after ${ms} ms: it waited instead of failing at once`);
    }
  } finally {
    await client.close();
  }
});
