#!/usr/bin/env bash
# One GPU call for a host's steadiness: two decode-host runs (device_scorecard.sh's decode phase, HOST_RUN and
# HOST_RUN + 1) with decode_host.py's breakdown of a kept call between them (BREAKDOWN_RUN, 2,000 calls a round, as
# the host rows take). The host bar's readings on one machine minutes apart, and the kept call's cost taken apart
# between them (NOTES-decode, "The H200's host again"). WANT (e.g. H200): run nothing, exit 3, on another GPU.
# Run from the repository root on a CUDA machine; everything goes to $OUT/card (default ./out-scorecard/card), and with
# TAR set into one archive there ($OUT/all.tgz) so that the files come back as one.
set -uo pipefail
OUT=${OUT:-out-scorecard}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "$GPU"
if [ -n "${WANT:-}" ] && [[ "$GPU" != *"$WANT"* ]]; then echo "not $WANT: nothing run"; exit 3; fi
: "${HOST_RUN:?set HOST_RUN, the number of the first decode-host run}" "${BREAKDOWN_RUN:?set BREAKDOWN_RUN}"
D="$OUT/card"
source "$(dirname "$0")/device_env.sh"
run_host() {
    PHASES=decode HOST_RUN=$1 bash "$(dirname "$0")/device_scorecard.sh"
    mv "$D/host.log" "$D/host-run$1.log"; mv "$D/decode-host.md" "$D/decode-host-run$1.md"
}
run_host "$HOST_RUN"
t0=$(date +%s)
timeout ${BENCH_S:-150} python3 benchmarks/decode_host.py --breakdown --calls 2000 \
    --json "$D/decode-breakdown-${GPU_TAG}-run$BREAKDOWN_RUN.json" > "$D/breakdown-run$BREAKDOWN_RUN.log" 2>&1
echo "breakdown: exit $? in $(( $(date +%s) - t0 ))s"; head -n 24 "$D/breakdown-run$BREAKDOWN_RUN.log"
run_host $((HOST_RUN + 1))
if [ -n "${TAR:-}" ]; then tar czf "$OUT/all.tgz" -C "$D" . && rm -rf "$D" && ls -la "$OUT"; fi
