"""A small WSGI site that signs users in with keyholed (standard library only: wsgiref).

    KEYHOLE_SOCKET=/run/keyhole/keyhole.sock PORT=8000 python3 Protocol/clients/python/example/app.py

- POST /signin with form field id_token: token.verify, then session.create for the token's issuer
  and sub; the session token goes into an HttpOnly, Secure, SameSite=Lax cookie; 303 to /.
- GET /: a page for signed-in users only (401 otherwise, 503 when keyholed cannot say).
- POST /signout: session.revoke, the cookie cleared, 303 to /.
- GET /signin: the sign-in page, with a "Sign in with Apple" button (a link to /auth/apple) and the
  ?error=<code> a refused sign-in came back with.
- GET /auth/apple[?return_to=/path]: apple.authorize; the binding cookie it gives is set, 302 to Apple.
- POST /auth/apple/callback (the return URL registered for the Services ID, in keyholed's
  [apple] redirect_uris): apple.callback with Apple's form and the binding cookie, the session cookie
  as /signin sets it, 303 to the return_to; a refusal is 303 to /signin?error=<code>.

Prints "listening <port>" once it accepts connections (PORT=0 picks a free port).
"""

import html
import os
import sys
from urllib.parse import parse_qs, urlencode
from wsgiref.simple_server import WSGIRequestHandler, make_server

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import keyhole  # noqa: E402
from keyhole_middleware import DEFAULT_COOKIE, KeyholeWSGI, session_token  # noqa: E402

MAX_FORM = 64 * 1024
MAX_ID_TOKEN = 16 * 1024  # keyholed refuses longer tokens anyway (token_malformed): not worth asking
client = keyhole.Client()
# The binding cookie's name, from the last apple.authorize answer (keyholed's [apple] web_cookie). An app
# restarted between a visitor's authorize and callback looks for the default name: with another name
# configured, that callback is state_invalid, and the visitor clicks again.
apple_cookie_name = "__Host-kh_apple"


