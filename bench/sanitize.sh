#!/usr/bin/env bash
# compute-sanitizer over every kernel family: memcheck and racecheck (more tools with
# TOOLS="memcheck racecheck synccheck initcheck") over the GPU tests under the `sanitize`
# mark (tests/test_sanitize.py: one small case per family; tests/test_attention_fused.py,
# test_attention_output_chunks.py,
# test_attention_wgmma.py, test_attention_wgmma_registers.py and test_attention_layout.py:
# the fused attention kernel, its forms and layouts), one pytest process per test so that
# a report names its test, then a summary table.
#
#   bench/sanitize.sh [OUT_DIR]          (default: sanitize-results/)
#
# Needs an NVIDIA GPU, compute-sanitizer on PATH (or $CUDA_HOME/bin) and ptxforge installed
# (python3 -m pip install -e .). Writes OUT_DIR/<tool>/<test>.log and OUT_DIR/summary.txt;
# exits 1 when any run reports an error or its test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-sanitize-results}"
TOOLS="${TOOLS:-memcheck racecheck}"
PER_TEST_TIMEOUT="${PER_TEST_TIMEOUT:-600}"
SAN="$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")"
if [ ! -x "$SAN" ]; then
    echo "compute-sanitizer not found (put it on PATH or set CUDA_HOME)" >&2
    exit 2
fi
mkdir -p "$OUT"
mapfile -t TESTS < <(python3 -m pytest -q --collect-only -m "sanitize and gpu" \
    tests/test_sanitize.py tests/test_attention_fused.py tests/test_attention_wgmma.py \
    tests/test_attention_layout.py tests/test_attention_output_chunks.py \
    tests/test_attention_wgmma_registers.py 2>/dev/null | grep '::')
if [ "${#TESTS[@]}" -eq 0 ]; then
    echo "no tests under the sanitize mark were collected" >&2
    exit 2
fi
SUMMARY="$OUT/summary.txt"
printf '%-10s %-60s %-8s %8s %s\n' tool test result seconds errors > "$SUMMARY"
status=0
for tool in $TOOLS; do
    mkdir -p "$OUT/$tool"
    for t in "${TESTS[@]}"; do
        name="$(echo "$t" | sed 's/.*:://; s/[^A-Za-z0-9_.-]/_/g')"
        log="$OUT/$tool/$name.log"
        extra=()
        [ "$tool" = racecheck ] && extra=(--racecheck-report all)
        start=$(date +%s)
        # the driver JIT and the CUDA graphs of the runtime are covered; the host process's
        # Python allocations are not the sanitizer's business
        timeout "$PER_TEST_TIMEOUT" "$SAN" --tool "$tool" "${extra[@]}" \
            --error-exitcode 99 --print-limit 50 \
            python3 -m pytest -q -p no:cacheprovider -x "$t" > "$log" 2>&1
        rc=$?
        secs=$(( $(date +%s) - start ))
        errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+' || echo "?")
        hazards=$(grep -Eo 'RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?' \
            "$log" | tail -1 || true)
        case $rc in
            0) if grep -q ' passed' "$log"; then result=ok; else result=skipped; fi ;;
            99) result=REPORTED; status=1 ;;
            124) result=TIMEOUT; status=1 ;;
            *) if grep -q ' skipped' "$log" && ! grep -q ' passed\| failed' "$log"; then
                   result=skipped
               else
                   result=FAILED; status=1
               fi ;;
        esac
        printf '%-10s %-60s %-8s %8s %s %s\n' "$tool" "$name" "$result" "$secs" "$errors" \
            "$hazards" | tee -a "$SUMMARY"
    done
done
echo "summary: $SUMMARY"
exit $status
