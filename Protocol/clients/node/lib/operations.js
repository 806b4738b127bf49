'use strict';

/**
 * Every operation of PROTOCOL.md section 7, as Protocol/ops.json lists it: its access group
 * (null: ping) and whether it may be sent again after the connection dropped with it written but
 * unanswered (section 8). test/ops.test.js checks this copy against ops.json.
 */
const OPERATIONS = Object.freeze({
  'ping': { group: null, safeToRepeat: true, debug: false },
  'stats': { group: 'admin', safeToRepeat: true, debug: false },
  'token.verify': { group: 'verify', safeToRepeat: true, debug: false },
  'jwks.status': { group: 'verify', safeToRepeat: true, debug: false },
  'jwks.refresh': { group: 'admin', safeToRepeat: false, debug: false },
  'session.create': { group: 'session', safeToRepeat: false, debug: false },
  'session.get': { group: 'session', safeToRepeat: true, debug: false },
  'session.revoke': { group: 'session', safeToRepeat: true, debug: false },
  'session.revoke_all': { group: 'session', safeToRepeat: false, debug: false },
  'session.list': { group: 'session', safeToRepeat: true, debug: false },
  'user.get': { group: 'session', safeToRepeat: true, debug: false },
  'user.update': { group: 'admin', safeToRepeat: false, debug: false },
  'user.delete': { group: 'admin', safeToRepeat: false, debug: false },
  'apple.sign_in': { group: 'signin', safeToRepeat: false, debug: false },
  'apple.notification': { group: 'signin', safeToRepeat: false, debug: false },
  'apple.refresh_check': { group: 'admin', safeToRepeat: false, debug: false },
  'apple.transfer.export': { group: 'admin', safeToRepeat: false, debug: false },
  'apple.transfer.import': { group: 'admin', safeToRepeat: false, debug: false },
  'apple.pending': { group: 'admin', safeToRepeat: true, debug: false },
  'apple.authorize': { group: 'signin', safeToRepeat: false, debug: false },
  'apple.callback': { group: 'signin', safeToRepeat: false, debug: false },
  'admin.snapshot': { group: 'admin', safeToRepeat: false, debug: false },
  'admin.reload': { group: 'admin', safeToRepeat: false, debug: false },
  'debug.sleep': { group: 'admin', safeToRepeat: true, debug: true },
  'debug.echo': { group: 'admin', safeToRepeat: true, debug: true },
  'debug.block': { group: 'admin', safeToRepeat: false, debug: true },
  'debug.advance_clock': { group: 'admin', safeToRepeat: false, debug: true },
});

const SAFE_TO_REPEAT = new Set(Object.keys(OPERATIONS).filter((op) => OPERATIONS[op].safeToRepeat));

/** Whether `op` may be sent again after a lost connection; an operation not listed may not. */
function safeToRepeat(op) {
  return SAFE_TO_REPEAT.has(op);
}

module.exports = { OPERATIONS, safeToRepeat };
