"""A gRPC client generated independently from proto/ (Python grpcio) runs an
ask/tell study against the real dial-scheduler binary.

usage: ask_tell_client_test.py DIAL_SCHEDULER_BIN PROTO_DIR
"""
import os
import select
import subprocess
import sys
import tempfile
import unittest

SCHEDULER, PROTO_DIR = sys.argv[1], sys.argv[2]


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


class AskTellTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        generate_stubs(cls.tmp.name)
        cls.proc = subprocess.Popen(
            [SCHEDULER, "--db=" + os.path.join(cls.tmp.name, "dial.db"),
             "--checkpoint-root=" + os.path.join(cls.tmp.name, "ckpt"),
             "--listen=127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ready, _, _ = select.select([cls.proc.stdout], [], [], 30)
        if not ready:
            raise RuntimeError("scheduler did not start")
        line = cls.proc.stdout.readline()
        cls.address = line.strip().rsplit(" ", 1)[-1]

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(timeout=30)
        cls.tmp.cleanup()

    def test_ask_tell_round_trip(self):
        import grpc
        from dial.v1 import service_pb2, service_pb2_grpc, spec_pb2, study_pb2

        channel = grpc.insecure_channel(self.address)
        stub = service_pb2_grpc.StudyServiceStub(channel)
        spec = spec_pb2.StudySpec(
            name="py-study",
            objective=spec_pb2.Objective(metric="loss", goal=spec_pb2.MINIMIZE),
            search_space=[
                spec_pb2.ParameterSpec(
                    name="lr", float=spec_pb2.FloatRange(
                        min=1e-4, max=1.0, scale=spec_pb2.LOG)),
                spec_pb2.ParameterSpec(
                    name="opt", categorical=spec_pb2.Categorical(
                        values=["sgd", "adam"])),
            ],
            budget=spec_pb2.Budget(max_trials=5, max_parallel_trials=2))
        created = stub.CreateStudy(
            service_pb2.CreateStudyRequest(spec=spec), timeout=10).study
        self.assertEqual(created.state, study_pb2.STUDY_ACTIVE)

        finished = 0
        while True:
            resp = stub.SuggestTrials(service_pb2.SuggestTrialsRequest(
                study="py-study", count=2, client_id="python"), timeout=10)
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
                            metrics={"loss": lr * step}), timeout=10).decision
                    self.assertEqual(decision.action, study_pb2.Decision.CONTINUE)
                stub.CompleteTrial(service_pb2.CompleteTrialRequest(
                    study="py-study", trial=trial.number,
                    final_metrics={"loss": lr}), timeout=10)
                finished += 1
        self.assertEqual(finished, 5)

        trials = stub.ListTrials(
            service_pb2.ListTrialsRequest(study="py-study"), timeout=10).trials
        self.assertEqual(len(trials), 5)
        self.assertTrue(all(t.state == study_pb2.COMPLETED for t in trials))
        best = stub.GetBestTrials(service_pb2.GetBestTrialsRequest(
            study="py-study", count=1), timeout=10).trials[0]
        self.assertAlmostEqual(best.objective_value,
                               min(t.params["lr"].double_value for t in trials))
        full = stub.GetTrial(service_pb2.GetTrialRequest(
            study="py-study", trial=best.number), timeout=10).trial
        self.assertEqual([p.step for p in full.metric_history], [1, 2])

        with self.assertRaises(grpc.RpcError) as error:
            stub.GetStudy(service_pb2.GetStudyRequest(study="nope"), timeout=10)
        self.assertEqual(error.exception.code(), grpc.StatusCode.NOT_FOUND)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
