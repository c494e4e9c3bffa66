#!/usr/bin/env bash
# Fuzzes study spec parsing and validation (tests/fuzz/spec_fuzz.cc) with
# libFuzzer for SECONDS (default 30), ASan and UBSan on.
#
#   deploy/fuzz.sh               # 30 s
#   deploy/fuzz.sh 3600          # the long run (docs/testing.md)
#   deploy/fuzz.sh 3600 -fork=2  # extra arguments go to libFuzzer
#
# Configures and builds only the fuzz target, with clang, in its own build
# directory (FUZZ_BUILD_DIR, default build-fuzz): common/ and the protos,
# nothing of gRPC, SQLite or LibTorch. Starts from the committed seed corpus
# tests/fuzz/corpus/spec/ and writes what it discovers to a scratch
# directory (FUZZ_WORK_DIR, default a new one under /tmp), never to the
# repository. Exits non-zero when the fuzzer finds a crash, a sanitizer
# report, a leak, an input that takes over 10 s or one that needs over 2 GB,
# and prints how to replay the saved input.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${1:-30}
shift || true
if ! [[ "$DURATION" =~ ^[0-9]+$ ]]; then
  echo "usage: deploy/fuzz.sh [SECONDS] [libFuzzer flags...]" >&2
  exit 2
fi
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}

# clang-14 is the clang whose libFuzzer runtime install-deps.sh installs.
pick() {
  for c in "$@"; do
    if command -v "$c" >/dev/null 2>&1; then echo "$c"; return; fi
  done
}
CC_BIN=${FUZZ_CC:-$(pick clang-14 clang)}
CXX_BIN=${FUZZ_CXX:-$(pick clang++-14 clang++)}
if [ -z "$CC_BIN" ] || [ -z "$CXX_BIN" ]; then
  echo "fuzz: clang not found; run deploy/install-deps.sh" >&2
  exit 1
fi

if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  CC="$CC_BIN" CXX="$CXX_BIN" cmake -S . -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDIAL_FUZZ=ON -DDIAL_BUILD_TRAINER=OFF \
    >/dev/null
fi
cmake --build "$BUILD_DIR" --target spec_fuzz -j"${FUZZ_BUILD_JOBS:-2}"

if [ -n "${FUZZ_WORK_DIR:-}" ]; then
  WORK=$FUZZ_WORK_DIR
  mkdir -p "$WORK"
  keep=1
else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/dial-fuzz.XXXXXX")
  keep=0
fi
mkdir -p "$WORK/corpus" "$WORK/artifacts"

SYMBOLIZER=$(pick llvm-symbolizer-14 llvm-symbolizer)
if [ -n "$SYMBOLIZER" ]; then
  export ASAN_SYMBOLIZER_PATH
  ASAN_SYMBOLIZER_PATH=$(command -v "$SYMBOLIZER")
fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# Without allocation stacks: Debian's libraries have no frame pointers, so
# ASan would record ever new garbage stacks, growing 100+ MB a minute.
# A replay (below) runs with full stacks.
export ASAN_OPTIONS=${ASAN_OPTIONS:-malloc_context_size=0}

echo "fuzz: spec_fuzz for ${DURATION}s; new inputs go to $WORK/corpus"
status=0
"$BUILD_DIR/tests/fuzz/spec_fuzz" \
  -max_total_time="$DURATION" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  -print_final_stats=1 -artifact_prefix="$WORK/artifacts/" "$@" \
  "$WORK/corpus" tests/fuzz/corpus/spec \
  >"$WORK/fuzz.log" 2>&1 || status=$?

if [ "$status" -ne 0 ]; then
  tail -n 60 "$WORK/fuzz.log" >&2
  echo "fuzz: FAILED (libFuzzer exit $status). Full log: $WORK/fuzz.log" >&2
  for f in "$WORK"/artifacts/*; do
    [ -e "$f" ] || continue
    echo "fuzz: replay with: ASAN_OPTIONS= $BUILD_DIR/tests/fuzz/spec_fuzz $f" >&2
  done
  exit 1
fi
grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ *DONE)' \
  "$WORK/fuzz.log" || true
echo "fuzz: no findings in ${DURATION}s; $(ls "$WORK/corpus" | wc -l) new corpus inputs"
if [ "$keep" -eq 0 ]; then rm -rf "$WORK"; fi
