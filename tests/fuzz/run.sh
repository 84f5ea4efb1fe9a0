#!/usr/bin/env bash
# run.sh — build the libFuzzer targets (tests/fuzz/fuzz_*.c) with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer into build-fuzz/, then run
# each one for a bounded time over its seed corpus (tests/fuzz/corpus/<name>,
# <name> = the target without "fuzz_").
#
#   bash tests/fuzz/run.sh                         # every target, 30 s each
#   FUZZ_SECONDS=20 bash tests/fuzz/run.sh         # what tests/run.sh (CI) does
#   FUZZ_SECONDS=3600 bash tests/fuzz/run.sh decoder   # one target, one hour
#
# Environment: FUZZ_SECONDS (per target, default 30), FUZZ_BUILD (default
# <repo>/build-fuzz), FUZZ_ARGS (extra libFuzzer flags, e.g. "-jobs=2
# -workers=2" or "-only_ascii=1").
#
# The library is built with the sanitizers and coverage instrumentation
# (-fsanitize=fuzzer-no-link), not only the fuzz harness, so libFuzzer sees
# the decoder's and the wire parser's branches and ASan/UBSan check them.
# The repository's seed corpus is only read: inputs that reach new coverage
# are kept in build-fuzz/corpus/<name>, so a later run starts from them.
# A crash, an out-of-bounds read, undefined behaviour, a leak or a timeout
# stops that target with its input saved as build-fuzz/artifacts/<name>-*
# (replay: build-fuzz/tests/fuzz_<name> <file>) and makes the script exit 1.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD:-$repo/build-fuzz}
seconds=${FUZZ_SECONDS:-30}

if ! command -v clang >/dev/null; then
    echo "fuzz: clang is not installed (apt-get install clang libclang-rt-14-dev)" >&2
    exit 1
fi

# A build dir configured with another compiler cannot be switched in place.
if [ -f "$build/CMakeCache.txt" ] &&
    ! grep -q '^CMAKE_C_COMPILER:[A-Z]*=.*clang' "$build/CMakeCache.txt"; then
    rm -rf "$build"
fi
cmake -S "$repo" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DOUTBOX_FUZZ=ON -DOUTBOX_SANITIZE=ON -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null

targets=()
if [ $# -gt 0 ]; then
    for name in "$@"; do targets+=("fuzz_${name#fuzz_}"); done
else
    for src in "$repo"/tests/fuzz/fuzz_*.c; do targets+=("$(basename "$src" .c)"); done
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build/artifacts"
failed=()
for target in "${targets[@]}"; do
    name=${target#fuzz_}
    bin=$build/tests/$target
    seeds=$repo/tests/fuzz/corpus/$name
    work=$build/corpus/$name
    mkdir -p "$work"
    args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
          -artifact_prefix="$build/artifacts/$name-")
    [ -f "$repo/tests/fuzz/$name.dict" ] && args+=(-dict="$repo/tests/fuzz/$name.dict")
    dirs=("$work")
    [ -d "$seeds" ] && dirs+=("$seeds")
    echo "== fuzz $name: ${seconds}s over ${dirs[*]}"
    log=$build/$name.log
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    if "$bin" "${args[@]}" ${FUZZ_ARGS:-} "${dirs[@]}" >"$log" 2>&1; then
        grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" |
            sed 's/stat:://; s/: */=/' | tr '\n' ' '; echo
    else
        echo "fuzz $name FAILED; log $log, inputs:" >&2
        ls "$build"/artifacts/"$name"-* >&2 2>/dev/null || true
        grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$log" | head -20 >&2 || true
        failed+=("$name")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: failed: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: ${targets[*]}: no crash in ${seconds}s each"
