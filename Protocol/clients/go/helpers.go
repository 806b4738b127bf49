package keyhole

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// The typed helpers below (and apple_web.go's) cover every operation of PROTOCOL.md section 7 but
// debug.*, which go through Call. Results with a small, fixed shape are structs; those that are reports with many
// nested members (stats, jwks.status, jwks.refresh, apple.pending) are maps, as Call returns them.
// An empty issuer (or other optional string) is left out of the request: keyholed's default applies.

// PingResult is ping's answer.
type PingResult struct {
	Protocol int    `json:"protocol"`
	Version  string `json:"version"`
	UptimeMs int64  `json:"uptime_ms"`
}

// Name is a user's name.
type Name struct {
	Given  *string `json:"given,omitempty"`
	Family *string `json:"family,omitempty"`
}

// User is a user's record, as user.get answers it. Optional members are nil when keyholed has none.
type User struct {
	Issuer           string  `json:"issuer"`
	Sub              string  `json:"sub"`
	CreatedAt        int64   `json:"created_at"`
	UpdatedAt        int64   `json:"updated_at"`
	LastLoginAt      *int64  `json:"last_login_at"`
	Email            *string `json:"email,omitempty"`
	EmailVerified    *bool   `json:"email_verified,omitempty"`
	IsPrivateEmail   *bool   `json:"is_private_email,omitempty"`
	Name             *Name   `json:"name,omitempty"`
	ConsentRevokedAt *int64  `json:"consent_revoked_at,omitempty"`
	EmailEnabled     *bool   `json:"email_enabled,omitempty"`
}

// Session is a live session, as session.get answers it. User is nil when the user has no record.
type Session struct {
	ID           string         `json:"id"`
	Issuer       string         `json:"issuer"`
	Sub          string         `json:"sub"`
	CreatedAt    int64          `json:"created_at"`
	ExpiresAt    int64          `json:"expires_at"`
	LastSeenAt   int64          `json:"last_seen_at"`
	IdleTimeoutS int64          `json:"idle_timeout_s"`
	Data         map[string]any `json:"data"`
	User         *User          `json:"user"`
}

// NewSession is a session just created. Token is the secret the app hands its user (a cookie); it
// is shown only here.
type NewSession struct {
	Token     string `json:"session"`
	ID        string `json:"id"`
	ExpiresAt int64  `json:"expires_at"`
}

// SessionInfo is one entry of session.list (never a token).
type SessionInfo struct {
	ID         string `json:"id"`
	CreatedAt  int64  `json:"created_at"`
	ExpiresAt  int64  `json:"expires_at"`
	LastSeenAt int64  `json:"last_seen_at"`
}

// VerifiedToken is token.verify's answer; Claims is the token's whole payload.
type VerifiedToken struct {
	Issuer         string         `json:"issuer"`
	Sub            string         `json:"sub"`
	Aud            []string       `json:"aud"`
	Exp            int64          `json:"exp"`
	Iat            int64          `json:"iat"`
	Email          *string        `json:"email,omitempty"`
	EmailVerified  *bool          `json:"email_verified,omitempty"`
	IsPrivateEmail *bool          `json:"is_private_email,omitempty"`
	RealUserStatus *int           `json:"real_user_status,omitempty"`
	Claims         map[string]any `json:"claims"`
}

// VerifyOptions are token.verify's optional arguments; empty ones are left out.
type VerifyOptions struct {
	Issuer   string // the configured issuer's name (default: the one whose iss the token carries)
	Audience string // the audience the token must be for
	Nonce    string // the token's nonce must equal it or its SHA-256 in lowercase hex
}

// SessionOptions are session.create's optional arguments. TTL and Idle are sent in whole seconds
// (60 s to 400 days); zero leaves keyholed's default.
type SessionOptions struct {
	Issuer string
	TTL    time.Duration
	Idle   time.Duration
	Data   map[string]any
}

func (o SessionOptions) args() map[string]any {
	a := map[string]any{}
	if o.TTL != 0 {
		a["ttl_s"] = int64(o.TTL / time.Second)
	}
	if o.Idle != 0 {
		a["idle_s"] = int64(o.Idle / time.Second)
	}
	if o.Data != nil {
		a["data"] = o.Data
	}
	return a
}

