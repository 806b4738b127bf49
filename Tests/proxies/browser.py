"""A scripted browser for the web-flow tests: navigation, forms, redirects and cookies the way a
current browser handles them, over plain sockets. Python standard library only.

http.cookiejar would not do: it never sends a Secure cookie over http, and the tests' https sites are
plain HTTP on loopback (a proxy in front of them would terminate TLS). Here a site named in `sites`
("https://app.example.com") is reached at its loopback port and treated as the secure origin it
names, and the rules that decide whether a sign-in works in a real browser are kept:

- Secure cookies are set and sent only for https; `__Host-` cookies need Secure, an explicit
  `Path=/` and no Domain, else they are dropped, as browsers drop them. Paths match at `/` boundaries.
- SameSite: `Strict` goes with same-site requests only; `Lax` (also the default) with same-site ones
  and cross-site top-level GETs; `None` (Secure only) with every request. So Apple's cross-site
  form_post carries the binding cookie only if keyholed set it `SameSite=None; Secure`.
- A POST from a page carries `Origin`; 301, 302 and 303 after a POST become a GET.
"""

import http.client
import html.parser
import urllib.parse

MAX_REDIRECTS = 10


class Page:
    def __init__(self, url, status, headers, body, history):
        self.url = url
        self.status = status
        self.headers = headers  # [(name, value)] as they came
        self.body = body
        self.history = history  # the pages redirected from, first first

    def header(self, name):
        values = [v for n, v in self.headers if n.lower() == name.lower()]
        return values[0] if len(values) == 1 else (values or None)

    def set_cookies(self):
        return [v for n, v in self.headers if n.lower() == "set-cookie"]

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def forms(self):
        parser = FormParser()
        parser.feed(self.text)
        for form in parser.forms:
            form["action"] = urllib.parse.urljoin(self.url, form["action"] or self.url)
        return parser.forms

    def __repr__(self):
        return f"<Page {self.status} {self.url} {self.headers!r} {self.body[:300]!r}>"


class FormParser(html.parser.HTMLParser):
    """Each <form>: its method, action, fields (hidden and text inputs) and buttons."""

    def __init__(self):
        super().__init__()
        self.forms = []
        self.current = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.current = {"method": (a.get("method") or "get").upper(), "action": a.get("action") or "",
                            "fields": {}, "buttons": []}
            self.forms.append(self.current)
        elif self.current is not None and tag == "input" and a.get("name"):
            if a.get("type") in ("submit", "button"):
                self.current["buttons"].append((a["name"], a.get("value") or ""))
            else:
                self.current["fields"][a["name"]] = a.get("value") or ""
        elif self.current is not None and tag == "button" and a.get("name"):
            self.current["buttons"].append((a["name"], a.get("value") or ""))

    def handle_endtag(self, tag):
        if tag == "form":
            self.current = None


def origin_of(url):
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def path_matches(path, cookie_path):
    """RFC 6265 5.1.4: the same path, or below it at a '/' boundary (/apple does not match /applex)."""
    if path == cookie_path:
        return True
    return path.startswith(cookie_path) and (cookie_path.endswith("/") or path[len(cookie_path)] == "/")


def site_of(url):
    """Scheme and host: the test sites have no registrable-domain subtleties."""
    parts = urllib.parse.urlsplit(url)
    return (parts.scheme, parts.hostname)


