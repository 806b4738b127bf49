"""A small WSGI site that signs users in with keyholed (standard library only: wsgiref).

    KEYHOLE_SOCKET=/run/keyhole/keyhole.sock PORT=8000 python3 Protocol/clients/python/example/app.py

- POST /signin with form field id_token: token.verify, then session.create for the token's issuer
  and sub; the session token goes into an HttpOnly, Secure, SameSite=Lax cookie; 303 to /.
- GET /: a page for signed-in users only (401 otherwise, 503 when keyholed cannot say).
- POST /signout: session.revoke, the cookie cleared, 303 to /.

Prints "listening <port>" once it accepts connections (PORT=0 picks a free port).
"""

import html
import os
import sys
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import keyhole  # noqa: E402
from keyhole_middleware import DEFAULT_COOKIE, KeyholeWSGI, session_token  # noqa: E402

MAX_FORM = 64 * 1024
MAX_ID_TOKEN = 16 * 1024  # keyholed refuses longer tokens anyway (token_malformed): not worth asking
client = keyhole.Client()


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
