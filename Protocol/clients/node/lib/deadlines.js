'use strict';

const { performance } = require('node:perf_hooks');

/** The monotonic clock deadlines are read from, in milliseconds: a change of the system clock moves none. */
function monotonicNow() {
  return performance.now();
}

/**
 * The deadlines of a client's unfinished calls, served by one timer instead of one per call: a
 * setTimeout and a clearTimeout per call cost more than the rest of the client's own work on it.
 *
 * The calls are kept in one list in deadline order (`oldest` to `newest`, linked through each
 * call's `older` and `newer`; its `deadline` is a time of `now`). The timer is due at the oldest
 * call's deadline or before: a call that finishes only leaves the list, and when the timer fires it
 * hands every call past its deadline to `onExpire` and waits again for the oldest one left. While
 * no call is in the list the timer holds no process open (unref), so an idle client lets the
 * process exit; a call added refs it again.
 */
class Deadlines {
  /**
   * `onExpire(call)` must take the call out of the list (`remove`), as finishing a call does.
   * `now` is the clock (monotonic, milliseconds).
   */
  constructor(onExpire, now = monotonicNow) {
    this.onExpire = onExpire;
    this.now = now;
    this.oldest = null;
    this.newest = null;
    this.timer = null; // due at or before the oldest call's deadline while there is one
    this.timerDue = 0;
    this.onTimer = () => this.fire();
  }

  /** Adds a call whose `deadline` is set, and makes sure the timer is due by it. */
  add(call) {
    let older = this.newest;
    // Calls come in deadline order unless the client's timeoutMs was lowered meanwhile.
    while (older !== null && older.deadline > call.deadline) older = older.older;
    call.older = older;
    call.newer = older === null ? this.oldest : older.newer;
    if (call.newer === null) this.newest = call;
    else call.newer.older = call;
    if (older === null) this.oldest = call;
    else older.newer = call;
    // A timer due within a millisecond after the deadline is near enough (its own granularity).
    if (this.timer === null || call.deadline + 1 < this.timerDue) {
      this.arm(call.deadline - this.now());
    } else if (call.older === null && call.newer === null) {
      this.timer.ref(); // the only call: the process waits for it again
    }
  }

  /** Takes a call out of the list; nothing if it is not in it. */
  remove(call) {
    if (call.older === null) {
      if (this.oldest !== call) return;
      this.oldest = call.newer;
    } else {
      call.older.newer = call.newer;
    }
    if (call.newer === null) this.newest = call.older;
    else call.newer.older = call.older;
    call.older = null;
    call.newer = null;
    // No call left: the timer stays set (the next call may keep it) but holds no process open.
    if (this.oldest === null && this.timer !== null) this.timer.unref();
  }

  arm(ms) {
    if (this.timer !== null) clearTimeout(this.timer);
    const wait = Math.max(1, Math.ceil(ms));
    this.timerDue = this.now() + wait;
    this.timer = setTimeout(this.onTimer, wait);
  }

  /** The timer fired (early, if the call it was set for finished): the calls past their deadline expire. */
  fire() {
    this.timer = null;
    const now = this.now();
    while (this.oldest !== null && this.oldest.deadline <= now) {
      const call = this.oldest;
      this.onExpire(call);
      this.remove(call); // onExpire did; this only makes sure the loop moves on
    }
    if (this.oldest !== null) this.arm(this.oldest.deadline - now);
  }
}

module.exports = { Deadlines, monotonicNow };
