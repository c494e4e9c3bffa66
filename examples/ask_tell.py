#!/usr/bin/env python3
"""Ask/tell from Python with stubs generated from Dial's proto/ files.

Evaluates trials of a study in this process: asks the scheduler for trials,
reports intermediate values, and completes them, until the study is done.

usage: /usr/bin/python3 examples/ask_tell.py --scheduler 127.0.0.1:7070 --study quadratic
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_stubs():
    """Generates the Python gRPC stubs into a temporary directory."""
    out = tempfile.mkdtemp(prefix="dial-stubs-")
    protos = ["dial/v1/spec.proto", "dial/v1/study.proto", "dial/v1/service.proto"]
    subprocess.run(["protoc", "-I" + os.path.join(ROOT, "proto"),
                    "--python_out=" + out, "--grpc_out=" + out,
                    "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin"] + protos,
                   check=True)
    sys.path.insert(0, out)


def objective(params, step):
    """A toy training curve: converges to a quadratic of the params."""
    x = params["x"].double_value
    y = params["y"].double_value
    z = params["z"].int_value if "z" in params else 0
    final = (x - 1.0) ** 2 + (math.log10(y) + 1.0) ** 2 + 0.1 * z
    return final + 2.0 / (step + 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scheduler", default=os.environ.get("DIAL_SCHEDULER", "127.0.0.1:7070"))
    parser.add_argument("--study", required=True)
    parser.add_argument("--client-id", default="python-example")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    import_stubs()
    import grpc
    from dial.v1 import service_pb2, service_pb2_grpc, study_pb2

    stub = service_pb2_grpc.StudyServiceStub(grpc.insecure_channel(args.scheduler))
    while True:
        resp = stub.SuggestTrials(service_pb2.SuggestTrialsRequest(
            study=args.study, count=1, client_id=args.client_id), timeout=30)
        if resp.done:
            break
        for trial in resp.trials:
            loss = None
            for step in range(1, args.steps + 1):
                loss = objective(trial.params, step)
                decision = stub.ReportIntermediate(service_pb2.ReportIntermediateRequest(
                    study=args.study, trial=trial.number, step=step,
                    metrics={"loss": loss}), timeout=30).decision
                if decision.action == study_pb2.Decision.STOP:
                    break
            stub.CompleteTrial(service_pb2.CompleteTrialRequest(
                study=args.study, trial=trial.number, final_metrics={"loss": loss}),
                timeout=30)
            print(f"trial {trial.number}: loss={loss:.4f}")


if __name__ == "__main__":
    main()
