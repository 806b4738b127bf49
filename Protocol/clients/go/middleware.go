package keyhole

import (
	"context"
	"errors"
	"net/http"
	"strings"
)

// DefaultCookieName is the session cookie the middleware reads when MiddlewareOptions leaves it empty.
const DefaultCookieName = "kh_session"

// MiddlewareOptions configure Middleware.
type MiddlewareOptions struct {
	// Client asks keyholed; nil: a client for Socket (empty: $KEYHOLE_SOCKET, else DefaultSocket).
	Client *Client
	Socket string
	// CookieName is the session cookie (default "kh_session").
	CookieName string
	// Required answers 401 (WWW-Authenticate: Bearer realm="keyhole") to a request without a live
	// session instead of passing it on anonymous.
	Required bool
}

type contextKey int

const (
	sessionKey contextKey = iota
	tokenKey
)

// Middleware returns net/http middleware that finds the request's session: the token from
// "Authorization: Bearer kh_..." if present, else from the session cookie (never from the query
// string), looked up with session.get under the request's context.
//
//   - a live session: the handler runs with it in the request's context (SessionFromContext);
//   - no credential, or session_not_found: anonymous (401 when Required);
//   - any other failure (keyholed unreachable, timeout, overloaded, storage_unavailable,
//     permission_denied, ...): 503, fail closed; the handler does not run.
func Middleware(opts MiddlewareOptions) func(http.Handler) http.Handler {
	client := opts.Client
	if client == nil {
		client, _ = Dial(context.Background(), opts.Socket) // lazy: fails only with a done context
	}
	cookie := opts.CookieName
	if cookie == "" {
		cookie = DefaultCookieName
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token := requestToken(r, cookie)
			if token != "" {
				s, err := client.GetSession(r.Context(), token)
				switch {
				case err == nil:
					ctx := context.WithValue(r.Context(), sessionKey, s)
					ctx = context.WithValue(ctx, tokenKey, token)
					next.ServeHTTP(w, r.WithContext(ctx))
					return
				case !errors.Is(err, ErrSessionNotFound):
					w.Header().Set("Retry-After", "1")
					http.Error(w, "authentication is unavailable", http.StatusServiceUnavailable)
					return
				}
			}
			if opts.Required {
				Unauthorized(w)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// RequireSession wraps a handler that needs a session (behind Middleware without Required):
// anonymous requests get 401.
func RequireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := SessionFromContext(r.Context()); !ok {
			Unauthorized(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Unauthorized answers 401 with WWW-Authenticate: Bearer realm="keyhole".
func Unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="keyhole"`)
	http.Error(w, "sign in required", http.StatusUnauthorized)
}

// SessionFromContext returns the session Middleware found for the request (the whole session.get
// result; its User is nil when the user has no record), and whether there is one.
func SessionFromContext(ctx context.Context) (*Session, bool) {
	s, ok := ctx.Value(sessionKey).(*Session)
	return s, ok && s != nil
}

// UserFromContext returns the signed-in session's user record, or nil (anonymous, or no record).
func UserFromContext(ctx context.Context) *User {
	if s, ok := SessionFromContext(ctx); ok {
		return s.User
	}
	return nil
}

// TokenFromContext returns the session token Middleware found live (to revoke it at sign-out).
func TokenFromContext(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(tokenKey).(string)
	return t, ok
}

func requestToken(r *http.Request, cookieName string) string {
	if auth := r.Header.Get("Authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		if t := strings.TrimSpace(auth[7:]); strings.HasPrefix(t, "kh_") {
			return t
		}
	}
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		return c.Value
	}
	return ""
}
