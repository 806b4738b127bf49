"""packaging/grafana/keyholed.json and its README, checked against METRICS.md and a real keyholed.

1. The JSON model: ids, the ${DS_PROMETHEUS} input everywhere, an expression per query. 2. Every
metric a query names is in METRICS.md's table; counters only in rate()/increase(), histograms only
through histogram_quantile(... rate(_bucket)) or _sum/_count ratios. 3. promtool check rules takes
every query. 4. A real keyholed with the README's [http] block: every metric the dashboard uses is in
its /metrics; a real Prometheus with the README's scrape config answers every query; the README's
timer command feeds node_exporter; the README's units run under a real systemd. Standard library;
promtool, prometheus and node_exporter from Debian: a test fails, never skips, without them.
"""

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


from dashboard_support import *  # noqa: E402,F401,F403  (the helpers and constants above the tests)


class DashboardModelTests(unittest.TestCase):
    def setUp(self):
        self.dashboard = load_dashboard()
        self.panels = list(all_panels(self.dashboard["panels"]))

    def test_an_importable_model_with_the_datasource_input_and_the_instance_variable(self):
        self.assertGreaterEqual(self.dashboard["schemaVersion"], 36)
        self.assertIsNone(self.dashboard["id"])  # Grafana gives one at import
        inputs = [(i["name"], i["type"], i["pluginId"]) for i in self.dashboard["__inputs"]]
        self.assertEqual(inputs, [("DS_PROMETHEUS", "datasource", "prometheus")])
        # No other data source anywhere: every uid is the input's, Grafana's own (the built-in
        # annotation's) or the dashboard's.
        with open(DASHBOARD, encoding="utf-8") as f:
            uids = set(re.findall(r'"uid": "([^"]*)"', f.read()))
        self.assertEqual(uids, {"${DS_PROMETHEUS}", "-- Grafana --", self.dashboard["uid"]})
        instance = {v["name"]: v for v in self.dashboard["templating"]["list"]}["instance"]
        self.assertEqual((instance["type"], instance["datasource"]), ("query", DATASOURCE))
        self.assertEqual(instance["query"]["query"], "label_values(keyholed_build_info, instance)")

    def test_panel_ids_unique_and_every_panel_and_query_on_the_input(self):
        ids = [p["id"] for p in self.panels]
        self.assertEqual(len(ids), len(set(ids)), ids)
        self.assertTrue(all(isinstance(i, int) and i > 0 for i in ids))
        for panel in self.panels:
            self.assertEqual(panel.get("datasource"), DATASOURCE, panel["title"])
            if panel["type"] == "row":
                continue
            self.assertTrue(panel.get("targets"), f"{panel['title']}: no query")
            refs = [t["refId"] for t in panel["targets"]]
            self.assertEqual(len(refs), len(set(refs)), panel["title"])
            for target in panel["targets"]:
                self.assertEqual(target.get("datasource"), DATASOURCE, panel["title"])
                self.assertIsInstance(target.get("expr"), str, panel["title"])
                self.assertTrue(target["expr"].strip(), panel["title"])
                self.assertIn('instance="$instance"', target["expr"], panel["title"])

    def test_rows_in_order_and_panels_on_the_grid_without_overlap(self):
        self.assertEqual([p["title"] for p in self.panels if p["type"] == "row"], ROWS)
        boxes = []
        for panel in self.panels:
            g = panel["gridPos"]
            self.assertTrue(g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, panel["title"])
            for other, (x, y, w, h) in boxes:
                overlap = g["x"] < x + w and x < g["x"] + g["w"] and g["y"] < y + h and y < g["y"] + g["h"]
                self.assertFalse(overlap, f"{panel['title']} overlaps {other}")
            boxes.append((panel["title"], (g["x"], g["y"], g["w"], g["h"])))

    def test_every_metric_of_metrics_md_is_shown(self):
        table = metrics_table()
        used = {base_metric(name, table)[0]
                for _, t in queries(self.dashboard) for name, _, _ in metric_uses(t["expr"])}
        self.assertEqual(sorted(set(table) - used), [])


# --- 2. the queries by METRICS.md ----------------------------------------------------------------

