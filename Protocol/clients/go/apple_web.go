package keyhole

import "context"

// Sign in with Apple on the web (PROTOCOL.md, apple.authorize and apple.callback): the app asks
// AppleAuthorize for Apple's URL and a binding cookie, sets the cookie and redirects the browser;
// Apple POSTs its answer to the redirect URI, and the app hands those form fields and the cookie's
// value to AppleCallback, which signs the user in as AppleSignIn does.

// AppleAuthorize is apple.authorize's arguments, all optional: empty strings (and a nil Scope) are
// left out, so keyholed's default applies.
type AppleAuthorize struct {
	// ClientID is the Services ID to sign in with (default [apple] web_client_id, else the one
	// client id with a redirect URI).
	ClientID string
	// RedirectURI, when given, must be ClientID's [apple] redirect_uris entry, byte for byte.
	RedirectURI string
	// Scope is "name email" (nil: keyholed's default), "name", "email" or "" (neither).
	Scope *string
	// ReturnTo is where the browser goes once signed in: a path on the site ("/" by default) or a
	// URL on an origin of [apple] web_return_origins; anything else is bad_request.
	ReturnTo string
}

func (r AppleAuthorize) args() map[string]any {
	a := map[string]any{}
	if r.ClientID != "" {
		a["client_id"] = r.ClientID
	}
	if r.RedirectURI != "" {
		a["redirect_uri"] = r.RedirectURI
	}
	if r.Scope != nil {
		a["scope"] = *r.Scope
	}
	if r.ReturnTo != "" {
		a["return_to"] = r.ReturnTo
	}
	return a
}

// AppleAuthorizeResult is apple.authorize's answer: send the browser to URL after setting Cookie.
type AppleAuthorizeResult struct {
	URL       string      `json:"url"`
	State     string      `json:"state"`
	ExpiresAt int64       `json:"expires_at"`
	Cookie    AppleCookie `json:"cookie"`
}

// AppleCookie is the cookie that binds an authorization to the browser that started it.
// SetCookie is a Set-Cookie header's value, ready to send (Secure; HttpOnly; SameSite=None:
// Apple's answer is a cross-site POST).
type AppleCookie struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	MaxAge    int64  `json:"max_age"`
	SetCookie string `json:"set_cookie"`
}

// AppleCallback is apple.callback's arguments: Form is Apple's POST to the redirect URI, field by
// field (state, code, id_token, user, or error); Cookie is the value of the cookie AppleAuthorize
// named, as the browser sent it.
type AppleCallback struct {
	Form    map[string]string
	Cookie  string
	Session *SessionOptions // as AppleSignIn's (its Issuer is not sent)
}

// AppleCallbackResult is apple.callback's answer: apple.sign_in's, and where to send the browser.
type AppleCallbackResult struct {
	AppleSignInResult
	ReturnTo string `json:"return_to"`
}

// AppleAuthorize starts Sign in with Apple on the web: the URL at Apple to send the browser to,
// and the binding cookie to set first. Not safe to repeat.
func (c *Client) AppleAuthorize(ctx context.Context, req AppleAuthorize) (*AppleAuthorizeResult, error) {
	return callT[AppleAuthorizeResult](c, ctx, "apple.authorize", req.args())
}

// AppleCallback completes Sign in with Apple on the web with Apple's POSTed form and the binding
// cookie: it verifies them, exchanges the code, creates or updates the user and creates a session.
// A state that is unknown, expired, used or another browser's is ErrStateInvalid (the browser
// starts again); Apple's error instead of a code is ErrAppleAuthorizationRefused. Not safe to repeat.
func (c *Client) AppleCallback(ctx context.Context, req AppleCallback) (*AppleCallbackResult, error) {
	form := make(map[string]any, len(req.Form)) // an object even when empty
	for k, v := range req.Form {
		form[k] = v
	}
	a := map[string]any{"form": form, "cookie": req.Cookie}
	if req.Session != nil {
		a["session"] = req.Session.args()
	}
	return callT[AppleCallbackResult](c, ctx, "apple.callback", a)
}
