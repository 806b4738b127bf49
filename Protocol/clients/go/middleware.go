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
// "Authorization: Bearer kh_..." if present, else from the first session cookie (never from the
// query string), looked up with session.get under the request's context. A credential that is not
// a token's shape ("kh_" and 43 base64url characters) is no session, and keyholed is not asked.
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

// requestToken returns the request's session token, or "" for none: the Bearer credential when it
// starts "kh_", else the first cookie named cookieName. A value that is not a token's shape is no
// token, so keyholed is never asked about it (an attacker's megabyte cookie would otherwise become
// a request keyholed refuses, or one larger than a frame, which closes the shared connection).
func requestToken(r *http.Request, cookieName string) string {
	if auth := r.Header.Get("Authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		if t := strings.TrimSpace(auth[7:]); strings.HasPrefix(t, "kh_") {
			if !IsTokenShape(t) {
				return ""
			}
			return t
		}
	}
	t, _ := SessionCookie(r, cookieName)
	return t
}

// SessionCookie returns the session token in the request's first cookie called name, as Middleware
// reads it, and false when there is no such cookie or its value is not a token's shape (to revoke
// it at sign-out without sending keyholed what is no token).
func SessionCookie(r *http.Request, name string) (string, bool) {
	if v, ok := firstCookie(r.Header["Cookie"], name); ok && IsTokenShape(v) {
		return v, true
	}
	return "", false
}

// TokenLength is the length of a session token: "kh_" and 43 base64url characters (32 bytes).
const TokenLength = 3 + 43

// IsTokenShape reports whether s looks like a session token ("kh_" and 43 base64url characters),
// to check a credential before asking keyholed about it.
func IsTokenShape(s string) bool {
	if len(s) != TokenLength || s[:3] != "kh_" {
		return false
	}
	for i := 3; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// firstCookie finds the first cookie called name in Cookie header lines, in one pass over them.
// Pairs are split at ';' and each at its first '='; a malformed pair beside it (no '=', spaces,
// quotes, non-ASCII) is skipped, never a reason to drop the others. A value in double quotes is
// unquoted. The first pair with the name wins, whatever its value.
func firstCookie(lines []string, name string) (string, bool) {
	for _, line := range lines {
		for len(line) > 0 {
			var pair string
			if i := strings.IndexByte(line, ';'); i >= 0 {
				pair, line = line[:i], line[i+1:]
			} else {
				pair, line = line, ""
			}
			eq := strings.IndexByte(pair, '=')
			if eq < 0 {
				continue
			}
			if strings.TrimSpace(pair[:eq]) != name {
				continue
			}
			v := strings.TrimSpace(pair[eq+1:])
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v, true
		}
	}
	return "", false
}