class QueryRulesTests(unittest.TestCase):
    def test_metrics_md_table_parsed(self):
        table = metrics_table()
        self.assertGreaterEqual(len(table), 30)
        self.assertEqual(set(table.values()), {"counter", "gauge", "histogram"})
        self.assertEqual(table["keyholed_requests_total"], "counter")
        self.assertEqual(table["keyholed_request_duration_seconds"], "histogram")

    def test_every_query_follows_the_rules(self):
        table = metrics_table()
        for panel, target in queries(load_dashboard()):
            with self.subTest(panel=panel["title"], ref=target["refId"]):
                self.assertEqual(problems(target["expr"], table), [], target["expr"])

    def test_the_checker_refuses_what_it_must(self):
        table = metrics_table()
        bad = {
            'sum(keyholed_requests_total{instance="$instance"})': "outside rate",
            "keyholed_requests_total": "outside rate",
            "rate(keyholed_requests_total)": "outside rate",  # no range
            "deriv(keyholed_requests_total[5m])": "outside rate",
            "keyholed_no_such_metric": "not in METRICS.md",
            "rate(keyholed_request_total[5m])": "not in METRICS.md",
            "sum(rate(keyholed_request_duration_seconds_bucket[5m]))": "outside histogram_quantile",
            "histogram_quantile(0.9, keyholed_request_duration_seconds_bucket)": "outside histogram_quantile",
            "keyholed_request_duration_seconds": "used bare",
            "rate(keyholed_log_sync_duration_seconds_sum[5m])": "not in a _sum/_count ratio",
            "rate(keyholed_sessions[5m])": "gauge",
            "time()": "names no metric",
        }
        for expr, why in bad.items():
            with self.subTest(expr=expr):
                self.assertTrue(any(why in p for p in problems(expr, table)), (expr, problems(expr, table)))
        good = ['sum by (op) (rate(keyholed_requests_total{code!="ok"}[5m]))'
                " / on () group_left () sum(rate(keyholed_requests_total[5m]))",
                "sum without (op) (increase(keyholed_requests_total[1h]))",
                "histogram_quantile(0.5, sum(rate(keyholed_request_duration_seconds_bucket[5m])) by (le))",
                "rate(process_cpu_seconds_total[5m]) and on (job, instance) keyholed_build_info",
                'time() - keyholed_key_set_last_success_timestamp_seconds{issuer="a}b"}']
        for expr in good:
            self.assertEqual(problems(expr, table), [], expr)


# --- 3. promtool ---------------------------------------------------------------------------------

def check_rules(exprs, directory):
    rules = [{"record": f"keyholed_dashboard:query_{n}", "expr": e} for n, e in enumerate(exprs)]
    path = os.path.join(directory, "dashboard.rules.yml")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"groups": [{"name": "keyholed_dashboard", "rules": rules}]}, f, indent=1)  # JSON is YAML
    return subprocess.run([PROMTOOL, "check", "rules", path], capture_output=True, text=True)


class PromtoolTests(unittest.TestCase):
    def setUp(self):
        require_program(PROMTOOL)
        self.dir = tempfile.mkdtemp(prefix="khg")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_every_query_is_valid_promql(self):
        exprs = [concrete(t["expr"]) for _, t in queries(load_dashboard())]
        self.assertFalse([e for e in exprs if "$" in e])
        run = check_rules(exprs, self.dir)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn(f"SUCCESS: {len(exprs)} rules found", run.stdout)

    def test_promtool_refuses_a_broken_query(self):
        run = check_rules(["sum by (op) (rate(keyholed_requests_total[5m])"], self.dir)
        self.assertNotEqual(run.returncode, 0)


# --- 4. a real keyholed, Prometheus, node_exporter and systemd -----------------------------------

class KeySetServer(http.server.SimpleHTTPRequestHandler):
    """A remote issuer's key set: the files of the directory it is given (404 for others), quietly."""

    def log_message(self, *args):
        pass


def live_config(directory, port, keys_at):
    """keyholed.toml for LiveTests, after the harness's Apple issuer: a remote issuer, one whose key
    set cannot be fetched, [apple] (its keys made in directory), and the README's [http] block."""
    key, store_key = os.path.join(directory, "apple.p8"), os.path.join(directory, "store.key")
    shutil.copy(os.path.join(FIXTURES, "keys", "p256-pkcs8.p8"), key)
    with open(store_key, "wb") as f:
        f.write(os.urandom(32))
    for path in (key, store_key):
        os.chmod(path, 0o600)  # keyholed refuses keys others may read
    block = readme_block("# /etc/keyhole/keyholed.toml")
    assert 'listen = "127.0.0.1:9847"' in block and 'listen_allow = ["metrics"]' in block, block
    block = block.replace("127.0.0.1:9847", f"127.0.0.1:{port}").replace(
        "[http]\n", f'[http]\nsocket = "{directory}/http.sock"\n')
    issuer = '[[issuer]]\nname = "{0}"\niss = "https://{0}.example"\njwks_uri = "{1}"\naudiences = ["x"]\n\n'
    return (issuer.format("remote", keys_at + "/keys") + issuer.format("broken", keys_at + "/gone")
            + f'[apple]\nissuer = "apple"\nteam_id = "ABCDE12345"\nkey_id = "XYZ987WXYZ"\n'
            + f'private_key_file = "{key}"\nstore_key_file = "{store_key}"\nendpoint = "http://127.0.0.1:9"\n\n'
            + block)


