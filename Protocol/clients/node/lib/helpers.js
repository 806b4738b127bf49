'use strict';

/**
 * Typed helpers for every non-debug operation of PROTOCOL.md section 7, as methods of Client.
 * Each builds the operation's args (wire names, snake_case; options left undefined are not sent)
 * and resolves with keyhole's result object as it is. debug.* go through client.call().
 */

const { Client } = require('./client');
const { jsonString } = require('./frames');

/** `args` with the options of `options` named in `names` (camelCase -> wire name) that are set. */
function withOptions(args, options, names) {
  if (options !== undefined && options !== null && typeof options !== 'object') {
    throw new TypeError('options must be an object');
  }
  for (const [name, wire] of Object.entries(names)) {
    if (options && options[name] !== undefined) args[wire] = options[name];
  }
  return args;
}

function user(sub, options) {
  return withOptions({ sub }, options, { issuer: 'issuer' });
}

/** Apple's POSTed fields as the object `form` is sent as: a URLSearchParams becomes a plain object. */
function formFields(form) {
  if (form instanceof URLSearchParams) return Object.fromEntries(form);
  if (form === null || typeof form !== 'object' || Array.isArray(form)) {
    throw new TypeError('form must be an object of the fields Apple POSTed');
  }
  return form;
}

const helpers = {
  ping() { return this.call('ping', {}); },
  stats() { return this.call('stats', {}); },

  verifyToken(token, options) {
    return this.call('token.verify', withOptions({ token }, options,
      { issuer: 'issuer', audience: 'audience', nonce: 'nonce' }));
  },
  jwksStatus(options) { return this.call('jwks.status', withOptions({}, options, { issuer: 'issuer' })); },
  jwksRefresh(options) { return this.call('jwks.refresh', withOptions({}, options, { issuer: 'issuer' })); },

  createSession(sub, options) {
    return this.call('session.create', withOptions({ sub }, options,
      { issuer: 'issuer', ttlSeconds: 'ttl_s', idleSeconds: 'idle_s', data: 'data' }));
  },
  getSession(token) {
    // The auth check of every request: its args written by hand (the same text as JSON.stringify).
    if (typeof token === 'string') return this.request('session.get', `{"session":${jsonString(token)}}`);
    return this.call('session.get', { session: token });
  },
  /** revokeSession(token), or revokeSession({session}) / revokeSession({id}). */
  revokeSession(which) {
    if (typeof which === 'string') return this.call('session.revoke', { session: which });
    return this.call('session.revoke', withOptions({}, which, { session: 'session', id: 'id' }));
  },
  revokeAllSessions(sub, options) { return this.call('session.revoke_all', user(sub, options)); },
  listSessions(sub, options) { return this.call('session.list', user(sub, options)); },

  getUser(sub, options) { return this.call('user.get', user(sub, options)); },
  /** email: a string, or null to remove it; name: {given?, family?}, or null. */
  updateUser(sub, options) {
    return this.call('user.update', withOptions({ sub }, options,
      { issuer: 'issuer', email: 'email', name: 'name' }));
  },
  deleteUser(sub, options) { return this.call('user.delete', user(sub, options)); },

  appleSignIn(identityToken, options) {
    return this.call('apple.sign_in', withOptions({ identity_token: identityToken }, options, {
      authorizationCode: 'authorization_code', clientId: 'client_id', nonce: 'nonce',
      user: 'user', session: 'session',
    }));
  },
  /** Sign in with Apple on the web, step 1: Apple's authorization URL and the binding cookie to set. */
  appleAuthorize(options) {
    return this.call('apple.authorize', withOptions({}, options, {
      clientId: 'client_id', redirectUri: 'redirect_uri', scope: 'scope', returnTo: 'return_to',
    }));
  },
  /**
   * Step 2: `form` is Apple's POST to the redirect URI (an object of strings, or a URLSearchParams),
   * `cookie` the binding cookie's value as the browser sent it.
   */
  appleCallback(form, cookie, options) {
    return this.call('apple.callback', withOptions({ form: formFields(form), cookie }, options,
      { session: 'session' }));
  },
  appleNotification(payload) { return this.call('apple.notification', { payload }); },
  appleRefreshCheck(sub) { return this.call('apple.refresh_check', { sub }); },
  appleTransferExport(sub, targetTeamId, options) {
    return this.call('apple.transfer.export', withOptions({ sub, target_team_id: targetTeamId }, options,
      { clientId: 'client_id' }));
  },
  appleTransferImport(transferSub, options) {
    return this.call('apple.transfer.import', withOptions({ transfer_sub: transferSub }, options,
      { clientId: 'client_id' }));
  },
  applePending() { return this.call('apple.pending', {}); },

  adminSnapshot() { return this.call('admin.snapshot', {}); },
  adminReload() { return this.call('admin.reload', {}); },
};

/** Which operation each helper sends (the tests check that every non-debug operation has one). */
const HELPER_OPS = Object.freeze({
  ping: 'ping', stats: 'stats', verifyToken: 'token.verify', jwksStatus: 'jwks.status',
  jwksRefresh: 'jwks.refresh', createSession: 'session.create', getSession: 'session.get',
  revokeSession: 'session.revoke', revokeAllSessions: 'session.revoke_all', listSessions: 'session.list',
  getUser: 'user.get', updateUser: 'user.update', deleteUser: 'user.delete', appleSignIn: 'apple.sign_in',
  appleAuthorize: 'apple.authorize', appleCallback: 'apple.callback', appleNotification: 'apple.notification',
  appleRefreshCheck: 'apple.refresh_check',
  appleTransferExport: 'apple.transfer.export', appleTransferImport: 'apple.transfer.import',
  applePending: 'apple.pending', adminSnapshot: 'admin.snapshot', adminReload: 'admin.reload',
});

for (const [name, method] of Object.entries(helpers)) {
  // A bad argument rejects the returned promise, as every other failure of a call does.
  const helper = function () {
    try {
      return method.apply(this, arguments); // eslint-disable-line prefer-rest-params
    } catch (error) {
      return Promise.reject(error);
    }
  };
  Object.defineProperty(helper, 'name', { value: name });
  Object.defineProperty(Client.prototype, name, { value: helper, writable: true, configurable: true });
}

module.exports = { HELPER_OPS };
