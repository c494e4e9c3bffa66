#!/usr/bin/env python3
"""Ask/tell from Python with stubs generated from Dial's proto/ files.

Evaluates trials of a study in this process: asks the scheduler for trials,
reports intermediate values, and completes them, until the study is done.

usage: /usr/bin/python3 examples/ask_tell.py --scheduler 127.0.0.1:7070 --study quadratic

A secured scheduler (docs/security-setup.md) needs a token, and TLS when it
serves TLS:

  DIAL_TOKEN=$(cat pki/tokens/alice.token) /usr/bin/python3 examples/ask_tell.py \
      --scheduler 10.0.0.5:7070 --tls-ca pki/ca.crt \
      --tls-cert pki/user.crt --tls-key pki/user.key --study quadratic
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


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def make_channel(grpc, args):
    """A plaintext channel, or TLS when --tls-ca is given (mTLS with
    --tls-cert and --tls-key)."""
    if not args.tls_ca:
        if args.tls_cert or args.tls_key:
            sys.exit("--tls-cert/--tls-key need --tls-ca")
        return grpc.insecure_channel(args.scheduler)
    if bool(args.tls_cert) != bool(args.tls_key):
        sys.exit("--tls-cert and --tls-key: give both or neither")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=read_file(args.tls_ca),
        private_key=read_file(args.tls_key) if args.tls_key else None,
        certificate_chain=read_file(args.tls_cert) if args.tls_cert else None)
    options = []
    if args.tls_server_name:
        options.append(("grpc.ssl_target_name_override", args.tls_server_name))
    return grpc.secure_channel(args.scheduler, credentials, options=options)


def call_metadata(token):
    """The token as per-call metadata. (gRPC's call credentials would refuse
    it on a plaintext channel; the scheduler decides what it accepts.)"""
    return [("authorization", "Bearer " + token)] if token else []


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
    parser.add_argument("--tls-ca", help="PEM CA certificate: connect with TLS")
    parser.add_argument("--tls-cert", help="PEM client certificate (mTLS)")
    parser.add_argument("--tls-key", help="PEM key of --tls-cert")
    parser.add_argument("--tls-server-name",
                        help="name to check in the scheduler's certificate")
    parser.add_argument("--token", default=os.environ.get("DIAL_TOKEN", ""),
                        help="bearer token (default: $DIAL_TOKEN)")
    args = parser.parse_args()

    import_stubs()
    import grpc
    from dial.v1 import service_pb2, service_pb2_grpc, study_pb2

    stub = service_pb2_grpc.StudyServiceStub(make_channel(grpc, args))
    md = call_metadata(args.token)
    while True:
        resp = stub.SuggestTrials(service_pb2.SuggestTrialsRequest(
            study=args.study, count=1, client_id=args.client_id),
            timeout=30, metadata=md)
        if resp.done:
            break
        for trial in resp.trials:
            loss = None
            for step in range(1, args.steps + 1):
                loss = objective(trial.params, step)
                decision = stub.ReportIntermediate(service_pb2.ReportIntermediateRequest(
                    study=args.study, trial=trial.number, step=step,
                    metrics={"loss": loss}), timeout=30, metadata=md).decision
                if decision.action == study_pb2.Decision.STOP:
                    break
            stub.CompleteTrial(service_pb2.CompleteTrialRequest(
                study=args.study, trial=trial.number, final_metrics={"loss": loss}),
                timeout=30, metadata=md)
            print(f"trial {trial.number}: loss={loss:.4f}")


if __name__ == "__main__":
    main()
