"""What test_dashboard.py shares: the dashboard's model and queries, METRICS.md's table, the PromQL
checks of the query rules, and the processes the live tests start."""

import functools
import http.client
import http.server
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
DASHBOARD = os.path.join(REPO_ROOT, "packaging", "grafana", "keyholed.json")
README = os.path.join(REPO_ROOT, "packaging", "grafana", "README.md")
METRICS_MD = os.path.join(REPO_ROOT, "Sources", "KeyholeMetrics", "METRICS.md")
HARNESS = os.path.join(REPO_ROOT, "Protocol", "testing", "keyholed_harness.py")
CONTAINER = os.path.join(REPO_ROOT, "Scripts", "systemd-container.sh")
FIXTURES = os.path.join(REPO_ROOT, "Tests", "KeyholeJOSETests", "Fixtures")
KEYHOLED = os.environ.get("KEYHOLED") or os.path.join(REPO_ROOT, ".build", "debug", "keyholed")
KEYHOLE = os.environ.get("KEYHOLE") or os.path.join(os.path.dirname(KEYHOLED), "keyhole")
PROMTOOL, PROMETHEUS = "/usr/bin/promtool", "/usr/bin/prometheus"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
ROWS = ["Requests", "Connections", "Tokens", "Storage", "Apple", "Forward-auth", "Process"]
ATTEMPTS = 400  # polls 50 ms apart: 20 s for a process to listen or a condition to hold

sys.path.insert(0, os.path.join(REPO_ROOT, "Protocol", "clients", "python"))
import keyhole  # noqa: E402  (the repository's Python client)


def load_dashboard():
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def all_panels(panels):
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))  # a collapsed row holds its panels


def queries(dashboard):
    """(panel, target) for every query of the dashboard."""
    return [(p, t) for p in all_panels(dashboard["panels"]) for t in p.get("targets", [])]


def metrics_table():
    """METRICS.md's table: metric name to type (counter, gauge or histogram)."""
    table = {}
    with open(METRICS_MD, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4 and re.fullmatch(r"`[a-z_:][a-z0-9_:]*`", cells[0]):
                table[cells[0].strip("`")] = cells[1]
    return table


def readme_block(first_line):
    """The README's fenced block whose first line is first_line, without that line."""
    with open(README, encoding="utf-8") as f:
        blocks = re.findall(r"^```[a-z]*\n(.*?)^```", f.read(), re.S | re.M)
    for block in blocks:
        head, _, rest = block.partition("\n")
        if head == first_line:
            return rest
    raise AssertionError(f"no block starting {first_line!r} in {README}")


def concrete(expr, instance="web-1.example.com", window="5m"):
    """A dashboard query as Prometheus takes it: Grafana's variables replaced."""
    return expr.replace("$__rate_interval", window).replace("$instance", instance)


# --- PromQL, as far as the rules need it ---------------------------------------------------------

TOKEN = re.compile(r'\s+|(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)'
                   r'|(?P<string>"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`)|(?P<range>\[[^\]]*\])'
                   r'|(?P<matchers>\{(?:[^}"\']|"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')*\})|(?P<punct>.)')
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
AGGREGATIONS = {"sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk",
                "quantile", "count_values"}


def tokens(expr):
    return [(m.lastgroup, m.group()) for m in TOKEN.finditer(expr) if m.lastgroup]


def metric_uses(expr):
    """(name, enclosing functions outermost first, has a range) for each metric a query names."""
    toks, uses, stack, i = tokens(expr), [], [], 0

    def past_labels(j):  # toks[j] is the "(" of a label list
        while toks[j] != ("punct", ")"):
            j += 1
        return j + 1

    while i < len(toks):
        kind, text = toks[i]
        following = toks[i + 1] if i + 1 < len(toks) else (None, None)
        if kind == "ident" and text in GROUPING and following == ("punct", "("):
            i = past_labels(i + 1)
        elif kind == "ident" and text in AGGREGATIONS and following[1] in ("by", "without"):
            i = past_labels(i + 2)  # sum by (op) (...): the aggregation's "(" comes next
            assert toks[i] == ("punct", "("), expr
            stack.append(text)
            i += 1
        elif kind == "ident" and following == ("punct", "("):
            stack.append(text)
            i += 2
        elif kind == "punct" and text in "()":
            stack.append(None) if text == "(" else stack.pop()
            i += 1
        elif kind == "ident" and text.lower() not in KEYWORDS:
            j = i + 1 + (i + 1 < len(toks) and toks[i + 1][0] == "matchers")
            has_range = j < len(toks) and toks[j][0] == "range"
            uses.append((text, tuple(stack), has_range))
            i = j + has_range
        else:
            i += 1
    return uses


def base_metric(name, table):
    """(the METRICS.md name, the histogram suffix or "") for a series name, or (None, "")."""
    if name in table:
        return name, ""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and table.get(name[:-len(suffix)]) == "histogram":
            return name[:-len(suffix)], suffix
    return None, ""


def problems(expr, table):
    """What is wrong with a query by the rules of this file's docstring (empty: nothing)."""
    found, uses = [], metric_uses(expr)
    names = [name for name, _, _ in uses]
    if not uses:
        found.append("names no metric")
    for name, functions, has_range in uses:
        base, suffix = base_metric(name, table)
        inner = functions[-1] if functions else None
        if base is None:
            found.append(f"{name} is not in METRICS.md")
        elif table[base] == "counter" and (inner not in ("rate", "increase") or not has_range):
            found.append(f"counter {name} outside rate()/increase()")
        elif table[base] == "histogram" and suffix == "_bucket":
            if inner != "rate" or not has_range or "histogram_quantile" not in functions:
                found.append(f"{name} outside histogram_quantile(... rate())")
        elif table[base] == "histogram" and suffix in ("_sum", "_count"):
            other = base + ("_count" if suffix == "_sum" else "_sum")
            if inner not in ("rate", "increase") or not has_range:
                found.append(f"{name} outside rate()/increase()")
            elif other not in names or ("punct", "/") not in tokens(expr):
                found.append(f"{name} not in a _sum/_count ratio")
        elif table[base] == "histogram":
            found.append(f"histogram {name} used bare")
        elif table[base] == "gauge" and any(f in ("rate", "irate", "increase") for f in functions):
            found.append(f"gauge {name} inside a counter function")
    return found


def series_names(text):
    """The series names of a Prometheus text exposition."""
    return {re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group() for line in text.splitlines()
            if line and not line.startswith("#")}


def sample(text, name, labels=""):
    """The value of one series of an exposition (labels as written, e.g. 'op="ping",code="ok"')."""
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if series == (f"{name}{{{labels}}}" if labels else name):
            return float(value)
    return None


# --- processes -----------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll(condition, what, proc=None):
    """Call condition() until it returns something true (and return that); fail after ATTEMPTS."""
    for _ in range(ATTEMPTS):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {proc.returncode}")
        try:
            result = condition()
            if result:
                return result
        except OSError:
            pass
        time.sleep(0.05)  # the interval between polls, not a wait for the event itself
    raise AssertionError(f"{what}: not after {ATTEMPTS} polls")


def listening(port):
    return lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8")
    finally:
        conn.close()


def require_program(path):
    if not os.access(path, os.X_OK):
        raise AssertionError(f"{path} is missing (Debian: apt-get install prometheus prometheus-node-exporter)")


def start(test, args, log):
    """A child process (output to log), stopped with SIGTERM and waited for when the test ends."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    test.addCleanup(stop, proc)
    return proc


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        proc.wait(30)


# --- 1. the JSON model ---------------------------------------------------------------------------
