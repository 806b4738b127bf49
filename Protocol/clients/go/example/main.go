// Command example is a small web app that signs users in with Keyhole, using net/http only.
//
//	GET  /signin   the sign-in page: a "Sign in with Apple" button (a link to /auth/apple), and the
//	               code of a failed sign-in (?error=state_invalid, ...)
//	POST /signin   form field id_token: token.verify, then session.create; sets the kh_session
//	               cookie and redirects to / (401 for a token that does not verify, or longer
//	               than 16 384 bytes, which keyholed is not asked about)
//	GET  /auth/apple[?return_to=PATH]
//	               apple.authorize: sets its binding cookie, 302 to Apple (400 for a return_to
//	               keyholed refuses, such as one off the site)
//	POST /auth/apple/callback
//	               Apple's form_post (the Services ID's return URL): apple.callback; sets the
//	               kh_session cookie, 303 to its return_to; a refusal is 303 to /signin?error=CODE
//	GET  /         the signed-in user's page (401 when not signed in, 503 when keyholed is unreachable)
//	POST /signout  session.revoke of the cookie's session (only a value of a token's shape is sent),
//	               clears the cookie, redirects to /
//
// It listens on 127.0.0.1:$PORT (0: any free port) and prints "listening <port>"; keyholed's socket
// is $KEYHOLE_SOCKET (else /run/keyhole/keyhole.sock); $KEYHOLE_TIMEOUT_MS sets the calls' deadline
// (default 5000).
package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	keyhole "keyhole/clients/go"
)

func main() {
	var opts []keyhole.Option
	if ms, err := strconv.Atoi(os.Getenv("KEYHOLE_TIMEOUT_MS")); err == nil && ms > 0 {
		opts = append(opts, keyhole.WithTimeout(time.Duration(ms)*time.Millisecond))
	}
	kh, err := keyhole.Dial(context.Background(), "", opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer kh.Close()

	mux := http.NewServeMux()
	auth := keyhole.Middleware(keyhole.MiddlewareOptions{Client: kh, Required: true})
	mux.Handle("/", auth(http.HandlerFunc(home)))
	mux.HandleFunc("/signin", signIn(kh))
	mux.HandleFunc("/signout", signOut(kh))
	mux.HandleFunc("/auth/apple", appleAuthorize(kh))
	mux.HandleFunc("/auth/apple/callback", appleCallback(kh))

	ln, err := net.Listen("tcp", "127.0.0.1:"+envOr("PORT", "0"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening %d\n", ln.Addr().(*net.TCPAddr).Port)
	log.Fatal(http.Serve(ln, mux))
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func home(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	s, _ := keyhole.SessionFromContext(r.Context())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, `<!doctype html><title>Keyhole example</title>
<p>Signed in as <b>%s</b> (issuer %s).</p>
<form method="post" action="/signout"><button>Sign out</button></form>
`, html.EscapeString(s.Sub), html.EscapeString(s.Issuer))
}

func signIn(kh *keyhole.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			signInPage(w, r)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "GET or POST only", http.StatusMethodNotAllowed)
			return
		}
		idToken := r.PostFormValue("id_token")
		if idToken == "" {
			http.Error(w, "id_token is required", http.StatusBadRequest)
			return
		}
		if len(idToken) > maxIDToken {
			// keyholed would refuse it anyway; a large one would not even fit in its frame, and that
			// closes the connection every request of this process shares.
			http.Error(w, "the identity token does not verify", http.StatusUnauthorized)
			return
		}
		v, err := kh.VerifyToken(r.Context(), idToken, keyhole.VerifyOptions{})
		if err != nil {
			// bad_request: keyholed refused the token as an argument; the user's token, not keyholed's
			// health, is at fault.
			if keyhole.IsTokenError(err) || errors.Is(err, keyhole.ErrBadRequest) {
				http.Error(w, "the identity token does not verify", http.StatusUnauthorized)
			} else {
				unavailable(w, err)
			}
			return
		}
		s, err := kh.CreateSession(r.Context(), v.Sub, keyhole.SessionOptions{Issuer: v.Issuer})
		if err != nil {
			unavailable(w, err)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: keyhole.DefaultCookieName, Value: s.Token, Path: "/",
			HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
		http.Redirect(w, r, "/", http.StatusSeeOther)
	}
}

func signOut(kh *keyhole.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		// Only a token of the right shape is revoked: anything else is no session, and is not sent.
		if token, ok := keyhole.SessionCookie(r, keyhole.DefaultCookieName); ok {
			if _, err := kh.RevokeSession(r.Context(), token); err != nil && !errors.Is(err, keyhole.ErrBadRequest) {
				unavailable(w, err) // the session may still be live: keep the cookie, let the user retry
				return
			}
		}
		http.SetCookie(w, &http.Cookie{Name: keyhole.DefaultCookieName, Value: "", Path: "/", MaxAge: -1,
			HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
		http.Redirect(w, r, "/", http.StatusSeeOther)
	}
}

// maxIDToken is token.verify's limit on a token (PROTOCOL.md section 7: at most 16 KiB).
const maxIDToken = 16384

func unavailable(w http.ResponseWriter, err error) {
	log.Printf("keyhole: %v", err) // codes and messages only: never a token
	http.Error(w, "sign-in is unavailable, try again shortly", http.StatusServiceUnavailable)
}
