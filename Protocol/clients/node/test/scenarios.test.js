'use strict';

// Every conformance scenario of Protocol/vectors/client_scenarios.json, played by
// Protocol/testing/scenario_server.py as Protocol/testing/README.md describes.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, KeyholeError } = require('..');
const { loadScenarios, startScenario } = require('./support');

const doc = loadScenarios();

function outcome(promise) {
  return promise.then((result) => ({ result }), (error) => ({ error }));
}

function check(call, got, index) {
  const where = `call ${index} (${call.op})`;
  const expect = call.expect;
  if ('ok' in expect) {
    assert.ifError(got.error);
    assert.deepStrictEqual(got.result, expect.ok, where);
  } else if ('ok_padding_bytes_at_least' in expect) {
    assert.ifError(got.error);
    assert.equal(typeof got.result.padding, 'string', where);
    assert.ok(got.result.padding.length >= expect.ok_padding_bytes_at_least, where);
  } else {
    assert.ok(got.error, `${where} succeeded with ${JSON.stringify(got.result)}`);
    assert.ok(got.error instanceof KeyholeError, `${where} failed with ${got.error}`);
    const want = expect.error;
    assert.equal(got.error.code, want.code, `${where}: ${got.error.message}`);
    if ('message' in want) assert.equal(got.error.message, want.message, where);
    if ('retry_after_ms' in want) assert.equal(got.error.retryAfterMs, want.retry_after_ms, where);
  }
}

for (const scenario of doc.scenarios) {
  test(`scenario ${scenario.name}`, async () => {
    const server = await startScenario(scenario.name);
    const client = new Client({ socketPath: server.socket, timeoutMs: scenario.deadline_ms ?? doc.deadline_ms });
    try {
      if (scenario.pipelined) {
        const outcomes = await Promise.all(scenario.calls.map((call) => outcome(client.call(call.op, call.args))));
        scenario.calls.forEach((call, i) => check(call, outcomes[i], i));
      } else {
        for (const [i, call] of scenario.calls.entries()) {
          check(call, await outcome(client.call(call.op, call.args)), i);
        }
      }
    } finally {
      await client.close();
      const { code, stderr } = await server.finish();
      assert.equal(code, 0, `scenario_server: ${stderr}`);
    }
  });
}
