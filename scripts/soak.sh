#!/usr/bin/env bash
# Soak: 10,000 concurrent streams against `servebench sim` for 10 minutes, with the client's
# and the simulator's resident memory (VmRSS) sampled every 5 s. Answers one question: does
# the client's memory stay flat once the load is established?
#
#   scripts/soak.sh                    # 600 s, 10,000 streams (about 12 minutes of wall time)
#   SOAK_SECONDS=60 scripts/soak.sh    # a short check
#
# Output goes to results/soak-<UTC date>/: rss.csv (the samples), sim.log, run.log, the run's
# servebench JSON and summary.txt (the figures printed at the end). The per-request JSONL is
# deleted at the end (a few KB per request) unless SOAK_KEEP_RECORDS=1.
#
# Settings (environment):
#   SOAK_SECONDS        arrival window, `servebench run --duration` (600)
#   SOAK_STREAMS        `--max-concurrency`, also the simulator's --max-num-seqs (10000)
#   SOAK_STEP_MS        the simulator's engine step, the same at any batch size (500)
#   SOAK_INPUT_LEN      prompt tokens (16)
#   SOAK_OUTPUT_LEN     output tokens per request, ignore_eos (64): a stream stays open for
#                       about (SOAK_OUTPUT_LEN + 0.5) steps, 32 s by default
#   SOAK_RATE           offered requests/s (default: 5 % above what SOAK_STREAMS streams
#                       complete per second, so the client's cap stays full; 326 by default)
#   SOAK_WARMUP_S       seconds into the run after which the load counts as established
#                       (60, at most half of SOAK_SECONDS)
#   SOAK_SAMPLE_S       sampling period (5)
#   SOAK_TOLERANCE_PCT  "flat" when the client's fitted RSS growth from the warm-up mark to the
#                       end of the arrival window is at most this % of its RSS at warm-up (10)
#   SOAK_KEEP_RECORDS   1 keeps the per-request JSONL (0)
#   SERVEBENCH_BIN      a servebench binary to use instead of building the release one
#
# Opening 10,000 connections needs that many file descriptors in each process: the script
# raises the soft `ulimit -n` to 4,096 above the stream count (it fails if the hard limit is
# lower). Everything listens and connects on 127.0.0.1 only.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

SECONDS_RUN=${SOAK_SECONDS:-600}
STREAMS=${SOAK_STREAMS:-10000}
STEP_MS=${SOAK_STEP_MS:-500}
INPUT_LEN=${SOAK_INPUT_LEN:-16}
OUTPUT_LEN=${SOAK_OUTPUT_LEN:-64}
WARMUP_S=${SOAK_WARMUP_S:-}
SAMPLE_S=${SOAK_SAMPLE_S:-5}
TOLERANCE_PCT=${SOAK_TOLERANCE_PCT:-10}
KEEP_RECORDS=${SOAK_KEEP_RECORDS:-0}

