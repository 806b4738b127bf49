'use strict';

/** keyholed's error codes (PROTOCOL.md section 6). */
const SERVER_CODES = Object.freeze([
  'bad_frame', 'frame_too_large', 'bad_request', 'unknown_op', 'unsupported_version',
  'permission_denied', 'overloaded', 'shutting_down', 'internal',
  'token_malformed', 'token_alg_not_allowed', 'token_key_unknown', 'token_signature_invalid',
  'token_expired', 'token_not_yet_valid', 'token_issuer_unknown', 'token_audience_invalid',
  'token_nonce_mismatch', 'token_claim_invalid', 'keys_unavailable',
  'session_not_found', 'user_not_found', 'storage_unavailable', 'data_too_large',
  'upstream_rejected', 'upstream_unavailable', 'not_configured', 'state_invalid',
  'apple_authorization_refused', 'config_invalid',
]);

/** The client's own codes (PROTOCOL.md section 8), which keyholed never sends. */
const CLIENT_CODES = Object.freeze(['unavailable', 'connection_lost', 'timeout', 'protocol_error']);

const KNOWN = new Set(SERVER_CODES);

/**
 * The one error type of every failed call: keyholed's answer or the client's own failure.
 * `code` is one of SERVER_CODES or CLIENT_CODES; a code keyholed sent that this client does not
 * know is reported as `internal`, with the code as sent in `reportedCode`.
 */
class KeyholeError extends Error {
  constructor(code, message, { retryAfterMs = null, appleError = null, reportedCode = null } = {}) {
    super(message);
    this.name = 'KeyholeError';
    this.code = code;
    this.retryAfterMs = retryAfterMs;
    this.appleError = appleError;
    this.reportedCode = reportedCode;
  }

  /** The error of a response's `error` object (section 4). */
  static fromResponse(error) {
    const sent = error.code;
    const known = typeof sent === 'string' && KNOWN.has(sent);
    const message = typeof error.message === 'string' ? error.message : String(sent);
    const retry = error.retry_after_ms;
    return new KeyholeError(known ? sent : 'internal', message, {
      retryAfterMs: typeof retry === 'number' && Number.isFinite(retry) ? retry : null,
      appleError: typeof error.apple_error === 'string' ? error.apple_error : null,
      reportedCode: known ? null : (typeof sent === 'string' ? sent : null),
    });
  }
}

module.exports = { KeyholeError, SERVER_CODES, CLIENT_CODES };
