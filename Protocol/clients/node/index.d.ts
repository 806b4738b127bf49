// TypeScript declarations for Keyhole's Node.js client (index.js). See README.md.

import type { IncomingMessage, ServerResponse } from 'node:http';

/** keyholed's error codes (PROTOCOL.md section 6). */
export type ServerErrorCode =
  | 'bad_frame' | 'frame_too_large' | 'bad_request' | 'unknown_op' | 'unsupported_version'
  | 'permission_denied' | 'overloaded' | 'shutting_down' | 'internal'
  | 'token_malformed' | 'token_alg_not_allowed' | 'token_key_unknown' | 'token_signature_invalid'
  | 'token_expired' | 'token_not_yet_valid' | 'token_issuer_unknown' | 'token_audience_invalid'
  | 'token_nonce_mismatch' | 'token_claim_invalid' | 'keys_unavailable'
  | 'session_not_found' | 'user_not_found' | 'storage_unavailable' | 'data_too_large'
  | 'upstream_rejected' | 'upstream_unavailable' | 'not_configured' | 'state_invalid'
  | 'apple_authorization_refused' | 'config_invalid';

/** The client's own codes (PROTOCOL.md section 8), which keyholed never sends. */
export type ClientErrorCode = 'unavailable' | 'connection_lost' | 'timeout' | 'protocol_error';

export type ErrorCode = ServerErrorCode | ClientErrorCode;

/** Every failed call rejects with this. A code keyholed sent that the client does not know is `internal`. */
export class KeyholeError extends Error {
  constructor(code: ErrorCode, message: string, extra?: {
    retryAfterMs?: number | null; appleError?: string | null; reportedCode?: string | null;
  });
  readonly name: 'KeyholeError';
  readonly code: ErrorCode;
  /** keyholed's hint of how long to wait before retrying, or null. */
  readonly retryAfterMs: number | null;
  /** With upstream_rejected: Apple's OAuth error (invalid_grant, invalid_client), else null. */
  readonly appleError: string | null;
  /** The code as keyholed sent it, when it was not one this client knows (code is then internal). */
  readonly reportedCode: string | null;
}

export interface ClientOptions {
  /** Default: $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock. */
  socketPath?: string;
  /** Per-call deadline covering connecting, reconnecting, writing and the answer. Default 5000. */
  timeoutMs?: number;
  /** Wait out `overloaded` (its retry_after_ms) and send again, within the deadline. Default false. */
  retryOverloaded?: boolean;
}

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export interface UserOptions { issuer?: string }

export interface PingResult { protocol: number; version: string; uptime_ms: number }

export interface VerifiedToken {
  issuer: string; sub: string; aud: string[]; exp: number; iat?: number;
  email?: string; email_verified?: boolean; is_private_email?: boolean; real_user_status?: number;
  claims: JsonObject;
  [member: string]: Json | undefined;
}

export interface User {
  issuer: string; sub: string; created_at: number; updated_at: number; last_login_at: number | null;
  email?: string; email_verified?: boolean; is_private_email?: boolean;
  name?: { given?: string; family?: string };
  consent_revoked_at?: number; email_enabled?: boolean;
  [member: string]: Json | undefined;
}

export interface CreatedSession { session: string; id: string; expires_at: number }

export interface Session {
  id: string; issuer: string; sub: string; created_at: number; expires_at: number;
  last_seen_at: number; idle_timeout_s: number; data: JsonObject; user: User | null;
}

export interface SessionSummary { id: string; created_at: number; expires_at: number; last_seen_at: number }

export interface CreateSessionOptions extends UserOptions {
  /** ttl_s: 60 to 34 560 000 seconds. */
  ttlSeconds?: number;
  /** idle_s: 60 to 34 560 000 seconds. */
  idleSeconds?: number;
  data?: JsonObject;
}

export interface UpdateUserOptions extends UserOptions {
  /** A string, or null to remove it. */
  email?: string | null;
  name?: { given?: string; family?: string } | null;
}

export interface AppleSignInOptions {
  authorizationCode?: string;
  clientId?: string;
  nonce?: string;
  user?: { email?: string; name?: { given?: string; family?: string } };
  session?: { ttl_s?: number; idle_s?: number; data?: JsonObject };
}

export interface AppleAuthorizeOptions {
  /** A Services ID of [apple] client_ids with a redirect_uris entry; default [apple] web_client_id. */
  clientId?: string;
  /** Must be clientId's redirect_uris entry, byte for byte. */
  redirectUri?: string;
  /** 'name email' (the default), 'name', 'email' or ''. */
  scope?: string;
  /** Where the browser goes once signed in: a path on the site ('/' by default) or a web_return_origins URL. */
  returnTo?: string;
}

export interface AppleAuthorization {
  /** Apple's authorization URL: redirect the browser there. */
  url: string;
  state: string;
  expires_at: number;
  /** The binding cookie: send set_cookie as a Set-Cookie header before redirecting. */
  cookie: { name: string; value: string; max_age: number; set_cookie: string };
}

export class Client {
  constructor(options?: ClientOptions);
  readonly socketPath: string;
  readonly timeoutMs: number;
  readonly retryOverloaded: boolean;

