#!/usr/bin/python3
"""/metrics of the real dial-scheduler binary, served over HTTPS with the
scheduler's certificate and tokens (deploy/dev-ca.sh): parsed with
prometheus_client's text-format parser, its counters match the calls this
test made with dialctl, its gauges the study; tokens decide who may read.

A worker's /metrics (dial-worker --metrics-listen) is read the same way,
and every metric deploy/grafana/dial.json queries must be one of the two.

usage: metrics_test.py DIAL_SCHEDULER DIALCTL SOURCE_DIR DIAL_WORKER
"""
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

SCHEDULER, DIALCTL, SOURCE, WORKER = sys.argv[1:5]


def parse(text):
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def family_names(text):
    """The series names of every family, samples or not: counters with
    _total, histograms with _bucket, _sum and _count (what a query names)."""
    names = set()
    for f in text_string_to_metric_families(text):
        if f.type == "counter":
            names.add(f.name + "_total")
        elif f.type == "histogram":
            names |= {f.name + s for s in ("_bucket", "_sum", "_count")}
        else:
            names.add(f.name)
    return names


class FamilyNamesTest(unittest.TestCase):
    # Flaky before: the Grafana check took series names from samples and
    # family names, and a histogram without samples yet (no call finished
    # when the scrape saw the worker registered: its RegisterWorker was
    # still waiting for its commit) gave "dial_..._seconds", not the
    # "dial_..._seconds_bucket" the dashboard queries.
    def test_a_histogram_without_samples_names_its_series(self):
        text = ("# HELP dial_x_seconds X.\n# TYPE dial_x_seconds histogram\n"
                "# HELP dial_n N.\n# TYPE dial_n counter\n"
                "# HELP dial_g G.\n# TYPE dial_g gauge\n")
        self.assertEqual(family_names(text),
                         {"dial_x_seconds_bucket", "dial_x_seconds_sum",
                          "dial_x_seconds_count", "dial_n_total", "dial_g"})


class MetricsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        subprocess.run([os.path.join(SOURCE, "deploy/dev-ca.sh"), d + "/ca"],
                       check=True, capture_output=True)
        self.ca = d + "/ca"
        self.proc = subprocess.Popen(
            [SCHEDULER, "--db=" + d + "/dial.db",
             "--checkpoint-root=" + d + "/ckpt", "--listen=127.0.0.1:0",
             "--http-listen=127.0.0.1:0",
             "--tls-cert=" + self.ca + "/server.crt",
             "--tls-key=" + self.ca + "/server.key",
             "--auth-tokens=" + self.ca + "/auth-tokens"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.grpc = self.http = None
        # Both readiness lines come before the process waits for signals.
        for _ in range(2):
            line = self.proc.stdout.readline()
            m = re.match(r"dial-scheduler listening on (\S+)", line)
            if m:
                self.grpc = m.group(1)
            m = re.match(r"dial-scheduler http on port (\d+)", line)
            if m:
                self.http = int(m.group(1))
        self.assertIsNotNone(self.grpc)
        self.assertIsNotNone(self.http)
        self.tls = ssl.create_default_context(cafile=self.ca + "/ca.crt")

    def tearDown(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.tmp.cleanup()

    def token(self, name):
        with open(f"{self.ca}/tokens/{name}.token") as f:
            return f.read().strip()

    def dialctl(self, *args, ok=True):
        r = subprocess.run(
            [DIALCTL, "--scheduler=" + self.grpc, "--tls-ca=" + self.ca + "/ca.crt",
             "--token=" + self.token("alice"), *args],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode == 0, ok, r.stderr)

    def scrape(self, token):
        req = urllib.request.Request(f"https://127.0.0.1:{self.http}/metrics")
        if token:
            req.add_header("Authorization", "Bearer " + token)
        with urllib.request.urlopen(req, context=self.tls, timeout=30) as r:
            self.assertTrue(r.headers["Content-Type"].startswith("text/plain"))
            return r.read().decode()

    def test_counters_match_the_calls_and_tokens_decide_who_reads(self):
        self.dialctl("study", "create", "-f",
                     os.path.join(SOURCE, "examples/quadratic-random.yaml"))
        for _ in range(3):
            self.dialctl("study", "get", "quadratic")
        for _ in range(2):
            self.dialctl("study", "get", "nope", ok=False)

        samples = parse(self.scrape(self.token("admin")))

        def value(name, **labels):
            return samples.get((name, tuple(sorted(labels.items()))))

        study = "dial.v1.StudyService"
        self.assertEqual(value("dial_grpc_server_handled_total", grpc_service=study,
                               grpc_method="CreateStudy", grpc_code="OK"), 1)
        self.assertEqual(value("dial_grpc_server_handled_total", grpc_service=study,
                               grpc_method="GetStudy", grpc_code="OK"), 3)
        self.assertEqual(value("dial_grpc_server_handled_total", grpc_service=study,
                               grpc_method="GetStudy", grpc_code="NOT_FOUND"), 2)
        self.assertEqual(value("dial_grpc_server_handling_seconds_count",
                               grpc_service=study, grpc_method="GetStudy"), 5)
        self.assertEqual(value("dial_grpc_server_handling_seconds_bucket",
                               grpc_service=study, grpc_method="GetStudy",
                               le="+Inf"), 5)
        self.assertEqual(value("dial_studies", state="STUDY_ACTIVE"), 1)
        self.assertEqual(value("dial_workers"), 0)
        # The study's first trials wait for a worker; nobody watches; the
        # creation was committed in at least one group of writes.
        self.assertEqual(value("dial_queue_pending_trials"),
                         value("dial_trials", study="quadratic",
                               state="PENDING") or 0)
        self.assertEqual(value("dial_watchers"), 0)
        self.assertGreaterEqual(value("dial_db_commit_seconds_count"), 1)
        self.assertGreaterEqual(value("dial_db_group_writes_sum"),
                                value("dial_db_group_writes_count"))
        # No trial numbers, tokens or principals as labels.
        for (name, labels) in samples:
            for k, _ in labels:
                self.assertIn(k, {"grpc_service", "grpc_method", "grpc_code",
                                  "le", "state", "study"}, name)

        # A viewer reads; a user (who sees only their own studies) and a
        # caller without a token do not.
        self.assertIn("dial_studies", self.scrape(self.token("viewer")))
        for token, code in ((self.token("alice"), 403), (None, 401),
                            ("not-a-token", 401)):
            with self.assertRaises(urllib.error.HTTPError) as e:
                self.scrape(token)
            self.assertEqual(e.exception.code, code)

    def test_worker_metrics_and_the_grafana_dashboard(self):
        d = self.tmp.name
        worker = subprocess.Popen(
            [WORKER, "--scheduler=" + self.grpc, "--slots=3",
             "--tls-ca=" + self.ca + "/ca.crt",
             "--tls-cert=" + self.ca + "/worker.crt",
             "--tls-key=" + self.ca + "/worker.key",
             "--token=" + self.token("worker"), "--work-dir=" + d + "/w",
             "--checkpoint-root=" + d + "/ckpt", "--metrics-listen=127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            m = re.match(r"dial-worker metrics on port (\d+)",
                         worker.stdout.readline())
            self.assertIsNotNone(m)
            port = int(m.group(1))
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                        timeout=30) as r:
                text = r.read().decode()
            work = parse(text)
            # Families without samples yet (GPU memory here) count too.
            families = family_names(text)
            self.assertEqual(work[("dial_worker_slots", ())], 3)
            self.assertEqual(work[("dial_worker_busy_slots", ())], 0)
            self.assertEqual(work[("dial_worker_trials_started_total", ())], 0)
            self.assertEqual(work[("dial_worker_buffered_reports", ())], 0)
            # Counts only: no label but the outcome, the GPU and buckets.
            for (name, labels) in work:
                for k, _ in labels:
                    self.assertIn(k, {"outcome", "gpu", "le"}, name)
            # The scheduler sees it once it has registered (bounded wait on
            # the condition, a scrape at a time).
            for _ in range(300):
                sched_text = self.scrape(self.token("admin"))
                sched = parse(sched_text)
                if sched[("dial_workers", ())] == 1:
                    break
                time.sleep(0.1)
            self.assertEqual(sched[("dial_workers", ())], 1)
        finally:
            worker.terminate()
            worker.wait(timeout=60)
            worker.stdout.close()
        # Every metric the Grafana dashboard plots exists in one of them.
        families |= family_names(sched_text)
        names = {n for (n, _) in sched} | {n for (n, _) in work} | families
        with open(os.path.join(SOURCE, "deploy/grafana/dial.json")) as f:
            dashboard = json.load(f)
        used = set()
        for panel in dashboard["panels"]:
            self.assertTrue(panel["targets"], panel["title"])
            for t in panel["targets"]:
                used |= set(re.findall(r"\bdial_[a-z_]+", t["expr"]))
        self.assertGreater(len(used), 15)
        for metric in used:
            self.assertIn(metric, names, "deploy/grafana/dial.json")

    def test_a_remote_http_listen_needs_tokens(self):
        d = self.tmp.name
        r = subprocess.run(
            [SCHEDULER, "--db=" + d + "/other.db", "--listen=127.0.0.1:0",
             "--http-listen=0.0.0.0:0"], capture_output=True, text=True,
            timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--http-listen: '0.0.0.0' is not a loopback address",
                      r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
