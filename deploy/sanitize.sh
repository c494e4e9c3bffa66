#!/usr/bin/env bash
# Builds everything but the LibTorch trainer with a sanitizer and runs the
# tests that need no dial-train (docs/testing.md):
#
#   deploy/sanitize.sh asan   # AddressSanitizer + UndefinedBehaviorSanitizer
#   deploy/sanitize.sh tsan   # ThreadSanitizer (see below)
#
# Build directory: build-asan / build-tsan (SANITIZE_BUILD_DIR overrides).
# Any sanitizer report fails the run (halt_on_error), with a stack trace.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-}
case "$MODE" in
  asan)
    FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/deploy/lsan.supp:print_suppressions=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ;;
  tsan)
    # Two things make ThreadSanitizer unusable with Debian's libraries as
    # they are (docs/testing.md): Debian's Abseil synchronization library is
    # not instrumented, so every absl::Mutex is invisible to TSan (thousands
    # of false races); and protobuf's MapFieldBase has another layout when
    # __SANITIZE_THREAD__ is defined, so our TSan-built code and Debian's
    # libprotobuf disagree about it and map-field code crashes.
    #
    # The second is handled here: our code is compiled with
    # __SANITIZE_THREAD__ undefined, so it sees the layout libprotobuf was
    # built with. The first needs an instrumented Abseil: set
    # DIAL_TSAN_ABSL_PREFIX to an install prefix of Abseil 20220623 built
    # with -fsanitize=thread (docs/testing.md says how); without it the run
    # stops here rather than report races that are not there.
    if [ -z "${DIAL_TSAN_ABSL_PREFIX:-}" ]; then
      echo "sanitize: tsan needs an Abseil built with -fsanitize=thread;" \
           "set DIAL_TSAN_ABSL_PREFIX (see docs/testing.md)" >&2
      exit 2
    fi
    FLAGS="-fsanitize=thread -U__SANITIZE_THREAD__"
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
    export CMAKE_PREFIX_PATH="$DIAL_TSAN_ABSL_PREFIX${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    ;;
  *)
    echo "usage: deploy/sanitize.sh asan|tsan" >&2
    exit 2
    ;;
esac

deploy/install-deps.sh
BUILD_DIR=${SANITIZE_BUILD_DIR:-build-$MODE}
TESTS=(common_test searchers_test storage_test scheduler_test worker_test
  client_test http_test)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDIAL_BUILD_TRAINER=OFF \
  -DCMAKE_CXX_FLAGS="$FLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS="$FLAGS" -DCMAKE_SHARED_LINKER_FLAGS="$FLAGS"
cmake --build "$BUILD_DIR" -j2 --target "${TESTS[@]}"

export OPENBLAS_NUM_THREADS=1
failed=0
passed=0
for t in "${TESTS[@]}"; do
  echo "== $MODE: $t"
  if "$BUILD_DIR/tests/$t" --gtest_brief=1; then
    passed=$((passed + 1))
  else
    echo "sanitize: $t FAILED under $MODE" >&2
    failed=$((failed + 1))
  fi
done
echo "sanitize $MODE: $passed passed, $failed failed (test binaries)"
[ "$failed" -eq 0 ]