log() { printf 'soak: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

for v in SECONDS_RUN STREAMS STEP_MS INPUT_LEN OUTPUT_LEN SAMPLE_S; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
if [[ -z $WARMUP_S ]]; then
    WARMUP_S=$((SECONDS_RUN / 2 < 60 ? SECONDS_RUN / 2 : 60))
fi
[[ $WARMUP_S =~ ^[0-9]+$ ]] || die "SOAK_WARMUP_S must be a whole number of seconds, got '$WARMUP_S'"
# A stream waits on average half a step to be admitted, then takes one step per token. With
# arrivals 5 % faster than streams finish, the cap stays full; the excess queues in the client
# and is drained after the arrival window (about 5 % of SOAK_SECONDS).
RATE=${SOAK_RATE:-$(awk -v n="$STREAMS" -v o="$OUTPUT_LEN" -v s="$STEP_MS" \
    'BEGIN { r = 1.05 * n * 1000 / ((o + 0.5) * s); printf "%d", (r == int(r)) ? r : int(r) + 1 }')}
((WARMUP_S < SECONDS_RUN)) || die "the warm-up ($WARMUP_S s) must end before the run does ($SECONDS_RUN s)"
for c in curl jq awk python3; do
    command -v "$c" >/dev/null 2>&1 || die "$c is required"
done

binary() {
    if [[ -n ${SERVEBENCH_BIN:-} ]]; then
        [[ -x $SERVEBENCH_BIN ]] || die "SERVEBENCH_BIN=$SERVEBENCH_BIN is not executable"
        printf '%s\n' "$SERVEBENCH_BIN"
        return 0
    fi
    log "building the release binary (nice -n 10 cargo build --release -p servebench-cli)"
    (cd "$REPO" && nice -n 10 cargo build --release -p servebench-cli >&2)
    local bin=${CARGO_TARGET_DIR:-$REPO/target}/release/servebench
    [[ -x $bin ]] || die "the build produced no $bin"
    printf '%s\n' "$bin"
}

raise_fd_limit() {
    local want=$((STREAMS + 4096)) hard
    hard=$(ulimit -Hn)
    if [[ $hard != unlimited ]] && ((hard < want)); then
        die "$STREAMS streams need $want open files per process; the hard limit is $hard (raise it, e.g. in /etc/security/limits.conf)"
    fi
    if [[ $(ulimit -Sn) != unlimited ]] && (($(ulimit -Sn) < want)); then
        log "raising the open-file limit from $(ulimit -Sn) to $want"
        ulimit -Sn "$want"
    fi
}

free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

rss_kib() {
    awk '/^VmRSS:/ { print $2; found = 1 } END { if (!found) print "" }' "/proc/$1/status" 2>/dev/null || true
}

fd_count() {
    local fds
    fds=$(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l) || true
    printf '%s\n' "${fds:-}"
}

# One gauge or counter from the simulator's /metrics (label sets summed).
scrape() {
    printf '%s\n' "$1" | awk -v name="$2" '
        $1 == name || index($1, name "{") == 1 { sum += $NF; found = 1 }
        END { if (found) printf "%g\n", sum; else print "" }'
}

BIN=$(binary)
raise_fd_limit

STAMP=$(date -u +%Y%m%d-%H%M%S)
OUT=${SOAK_OUT:-$REPO/results/soak-$STAMP}
mkdir -p "$OUT"
CSV=$OUT/rss.csv
SIM_PID='' RUN_PID=''

cleanup() {
    local pid
    for pid in "$RUN_PID" "$SIM_PID"; do
        [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && kill "$pid" 2>/dev/null
    done
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$(free_port)
URL=http://127.0.0.1:$PORT
# KV blocks for every stream's whole sequence, with room to spare, so that no request is ever
# preempted or left waiting for blocks: the soak is about the client, not about KV pressure.
BLOCKS=$(((STREAMS + 1024) * ((INPUT_LEN + OUTPUT_LEN) / 16 + 2)))
# One step must hold a decode token for every stream plus the prefills that replace the
# requests finishing in it.
BUDGET=$((STREAMS + 8192))
# A constant step: with overlapped scheduling a step lasts max(CPU floor, GPU time), and the
# floor is above what Llama-3.1-8B on an H100 needs for 10,000 decodes (about 0.33 s), so
# every stream lasts the same time whatever the batch. With the roofline's step time, which
# grows with the batch, the completion rate hardly changes between 1,000 and 10,000 running
# streams, and an open-loop arrival rate would either stall far below the cap or queue
# without bound. The simulator's connection cap (4,096 by default) must hold every stream
# and leave room for the sampler's /metrics requests.
SIM_ARGS=(llama-3.1-8b --gpu h100 --host 127.0.0.1 --port "$PORT"
    --max-num-seqs "$STREAMS" --max-num-batched-tokens "$BUDGET"
    --num-gpu-blocks-override "$BLOCKS" --max-model-len $((INPUT_LEN + OUTPUT_LEN + 64))
    --async-scheduling --cpu-floor-us $((STEP_MS * 1000)) --req-overhead-us 0
    --max-connections $((STREAMS + 64)))
log "starting the simulator on $URL: ${SIM_ARGS[*]}"
"$BIN" sim "${SIM_ARGS[@]}" >"$OUT/sim.log" 2>&1 </dev/null &
SIM_PID=$!
deadline=$((SECONDS + 60))
until [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/health" || true) == 200 ]]; do
    kill -0 "$SIM_PID" 2>/dev/null || {
        tail -n 20 "$OUT/sim.log" >&2
        die "the simulator exited during start-up"
    }
    ((SECONDS < deadline)) || die "the simulator did not answer /health within 60 s"
    sleep 0.5
done

RUN_ARGS=(run --base-url "$URL" --max-concurrency "$STREAMS" --request-rate "$RATE"
    --duration "$SECONDS_RUN" --num-prompts "$STREAMS" --dataset-name random
    --random-input-len "$INPUT_LEN" --random-output-len "$OUTPUT_LEN" --ignore-eos
    --metric-percentiles "50,99" --disable-tqdm --output-dir "$OUT/run" --label soak)
log "running: servebench ${RUN_ARGS[*]}"
"$BIN" "${RUN_ARGS[@]}" >"$OUT/run.log" 2>&1 </dev/null &
RUN_PID=$!
CLIENT_START=$EPOCHREALTIME

# `servebench run` prints its traffic settings just before the first request is released:
# that instant is the run's t = 0, after the prompts are built and the model is probed.
RUN_MARK='Maximum request concurrency:'
run_start=''
next_sample=0
echo 't_s,run_s,client_rss_kib,sim_rss_kib,client_fds,sim_running,sim_waiting,sim_engine_lag_s,sim_reanchors' >"$CSV"
log "sampling RSS every $SAMPLE_S s into $CSV"
while kill -0 "$RUN_PID" 2>/dev/null; do
    now=$EPOCHREALTIME
    if [[ -z $run_start ]] && grep -q "$RUN_MARK" "$OUT/run.log" 2>/dev/null; then
        run_start=$now
    fi
    t=$(awk -v a="$CLIENT_START" -v b="$now" 'BEGIN { printf "%.1f", b - a }')
    if awk -v t="$t" -v n="$next_sample" 'BEGIN { exit !(t >= n) }'; then
        next_sample=$((next_sample + SAMPLE_S))
        run_s=''
        [[ -n $run_start ]] && run_s=$(awk -v a="$run_start" -v b="$now" 'BEGIN { printf "%.1f", b - a }')
        metrics=$(curl -s --max-time 2 "$URL/metrics" || true)
        printf '%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$t" "$run_s" "$(rss_kib "$RUN_PID")" \
            "$(rss_kib "$SIM_PID")" "$(fd_count "$RUN_PID")" \
            "$(scrape "$metrics" vllm:num_requests_running)" \
            "$(scrape "$metrics" vllm:num_requests_waiting)" \
            "$(scrape "$metrics" sim:engine_lag_seconds)" \
            "$(scrape "$metrics" sim:engine_reanchors_total)" >>"$CSV"
    fi
    sleep 1
done
run_status=0
wait "$RUN_PID" || run_status=$?
RUN_PID=''
kill "$SIM_PID" 2>/dev/null || true
wait "$SIM_PID" 2>/dev/null || true
SIM_PID=''

RESULT=$(find "$OUT/run" -name '*.servebench.json' | head -n 1)
RECORDS=$(find "$OUT/run" -name '*.requests.jsonl' | head -n 1)
[[ -n $RESULT ]] || {
    tail -n 30 "$OUT/run.log" >&2
    die "servebench run (exit $run_status) wrote no result"
}

# RSS figures over the samples taken after the warm-up mark and up to the end of the arrival
# window: the RSS at each end and a least-squares slope (the slope ignores single spikes).
# After the window the client only drains the last streams and computes the summary.
read -r rss_warm rss_window_end rss_last rss_max slope_mib_min n_fit sim_warm sim_end <<<"$(
    awk -F, -v w="$WARMUP_S" -v d="$SECONDS_RUN" '
        NR == 1 || $3 == "" { next }
        { last = $3; if ($3 > max) max = $3 }
        $2 != "" && $2 >= w && $2 <= d {
            if (warm == "") { warm = $3; simw = $4 }
            end = $3; sime = $4
            x = $2 / 60; y = $3 / 1024
            n++; sx += x; sy += y; sxx += x * x; sxy += x * y
        }
        END {
            slope = (n > 1 && n * sxx - sx * sx > 0) ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : 0
            printf "%.1f %.1f %.1f %.1f %.3f %d %.1f %.1f\n", warm / 1024, end / 1024, last / 1024,
                max / 1024, slope, n, simw / 1024, sime / 1024
        }' "$CSV"
)"
window_min=$(awk -v w="$WARMUP_S" -v d="$SECONDS_RUN" 'BEGIN { printf "%.3f", (d - w) / 60 }')
growth=$(awk -v s="$slope_mib_min" -v m="$window_min" 'BEGIN { printf "%.1f", s * m }')
limit=$(awk -v r="$rss_warm" -v p="$TOLERANCE_PCT" 'BEGIN { printf "%.1f", r * p / 100 }')
verdict=$(awk -v g="$growth" -v l="$limit" -v n="$n_fit" 'BEGIN {
    if (n < 3) print "unknown (fewer than 3 samples after the warm-up)"
    else if (g <= l) print "flat"
    else print "growing" }')

# What the run itself says: streams in flight, completions and tokens inside the window (the
# per-second series are on the run's clock, whose origin is the sampler's run_s = 0).
read -r peak completed failed in_flight_mean in_flight_min done_in_window tokens_in_window <<<"$(
    jq -r --argjson w "$WARMUP_S" --argjson d "$SECONDS_RUN" '
        .summary as $s | $s.time_series as $ts | ($ts.origin_ns / 1e9) as $o
        | [range(0; $ts.in_flight_mean | length)] | map(select(. + $o >= $w and . + $o < $d)) as $idx
        | [$s.peak_concurrency, $s.completed, $s.failed,
           (if ($idx | length) > 0 then ([$idx[] | $ts.in_flight_mean[.]] | add / length) else 0 end),
           (if ($idx | length) > 0 then ([$idx[] | $ts.in_flight_mean[.]] | min) else 0 end),
           ([$idx[] | $ts.completions[.]] | add // 0),
           ([$idx[] | $ts.output_tokens[.]] | add // 0)]
        | map(tostring) | join(" ")' "$RESULT"
)"
per_request=$(awk -v g="$growth" -v n="$done_in_window" 'BEGIN { if (n > 0) printf "%.0f", g * 1048576 / n; else print "-" }')
per_token=$(awk -v g="$growth" -v n="$tokens_in_window" 'BEGIN { if (n > 0) printf "%.1f", g * 1048576 / n; else print "-" }')

{
    echo "soak $STAMP: $STREAMS streams, $RATE req/s offered for $SECONDS_RUN s, prompts $INPUT_LEN + outputs $OUTPUT_LEN tokens, engine step $STEP_MS ms"
    echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
    echo "servebench run exit status: $run_status; client CPU $(jq -r '.client_health.cpu_percent // "-" | if type == "number" then (. * 10 | round / 10) else . end' "$RESULT") % of one core; simulator re-anchored its timeline $(tail -n 1 "$CSV" | cut -d, -f9) times"
    echo "streams in flight: peak $peak; mean $(printf '%.0f' "$in_flight_mean"), lowest 1-s mean $(printf '%.0f' "$in_flight_min") between ${WARMUP_S} s and ${SECONDS_RUN} s"
    echo "requests: $completed completed, $failed failed"
    jq -r '.summary.failures_by_kind | to_entries[] | "  failed as \(.key): \(.value)"' "$RESULT"
    echo "client RSS: ${rss_warm} MiB at ${WARMUP_S} s, ${rss_window_end} MiB at ${SECONDS_RUN} s, ${rss_last} MiB at the last sample, ${rss_max} MiB max"
    echo "client RSS slope after warm-up: ${slope_mib_min} MiB/min (${n_fit} samples): ${growth} MiB over $(awk -v m="$window_min" 'BEGIN { printf "%g", m }') min"
    echo "  = ${per_request} bytes per request completed in the window ($done_in_window), ${per_token} bytes per output token received in it ($(printf '%.0f' "$tokens_in_window"))"
    echo "simulator RSS: ${sim_warm} MiB at ${WARMUP_S} s, ${sim_end} MiB at ${SECONDS_RUN} s"
    echo "verdict: $verdict (tolerance: growth <= ${TOLERANCE_PCT} % of the RSS at warm-up = ${limit} MiB)"
} | tee "$OUT/summary.txt"

if [[ $failed != 0 && -n $RECORDS ]]; then
    echo "first failures:" | tee -a "$OUT/summary.txt"
    grep -m 5 -o '"failure":{[^}]*}' "$RECORDS" | tee -a "$OUT/summary.txt" || true
fi
if [[ -n $RECORDS && $KEEP_RECORDS != 1 ]]; then
    rm -f "$RECORDS"
fi
log "results in $OUT"
[[ $run_status == 0 ]] || log "servebench run exited with status $run_status (see $OUT/run.log)"
