package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"sync/atomic"

	keyhole "keyhole/clients/go"
)

// Sign in with Apple on the web (PROTOCOL.md, apple.authorize and apple.callback): GET /auth/apple
// sets the binding cookie keyholed gives and sends the browser to Apple; Apple POSTs its answer to
// /auth/apple/callback (the Services ID's return URL, named in keyholed's [apple] redirect_uris).

// appleCookie holds the binding cookie's name as the last apple.authorize answer gave it ([apple]
// web_cookie), for the callback to read. Until this process has asked once, keyholed's default: a
// callback then that finds no cookie of that name is state_invalid, and the user starts again.
var appleCookie atomic.Value // string

func appleCookieName() string {
	if name, ok := appleCookie.Load().(string); ok {
		return name
	}
	return "__Host-kh_apple"
}

// Bounds on what is sent to keyholed, checked before asking it: a request larger than its frame
// (max_frame_bytes, 65 536 by default) would close the connection every request of this process
// shares. keyholed refuses a return_to over 2048 bytes and a form field over 16 KiB anyway.
const (
	maxReturnTo     = 2048
	maxCallbackBody = 64 << 10 // Apple's POST is a few KiB
	maxCallbackJSON = 60000    // the form as JSON; the cookie and the envelope fit in the rest
	maxAppleCookie  = 256      // keyholed's cookie values are 43 characters
)

// signInPage is GET /signin: the Sign in with Apple button, and the code a failed sign-in came back with.
func signInPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, "<!doctype html><title>Sign in</title>\n")
	if code := r.URL.Query().Get("error"); code != "" {
		fmt.Fprintf(w, "<p>Sign-in failed: <code>%s</code>.</p>\n", html.EscapeString(code))
	}
	fmt.Fprint(w, `<p><a href="/auth/apple">Sign in with Apple</a></p>
<form method="post" action="/signin"><input name="id_token" placeholder="identity token"><button>Sign in with an identity token</button></form>
`)
}

// appleAuthorize is GET /auth/apple[?return_to=PATH]: apple.authorize, its cookie set as given, 302 to
// Apple. A return_to keyholed refuses (off-site, malformed) is 400.
func appleAuthorize(kh *keyhole.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		returnTo := "/"
		if q := r.URL.Query(); q.Has("return_to") {
			returnTo = q.Get("return_to") // as it is: keyholed decides what is on the site
		}
		if len(returnTo) > maxReturnTo {
			http.Error(w, "return_to is not acceptable", http.StatusBadRequest)
			return
		}
		a, err := kh.AppleAuthorize(r.Context(), keyhole.AppleAuthorize{ReturnTo: returnTo})
		if err != nil {
			if errors.Is(err, keyhole.ErrBadRequest) {
				http.Error(w, "return_to is not acceptable", http.StatusBadRequest)
			} else {
				unavailable(w, err)
			}
			return
		}
		appleCookie.Store(a.Cookie.Name)
		w.Header().Add("Set-Cookie", a.Cookie.SetCookie)
		http.Redirect(w, r, a.URL, http.StatusFound)
	}
}

// appleCallback is POST /auth/apple/callback, Apple's form_post: apple.callback with the form and the
// binding cookie; the session cookie as POST /signin sets it, and 303 to the result's return_to. A
// refused sign-in goes back to the sign-in page with its code (?error=state_invalid, ...).
func appleCallback(kh *keyhole.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxCallbackBody)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "the callback's form is malformed", http.StatusBadRequest)
			return
		}
		form := make(map[string]string, len(r.PostForm))
		for name := range r.PostForm {
			form[name] = r.PostForm.Get(name)
		}
		if j, err := json.Marshal(form); err != nil || len(j) > maxCallbackJSON {
			http.Error(w, "the callback's form is too large", http.StatusBadRequest)
			return
		}
		cookie := "" // none: keyholed answers state_invalid, and the state is used up
		if c, err := r.Cookie(appleCookieName()); err == nil && len(c.Value) <= maxAppleCookie {
			cookie = c.Value // a longer one cannot be keyholed's: sent as none
		}
		res, err := kh.AppleCallback(r.Context(), keyhole.AppleCallback{Form: form, Cookie: cookie})
		if err != nil {
			if signInRefused(err) {
				http.Redirect(w, r, "/signin?error="+url.QueryEscape(keyhole.ErrorCode(err)), http.StatusSeeOther)
			} else {
				unavailable(w, err)
			}
			return
		}
		http.SetCookie(w, &http.Cookie{Name: keyhole.DefaultCookieName, Value: res.Session.Token, Path: "/",
			HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
		http.Redirect(w, r, res.ReturnTo, http.StatusSeeOther)
	}
}

// signInRefused tells a sign-in keyholed refused (the user starts again) from keyholed failing to
// answer (unreachable, timeout, overloaded, storage_unavailable, not_configured, ...: 503, as the
// middleware answers).
func signInRefused(err error) bool {
	switch keyhole.ErrorCode(err) {
	case keyhole.CodeStateInvalid, keyhole.CodeAppleAuthorizationRefused, keyhole.CodeBadRequest,
		keyhole.CodeUpstreamRejected:
		return true
	}
	return keyhole.IsTokenError(err)
}
