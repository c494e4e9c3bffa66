"""A gRPC client generated independently from proto/ (Python grpcio) runs an
ask/tell study against the real dial-scheduler binary: once in plaintext
without authentication, and once secured as docs/security-setup.md sets it
up (TLS, client certificates, bearer tokens from deploy/dev-ca.sh).

usage: ask_tell_client_test.py DIAL_SCHEDULER_BIN PROTO_DIR
"""
import os
import select
import subprocess
import sys
import tempfile
import unittest

SCHEDULER, PROTO_DIR = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.abspath(PROTO_DIR))


def generate_stubs(out_dir):
    # Debian's protoc with its gRPC Python plugin (python3-grpc-tools bundles
    # a protoc too old for proto3 `optional`).
    protos = [os.path.join("dial/v1", p)
              for p in ("spec.proto", "study.proto", "service.proto")]
    subprocess.run(["protoc", "-I" + PROTO_DIR, "--python_out=" + out_dir,
                    "--grpc_out=" + out_dir,
                    "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin"]
                   + protos, check=True)
    sys.path.insert(0, out_dir)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def make_channel(address, tls_ca=None, tls_cert=None, tls_key=None,
                 tls_server_name=None):
    """Plaintext, or TLS checked against tls_ca (with a client certificate
    when tls_cert and tls_key are given), as examples/ask_tell.py does."""
    import grpc
    if not tls_ca:
        return grpc.insecure_channel(address)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=read_file(tls_ca),
        private_key=read_file(tls_key) if tls_key else None,
        certificate_chain=read_file(tls_cert) if tls_cert else None)
    options = []
    if tls_server_name:
        options.append(("grpc.ssl_target_name_override", tls_server_name))
    return grpc.secure_channel(address, credentials, options=options)


def call_metadata(token):
    # Per-call metadata: grpcio's call credentials refuse a plaintext
    # channel, and the plaintext scheduler takes no token anyway.
    return [("authorization", "Bearer " + token)] if token else []


def start_scheduler(tmp_dir, extra_args):
    """Starts dial-scheduler on a free loopback port; returns the process
    and the address from its readiness line."""
    stderr = open(os.path.join(tmp_dir, "scheduler.err"), "w")
    proc = subprocess.Popen(
        [SCHEDULER, "--db=" + os.path.join(tmp_dir, "dial.db"),
         "--checkpoint-root=" + os.path.join(tmp_dir, "ckpt"),
         "--listen=127.0.0.1:0"] + extra_args,
        stdout=subprocess.PIPE, stderr=stderr, text=True)
    stderr.close()
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    if "listening on" not in line:
        proc.kill()
        proc.wait(timeout=30)
        raise RuntimeError("scheduler did not start: " +
                           open(os.path.join(tmp_dir, "scheduler.err")).read())
    return proc, line.strip().rsplit(" ", 1)[-1]


def quadratic_spec(name, max_trials=5):
    from dial.v1 import spec_pb2
    return spec_pb2.StudySpec(
        name=name,
        objective=spec_pb2.Objective(metric="loss", goal=spec_pb2.MINIMIZE),
        search_space=[
            spec_pb2.ParameterSpec(
                name="lr", float=spec_pb2.FloatRange(
                    min=1e-4, max=1.0, scale=spec_pb2.LOG)),
            spec_pb2.ParameterSpec(
                name="opt", categorical=spec_pb2.Categorical(
                    values=["sgd", "adam"])),
        ],
        budget=spec_pb2.Budget(max_trials=max_trials,
                               max_parallel_trials=min(2, max_trials)))