def respond(start_response, status, body=b"", headers=()):
    start_response(status, [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store"), *headers])
    return [body]


def read_form(environ):
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if not 0 < length <= MAX_FORM:
        return {}
    return {k: v[0] for k, v in parse_qs(environ["wsgi.input"].read(length).decode("utf-8", "replace")).items()}


def cookie(value, max_age=None):
    attributes = f"{DEFAULT_COOKIE}={value}; HttpOnly; Secure; SameSite=Lax; Path=/"
    return ("Set-Cookie", attributes + (f"; Max-Age={max_age}" if max_age is not None else ""))


def request_cookie(environ, name):
    """The first cookie named name, "" when the browser sent none (one pass, by hand, as
    keyhole_middleware.session_token reads the session cookie)."""
    for pair in environ.get("HTTP_COOKIE", "").split(";"):
        key, eq, value = pair.partition("=")
        if eq and key.strip() == name:
            value = value.strip()
            return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    return ""


def signin_page(environ, start_response):
    """GET /signin. The error is a Keyhole error code, but shown escaped all the same: it comes from the URL."""
    error = parse_qs(environ.get("QUERY_STRING", "")).get("error", [""])[0]
    notice = f'<p role="alert">Sign-in refused: {html.escape(error)}.</p>\n' if error else ""
    body = (f"<!doctype html>\n<title>Sign in</title>\n{notice}"
            '<p><a class="apple" href="/auth/apple">Sign in with Apple</a></p>\n')
    return respond(start_response, "200 OK", body.encode())


def apple_authorize(environ, start_response):
    """GET /auth/apple: keyholed checks return_to (a path on this site), so it goes as it came."""
    global apple_cookie_name
    return_to = parse_qs(environ.get("QUERY_STRING", "")).get("return_to", ["/"])[0]
    try:
        started = client.apple_authorize(return_to=return_to)
    except keyhole.KeyholeConnectionError:
        return respond(start_response, "503 Service Unavailable", b"<p>Try again later.</p>\n")
    except keyhole.KeyholeError as e:
        if e.code == "bad_request":
            return respond(start_response, "400 Bad Request", b"<p>That return address is not on this site.</p>\n")
        return respond(start_response, "503 Service Unavailable", b"<p>Try again later.</p>\n")
    apple_cookie_name = started["cookie"]["name"]
    return respond(start_response, "302 Found",
                   headers=[("Location", started["url"]), ("Set-Cookie", started["cookie"]["set_cookie"])])


def apple_callback(environ, start_response):
    """POST /auth/apple/callback: Apple's form_post, with the binding cookie (SameSite=None, so a
    cross-site POST carries it)."""
    try:
        done = client.apple_callback(read_form(environ), request_cookie(environ, apple_cookie_name))
    except keyhole.KeyholeConnectionError:
        return respond(start_response, "503 Service Unavailable", b"<p>Try again later.</p>\n")
    except keyhole.KeyholeError as e:
        location = "/signin?" + urlencode({"error": e.code})
        return respond(start_response, "303 See Other", headers=[("Location", location)])
    return respond(start_response, "303 See Other",
                   headers=[("Location", done["return_to"]), cookie(done["session"]["session"])])


def page(environ, start_response):
    """GET /: behind the middleware with required=True, so only signed-in users get here."""
    session = environ["keyhole.session"]
    body = f"<p>Signed in as {html.escape(session['sub'])} ({html.escape(session['issuer'])}).</p>\n"
    return respond(start_response, "200 OK", body.encode())


def app(environ, start_response):
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "/")
    if path == "/signin" and method == "POST":
        id_token = read_form(environ).get("id_token", "")
        if not id_token or len(id_token) > MAX_ID_TOKEN:
            return respond(start_response, "401 Unauthorized", b"<p>That sign-in did not verify.</p>\n")
        try:
            verified = client.verify_token(id_token)
            created = client.create_session(verified["sub"], issuer=verified["issuer"])
        except keyhole.KeyholeConnectionError:
            return respond(start_response, "503 Service Unavailable", b"<p>Try again later.</p>\n")
        except keyhole.KeyholeError as e:
            if e.code.startswith("token_") or e.code == "bad_request":
                return respond(start_response, "401 Unauthorized", b"<p>That sign-in did not verify.</p>\n")
            return respond(start_response, "503 Service Unavailable", b"<p>Try again later.</p>\n")
        return respond(start_response, "303 See Other", headers=[("Location", "/"), cookie(created["session"])])
    if path == "/signin" and method in ("GET", "HEAD"):
        return signin_page(environ, start_response)
    if path == "/auth/apple" and method == "GET":  # not HEAD: each answer is a new pending authorization
        return apple_authorize(environ, start_response)
    if path == "/auth/apple/callback" and method == "POST":
        return apple_callback(environ, start_response)
    if path == "/signout" and method == "POST":
        token = session_token(environ.get("HTTP_AUTHORIZATION"), environ.get("HTTP_COOKIE"))
        if token:
            try:
                client.revoke_session(session=token)
            except keyhole.KeyholeError:
                return respond(start_response, "503 Service Unavailable", b"<p>Try again later.</p>\n")
        return respond(start_response, "303 See Other", headers=[("Location", "/"), cookie("", max_age=0)])
    return respond(start_response, "404 Not Found", b"<p>Not found.</p>\n")


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):  # the access log would print request lines to stderr
        pass


def site(signed_in_page, rest):
    """Routes GET / to the page that needs a session, everything else to the rest."""
    def route(environ, start_response):
        if environ.get("PATH_INFO", "/") == "/" and environ["REQUEST_METHOD"] in ("GET", "HEAD"):
            return signed_in_page(environ, start_response)
        return rest(environ, start_response)
    return route


def main():
    application = site(KeyholeWSGI(page, client=client, required=True), app)
    server = make_server("127.0.0.1", int(os.environ.get("PORT", "8000")), application,
                         handler_class=QuietHandler)
    print(f"listening {server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        client.close()


if __name__ == "__main__":
    main()
