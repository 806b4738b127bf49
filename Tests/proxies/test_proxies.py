"""keyholed's forward-auth (GET /authz) behind real reverse proxies, end to end.

One real keyholed (Protocol/testing/keyholed_harness.py, with an [http] listener on a Unix socket),
one upstream app (upstream.py: it answers with the headers that reached it and logs every request),
and, for each proxy, its shipped snippet from packaging/proxies/ with the addresses filled in: one
test class per proxy, each running the same contract. Sessions are made over keyholed's main socket
with the repository's Python client. README.md beside this file says how to run it.
"""

import shutil
import tempfile
import unittest
import uuid

import rig

IDENTITY = ("X-Auth-Request-User", "X-Auth-Request-Issuer", "X-Auth-Request-Email",
            "X-Keyhole-Session-Id", "X-Keyhole-Session-Expires")
KEYHOLED = None
UPSTREAM = None
WORKDIR = None
TOKENS = []  # every session token the tests made: none may show in a log


def setUpModule():
    global KEYHOLED, UPSTREAM, WORKDIR
    WORKDIR = tempfile.mkdtemp(prefix="khp", dir="/tmp")  # short: Unix socket paths hold 107 bytes
    UPSTREAM = rig.Upstream(WORKDIR)
    KEYHOLED = rig.Keyholed(WORKDIR)
    try:
        KEYHOLED.start()
        status, _, body = rig.unix_request(KEYHOLED.http_socket, "/healthz")
        if status != 200:
            raise rig.RigError(f"keyholed's /healthz answered {status}: {body!r}")
    except Exception:
        tearDownModule()
        raise


def tearDownModule():
    status = None
    log = ""
    if KEYHOLED is not None:
        status = KEYHOLED.stop()
        log = rig.read_text(KEYHOLED.log_path)  # whole now that every keyholed has exited
    if UPSTREAM is not None:
        UPSTREAM.stop()
    if status not in (0, None):
        raise rig.RigError(f"keyholed_harness exited {status} (a keyholed did not exit 0 after SIGTERM):\n"
                           f"{rig.read_text(KEYHOLED.stderr_path)}\n{log}")
    leaked = [token for token in TOKENS if token in log or token[3:] in log]
    if leaked:
        raise rig.RigError(f"{len(leaked)} session tokens in keyholed's log {KEYHOLED.log_path}")
    shutil.rmtree(WORKDIR, ignore_errors=True)


def encoded(value):
    """A header value as HTTP.md says keyholed writes it: each byte outside '!'..'~', and '%', as %XX."""
    return "".join(chr(b) if 0x21 <= b <= 0x7E and b != 0x25 else "%%%02X" % b for b in value.encode("utf-8"))


def normalized(name):
    """A header name as CGI, PHP, WSGI and Rack see it: case and '-' versus '_' do not count."""
    return name.lower().replace("_", "-")


def header(headers, name):
    values = [v for n, v in headers if n.lower() == name.lower()]
    return values[0] if len(values) == 1 else values


