'use strict';

/**
 * Keyhole's Node.js client (Node 18 and later, standard library only): see README.md.
 *
 *   const { Client } = require('keyhole');
 *   const client = new Client({ socketPath: '/run/keyhole/keyhole.sock' });
 *   const session = await client.getSession(token);
 */

const { Client, resolveSocketPath, DEFAULT_SOCKET, DEFAULT_TIMEOUT_MS } = require('./lib/client');
const { HELPER_OPS } = require('./lib/helpers');
const { KeyholeError, SERVER_CODES, CLIENT_CODES } = require('./lib/errors');
const { OPERATIONS, safeToRepeat } = require('./lib/operations');
const { middleware, tokenFromRequest, isSessionToken, DEFAULT_COOKIE } = require('./lib/middleware');
const { MAX_RESPONSE_BYTES } = require('./lib/connection');

module.exports = {
  Client,
  KeyholeError,
  middleware,
  tokenFromRequest,
  isSessionToken,
  OPERATIONS,
  HELPER_OPS,
  SERVER_CODES,
  CLIENT_CODES,
  safeToRepeat,
  resolveSocketPath,
  DEFAULT_SOCKET,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_COOKIE,
  MAX_RESPONSE_BYTES,
};
