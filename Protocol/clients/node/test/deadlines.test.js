'use strict';

// Deadlines on its own, with an injected clock: the list kept in deadline order, calls leaving it
// from anywhere, the one timer fired early or late, and whether it holds the process open.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Deadlines } = require('../lib/deadlines');

/**
 * Deadlines on a clock the test sets, recording what expires; `fire()` plays the timer going off
 * (the real one, set by the class on real time, is cleared first, so that only the test fires it).
 */
function setup() {
  const clock = { now: 0 };
  const expired = [];
  const deadlines = new Deadlines((call) => { expired.push(call.name); deadlines.remove(call); }, () => clock.now);
  const call = (name, deadline) => ({ name, deadline, older: null, newer: null });
  const order = () => {
    const names = [];
    for (let c = deadlines.oldest; c !== null; c = c.newer) names.push(c.name);
    const backwards = [];
    for (let c = deadlines.newest; c !== null; c = c.older) backwards.unshift(c.name);
    assert.deepStrictEqual(backwards, names, 'the links disagree');
    return names;
  };
  const fire = () => {
    clearTimeout(deadlines.timer);
    deadlines.fire();
  };
  const done = () => {
    while (deadlines.oldest !== null) deadlines.remove(deadlines.oldest);
    clearTimeout(deadlines.timer);
  };
  return { clock, expired, deadlines, call, order, fire, done };
}

test('calls expire in deadline order, only once past it, and the timer waits for the oldest left', () => {
  const { clock, expired, deadlines, call, order, fire, done } = setup();
  try {
    const [a, b, c] = [call('a', 1000), call('b', 2000), call('c', 3000)];
    for (const x of [a, b, c]) deadlines.add(x);
    assert.deepStrictEqual(order(), ['a', 'b', 'c']);
    assert.equal(deadlines.timerDue, 1000);
    clock.now = 999; // fired early (the timer's granularity): nothing is due yet
    fire();
    assert.deepStrictEqual(expired, []);
    assert.equal(deadlines.timerDue, 1000);
    clock.now = 2000; // late: both a and b are due
    fire();
    assert.deepStrictEqual(expired, ['a', 'b']);
    assert.deepStrictEqual(order(), ['c']);
    assert.equal(deadlines.timerDue, 3000);
    clock.now = 5000;
    fire();
    assert.deepStrictEqual(expired, ['a', 'b', 'c']);
    assert.deepStrictEqual(order(), []);
    assert.equal(deadlines.timer, null);
  } finally {
    done();
  }
});

test('a call that finishes leaves the list from its head, middle or tail, and never expires', () => {
  const { clock, expired, deadlines, call, order, fire, done } = setup();
  try {
    const calls = ['a', 'b', 'c', 'd', 'e'].map((name, i) => call(name, 100 * (i + 1)));
    for (const x of calls) deadlines.add(x);
    deadlines.remove(calls[2]);
    assert.deepStrictEqual(order(), ['a', 'b', 'd', 'e']);
    deadlines.remove(calls[0]);
    deadlines.remove(calls[4]);
    assert.deepStrictEqual(order(), ['b', 'd']);
    deadlines.remove(calls[4]); // twice, or never added: nothing happens
    deadlines.remove(call('x', 50));
    assert.deepStrictEqual(order(), ['b', 'd']);
    clock.now = 1000; // the timer was set for a, which is gone: it fires early for b, d
    fire();
    assert.deepStrictEqual(expired, ['b', 'd']);
  } finally {
    done();
  }
});

test('a call with an earlier deadline than the newest (timeoutMs lowered) goes in its place and brings the timer forward', () => {
  const { clock, expired, deadlines, call, order, fire, done } = setup();
  try {
    deadlines.add(call('long', 600));
    deadlines.add(call('longer', 700));
    deadlines.add(call('short', 100));
    assert.deepStrictEqual(order(), ['short', 'long', 'longer']);
    assert.equal(deadlines.timerDue, 100);
    deadlines.add(call('middle', 650));
    assert.deepStrictEqual(order(), ['short', 'long', 'middle', 'longer']);
    assert.equal(deadlines.timerDue, 100);
    clock.now = 660;
    fire();
    assert.deepStrictEqual(expired, ['short', 'long', 'middle']);
    assert.equal(deadlines.timerDue, 700);
  } finally {
    done();
  }
});

test('the timer holds the process open only while a call is in the list', () => {
  const { deadlines, call, done } = setup();
  try {
    const a = call('a', 5000);
    deadlines.add(a);
    assert.equal(deadlines.timer.hasRef(), true);
    deadlines.remove(a);
    assert.equal(deadlines.timer.hasRef(), false);
    const b = call('b', 5001); // the same timer serves it: held again
    const timer = deadlines.timer;
    deadlines.add(b);
    assert.equal(deadlines.timer, timer);
    assert.equal(deadlines.timer.hasRef(), true);
    deadlines.add(call('c', 5002));
    deadlines.remove(b);
    assert.equal(deadlines.timer.hasRef(), true, 'c still waits');
  } finally {
    done();
  }
});
