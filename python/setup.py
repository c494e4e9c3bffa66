"""Builds the `dial` Python SDK.

The protobuf and gRPC stubs (dial.v1.*_pb2, *_pb2_grpc) are generated here
from ../proto at build time, with Debian's protoc and gRPC Python plugin,
and are never committed. There is deliberately no pyproject.toml: pip then
builds with the setuptools already installed, without downloading a build
environment, so `pip install ./python` works offline.
"""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.environ.get("DIAL_PROTO_DIR", os.path.join(HERE, "..", "proto"))
PROTOS = ["dial/v1/spec.proto", "dial/v1/study.proto", "dial/v1/service.proto"]


def grpc_plugin():
    plugin = os.environ.get("DIAL_GRPC_PYTHON_PLUGIN") or shutil.which(
        "grpc_python_plugin")
    if not plugin:
        raise SystemExit("dial: grpc_python_plugin not found (Debian: "
                         "protobuf-compiler-grpc), or set "
                         "DIAL_GRPC_PYTHON_PLUGIN")
    return plugin


class BuildPyWithStubs(build_py):
    """build_py, then protoc into the build tree's dial/v1/."""

    def run(self):
        super().run()
        if not os.path.isdir(os.path.join(PROTO_DIR, "dial", "v1")):
            raise SystemExit(f"dial: no protos in {PROTO_DIR} (set "
                             "DIAL_PROTO_DIR to the repository's proto/)")
        out = self.build_lib
        subprocess.run(
            ["protoc", "-I" + PROTO_DIR, "--python_out=" + out,
             "--pyi_out=" + out, "--grpc_out=" + out,
             "--plugin=protoc-gen-grpc=" + grpc_plugin()] + PROTOS,
            check=True)


setup(
    name="dial",
    version="0.2.0",
    description="Python SDK of Dial, the distributed hyperparameter tuning "
                "service",
    packages=["dial", "dial.v1"],
    package_data={"dial": ["py.typed"]},
    python_requires=">=3.9",
    # Debian's python3-grpcio and python3-protobuf; pandas is optional.
    install_requires=["grpcio", "protobuf"],
    extras_require={"pandas": ["pandas"], "torch": ["torch"]},
    cmdclass={"build_py": BuildPyWithStubs},
    zip_safe=False,
)