class LiveTests(unittest.TestCase):
    """One keyholed for the class (through the harness); make_requests' requests before each test."""

    @classmethod
    def setUpClass(cls):
        if not os.access(KEYHOLED, os.X_OK):
            raise AssertionError(f"keyholed not found or not executable: {KEYHOLED} (set KEYHOLED)")
        cls.dir = tempfile.mkdtemp(prefix="khg", dir="/tmp")  # short: Unix socket paths
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        served = os.path.join(cls.dir, "served")  # the key set alone, not the private keys beside it
        os.mkdir(served)
        shutil.copy(os.path.join(FIXTURES, "apple", "apple_jwks_panva-wellknown-20241001.json"),
                    os.path.join(served, "keys"))
        keys = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(KeySetServer, directory=served))
        threading.Thread(target=keys.serve_forever, daemon=True).start()
        cls.addClassCleanup(keys.server_close)
        cls.addClassCleanup(keys.shutdown)
        cls.port = free_port()
        extra = live_config(cls.dir, cls.port, f"http://127.0.0.1:{keys.server_address[1]}")
        stderr = os.path.join(cls.dir, "harness.stderr")
        with open(stderr, "wb") as err:
            cls.harness = subprocess.Popen([sys.executable, HARNESS, "--keyholed", KEYHOLED, "--config-extra", extra],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        cls.addClassCleanup(cls.stop_harness, stderr)
        cls.info = json.loads(cls.harness.stdout.readline() or "null")
        if cls.info is None:
            raise AssertionError("keyholed_harness did not start keyholed")
        poll(listening(cls.port), "keyholed's metrics listener", cls.harness)
        cls.client = keyhole.Client(cls.info["socket"])
        cls.addClassCleanup(cls.client.close)

    @classmethod
    def stop_harness(cls, stderr):
        """The harness stops keyholed (SIGTERM) and exits 0 only if keyholed exited 0."""
        try:
            cls.harness.stdin.write("stop\n")
            cls.harness.stdin.close()
        except BrokenPipeError:
            pass
        if cls.harness.wait(60) != 0:
            with open(stderr, encoding="utf-8", errors="replace") as f:
                raise AssertionError(f"keyholed_harness exited {cls.harness.returncode}:\n{f.read()}")

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="khg", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.work, True)
        self.make_requests()

    def make_requests(self):
        c = self.client
        c.ping()
        token = c.create_session("dashboard-user", issuer="local")["session"]
        c.get_session(token)
        with self.assertRaises(keyhole.KeyholeError) as caught:
            c.get_session("kh_" + "A" * 43)
        self.assertEqual(caught.exception.code, "session_not_found")
        self.assertEqual(c.verify_token(self.info["token"], issuer="apple")["sub"], self.info["sub"])
        with self.assertRaises(keyhole.KeyholeError):
            c.verify_token("not.a.token", issuer="remote")
        c.admin_snapshot()
        self.assertTrue(c.revoke_session(session=token))

    def missing(self, exposition):
        """The series the dashboard's queries name that an exposition lacks."""
        present = series_names(exposition)
        return sorted({name for _, t in queries(load_dashboard()) for name, _, _ in metric_uses(t["expr"])
                       if name not in present})

    def test_metrics_listener_has_every_metric_the_dashboard_uses(self):
        status, text = get(self.port, "/metrics")
        self.assertEqual(status, 200)
        self.assertEqual(self.missing(text), [])
        # The requests above are in it, errors under their code.
        self.assertGreaterEqual(sample(text, "keyholed_requests_total", 'op="session.create",code="ok"'), 1)
        self.assertGreaterEqual(
            sample(text, "keyholed_requests_total", 'op="session.get",code="session_not_found"'), 1)
        # What the README says of listen_allow = ["metrics"]: nothing else there.
        self.assertEqual(get(self.port, "/healthz")[0], 403)

    def test_prometheus_with_the_readme_scrape_config_answers_every_query(self):
        require_program(PROMETHEUS)
        scrape = readme_block("# prometheus.yml")
        instance = re.search(r"replacement: (\S+)", scrape).group(1)
        config = os.path.join(self.work, "prometheus.yml")
        with open(config, "w", encoding="utf-8") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    + scrape.replace("127.0.0.1:9847", f"127.0.0.1:{self.port}"))
        checked = subprocess.run([PROMTOOL, "check", "config", config], capture_output=True, text=True)
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
        port = free_port()
        prometheus = start(self, [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={self.work}/data",
                                  f"--web.listen-address=127.0.0.1:{port}"], os.path.join(self.work, "prometheus.log"))

        def query(expr):
            status, body = get(port, "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
            answer = json.loads(body)
            self.assertEqual((status, answer["status"]), (200, "success"), (expr, body))
            return answer["data"]["result"]

        def value(expr):
            result = query(concrete(expr, instance))
            return float(result[0]["value"][1]) if result else None

        poll(lambda: get(port, "/-/ready")[0] == 200, "prometheus ready", prometheus)
        poll(lambda: (value('count_over_time(keyholed_build_info{instance="$instance"}[1m])') or 0) >= 2,
             "two scrapes of keyholed", prometheus)
        self.make_requests()  # after the first scrapes, so that the rates are not 0
        created = sample(get(self.port, "/metrics")[1], "keyholed_requests_total", 'op="session.create",code="ok"')
        poll(lambda: (value('keyholed_requests_total{op="session.create",code="ok",instance="$instance"}')
                      or 0) >= created, "a scrape after the requests", prometheus)
        for panel, target in queries(load_dashboard()):
            with self.subTest(panel=panel["title"], ref=target["refId"]):
                self.assertTrue(query(concrete(target["expr"], instance, "1m")), f"no data: {target['expr']}")
        self.assertGreater(value('sum(rate(keyholed_requests_total{op="session.create",instance="$instance"}[1m]))'), 0)
        # The Process row's join found keyholed's own process: its start time, not another's.
        start_time = value('process_start_time_seconds{instance="$instance"}'
                           " and on (job, instance) keyholed_build_info")
        self.assertEqual(start_time, sample(get(self.port, "/metrics")[1], "process_start_time_seconds"))
        # The key-set age panel's "never" (from 1e9 s): the issuer never fetched, and only that one.
        ages = {r["metric"]["issuer"]: float(r["value"][1]) for r in query(concrete(
            'time() - keyholed_key_set_last_success_timestamp_seconds{instance="$instance"}', instance))}
        self.assertEqual(sorted(ages), ["apple", "broken", "remote"])
        self.assertEqual([i for i, age in sorted(ages.items()) if age >= 1e9], ["broken"])

    def timer_command(self, textfile_dir):
        """The README's ExecStart, with the test's keyhole and textfile directory."""
        unit = readme_block("# /etc/systemd/system/keyholed-metrics.service")
        args = shlex.split(next(line for line in unit.splitlines() if line.startswith("ExecStart="))[10:])
        self.assertEqual(args[:2], ["/bin/sh", "-c"])
        return args[:2] + [args[2].replace("/usr/bin/keyhole", KEYHOLE)
                           .replace("/var/lib/prometheus/node-exporter", textfile_dir)]

    def node_exporter(self, textfile_dir, flags):
        """What node_exporter (the textfile collector alone, and flags) serves once."""
        port = free_port()
        proc = start(self, [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                            "--collector.textfile", f"--collector.textfile.directory={textfile_dir}"] + flags,
                     os.path.join(self.work, f"node_exporter.{port}.log"))
        poll(listening(port), "node_exporter", proc)
        status, text = get(port, "/metrics")
        self.assertEqual(status, 200)
        stop(proc)
        return text

    def test_timer_command_feeds_node_exporter_run_as_the_readme_says(self):
        require_program(NODE_EXPORTER)
        textfiles = os.path.join(self.work, "textfile")
        os.mkdir(textfiles)
        env = dict(os.environ, KEYHOLE_SOCKET=self.info["socket"])
        run = subprocess.run(self.timer_command(textfiles), env=env, capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(os.listdir(textfiles), ["keyholed.prom"])
        with open(os.path.join(textfiles, "keyholed.prom"), encoding="utf-8") as f:
            ours = sample(f.read(), "process_start_time_seconds")
        args = re.search(r'^ARGS="(.*)"$', readme_block("# /etc/default/prometheus-node-exporter"), re.M).group(1)
        self.assertIn("--web.disable-exporter-metrics", shlex.split(args))
        served = self.node_exporter(textfiles, shlex.split(args))
        self.assertEqual(sample(served, "node_textfile_scrape_error"), 0)
        self.assertEqual(self.missing(served), [])
        self.assertEqual(sample(served, "process_start_time_seconds"), ours)
        # Without the flag, node_exporter's own process_* win: why the README asks for it.
        self.assertNotEqual(sample(self.node_exporter(textfiles, []), "process_start_time_seconds"), ours)
        # keyholed not answering: the command fails and takes the old file away.
        env["KEYHOLE_SOCKET"] = os.path.join(self.work, "nobody.sock")
        run = subprocess.run(self.timer_command(textfiles), env=env, capture_output=True, text=True)
        self.assertNotEqual(run.returncode, 0)
        self.assertEqual(os.listdir(textfiles), [])


# Runs as root under systemd in a throwaway container (Scripts/systemd-container.sh): prints name=value.
UNITS_UNDER_SYSTEMD = r"""
set -u
keyholed=/srv/keyhole-test/keyholed dir=/var/lib/prometheus/node-exporter
say() { printf '%s=%s\n' "$1" "$2"; }
# Polls every 0.1 s, at most 20 s, until the shell condition $1 holds.
until_true() { i=0; while ! eval "$1"; do [ $i -lt 200 ] || return 1; sleep 0.1; i=$((i + 1)); done; }
runs() { systemctl show -P ExecMainStartTimestampMonotonic keyholed-metrics.service; }
start_keyholed() {
    systemd-run --quiet --unit="$1" --property=Type=notify "$keyholed" --socket /run/keyhole/keyhole.sock \
        --state-dir /var/lib/keyhole-test
}
mkdir -p "$dir" /run/keyhole
rm -f "$dir"/keyholed.prom*
cp /srv/keyhole-test/keyhole /usr/bin/keyhole
cp /srv/keyhole-test/keyholed-metrics.service /srv/keyhole-test/keyholed-metrics.timer /etc/systemd/system/
systemctl daemon-reload
start_keyholed keyholed; say keyholed "$(systemctl is-active keyholed.service)"
systemctl start keyholed-metrics.timer
until_true '[ -e $dir/keyholed.prom ]'; say written $?
say mode "$(stat -c '%a %U' $dir/keyholed.prom)"
say build_info "$(grep -c '^keyholed_build_info{' $dir/keyholed.prom)"
first=$(runs)
until_true '[ "$(runs)" != "$first" ]'; say again $?
systemctl stop keyholed.service
until_true '[ ! -e $dir/keyholed.prom ]'; say removed $?
until_true '[ "$(systemctl show -P Result keyholed-metrics.service)" = exit-code ]'; say failed $?
say left "$(ls $dir | grep -c keyholed)"
start_keyholed keyholed-again
until_true '[ -e $dir/keyholed.prom ]'; say back $?
say timer "$(systemctl is-active keyholed-metrics.timer)"
"""


class SystemdUnitTests(unittest.TestCase):
    INTERVAL = "OnUnitInactiveSec=15s"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="khg", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write_units(self, keyhole_path):
        for name in ("keyholed-metrics.service", "keyholed-metrics.timer"):
            text = readme_block(f"# /etc/systemd/system/{name}").replace("/usr/bin/keyhole", keyhole_path)
            if name.endswith(".timer"):
                self.assertIn(self.INTERVAL + "\n", text)
                text = text.replace(self.INTERVAL, "OnUnitInactiveSec=2s")  # the same, sooner
            with open(os.path.join(self.dir, name), "w", encoding="utf-8") as f:
                f.write(text)

    def test_units_pass_systemd_analyze_verify(self):
        self.write_units(KEYHOLE)  # verify wants the programs to exist
        units = [os.path.join(self.dir, f"keyholed-metrics.{kind}") for kind in ("service", "timer")]
        run = subprocess.run(["systemd-analyze", "verify"] + units, capture_output=True, text=True)
        self.assertEqual((run.returncode, run.stdout + run.stderr), (0, ""))

    def test_timer_writes_repeats_fails_closed_and_recovers_under_systemd(self):
        if os.geteuid() != 0:
            raise AssertionError("needs root: Scripts/systemd-container.sh boots systemd in a container")
        self.write_units("/usr/bin/keyhole")
        with open(os.path.join(self.dir, "script.sh"), "w", encoding="utf-8") as f:
            f.write(UNITS_UNDER_SYSTEMD)
        for program in (KEYHOLED, KEYHOLE):  # the container's /tmp is its own, and the build may be elsewhere
            shutil.copy(program, self.dir)
        run = subprocess.run([CONTAINER, self.dir, "/bin/sh", "/srv/keyhole-test/script.sh"],
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr)
        found = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
        self.assertEqual(found, {"keyholed": "active", "written": "0", "mode": "644 root", "build_info": "1",
                                 "again": "0", "removed": "0", "failed": "0", "left": "0", "back": "0",
                                 "timer": "active"}, run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main()