class Browser:
    def __init__(self, sites):
        self.sites = dict(sites)  # "https://app.example.com" -> loopback port
        self.cookies = {}  # (host, path, name) -> cookie dict
        self.sent = []  # (url, Cookie header or None) of every request, for the tests' checks

    # Cookies

    def store(self, url, line):
        parts = urllib.parse.urlsplit(url)
        name_value, *attributes = [p.strip() for p in line.split(";")]
        if "=" not in name_value:
            return
        name, value = name_value.split("=", 1)
        cookie = {"name": name.strip(), "value": value.strip(), "host": parts.hostname, "path": "/",
                  "secure": False, "httponly": False, "samesite": "lax", "domain": None, "max_age": None,
                  "path_given": False}
        default_path = parts.path.rsplit("/", 1)[0] or "/"
        cookie["path"] = default_path
        for attribute in attributes:
            key, _, val = attribute.partition("=")
            key = key.strip().lower()
            if key == "path" and val.startswith("/"):
                cookie["path"] = val
                cookie["path_given"] = True
            elif key == "secure":
                cookie["secure"] = True
            elif key == "httponly":
                cookie["httponly"] = True
            elif key == "samesite":
                cookie["samesite"] = val.strip().lower()
            elif key == "domain":
                cookie["domain"] = val.strip().lstrip(".").lower()
            elif key == "max-age":
                cookie["max_age"] = int(val)
        secure_origin = parts.scheme == "https"
        if cookie["secure"] and not secure_origin:
            return
        host_rules = cookie["secure"] and cookie["path_given"] and cookie["path"] == "/" and cookie["domain"] is None
        if cookie["name"].startswith("__Host-") and not host_rules:
            return
        if cookie["name"].startswith("__Secure-") and not cookie["secure"]:
            return
        if cookie["samesite"] == "none" and not cookie["secure"]:
            return
        key = (parts.hostname, cookie["path"], cookie["name"])
        if cookie["max_age"] is not None and cookie["max_age"] <= 0:
            self.cookies.pop(key, None)
        else:
            self.cookies[key] = cookie

    def cookie(self, name):
        """The value this browser holds for `name` (any host), or None."""
        values = [c["value"] for c in self.cookies.values() if c["name"] == name]
        return values[0] if values else None

    def cookie_attributes(self, name):
        return [c for c in self.cookies.values() if c["name"] == name]

    def cookie_header(self, url, method, initiator):
        parts = urllib.parse.urlsplit(url)
        cross_site = initiator is not None and site_of(initiator) != site_of(url)
        chosen = []
        for cookie in self.cookies.values():
            if cookie["host"] != parts.hostname:
                continue
            if not path_matches(parts.path or "/", cookie["path"]):
                continue
            if cookie["secure"] and parts.scheme != "https":
                continue
            if cross_site:
                if cookie["samesite"] == "strict":
                    continue
                if cookie["samesite"] not in ("none",) and method != "GET":
                    continue
            chosen.append(f"{cookie['name']}={cookie['value']}")
        return "; ".join(chosen) or None

    # Requests

    def endpoint(self, url):
        parts = urllib.parse.urlsplit(url)
        origin = origin_of(url)
        if origin in self.sites:
            return self.sites[origin]
        if parts.scheme == "http" and parts.hostname == "127.0.0.1":
            return parts.port or 80
        raise AssertionError(f"the browser cannot reach {url}: not a test site")

    def fetch(self, method, url, body=None, initiator=None, headers=()):
        """One request, no redirects followed: (status, headers, body)."""
        port = self.endpoint(url)
        parts = urllib.parse.urlsplit(url)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", parts.netloc)
            conn.putheader("User-Agent", "keyhole-test-browser/1")
            cookie = self.cookie_header(url, method, initiator)
            self.sent.append((url, cookie))
            if cookie:
                conn.putheader("Cookie", cookie)
            if method == "POST" and initiator is not None:
                conn.putheader("Origin", origin_of(initiator))
            for name, value in headers:
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Type", "application/x-www-form-urlencoded")
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            data = response.read()
            answer_headers = response.getheaders()
        finally:
            conn.close()
        for name, value in answer_headers:
            if name.lower() == "set-cookie":
                self.store(url, value)
        return response.status, answer_headers, data

    def go(self, url, method="GET", form=None, initiator=None, headers=()):
        """A navigation: the request, then its redirects; the last page, with the others in history."""
        history = []
        body = urllib.parse.urlencode(form).encode("ascii") if form is not None else None
        for _ in range(MAX_REDIRECTS):
            status, answer_headers, data = self.fetch(method, url, body, initiator, headers)
            page = Page(url, status, answer_headers, data, list(history))
            location = page.header("Location")
            if status not in (301, 302, 303, 307, 308) or not isinstance(location, str):
                return page
            history.append(page)
            url = urllib.parse.urljoin(url, location)
            if status in (301, 302, 303) and method == "POST":
                method, body = "GET", None
            headers = ()
        raise AssertionError(f"more than {MAX_REDIRECTS} redirects from {history[0].url}")

    def submit(self, page, index=0, fields=None, button=None, drop=()):
        """Submits form `index` of `page` as a user (or its onload script) would: its fields, with
        `fields` changed and the names in `drop` left out, and the button pressed."""
        form = page.forms()[index]
        values = dict(form["fields"])
        values.update(fields or {})
        for name in drop:
            values.pop(name, None)
        if button is not None:
            values[button[0]] = button[1]
        if form["method"] == "POST":
            return self.go(form["action"], "POST", values, initiator=page.url)
        query = urllib.parse.urlencode(values)
        return self.go(form["action"] + ("?" + query if query else ""), initiator=page.url)
