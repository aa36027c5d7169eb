#!/usr/bin/env bash
# One GPU call for the scorecard (benchmarks/scorecard.py) of one run, by PHASES (default "prefill decode card"):
#   prefill  prefill.py bench with the multi-head and the GQA rows in one process (--gqa 1 4), D = 64 and 128,
#            N = 4K, 8K and 16K, attnlab against SDPA's cuDNN backend and PyTorch's own choice, ROUNDS rounds (default
#            3) with the order rotating and the clocks noted (about 200 s), into prefill-<gpu>-runRUN.json;
#   decode   decode_host.py (host floors, a kept call's host time, eager against CUDA graphs beside cuDNN, L2-warm
#            and L2-cold), into decode-host-<gpu>-runHOST_RUN.json; HOST_ARGS adds arguments (e.g. "--sweep": the
#            batch-1 split sweep, warm and cold, about a minute more; raise HOST_S);
#   card     the scorecard of the two files, and their standing against the peers (the README's table);
#   energy   clock_share.py on the prefill file's D = 128 forward: its times at the power limit the run recorded, their
#            energy a FLOP and how their speed followed the clock (not in the default phases).
# DS, NS and PROVIDERS narrow the prefill table (defaults "64 128", "4096 8192 16384", "attnlab,sdpa-cudnn,sdpa").
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/card (default ./out-scorecard/card).
set -uo pipefail
OUT=${OUT:-out-scorecard}
D="$OUT/card"
source "$(dirname "$0")/device_env.sh"
PREFILL_JSON="$D/prefill-${GPU_TAG}-run${RUN:-x}.json"
HOST_JSON="$D/decode-host-${GPU_TAG}-run${HOST_RUN:-x}.json"
for phase in ${PHASES:-prefill decode card}; do
    t0=$(date +%s)
    case $phase in
    prefill) timeout ${PREFILL_S:-330} python3 benchmarks/prefill.py bench --gqa 1 4 --D ${DS:-64 128} \
                 --N ${NS:-4096 8192 16384} --providers ${PROVIDERS:-attnlab,sdpa-cudnn,sdpa} --flex-budget 0 \
                 --rounds ${ROUNDS:-3} --clocks \
                 --json "$PREFILL_JSON" --md "$D/prefill.md" > "$D/prefill.log" 2>&1
             echo "prefill: exit $? in $(( $(date +%s) - t0 ))s"; cat "$D/prefill.md" 2>/dev/null || tail -n 20 "$D/prefill.log" ;;
    decode) timeout ${HOST_S:-200} python3 benchmarks/decode_host.py ${HOST_ARGS:-} --json "$HOST_JSON" --md "$D/decode-host.md" \
                > "$D/host.log" 2>&1
            echo "decode_host: exit $? in $(( $(date +%s) - t0 ))s"; cat "$D/decode-host.md" 2>/dev/null || tail -n 20 "$D/host.log" ;;
    card) python3 benchmarks/scorecard.py --prefill "$PREFILL_JSON" --decode-host "$HOST_JSON" --md "$D/scorecard.md" \
              --json "$D/scorecard.json"
          python3 benchmarks/scorecard.py --standing --prefill "$PREFILL_JSON" --decode-host "$HOST_JSON" \
              --md "$D/standing.md" ;;
    energy) python3 benchmarks/clock_share.py "$PREFILL_JSON" --D 128 --pass fwd > "$D/energy.md" 2>&1
            echo "energy: exit $?"; sed -n '/times at the limit/,$p' "$D/energy.md" | tail -n 30 ;;
    *) echo "device_scorecard.sh: unknown phase $phase"; exit 2 ;;
    esac
done
