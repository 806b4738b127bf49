<?php

declare(strict_types=1);

namespace Keyhole;

/**
 * A call to keyholed failed.
 *
 * code() is the protocol's string code: one of keyholed's (PROTOCOL.md section 6; a code this
 * client does not know is reported as "internal") or one of the client's own (section 8):
 * "unavailable", "connection_lost", "timeout", "protocol_error". PHP's getCode() is an int and
 * is always 0 here: use code().
 */
class KeyholeException extends \RuntimeException
{
    /** keyholed's codes (PROTOCOL.md section 6). */
    public const SERVER_CODES = [
        'bad_frame', 'frame_too_large', 'bad_request', 'unknown_op', 'unsupported_version',
        'permission_denied', 'overloaded', 'shutting_down', 'internal', 'token_malformed',
        'token_alg_not_allowed', 'token_key_unknown', 'token_signature_invalid', 'token_expired',
        'token_not_yet_valid', 'token_issuer_unknown', 'token_audience_invalid',
        'token_nonce_mismatch', 'token_claim_invalid', 'keys_unavailable', 'session_not_found',
        'user_not_found', 'storage_unavailable', 'data_too_large', 'upstream_rejected',
        'upstream_unavailable', 'not_configured', 'state_invalid', 'apple_authorization_refused',
        'config_invalid',
    ];

    /** The client's own codes, which keyholed never sends (PROTOCOL.md section 8). */
    public const CLIENT_CODES = ['unavailable', 'connection_lost', 'timeout', 'protocol_error'];

    private string $errorCode;
    private ?int $retryAfterMs;
    private ?string $appleError;

    public function __construct(
        string $code,
        string $message,
        ?int $retryAfterMs = null,
        ?string $appleError = null,
        ?\Throwable $previous = null
    ) {
        parent::__construct($message, 0, $previous);
        $this->errorCode = $code;
        $this->retryAfterMs = $retryAfterMs;
        $this->appleError = $appleError;
    }

    /** The string code, e.g. "session_not_found" or "connection_lost". */
    public function code(): string
    {
        return $this->errorCode;
    }

    /** The message, for people (it may change between releases; match on code()). */
    public function message(): string
    {
        return $this->getMessage();
    }

    /** keyholed's hint of how long to wait before retrying, in milliseconds, when it gave one. */
    public function retryAfterMs(): ?int
    {
        return $this->retryAfterMs;
    }

    /** Apple's OAuth error ("invalid_grant", ...), with upstream_rejected only. */
    public function appleError(): ?string
    {
        return $this->appleError;
    }

    /** True for the client's own codes (unavailable, connection_lost, timeout, protocol_error). */
    public function isClientSide(): bool
    {
        return in_array($this->errorCode, self::CLIENT_CODES, true);
    }

    public function __toString(): string
    {
        $retry = $this->retryAfterMs === null ? '' : " (retry after {$this->retryAfterMs} ms)";
        return static::class . ": {$this->errorCode}: {$this->getMessage()}{$retry}";
    }
}
