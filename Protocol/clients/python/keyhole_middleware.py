"""WSGI and ASGI middleware for keyholed sessions (Django, Flask, FastAPI, Starlette...).

Standard library only, beside keyhole.py. Each request's session token comes from
`Authorization: Bearer kh_...` when the request has one, else from the session cookie (`kh_session`
unless told otherwise); never from the query string. The middleware asks keyholed (session.get) and
hands the session and its user to the application:

- WSGI: environ["keyhole.session"] and environ["keyhole.user"];
- ASGI: scope["keyhole.session"] and scope["keyhole.user"] (Starlette and FastAPI: request.scope).

Both are None for an anonymous request (no credential, a value that is not a token's shape, or
keyholed does not know the session). With
required=True an anonymous request is answered 401 (`WWW-Authenticate: Bearer realm="keyhole"`) and
never reaches the application. Any other failure (keyholed unreachable or past the deadline, storage
unavailable, overloaded, permission denied...) is answered 503: fail closed, never signed in.

    from keyhole_middleware import KeyholeWSGI
    app.wsgi_app = KeyholeWSGI(app.wsgi_app, required=False)        # Flask
    application = KeyholeWSGI(get_wsgi_application())               # Django (wsgi.py)

    from keyhole_middleware import KeyholeASGI
    app.add_middleware(KeyholeASGI)                                  # FastAPI / Starlette
"""

import asyncio
import re

import keyhole

__all__ = ["KeyholeWSGI", "KeyholeASGI", "session_token", "DEFAULT_COOKIE"]

DEFAULT_COOKIE = "kh_session"
_TOKEN = re.compile(r"kh_[A-Za-z0-9_-]{43}")
_UNAUTHORIZED = (b"401 Unauthorized", b"session required\n")
_UNAVAILABLE = (b"503 Service Unavailable", b"authentication is unavailable\n")


def session_token(authorization, cookie_header, cookie_name=DEFAULT_COOKIE):
    """The session token a request carries, or None.

    A Bearer credential starting kh_ wins; else the first cookie named cookie_name. Either must have
    a token's shape (kh_ and 43 base64url characters), or the request has no session: a junk or
    oversized value never reaches keyholed. The cookie header is read in one pass, by hand: other
    cookies, however malformed, do not hide this one (http.cookies gives up on the whole header).
    """
    if authorization:
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and value.startswith("kh_"):
            return value if _TOKEN.fullmatch(value) else None
    if cookie_header:
        for pair in cookie_header.split(";"):
            name, eq, value = pair.partition("=")
            if eq and name.strip() == cookie_name:
                value = value.strip()
                if len(value) >= 2 and value[0] == value[-1] == '"':
                    value = value[1:-1]
                return value if _TOKEN.fullmatch(value) else None
    return None


def _lookup(client, token):
    """(session, user) for a token; (None, None) when anonymous. Raises KeyholeError otherwise."""
    if token is None:
        return None, None
    try:
        session = client.get_session(token)
    except keyhole.KeyholeError as e:
        if e.code == "session_not_found":
            return None, None
        raise
    return session, session.get("user")


class _Options:
    def __init__(self, client, socket, cookie_name, required):
        self.client = client or keyhole.Client(socket)
        self.cookie_name = cookie_name
        self.required = required


class KeyholeWSGI:
    """WSGI middleware. client: a keyhole.Client to share (else one for `socket`, default
    $KEYHOLE_SOCKET); cookie_name; required: answer 401 when there is no live session."""

    def __init__(self, app, client=None, socket=None, cookie_name=DEFAULT_COOKIE, required=False):
        self.app = app
        self.options = _Options(client, socket, cookie_name, required)

    def __call__(self, environ, start_response):
        token = session_token(environ.get("HTTP_AUTHORIZATION"), environ.get("HTTP_COOKIE"),
                              self.options.cookie_name)
        try:
            session, user = _lookup(self.options.client, token)
        except Exception:  # noqa: BLE001 - whatever failed, nobody is signed in: fail closed
            return _wsgi_answer(start_response, _UNAVAILABLE)
        if session is None and self.options.required:
            return _wsgi_answer(start_response, _UNAUTHORIZED)
        environ["keyhole.session"], environ["keyhole.user"] = session, user
        return self.app(environ, start_response)


def _wsgi_answer(start_response, answer):
    status, body = answer
    headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
               ("Cache-Control", "no-store")]
    if status.startswith(b"401"):
        headers.append(("WWW-Authenticate", 'Bearer realm="keyhole"'))
    start_response(status.decode(), headers)
    return [body]


class KeyholeASGI:
    """ASGI middleware (HTTP and WebSocket scopes; others pass through). The blocking client runs
    in a worker thread, so the event loop is never held. Options as KeyholeWSGI's."""

    def __init__(self, app, client=None, socket=None, cookie_name=DEFAULT_COOKIE, required=False):
        self.app = app
        self.options = _Options(client, socket, cookie_name, required)

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {}
        for name, value in scope.get("headers", []):
            name = name.decode("latin-1").lower()
            if name in ("authorization", "cookie"):
                value = value.decode("latin-1")
                headers[name] = headers[name] + "; " + value if name == "cookie" and name in headers else value
        token = session_token(headers.get("authorization"), headers.get("cookie"), self.options.cookie_name)
        try:
            session, user = await asyncio.get_running_loop().run_in_executor(
                None, _lookup, self.options.client, token)
        except Exception:  # noqa: BLE001 - whatever failed, nobody is signed in: fail closed
            return await _asgi_answer(scope, send, _UNAVAILABLE)
        if session is None and self.options.required:
            return await _asgi_answer(scope, send, _UNAUTHORIZED)
        scope = dict(scope)
        scope["keyhole.session"], scope["keyhole.user"] = session, user
        return await self.app(scope, receive, send)


async def _asgi_answer(scope, send, answer):
    status, body = answer
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008 if status.startswith(b"401") else 1013})
        return
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
               (b"cache-control", b"no-store")]
    if status.startswith(b"401"):
        headers.append((b"www-authenticate", b'Bearer realm="keyhole"'))
    await send({"type": "http.response.start", "status": int(status[:3]), "headers": headers})
    await send({"type": "http.response.body", "body": body})
