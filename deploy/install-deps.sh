#!/usr/bin/env bash
# Installs every Debian package that Dial's build, tests, benchmarks and
# quickstart need. Idempotent: installs only what is missing, so running it
# twice is safe and the second run does nothing.
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build pkg-config
  # fuzzing (deploy/fuzz.sh): clang, its libFuzzer and sanitizer runtimes,
  # and llvm-symbolizer for readable sanitizer reports
  clang-14 libclang-rt-14-dev llvm-14
  # the formatting check (deploy/check-format.sh)
  clang-format-14
  # libraries
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libsqlite3-dev libyaml-cpp-dev zlib1g-dev
  libeigen3-dev libnlopt-dev libtorch-dev libgtest-dev libgmock-dev
  libbenchmark-dev
  # the HTTP server (http/: Boost.Beast, header-only), the tests' HTTP
  # client, and the Prometheus text parser the metrics test checks with
  libboost1.74-dev libcpp-httplib-dev python3-prometheus-client
  # TLS and token hashing (OpenSSL's libcrypto), the development CA
  # (deploy/dev-ca.sh), the network-namespace tests (ip netns; nftables
  # for packet loss) and the transfer bench (socat: the plain TCP copy)
  libssl-dev openssl iproute2 nftables socat
  # the PostgreSQL store (libpq) and the server its tests start on their
  # own (initdb/pg_ctl in a temporary directory, as the postgres user);
  # psycopg2 and SQLAlchemy for Optuna's RDB storage, the peer in bench/
  libpq-dev postgresql python3-psycopg2 python3-sqlalchemy
  # LibTorch calls the system libblas.so.3: without OpenBLAS it runs on the
  # reference BLAS, about 20x slower.
  libopenblas0-pthread
  # cluster engines (deploy/slurm, deploy/systemd; tests/e2e/slurm_test.cc
  # runs a one-node Slurm of its own, tests/deploy/systemd_test.sh checks
  # the units with systemd-analyze)
  slurm-wlm munge systemd
  # data and tools
  dataset-fashion-mnist sqlite3
  # Python peers for tests and benchmarks (use /usr/bin/python3)
  python3 python3-grpcio python3-protobuf python3-optuna python3-torch
  # the parameter-importance peer (Optuna's fANOVA needs scikit-learn);
  # dial.sklearn and dial.xgboost (optional imports of the SDK) are tested
  # with them
  python3-sklearn python3-xgboost
  # plots in bench/README.md (bench/fairness/run.sh)
  python3-matplotlib
  # the Python SDK (python/): installed into a virtualenv that sees these
  # (build/python-venv), tested with pytest; pandas for to_dataframe()
  python3-venv python3-yaml python3-pytest python3-pandas python3-setuptools
  # the dashboard's browser tests (Playwright drives Debian's Chromium)
  chromium
)

# `kubectl kustomize` renders deploy/k8s (tests/deploy/k8s_test.py): any
# kubectl will do (the machines have one from Google's repository);
# Debian's otherwise.
if ! command -v kubectl >/dev/null; then PACKAGES+=(kubernetes-client); fi
# The dashboard (dashboard/) builds with Node.js and npm: the machine's
# own if it has them, Debian's otherwise.
if ! command -v npm >/dev/null; then PACKAGES+=(nodejs npm); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
# Installing never starts services (munge, slurmd, slurmctld): the tests
# run daemons of their own. A policy-rc.d that says so, unless one exists.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod 755 /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