// UserUpdate is what user.update changes: set Email or Name, or remove them with the Clear flags.
type UserUpdate struct {
	Email      *string
	ClearEmail bool
	Name       *Name
	ClearName  bool
}

// DeleteUserResult is user.delete's answer; AppleRevocation is "done", "pending" or "".
type DeleteUserResult struct {
	Deleted         bool   `json:"deleted"`
	SessionsRevoked int    `json:"sessions_revoked"`
	AppleRevocation string `json:"apple_revocation,omitempty"`
}

// AppleSignIn is apple.sign_in's arguments; IdentityToken is required.
type AppleSignIn struct {
	IdentityToken     string          `json:"identity_token"`
	AuthorizationCode string          `json:"authorization_code,omitempty"`
	ClientID          string          `json:"client_id,omitempty"`
	Nonce             string          `json:"nonce,omitempty"`
	User              *AppleUser      `json:"user,omitempty"`
	Session           *SessionOptions `json:"-"`
}

// AppleUser is what Apple gives web flows on the first sign-in only.
type AppleUser struct {
	Email string `json:"email,omitempty"`
	Name  *Name  `json:"name,omitempty"`
}

// AppleSignInResult is apple.sign_in's answer: Created tells whether the user record is new.
type AppleSignInResult struct {
	Created bool       `json:"created"`
	User    User       `json:"user"`
	Session NewSession `json:"session"`
}

// AppleNotificationResult is apple.notification's answer.
type AppleNotificationResult struct {
	Type      string `json:"type"`
	Sub       string `json:"sub"`
	Applied   bool   `json:"applied"`
	Duplicate bool   `json:"duplicate"`
}

// AppleRefreshCheckResult is apple.refresh_check's answer: Result is "valid", "consent_revoked"
// or "no_token".
type AppleRefreshCheckResult struct {
	Result          string `json:"result"`
	SessionsRevoked int    `json:"sessions_revoked,omitempty"`
}

// AppleTransferImportResult is apple.transfer.import's answer.
type AppleTransferImportResult struct {
	Sub            string  `json:"sub"`
	Email          *string `json:"email,omitempty"`
	IsPrivateEmail *bool   `json:"is_private_email,omitempty"`
	Moved          bool    `json:"moved"`
	SessionsMoved  int     `json:"sessions_moved"`
}

// SnapshotResult is admin.snapshot's answer.
type SnapshotResult struct {
	StartLSN        int64 `json:"start_lsn"`
	Sessions        int64 `json:"sessions"`
	Users           int64 `json:"users"`
	Bytes           int64 `json:"bytes"`
	WALBytesRemoved int64 `json:"wal_bytes_removed"`
	CreatedAt       int64 `json:"created_at"`
	Ms              int64 `json:"ms"`
	LongestPauseUs  int64 `json:"longest_pause_us"`
}

// ReloadResult is admin.reload's answer.
type ReloadResult struct {
	Applied      []string `json:"applied"`
	NeedsRestart []string `json:"needs_restart"`
}

// callInto calls op and decodes its result into out.
func (c *Client) callInto(ctx context.Context, op string, args any, out any) error {
	var into any
	switch out.(type) {
	case *Session, *User: // read as the answer is checked, when the call reads its own answer
		into = out
	}
	raw, decoded, err := c.call(ctx, op, args, into)
	if err != nil || decoded {
		return err
	}
	switch out := out.(type) {
	case *Session: // the call made on every request: read by hand (decode.go)
		err = decodeSession(raw, out)
	case *User:
		err = decodeUser(raw, out)
	default:
		err = json.Unmarshal(raw, out)
	}
	if err != nil {
		return clientError(CodeProtocolError, op+": unexpected result: "+err.Error(), err)
	}
	return nil
}