class ProxyContract:
    """The tests every proxy's snippet must pass; a subclass names the proxy (rig.Nginx, rig.Caddy)."""

    proxy_class = None
    down_status = None  # what the proxy answers when it cannot reach keyholed
    no_email = None  # the X-Auth-Request-Email values the upstream gets for a user without an email

    @classmethod
    def setUpClass(cls):
        cls.proxy = cls.proxy_class(KEYHOLED.http_socket, UPSTREAM.port)
        try:
            cls.proxy.start()
        except Exception:
            cls.proxy.stop()  # tearDownClass does not run after a failed setUpClass
            raise

    @classmethod
    def tearDownClass(cls):
        logs = cls.proxy.logs()
        cls.proxy.stop()
        leaked = [token for token in TOKENS if token[3:] in logs]
        if leaked:
            raise rig.RigError(f"{cls.proxy.name} logged {len(leaked)} session tokens:\n{logs}")

    # Helpers

    def session(self, sub=None, issuer="local", data=None, email=None):
        """A new session (TTL one hour, so it ends at expires_at); returns (token, created, sub, issuer)."""
        sub = sub if sub is not None else f"user-{uuid.uuid4().hex[:12]}"
        created = KEYHOLED.client.create_session(sub, issuer=issuer, ttl_s=3600, data=data)
        TOKENS.append(created["session"])
        if email is not None:
            KEYHOLED.client.update_user(sub, issuer=issuer, email=email)
        return created["session"], created, sub, issuer

    def get(self, target, headers=(), method="GET", body=None):
        return rig.request(self.proxy.port, method, target, headers, body)

    def through(self, target, headers=(), method="GET", body=None, status=200):
        """Ask through the proxy, expecting it to reach the upstream once; returns what the upstream saw."""
        before = len(UPSTREAM.requests())
        got, _, answer = self.get(target, headers, method, body)
        self.assertEqual(got, status, answer[:500])
        reached = UPSTREAM.requests()[before:]
        self.assertEqual(len(reached), 1, reached)
        return reached[0]

    def refused(self, target, headers=(), method="GET", body=None):
        """Ask through the proxy, expecting no request to reach the upstream; returns (status, headers, body)."""
        before = len(UPSTREAM.requests())
        got = self.get(target, headers, method, body)
        self.assertEqual(UPSTREAM.requests()[before:], [], f"reached the upstream; proxy answered {got[0]}")
        return got

    def identity(self, seen):
        """The identity headers the upstream got, under any spelling: {canonical name: [values]}."""
        found = {name: [] for name in IDENTITY}
        by_normal = {normalized(name): name for name in IDENTITY}
        for name, value in seen["headers"]:
            if normalized(name) in by_normal:
                found[by_normal[normalized(name)]].append(value)
        return found

    def assert_identity(self, seen, created, sub, issuer, email=None):
        found = self.identity(seen)
        self.assertEqual(found["X-Auth-Request-User"], [encoded(sub)], seen["headers"])
        self.assertEqual(found["X-Auth-Request-Issuer"], [encoded(issuer)], seen["headers"])
        self.assertEqual(found["X-Keyhole-Session-Id"], [created["id"]], seen["headers"])
        self.assertEqual(found["X-Keyhole-Session-Expires"], [str(created["expires_at"])], seen["headers"])
        if email is None:
            # No email: the header is left out (nginx) or empty (Caddy), never a client's value.
            self.assertEqual(found["X-Auth-Request-Email"], self.no_email, seen["headers"])
        else:
            self.assertEqual(found["X-Auth-Request-Email"], [encoded(email)], seen["headers"])

    def assert_unauthenticated(self, answer):
        status, headers, body = answer
        self.assertEqual(status, 401, body[:500])
        self.assertEqual(header(headers, "WWW-Authenticate"), 'Bearer realm="keyhole"', headers)

    # 1. A session cookie

    def test_session_cookie_reaches_upstream_with_identity(self):
        token, created, sub, issuer = self.session(email="ada@example.com")
        seen = self.through("/page", [("Cookie", f"theme=dark; kh_session={token}; other=1")])
        self.assert_identity(seen, created, sub, issuer, email="ada@example.com")
        self.assertEqual(seen["target"], "/page")

    def test_session_of_user_without_email_and_of_another_issuer(self):
        token, created, sub, issuer = self.session(issuer="apple")
        seen = self.through("/page", [("Cookie", f"kh_session={token}")])
        self.assert_identity(seen, created, sub, "apple")

    # 2. A bearer token

    def test_bearer_token_reaches_upstream_with_identity(self):
        token, created, sub, issuer = self.session(email="bo@example.com")
        seen = self.through("/api/thing", [("Authorization", f"Bearer {token}")])
        self.assert_identity(seen, created, sub, issuer, email="bo@example.com")

    def test_no_credential_or_a_wrong_one_is_401_and_reaches_nothing(self):
        self.assert_unauthenticated(self.refused("/page"))
        self.assert_unauthenticated(self.refused("/page", [("Cookie", "kh_session=kh_" + "A" * 43)]))
        self.assert_unauthenticated(self.refused("/page", [("Authorization", "Bearer kh_" + "B" * 43)]))
        self.assert_unauthenticated(self.refused("/page", [("Cookie", "kh_session=not-a-token")]))

    # 3. Identity headers a client sends

    SPOOFED = [("X-Auth-Request-User", "admin"), ("X-Auth-Request-Email", "admin@example.com"),
               ("x-auth-request-user", "admin-lower"), ("X-AUTH-REQUEST-ISSUER", "local"),
               ("X_Auth_Request_User", "admin-underscore"), ("X-Auth_Request-Email", "mixed@example.com"),
               ("X-Keyhole-Session-Id", "AAAAAAAAAAAAAAAAAAAAAA"), ("X_Keyhole_Session_Expires", "99999999999")]

    def test_client_sent_identity_headers_without_session_never_reach_upstream(self):
        self.assert_unauthenticated(self.refused("/page", self.SPOOFED))
        token, _, _, _ = self.session()
        KEYHOLED.client.revoke_session(session=token)
        self.assert_unauthenticated(self.refused("/page", self.SPOOFED + [("Cookie", f"kh_session={token}")]))

    def test_client_sent_identity_headers_are_replaced_by_the_real_ones(self):
        token, created, sub, issuer = self.session()  # no email: a client's must not get through either
        seen = self.through("/page", self.SPOOFED + [("Cookie", f"kh_session={token}")] + self.SPOOFED)
        self.assert_identity(seen, created, sub, issuer)
        token, created, sub, issuer = self.session(email="real@example.com")
        seen = self.through("/page", self.SPOOFED + [("Authorization", f"Bearer {token}")])
        self.assert_identity(seen, created, sub, issuer, email="real@example.com")

    # 4. Revocation

    def test_revoked_session_is_refused_on_the_very_next_request(self):
        token, created, _, _ = self.session()
        self.through("/page", [("Cookie", f"kh_session={token}")])
        self.assertTrue(KEYHOLED.client.revoke_session(id=created["id"]))
        self.assert_unauthenticated(self.refused("/page", [("Cookie", f"kh_session={token}")]))
        self.assert_unauthenticated(self.refused("/page", [("Authorization", f"Bearer {token}")]))

    def test_deleted_user_sessions_are_refused_at_once(self):
        token, _, sub, issuer = self.session()
        self.through("/page", [("Authorization", f"Bearer {token}")])
        KEYHOLED.client.delete_user(sub, issuer=issuer)
        self.assert_unauthenticated(self.refused("/page", [("Authorization", f"Bearer {token}")]))

    # 5. keyholed stopped

    def test_keyholed_stopped_fails_closed_then_recovers(self):
        token, created, sub, issuer = self.session()
        self.through("/page", [("Cookie", f"kh_session={token}")])
        KEYHOLED.kill_and_wait()
        try:
            for headers in ([("Cookie", f"kh_session={token}")], [("Authorization", f"Bearer {token}")],
                            self.SPOOFED):
                status, _, body = self.refused("/page", headers)
                self.assertEqual(status, self.down_status, body[:500])
        finally:
            KEYHOLED.restart()
        # The session outlived the restart, and the proxy reaches the new keyholed.
        seen = self.through("/page", [("Cookie", f"kh_session={token}")])
        self.assert_identity(seen, created, sub, issuer)

    # 6. Hostile values

    def test_hostile_sub_and_email_inject_nothing(self):
        # keyholed accepts any sub of 1 to 255 bytes at session.create, CR and LF included.
        hostile = [
            ("evil\r\nX-Injected: yes", "e\r\nX-Injected-Email: 1@example.com"),
            ("José 𝄞 \"quoted\" 'single' 100% <b>", "josé@exämple.com"),
            ("\x00\x01\t\x7f\xff end", "a b\tc@example.com"),
            ("%0D%0AX-Injected:%20yes", "%25@example.com"),
            ("a+b c", "a+b@example.com"),  # '+' stays '+': decode with unquote, not unquote_plus
        ]
        for sub, email in hostile:
            with self.subTest(sub=sub):
                token, created, _, issuer = self.session(sub=sub, email=email)
                seen = self.through("/page", [("Cookie", f"kh_session={token}")])
                self.assert_identity(seen, created, sub, issuer, email=email)
                names = [normalized(name) for name, _ in seen["headers"]]
                self.assertNotIn("x-injected", names, seen["headers"])
                self.assertNotIn("x-injected-email", names, seen["headers"])
                for name, value in seen["headers"]:
                    self.assertTrue(all(0x20 <= ord(c) < 0x7F or c == "\t" for c in name + value), (name, value))

    # 7. require

    def test_require_met_and_unmet(self):
        admin, created, sub, issuer = self.session(data={"role": "admin"})
        seen = self.through("/admin/panel", [("Cookie", f"kh_session={admin}")])
        self.assert_identity(seen, created, sub, issuer)
        several, created, sub, issuer = self.session(data={"role": ["editor", "admin"]})
        seen = self.through("/admin/panel", [("Authorization", f"Bearer {several}")])
        self.assert_identity(seen, created, sub, issuer)
        for data in ({"role": "user"}, {"role": ["user", "editor"]}, {"role": "Admin"}, {}, {"role": True}):
            with self.subTest(data=data):
                token, _, _, _ = self.session(data=data)
                status, _, body = self.refused("/admin/panel", [("Cookie", f"kh_session={token}")] + self.SPOOFED)
                self.assertEqual(status, 403, body[:500])
                # Outside /admin/, the same session is enough.
                self.through("/page", [("Cookie", f"kh_session={token}")])
        self.assert_unauthenticated(self.refused("/admin/panel"))

    # The client's request itself

    def test_client_query_string_does_not_reach_keyholed(self):
        token, created, sub, issuer = self.session(data={"role": "user"})
        for target in ("/page?require=role:admin&x=1", "/page?x=1&y=%0D%0A", "/page?session=kh_x"):
            with self.subTest(target=target):
                seen = self.through(target, [("Cookie", f"kh_session={token}")])
                self.assert_identity(seen, created, sub, issuer)
                self.assertEqual(seen["target"], target)
        # Nor can a query lift a require.
        status, _, _ = self.refused("/admin/panel?require=role:user", [("Cookie", f"kh_session={token}")])
        self.assertEqual(status, 403)

    def test_token_in_the_query_string_is_no_credential(self):
        token, _, _, _ = self.session()
        TOKENS.remove(token)  # a URL is in every access log: this one's showing there is no leak
        self.assert_unauthenticated(self.refused(f"/page?kh_session={token}"))
        self.assert_unauthenticated(self.refused(f"/page?session={token}&access_token={token}"))

    def test_request_body_reaches_upstream_not_keyholed(self):
        token, created, sub, issuer = self.session()
        body = b"a=1&b=" + b"x" * 100_000
        seen = self.through("/form", [("Cookie", f"kh_session={token}"),
                                      ("Content-Type", "application/x-www-form-urlencoded")], "POST", body)
        self.assertEqual(seen["method"], "POST")
        self.assertEqual(seen["body"].encode("latin-1"), body)
        self.assert_identity(seen, created, sub, issuer)
        self.assert_unauthenticated(self.refused("/form", method="POST", body=body))

    def test_other_methods_are_asked_about_as_get(self):
        token, created, sub, issuer = self.session()
        for method in ("HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"):
            with self.subTest(method=method):
                seen = self.through("/thing", [("Authorization", f"Bearer {token}")], method)
                self.assertEqual(seen["method"], method)
                self.assert_identity(seen, created, sub, issuer)
                status, _, _ = self.refused("/thing", method=method)
                self.assertEqual(status, 401)

    # The shipped snippet

    def test_sign_in_with_apple_pages_go_to_keyholed_not_through_forward_auth(self):
        # The rig's keyholed has no [http] web = true: its own 404 comes back, where forward-auth
        # would have answered 401 and the application never this.
        for method, path in (("GET", "/apple/start?return_to=%2F"), ("POST", "/apple/callback"), ("POST", "/logout")):
            status, headers, body = self.refused(path, method=method, body=b"" if method == "POST" else None)
            self.assertEqual(status, 404, f"{method} {path}: {body[:300]}")
            self.assertEqual(header(headers, "WWW-Authenticate"), [], path)

    def test_shipped_snippet_passes_the_proxys_own_check(self):
        status, output = self.proxy.check()
        self.assertEqual(status, 0, output)


class NginxTests(ProxyContract, unittest.TestCase):
    """packaging/proxies/nginx.conf: auth_request to keyholed's Unix socket."""

    proxy_class = rig.Nginx
    down_status = 500  # auth_request turns the subrequest's 502 into 500
    no_email = []  # proxy_set_header with an empty value leaves the header out

    def test_auth_locations_are_internal(self):
        token, _, _, _ = self.session()
        for target in ("/_keyhole", "/_keyhole_admin"):
            with self.subTest(target=target):
                status, _, _ = self.refused(target, [("Cookie", f"kh_session={token}")])
                self.assertEqual(status, 404)


class CaddyTests(ProxyContract, unittest.TestCase):
    """packaging/proxies/Caddyfile: forward_auth to keyholed's Unix socket."""

    proxy_class = rig.Caddy
    down_status = 502  # forward_auth's reverse_proxy cannot dial keyholed
    no_email = [""]  # copy_headers sets keyholed's empty header as it is


if __name__ == "__main__":
    unittest.main()
