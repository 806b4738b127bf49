"""The WSGI and ASGI middleware and the example site, against a real keyholed (the harness's).

    python3 -m unittest discover -s Protocol/clients/python -p 'test_middleware.py' -v
"""

import asyncio
import http.client
import os
import subprocess
import sys
import tempfile
import unittest
from urllib.parse import parse_qs, urlencode, urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import keyhole  # noqa: E402
from keyhole_middleware import KeyholeASGI, KeyholeWSGI, session_token  # noqa: E402
from test_conformance import Harness, ScriptedServer  # noqa: E402


def wsgi_app(environ, start_response):
    """Answers 200 with who the middleware says is signed in."""
    session = environ["keyhole.session"]
    user = environ["keyhole.user"]
    body = ("anonymous" if session is None else f"{session['sub']} user={user is not None}").encode()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [body]


def call_wsgi(app, headers):
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/"}
    environ.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()})
    answer = {}

    def start_response(status, response_headers):
        answer["status"] = int(status[:3])
        answer["headers"] = {k.lower(): v for k, v in response_headers}
    answer["body"] = b"".join(app(environ, start_response)).decode()
    return answer


async def asgi_app(scope, receive, send):
    session = scope["keyhole.session"]
    body = ("anonymous" if session is None else session["sub"]).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def call_asgi(app, headers):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)
    scope = {"type": "http", "method": "GET", "path": "/",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return {"status": start["status"], "headers": {k.decode(): v.decode() for k, v in start["headers"]},
            "body": b"".join(m.get("body", b"") for m in sent[1:]).decode()}


A = "kh_" + "A" * 43
B = "kh_" + "b-_9" * 10 + "xyz"


class TokenTests(unittest.TestCase):
    def test_bearer_then_cookie_never_query(self):
        self.assertEqual(session_token(f"Bearer {A}", f"kh_session={B}"), A)
        self.assertEqual(session_token("Basic dXNlcjpwYXNz", f"kh_session={B}"), B)
        self.assertEqual(session_token(None, f"other=1; kh_session={B}"), B)
        self.assertEqual(session_token(None, f'kh_session="{B}"'), B)
        self.assertEqual(session_token(None, f"mine={A}", cookie_name="mine"), A)
        self.assertIsNone(session_token(None, None))
        self.assertEqual(session_token("Bearer not-a-keyhole-token", f"kh_session={B}"), B)

    def test_only_a_token_shape_is_a_session(self):
        for junk in ("kh_short", "kh_" + "A" * 44, "kh_" + "A" * 42 + "=", "kh_" + '"' * 33000,
                     "kh_" + "A" * 1022, "kh_" + "A" * 70000, "kh_" + "A" * 42 + "é"):
            self.assertIsNone(session_token(f"Bearer {junk}", None), junk[:20])
            self.assertIsNone(session_token(None, f"kh_session={junk}"), junk[:20])

    def test_first_cookie_wins_and_malformed_neighbours_do_not_hide_it(self):
        self.assertEqual(session_token(None, f"kh_session={A}; kh_session={B}"), A)
        for neighbour in ("a=b c", "a=é", 'a={"j":1}', "novalue", "=", ";;", 'x="unterminated'):
            self.assertEqual(session_token(None, f"{neighbour}; kh_session={A}"), A, neighbour)
            self.assertEqual(session_token(None, f"kh_session={A}; {neighbour}"), A, neighbour)

    def test_cookie_parsing_is_linear(self):
        # http.cookies unquotes backslashes in quadratic time (CVE-2024-7592): 40 KB took seconds.
        header = 'a="' + "\\" * 20000 + '"; kh_session=' + A
        self.assertEqual(session_token(None, header), A)


class MiddlewareTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.harness = Harness()
        cls.client = keyhole.Client(cls.harness.info["socket"])
        cls.session = cls.client.create_session("middleware-user")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.harness.stop()

    def check(self, call, make):
        token = self.session["session"]
        for required in (False, True):
            app = make(required)
            by_cookie = call(app, {"Cookie": f"theme=dark; kh_session={token}"})
            self.assertEqual(by_cookie["status"], 200)
            self.assertTrue(by_cookie["body"].startswith("middleware-user"), by_cookie)
            by_bearer = call(app, {"Authorization": f"Bearer {token}"})
            self.assertEqual((by_bearer["status"], by_bearer["body"][:15]), (200, "middleware-user"))
            for headers in ({}, {"Cookie": "kh_session=kh_" + "A" * 43}, {"Cookie": "kh_session=junk"}):
                anonymous = call(app, headers)
                if required:
                    self.assertEqual(anonymous["status"], 401, headers)
                    self.assertEqual(anonymous["headers"]["www-authenticate"], 'Bearer realm="keyhole"')
                else:
                    self.assertEqual((anonymous["status"], anonymous["body"]), (200, "anonymous"), headers)

    def test_wsgi(self):
        self.check(call_wsgi, lambda required: KeyholeWSGI(wsgi_app, client=self.client, required=required))

    def test_asgi(self):
        self.check(call_asgi, lambda required: KeyholeASGI(asgi_app, client=self.client, required=required))

    def session_gets(self):
        return self.client.stats()["requests"].get("session.get", 0)

    def test_junk_credentials_never_reach_keyholed(self):
        before = self.session_gets()
        for junk in ("kh_" + "A" * 70000, "kh_" + "A" * 1022, "kh_short"):
            for call, app in ((call_wsgi, KeyholeWSGI(wsgi_app, client=self.client)),
                              (call_asgi, KeyholeASGI(asgi_app, client=self.client))):
                self.assertEqual(call(app, {"Cookie": f"kh_session={junk}"})["body"], "anonymous")
                self.assertEqual(call(app, {"Authorization": f"Bearer {junk}"})["body"], "anonymous")
            required = KeyholeWSGI(wsgi_app, client=self.client, required=True)
            self.assertEqual(call_wsgi(required, {"Cookie": f"kh_session={junk}"})["status"], 401)
        self.assertEqual(self.session_gets(), before)

    def test_keyholed_errors_are_503(self):
        """storage_unavailable and a code from a newer keyholed (internal), from the scripted server."""
        for scenario in ("known-error-code", "unknown-error-code"):
            with ScriptedServer(scenario) as server:
                scripted = keyhole.Client(server.path, timeout=2)
                answer = call_wsgi(KeyholeWSGI(wsgi_app, client=scripted), {"Cookie": f"kh_session={A}"})
                scripted.close()
                self.assertEqual(answer["status"], 503, scenario)

    def test_unreachable_keyholed_is_503_never_signed_in(self):
        missing = keyhole.Client(os.path.join(tempfile.gettempdir(), "kh-nobody-listens.sock"), timeout=0.2)
        self.addCleanup(missing.close)
        headers = {"Cookie": f"kh_session={self.session['session']}"}
        for call, app in ((call_wsgi, KeyholeWSGI(wsgi_app, client=missing)),
                          (call_asgi, KeyholeASGI(asgi_app, client=missing))):
            answer = call(app, headers)
            self.assertEqual(answer["status"], 503)
            self.assertNotIn("middleware-user", answer["body"])


APPLE_CALLBACK = "https://example.com/auth/apple/callback"


class ExampleAppTests(unittest.TestCase):
    """example/app.py as a child process, driven over real HTTP, against keyholed with the harness's
    Apple audience made a web client whose return URL is the example's callback."""

    @classmethod
    def setUpClass(cls):
        # The redirect URI is keyed by the harness's audience, which only its ready line names.
        plain = Harness()
        audience = plain.info["audience"]
        plain.stop()
        cls.config = f'[apple]\nredirect_uris = {{ "{audience}" = "{APPLE_CALLBACK}" }}\n'

    def setUp(self):
        self.harness = Harness(self.config)
        self.addCleanup(self.harness.stop)

    def start_app(self, socket_path):
        app = subprocess.Popen([sys.executable, os.path.join(HERE, "example", "app.py")],
                               env=dict(os.environ, PORT="0", KEYHOLE_SOCKET=socket_path),
                               stdout=subprocess.PIPE, text=True)
        self.addCleanup(app.wait)
        self.addCleanup(app.terminate)
        self.addCleanup(app.stdout.close)
        line = app.stdout.readline().split()
        self.assertEqual(line[:1], ["listening"])
        return int(line[1])

    def send(self, port, method, path, body=None, cookie=None):
        """(status, the response's headers, body)."""
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if body is not None else {}
        if cookie:
            headers["Cookie"] = cookie
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        answer = (response.status, response.msg, response.read().decode())
        conn.close()
        return answer

    def request(self, port, method, path, body=None, cookie=None):
        status, headers, body = self.send(port, method, path, body, cookie)
        return status, headers["Set-Cookie"], body

    def authorize(self, port):
        """GET /auth/apple: (Apple's URL, the state in it, the binding cookie as name=value)."""
        status, headers, _ = self.send(port, "GET", "/auth/apple")
        self.assertEqual(status, 302)
        self.assertEqual(len(headers.get_all("Set-Cookie")), 1)
        state = parse_qs(urlsplit(headers["Location"]).query)["state"][0]
        return headers["Location"], state, headers["Set-Cookie"].split(";")[0]

    def test_sign_in_page_sign_out(self):
        port = self.start_app(self.harness.info["socket"])
        status, set_cookie, _ = self.request(port, "POST", "/signin", urlencode({"id_token": self.harness.info["token"]}))
        self.assertEqual(status, 303)
        for attribute in ("HttpOnly", "Secure", "SameSite=Lax", "Path=/"):
            self.assertIn(attribute, set_cookie)
        cookie = set_cookie.split(";")[0]
        self.assertTrue(cookie.startswith("kh_session=kh_"))
        status, _, page = self.request(port, "GET", "/", cookie=cookie)
        self.assertEqual(status, 200)
        self.assertIn(self.harness.info["sub"], page)
        self.assertEqual(self.request(port, "GET", "/")[0], 401)
        status, cleared, _ = self.request(port, "POST", "/signout", b"", cookie=cookie)
        self.assertEqual(status, 303)
        self.assertIn("Max-Age=0", cleared)
        self.assertEqual(self.request(port, "GET", "/", cookie=cookie)[0], 401)
        forged = self.harness.info["token"][:-8] + "AAAAAAAA"
        status, set_cookie, _ = self.request(port, "POST", "/signin", urlencode({"id_token": forged}))
        self.assertEqual((status, set_cookie), (401, None))

    def test_unreachable_keyholed_is_503(self):
        port = self.start_app(os.path.join(self.harness.info["dir"], "nobody.sock"))
        self.assertEqual(self.request(port, "GET", "/", cookie="kh_session=kh_" + "A" * 43)[0], 503)
        self.assertEqual(self.request(port, "GET", "/auth/apple")[:2], (503, None))
        form = urlencode({"state": "s" * 43, "error": "user_cancelled_authorize"})
        self.assertEqual(self.request(port, "POST", "/auth/apple/callback", form,
                                      cookie="__Host-kh_apple=" + "c" * 43)[:2], (503, None))

    def test_sign_in_page_has_the_apple_button(self):
        port = self.start_app(self.harness.info["socket"])
        status, _, page = self.request(port, "GET", "/signin")
        self.assertEqual(status, 200)
        self.assertIn('<a class="apple" href="/auth/apple">Sign in with Apple</a>', page)
        self.assertNotIn("refused", page)
        # The error shown is the query's, escaped.
        status, _, page = self.request(port, "GET", "/signin?" + urlencode({"error": "<b>x</b>"}))
        self.assertEqual(status, 200)
        self.assertIn("&lt;b&gt;x&lt;/b&gt;", page)
        self.assertNotIn("<b>", page)

    def test_apple_authorize_sets_the_binding_cookie_and_redirects_to_apple(self):
        port = self.start_app(self.harness.info["socket"])
        url, state, binding = self.authorize(port)
        self.assertTrue(url.startswith("http://127.0.0.1:9/auth/authorize?"), url)
        self.assertIn("redirect_uri=https%3A%2F%2Fexample.com%2Fauth%2Fapple%2Fcallback", url)
        self.assertIn(f"state={state}", url)
        self.assertTrue(binding.startswith("__Host-kh_apple="), binding)
        _, headers, body = self.send(port, "GET", "/auth/apple?" + urlencode({"return_to": "/account?tab=1"}))
        set_cookie = headers["Set-Cookie"]
        attributes = [a.strip() for a in set_cookie.split(";")[1:]]
        for attribute in ("Max-Age=600", "Path=/", "Secure", "HttpOnly", "SameSite=None"):
            self.assertIn(attribute, attributes)
        self.assertNotIn(set_cookie.split(";")[0].partition("=")[2], body)
        # keyholed refuses an off-site return_to; the app answers 400 and sets no cookie.
        for off_site in ("//evil.example", "https://evil.example/"):
            status, set_cookie, _ = self.request(port, "GET", "/auth/apple?" + urlencode({"return_to": off_site}))
            self.assertEqual((status, set_cookie), (400, None), off_site)

    def callback(self, port, form, cookie):
        """POST /auth/apple/callback, which must refuse: (the error code it redirected with, the page
        that shows it). No session cookie, nothing secret in the answer or the page."""
        status, headers, body = self.send(port, "POST", "/auth/apple/callback", urlencode(form), cookie=cookie)
        self.assertEqual(status, 303)
        self.assertIsNone(headers["Set-Cookie"])
        location = headers["Location"]
        self.assertEqual(urlsplit(location).path, "/signin")
        code = parse_qs(urlsplit(location).query)["error"][0]
        status, _, page = self.request(port, "GET", location)
        self.assertEqual(status, 200)
        self.assertIn(f"Sign-in refused: {code}.", page)
        secrets = [form["state"]] + [pair.partition("=")[2] for pair in cookie.split("; ")]
        for secret in (s for s in secrets if len(s) >= 20):  # the state, the binding cookie
            for text in (location, body, page):
                self.assertNotIn(secret, text)
        return code

    def test_apple_callback_cancelled_at_apple(self):
        port = self.start_app(self.harness.info["socket"])
        _, state, binding = self.authorize(port)
        code = self.callback(port, {"state": state, "error": "user_cancelled_authorize"},
                             f"theme=dark; {binding}; other=1")
        self.assertEqual(code, "apple_authorization_refused")

    def test_apple_callback_with_another_browsers_cookie(self):
        port = self.start_app(self.harness.info["socket"])
        _, state, binding = self.authorize(port)
        wrong = binding[:-4] + ("AAAA" if not binding.endswith("AAAA") else "BBBB")
        self.assertEqual(self.callback(port, {"state": state, "code": "c", "id_token": "x"}, wrong), "state_invalid")
        _, state, _ = self.authorize(port)
        self.assertEqual(self.callback(port, {"state": state, "code": "c", "id_token": "x"}, "theme=dark"),
                         "state_invalid")
        # With the browser's own cookie the same fields get past the state, to the token's check.
        _, state, binding = self.authorize(port)
        self.assertEqual(self.callback(port, {"state": state, "code": "c", "id_token": "x"}, binding),
                         "token_malformed")


if __name__ == "__main__":
    unittest.main()