class AskTellTest(unittest.TestCase):
    """Plaintext, no authentication: the scheduler's loopback default."""

    @classmethod
    def scheduler_args(cls):
        return []

    @classmethod
    def connect(cls):
        """The channel and per-call metadata of the test's caller."""
        return make_channel(cls.address), []

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        generate_stubs(cls.tmp.name)
        extra = cls.scheduler_args()
        cls.proc, cls.address = start_scheduler(cls.tmp.name, extra)
        from dial.v1 import service_pb2_grpc
        channel, cls.md = cls.connect()
        cls.stub = service_pb2_grpc.StudyServiceStub(channel)

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(timeout=30)
        cls.tmp.cleanup()

    def test_ask_tell_round_trip(self):
        import grpc
        from dial.v1 import service_pb2, study_pb2

        stub, md = self.stub, self.md
        created = stub.CreateStudy(
            service_pb2.CreateStudyRequest(spec=quadratic_spec("py-study")),
            timeout=10, metadata=md).study
        self.assertEqual(created.state, study_pb2.STUDY_ACTIVE)

        finished = 0
        while True:
            resp = stub.SuggestTrials(service_pb2.SuggestTrialsRequest(
                study="py-study", count=2, client_id="python"), timeout=10,
                metadata=md)
            if resp.done:
                break
            self.assertTrue(resp.trials)
            for trial in resp.trials:
                lr = trial.params["lr"].double_value
                self.assertTrue(1e-4 <= lr <= 1.0)
                self.assertIn(trial.params["opt"].string_value, ("sgd", "adam"))
                for step in (1, 2):
                    decision = stub.ReportIntermediate(
                        service_pb2.ReportIntermediateRequest(
                            study="py-study", trial=trial.number, step=step,
                            metrics={"loss": lr * step}), timeout=10,
                        metadata=md).decision
                    self.assertEqual(decision.action, study_pb2.Decision.CONTINUE)
                stub.CompleteTrial(service_pb2.CompleteTrialRequest(
                    study="py-study", trial=trial.number,
                    final_metrics={"loss": lr}), timeout=10, metadata=md)
                finished += 1
        self.assertEqual(finished, 5)

        trials = stub.ListTrials(
            service_pb2.ListTrialsRequest(study="py-study"), timeout=10,
            metadata=md).trials
        self.assertEqual(len(trials), 5)
        self.assertTrue(all(t.state == study_pb2.COMPLETED for t in trials))
        best = stub.GetBestTrials(service_pb2.GetBestTrialsRequest(
            study="py-study", count=1), timeout=10, metadata=md).trials[0]
        self.assertAlmostEqual(best.objective_value,
                               min(t.params["lr"].double_value for t in trials))
        response = stub.GetTrial(service_pb2.GetTrialRequest(
            study="py-study", trial=best.number), timeout=10, metadata=md)
        self.assertEqual([p.step for p in response.trial.metric_history],
                         [1, 2])
        self.assertEqual(response.next_history_page_token, "")

        with self.assertRaises(grpc.RpcError) as error:
            stub.GetStudy(service_pb2.GetStudyRequest(study="nope"),
                          timeout=10, metadata=md)
        self.assertEqual(error.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_history_comes_in_pages(self):
        from dial.v1 import service_pb2

        stub, md = self.stub, self.md
        stub.CreateStudy(service_pb2.CreateStudyRequest(
            spec=quadratic_spec("py-pages", max_trials=1)), timeout=10,
            metadata=md)
        trial = stub.SuggestTrials(service_pb2.SuggestTrialsRequest(
            study="py-pages", count=1, client_id="pager"), timeout=10,
            metadata=md).trials[0]
        for step in range(1, 6):
            stub.ReportIntermediate(service_pb2.ReportIntermediateRequest(
                study="py-pages", trial=trial.number, step=step,
                metrics={"loss": 1.0 / step}), timeout=10, metadata=md)
        steps, token = [], ""
        while True:
            response = stub.GetTrial(service_pb2.GetTrialRequest(
                study="py-pages", trial=trial.number, history_page_size=2,
                history_page_token=token), timeout=10, metadata=md)
            self.assertLessEqual(len(response.trial.metric_history), 2)
            steps += [p.step for p in response.trial.metric_history]
            token = response.next_history_page_token
            if not token:
                break
        self.assertEqual(steps, [1, 2, 3, 4, 5])


class SecuredAskTellTest(AskTellTest):
    """TLS with client certificates and bearer tokens, the files made by
    deploy/dev-ca.sh: the same round trip as user alice, and the refusals."""

    @classmethod
    def setUpClass(cls):
        cls.pki_dir = tempfile.TemporaryDirectory()
        cls.pki = cls.pki_dir.name
        subprocess.run([os.path.join(ROOT, "deploy", "dev-ca.sh"), cls.pki],
                       check=True, stdout=subprocess.DEVNULL)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.pki_dir.cleanup()

    @classmethod
    def scheduler_args(cls):
        pki = cls.pki
        return ["--tls-cert=" + os.path.join(pki, "server.crt"),
                "--tls-key=" + os.path.join(pki, "server.key"),
                "--tls-client-ca=" + os.path.join(pki, "ca.crt"),
                "--auth-tokens=" + os.path.join(pki, "auth-tokens")]

    @classmethod
    def token(cls, name):
        return read_file(os.path.join(cls.pki, "tokens", name + ".token")
                         ).decode().strip()

    @classmethod
    def user_channel(cls, **kwargs):
        pki = cls.pki
        return make_channel(cls.address, tls_ca=os.path.join(pki, "ca.crt"),
                            tls_cert=os.path.join(pki, "user.crt"),
                            tls_key=os.path.join(pki, "user.key"), **kwargs)

    @classmethod
    def connect(cls):
        return cls.user_channel(), call_metadata(cls.token("alice"))

    def test_the_creator_owns_the_study(self):
        from dial.v1 import service_pb2
        study = self.stub.CreateStudy(service_pb2.CreateStudyRequest(
            spec=quadratic_spec("py-owned")), timeout=10,
            metadata=self.md).study
        self.assertEqual(study.owner, "alice")

    def test_a_call_without_a_token_is_unauthenticated(self):
        import grpc
        from dial.v1 import service_pb2
        for md in ([], call_metadata("not-a-token")):
            with self.assertRaises(grpc.RpcError) as error:
                self.stub.ListStudies(service_pb2.ListStudiesRequest(),
                                      timeout=10, metadata=md)
            self.assertEqual(error.exception.code(),
                             grpc.StatusCode.UNAUTHENTICATED)

    def test_another_user_may_not_touch_the_study(self):
        import grpc
        from dial.v1 import service_pb2
        self.stub.CreateStudy(service_pb2.CreateStudyRequest(
            spec=quadratic_spec("py-alice")), timeout=10, metadata=self.md)
        bob = call_metadata(self.token("bob"))
        with self.assertRaises(grpc.RpcError) as error:
            self.stub.SuggestTrials(service_pb2.SuggestTrialsRequest(
                study="py-alice", count=1, client_id="bob"), timeout=10,
                metadata=bob)
        # NOT_FOUND, as for a study that does not exist: bob learns nothing
        # of alice's studies.
        self.assertEqual(error.exception.code(), grpc.StatusCode.NOT_FOUND)
        names = [s.name for s in self.stub.ListStudies(
            service_pb2.ListStudiesRequest(), timeout=10,
            metadata=bob).studies]
        self.assertNotIn("py-alice", names)

    def test_the_audit_log_is_for_admins(self):
        import grpc
        from dial.v1 import service_pb2
        with self.assertRaises(grpc.RpcError) as error:
            self.stub.ListAuditEvents(service_pb2.ListAuditEventsRequest(),
                                      timeout=10, metadata=self.md)
        self.assertEqual(error.exception.code(),
                         grpc.StatusCode.PERMISSION_DENIED)
        self.stub.CreateStudy(service_pb2.CreateStudyRequest(
            spec=quadratic_spec("py-audited")), timeout=10, metadata=self.md)
        events = self.stub.ListAuditEvents(
            service_pb2.ListAuditEventsRequest(study="py-audited"), timeout=10,
            metadata=call_metadata(self.token("admin"))).events
        self.assertIn(("alice", "CreateStudy"),
                      [(e.principal, e.action) for e in events])

    def test_a_checked_server_name_other_than_the_certificates_fails(self):
        import grpc
        from dial.v1 import service_pb2, service_pb2_grpc
        stub = service_pb2_grpc.StudyServiceStub(
            self.user_channel(tls_server_name="not-the-scheduler.example"))
        with self.assertRaises(grpc.RpcError) as error:
            stub.ListStudies(service_pb2.ListStudiesRequest(), timeout=10,
                             metadata=self.md)
        self.assertEqual(error.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_tls_without_a_client_certificate_fails(self):
        import grpc
        from dial.v1 import service_pb2, service_pb2_grpc
        stub = service_pb2_grpc.StudyServiceStub(make_channel(
            self.address, tls_ca=os.path.join(self.pki, "ca.crt")))
        with self.assertRaises(grpc.RpcError) as error:
            stub.ListStudies(service_pb2.ListStudiesRequest(), timeout=10,
                             metadata=self.md)
        self.assertEqual(error.exception.code(), grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
