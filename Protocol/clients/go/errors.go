package keyhole

import (
	"errors"
	"fmt"
)

// Error codes keyholed sends (PROTOCOL.md section 6).
const (
	CodeBadFrame              = "bad_frame"
	CodeFrameTooLarge         = "frame_too_large"
	CodeBadRequest            = "bad_request"
	CodeUnknownOp             = "unknown_op"
	CodeUnsupportedVersion    = "unsupported_version"
	CodePermissionDenied      = "permission_denied"
	CodeOverloaded            = "overloaded"
	CodeShuttingDown          = "shutting_down"
	CodeInternal              = "internal"
	CodeTokenMalformed        = "token_malformed"
	CodeTokenAlgNotAllowed    = "token_alg_not_allowed"
	CodeTokenKeyUnknown       = "token_key_unknown"
	CodeTokenSignatureInvalid = "token_signature_invalid"
	CodeTokenExpired          = "token_expired"
	CodeTokenNotYetValid      = "token_not_yet_valid"
	CodeTokenIssuerUnknown    = "token_issuer_unknown"
	CodeTokenAudienceInvalid  = "token_audience_invalid"
	CodeTokenNonceMismatch    = "token_nonce_mismatch"
	CodeTokenClaimInvalid     = "token_claim_invalid"
	CodeKeysUnavailable       = "keys_unavailable"
	CodeSessionNotFound       = "session_not_found"
	CodeUserNotFound          = "user_not_found"
	CodeStorageUnavailable    = "storage_unavailable"
	CodeDataTooLarge          = "data_too_large"
	CodeUpstreamRejected      = "upstream_rejected"
	CodeUpstreamUnavailable   = "upstream_unavailable"
	CodeNotConfigured         = "not_configured"
	CodeConfigInvalid         = "config_invalid"

	// apple.callback's (Sign in with Apple on the web).
	CodeStateInvalid              = "state_invalid"
	CodeAppleAuthorizationRefused = "apple_authorization_refused"
)

// The client's own codes (PROTOCOL.md section 8), which keyholed never sends.
const (
	// CodeUnavailable: keyholed could not be reached before the deadline; the request was never sent.
	CodeUnavailable = "unavailable"
	// CodeConnectionLost: the connection ended after the request was written and before its answer,
	// and the operation is not safe to repeat (or its one re-send was lost too). Outcome unknown.
	// Never after keyholed's goodbye (a graceful shutdown): the calls it turned away were not read,
	// and are sent again on a new connection.
	CodeConnectionLost = "connection_lost"
	// CodeTimeout: the call's deadline passed (or its context was canceled) before the answer.
	CodeTimeout = "timeout"
	// CodeProtocolError: keyholed's answer broke the protocol; the connection was closed.
	CodeProtocolError = "protocol_error"
)

var serverCodes = map[string]bool{
	CodeBadFrame: true, CodeFrameTooLarge: true, CodeBadRequest: true, CodeUnknownOp: true,
	CodeUnsupportedVersion: true, CodePermissionDenied: true, CodeOverloaded: true,
	CodeShuttingDown: true, CodeInternal: true, CodeTokenMalformed: true,
	CodeTokenAlgNotAllowed: true, CodeTokenKeyUnknown: true, CodeTokenSignatureInvalid: true,
	CodeTokenExpired: true, CodeTokenNotYetValid: true, CodeTokenIssuerUnknown: true,
	CodeTokenAudienceInvalid: true, CodeTokenNonceMismatch: true, CodeTokenClaimInvalid: true,
	CodeKeysUnavailable: true, CodeSessionNotFound: true, CodeUserNotFound: true,
	CodeStorageUnavailable: true, CodeDataTooLarge: true, CodeUpstreamRejected: true,
	CodeUpstreamUnavailable: true, CodeNotConfigured: true, CodeConfigInvalid: true,
	CodeStateInvalid: true, CodeAppleAuthorizationRefused: true,
}

// Error is the one error type of a failed call: keyholed's answer, or one of the client's own codes.
//
// Compare codes with errors.Is against the sentinels (errors.Is(err, keyhole.ErrSessionNotFound))
// or read Code through errors.As. A timeout also matches context.DeadlineExceeded (or
// context.Canceled when the caller's context was canceled); Unwrap gives the underlying cause
// (an OS error for unavailable and connection_lost) where there is one.
type Error struct {
	// Code is one of the Code constants. A code this client does not know is reported as "internal"
	// (the code keyholed sent is then in Message).
	Code string
	// Message is for people; it may change between releases.
	Message string
	// RetryAfterMs is keyholed's hint of how long to wait before retrying; 0 when it gave none.
	RetryAfterMs int64
	// AppleError is Apple's OAuth error with upstream_rejected ("invalid_grant", "invalid_client").
	AppleError string

	cause error
}

func (e *Error) Error() string {
	s := "keyhole: " + e.Code
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RetryAfterMs > 0 {
		s += fmt.Sprintf(" (retry after %d ms)", e.RetryAfterMs)
	}
	return s
}

// Unwrap returns the cause: the context's error for a timeout, the OS error for unavailable and
// connection_lost, nil for keyholed's own answers.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is an *Error with the same code, so that the sentinels match by code.
// (A timeout also matches context.DeadlineExceeded or context.Canceled through Unwrap.)
func (e *Error) Is(target error) bool {
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code
	}
	return false
}

// Sentinels for errors.Is; each matches any *Error with its code.
var (
	ErrUnavailable        = &Error{Code: CodeUnavailable}
	ErrConnectionLost     = &Error{Code: CodeConnectionLost}
	ErrTimeout            = &Error{Code: CodeTimeout}
	ErrProtocol           = &Error{Code: CodeProtocolError}
	ErrOverloaded         = &Error{Code: CodeOverloaded}
	ErrShuttingDown       = &Error{Code: CodeShuttingDown}
	ErrInternal           = &Error{Code: CodeInternal}
	ErrBadRequest         = &Error{Code: CodeBadRequest}
	ErrPermissionDenied   = &Error{Code: CodePermissionDenied}
	ErrSessionNotFound    = &Error{Code: CodeSessionNotFound}
	ErrUserNotFound       = &Error{Code: CodeUserNotFound}
	ErrStorageUnavailable = &Error{Code: CodeStorageUnavailable}
	ErrNotConfigured      = &Error{Code: CodeNotConfigured}
	ErrStateInvalid       = &Error{Code: CodeStateInvalid}

	ErrAppleAuthorizationRefused = &Error{Code: CodeAppleAuthorizationRefused}
)

// ErrorCode returns the code of err if it is (or wraps) an *Error, else "".
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsTokenError reports whether err says an identity token did not verify (a token_* code):
// the token is bad, as opposed to keyholed failing to answer.
func IsTokenError(err error) bool {
	c := ErrorCode(err)
	return len(c) > 6 && c[:6] == "token_"
}

func clientError(code, message string, cause error) *Error {
	return &Error{Code: code, Message: message, cause: cause}
}