// callT calls op and returns its result decoded as a T (nil with the error).
func callT[T any](c *Client, ctx context.Context, op string, args any) (*T, error) {
	var r T
	if err := c.callInto(ctx, op, args, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func userArgs(sub, issuer string) map[string]any {
	a := map[string]any{"sub": sub}
	if issuer != "" {
		a["issuer"] = issuer
	}
	return a
}

func optional(name, value string) map[string]any {
	if value == "" {
		return map[string]any{}
	}
	return map[string]any{name: value}
}

// Ping asks keyholed's protocol and version; anyone may.
func (c *Client) Ping(ctx context.Context) (*PingResult, error) {
	return callT[PingResult](c, ctx, "ping", nil)
}

// Stats returns keyholed's counters (admin).
func (c *Client) Stats(ctx context.Context) (map[string]any, error) {
	return c.Call(ctx, "stats", nil)
}

// VerifyToken verifies an identity token (a JWT). A token that does not verify is an *Error with a
// token_* code (IsTokenError) or keys_unavailable.
func (c *Client) VerifyToken(ctx context.Context, token string, opts VerifyOptions) (*VerifiedToken, error) {
	a := map[string]any{"token": token}
	if opts.Issuer != "" {
		a["issuer"] = opts.Issuer
	}
	if opts.Audience != "" {
		a["audience"] = opts.Audience
	}
	if opts.Nonce != "" {
		a["nonce"] = opts.Nonce
	}
	return callT[VerifiedToken](c, ctx, "token.verify", a)
}

// JWKSStatus reports each issuer's key set (issuer "": every issuer).
func (c *Client) JWKSStatus(ctx context.Context, issuer string) (map[string]any, error) {
	return c.Call(ctx, "jwks.status", optional("issuer", issuer))
}

// RefreshJWKS fetches the issuers' key sets now (issuer "": every remote issuer) (admin).
func (c *Client) RefreshJWKS(ctx context.Context, issuer string) (map[string]any, error) {
	return c.Call(ctx, "jwks.refresh", optional("issuer", issuer))
}

// CreateSession creates a session for the user (sub, opts.Issuer). Not safe to repeat: a lost
// connection fails it with connection_lost (outcome unknown).
func (c *Client) CreateSession(ctx context.Context, sub string, opts SessionOptions) (*NewSession, error) {
	a := opts.args()
	a["sub"] = sub
	if opts.Issuer != "" {
		a["issuer"] = opts.Issuer
	}
	return callT[NewSession](c, ctx, "session.create", a)
}

// GetSession returns the live session a token names, with its user; ErrSessionNotFound if none.
func (c *Client) GetSession(ctx context.Context, token string) (*Session, error) {
	return callT[Session](c, ctx, "session.get", oneArg{"session", token})
}

// RevokeSession revokes the session a token names; it reports whether a live one was revoked.
func (c *Client) RevokeSession(ctx context.Context, token string) (bool, error) {
	return c.revoke(ctx, oneArg{"session", token})
}

// RevokeSessionByID revokes a session by its id (from ListSessions).
func (c *Client) RevokeSessionByID(ctx context.Context, id string) (bool, error) {
	return c.revoke(ctx, oneArg{"id", id})
}

func (c *Client) revoke(ctx context.Context, args oneArg) (bool, error) {
	var r struct {
		Revoked *bool `json:"revoked"`
	}
	if err := c.callInto(ctx, "session.revoke", args, &r); err != nil {
		return false, err
	}
	if r.Revoked == nil {
		return false, clientError(CodeProtocolError, "session.revoke: no revoked in the result", nil)
	}
	return *r.Revoked, nil
}

// RevokeAllSessions revokes every session of a user and returns how many were live.
func (c *Client) RevokeAllSessions(ctx context.Context, sub, issuer string) (int, error) {
	var r struct {
		Revoked int `json:"revoked"`
	}
	err := c.callInto(ctx, "session.revoke_all", userArgs(sub, issuer), &r)
	return r.Revoked, err
}

// ListSessions returns a user's live sessions, oldest first.
func (c *Client) ListSessions(ctx context.Context, sub, issuer string) ([]SessionInfo, error) {
	var r struct {
		Sessions []SessionInfo `json:"sessions"`
	}
	if err := c.callInto(ctx, "session.list", userArgs(sub, issuer), &r); err != nil {
		return nil, err
	}
	if r.Sessions == nil {
		r.Sessions = []SessionInfo{}
	}
	return r.Sessions, nil
}

// GetUser returns a user's record; ErrUserNotFound if there is none.
func (c *Client) GetUser(ctx context.Context, sub, issuer string) (*User, error) {
	return callT[User](c, ctx, "user.get", userArgs(sub, issuer))
}

// UpdateUser sets or removes a user's email and name, creating the record when missing (admin).
// It returns the record and whether it was created.
func (c *Client) UpdateUser(ctx context.Context, sub, issuer string, u UserUpdate) (*User, bool, error) {
	a := userArgs(sub, issuer)
	n := len(a)
	switch {
	case u.ClearEmail:
		a["email"] = nil
	case u.Email != nil:
		a["email"] = *u.Email
	}
	switch {
	case u.ClearName:
		a["name"] = nil
	case u.Name != nil:
		a["name"] = u.Name
	}
	if len(a) == n {
		return nil, false, errors.New("keyhole: user.update: nothing to change")
	}
	var r struct {
		User    User `json:"user"`
		Created bool `json:"created"`
	}
	if err := c.callInto(ctx, "user.update", a, &r); err != nil {
		return nil, false, err
	}
	return &r.User, r.Created, nil
}

// DeleteUser deletes a user's record and every session of theirs (admin).
func (c *Client) DeleteUser(ctx context.Context, sub, issuer string) (*DeleteUserResult, error) {
	return callT[DeleteUserResult](c, ctx, "user.delete", userArgs(sub, issuer))
}

// AppleSignIn verifies a Sign in with Apple identity token, exchanges its code when given, creates
// or updates the user and creates a session. Not safe to repeat.
func (c *Client) AppleSignIn(ctx context.Context, req AppleSignIn) (*AppleSignInResult, error) {
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var a map[string]any
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, err
	}
	if req.Session != nil {
		a["session"] = req.Session.args()
	}
	return callT[AppleSignInResult](c, ctx, "apple.sign_in", a)
}

// AppleNotification applies a server-to-server notification (the "payload" JWT Apple POSTs).
func (c *Client) AppleNotification(ctx context.Context, payload string) (*AppleNotificationResult, error) {
	return callT[AppleNotificationResult](c, ctx, "apple.notification", map[string]any{"payload": payload})
}

// AppleRefreshCheck checks a user's stored refresh token at Apple now (admin).
func (c *Client) AppleRefreshCheck(ctx context.Context, sub string) (*AppleRefreshCheckResult, error) {
	return callT[AppleRefreshCheckResult](c, ctx, "apple.refresh_check", map[string]any{"sub": sub})
}

// AppleTransferExport returns the transfer identifier of a user for the receiving team (admin).
// clientID "" lets keyholed pick it.
func (c *Client) AppleTransferExport(ctx context.Context, sub, targetTeamID, clientID string) (string, error) {
	a := map[string]any{"sub": sub, "target_team_id": targetTeamID}
	if clientID != "" {
		a["client_id"] = clientID
	}
	var r struct {
		TransferSub string `json:"transfer_sub"`
	}
	err := c.callInto(ctx, "apple.transfer.export", a, &r)
	return r.TransferSub, err
}

// AppleTransferImport moves a transferred user to their new sub (admin).
func (c *Client) AppleTransferImport(ctx context.Context, transferSub, clientID string) (*AppleTransferImportResult, error) {
	a := map[string]any{"transfer_sub": transferSub}
	if clientID != "" {
		a["client_id"] = clientID
	}
	return callT[AppleTransferImportResult](c, ctx, "apple.transfer.import", a)
}

// ApplePending lists the revocations at Apple still owed for deleted users (admin).
func (c *Client) ApplePending(ctx context.Context) (map[string]any, error) {
	return c.Call(ctx, "apple.pending", nil)
}

// AdminSnapshot writes a snapshot of users and sessions and answers once it is durable (admin).
func (c *Client) AdminSnapshot(ctx context.Context) (*SnapshotResult, error) {
	return callT[SnapshotResult](c, ctx, "admin.snapshot", nil)
}

// AdminReload reads keyholed's configuration again, as SIGHUP does (admin).
func (c *Client) AdminReload(ctx context.Context) (*ReloadResult, error) {
	return callT[ReloadResult](c, ctx, "admin.reload", nil)
}