  /** Any operation (debug.* included): resolves with its result object. */
  call(op: string, args?: JsonObject | null): Promise<JsonObject>;
  /** Fails the calls still in flight (connection_lost) and closes the connection. */
  close(): Promise<void>;

  ping(): Promise<PingResult>;
  stats(): Promise<JsonObject>;
  verifyToken(token: string, options?: { issuer?: string; audience?: string; nonce?: string }): Promise<VerifiedToken>;
  jwksStatus(options?: { issuer?: string }): Promise<JsonObject>;
  jwksRefresh(options?: { issuer?: string }): Promise<JsonObject>;

  createSession(sub: string, options?: CreateSessionOptions): Promise<CreatedSession>;
  getSession(token: string): Promise<Session>;
  /** By token (a string or {session}), or by id ({id}). */
  revokeSession(which: string | { session: string } | { id: string }): Promise<{ revoked: boolean }>;
  revokeAllSessions(sub: string, options?: UserOptions): Promise<{ revoked: number }>;
  listSessions(sub: string, options?: UserOptions): Promise<{ sessions: SessionSummary[] }>;

  getUser(sub: string, options?: UserOptions): Promise<User>;
  updateUser(sub: string, options: UpdateUserOptions): Promise<{ user: User; created: boolean }>;
  deleteUser(sub: string, options?: UserOptions): Promise<{ deleted: boolean; sessions_revoked: number; apple_revocation?: 'done' | 'pending' }>;

  appleSignIn(identityToken: string, options?: AppleSignInOptions): Promise<{ created: boolean; user: User; session: CreatedSession }>;
  /** Sign in with Apple on the web, step 1. */
  appleAuthorize(options?: AppleAuthorizeOptions): Promise<AppleAuthorization>;
  /**
   * Step 2: `form` is Apple's POST to the redirect URI (state, code, id_token, user, or error), `cookie`
   * the value of the cookie named by appleAuthorize's cookie.name, as the browser sent it.
   */
  appleCallback(form: Record<string, string> | URLSearchParams, cookie: string, options?: {
    session?: { ttl_s?: number; idle_s?: number; data?: JsonObject };
  }): Promise<{ created: boolean; user: User; session: CreatedSession; return_to: string }>;
  appleNotification(payload: string): Promise<{ type: string; sub: string; applied: boolean; duplicate: boolean }>;
  appleRefreshCheck(sub: string): Promise<{ result: 'valid' | 'consent_revoked' | 'no_token'; sessions_revoked?: number }>;
  appleTransferExport(sub: string, targetTeamId: string, options?: { clientId?: string }): Promise<{ transfer_sub: string }>;
  appleTransferImport(transferSub: string, options?: { clientId?: string }): Promise<{
    sub: string; email?: string; is_private_email?: boolean; moved: boolean; sessions_moved: number;
  }>;
  applePending(): Promise<{ count: number; pending: JsonObject[] }>;

  adminSnapshot(): Promise<{
    start_lsn: number; sessions: number; users: number; bytes: number; wal_bytes_removed: number;
    created_at: number; ms: number; longest_pause_us: number;
  }>;
  adminReload(): Promise<{ applied: string[]; needs_restart: string[] }>;
}

/** What the middleware sets on the request: both null when anonymous. */
export interface KeyholeRequestState {
  session: Session | null;
  user: User | null;
}

export interface MiddlewareOptions {
  /** The client to ask; else one is made for socketPath. */
  client?: Client;
  socketPath?: string;
  /** Default kh_session. */
  cookieName?: string;
  /** Answer 401 (WWW-Authenticate: Bearer realm="keyhole") when there is no session. Default false. */
  required?: boolean;
  /**
   * Told of an exception thrown by the handler after the middleware (which is answered 500 if it
   * had not answered). Default: logged with console.error.
   */
  onError?: (error: unknown, req: IncomingMessage, res: ServerResponse) => void;
}


/** Express/Connect middleware; with node:http, call it with a next of your own. */
export function middleware(options?: MiddlewareOptions):
  (req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => void;

/**
 * The session token of a request: Authorization Bearer kh_..., else the (first) cookie; never the
 * query. null when none, or when the value is not a token's shape.
 */
export function tokenFromRequest(req: IncomingMessage, options?: { cookieName?: string }): string | null;

/** Whether a value has a session token's shape: `kh_` and 43 base64url characters. */
export function isSessionToken(value: unknown): value is string;

export interface OperationInfo { group: string | null; safeToRepeat: boolean; debug: boolean }
export const OPERATIONS: Readonly<Record<string, OperationInfo>>;
export const HELPER_OPS: Readonly<Record<string, string>>;
export const SERVER_CODES: readonly ServerErrorCode[];
export const CLIENT_CODES: readonly ClientErrorCode[];
export function safeToRepeat(op: string): boolean;
export function resolveSocketPath(given?: string): string;
export const DEFAULT_SOCKET: string;
export const DEFAULT_TIMEOUT_MS: number;
export const DEFAULT_COOKIE: string;
export const MAX_RESPONSE_BYTES: number;

declare module 'node:http' {
  interface IncomingMessage {
    /** Set by keyhole's middleware. */
    keyhole?: KeyholeRequestState;
  }
}
