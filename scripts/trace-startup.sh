#!/usr/bin/env bash
# Trace start-up: replays a long Mooncake-shaped trace (10,000 entries: 147M prompt tokens when
# tiled from the Mooncake synthetic trace)
# against `servebench sim` and reports how long the client takes from its start to the first
# request it sends, and the client's peak resident memory while it replays. Answers
# one question: does preparing a long trace delay the first request or blow up memory? (Prompts
# are built just ahead of their send, on a thread of their own, into a bounded channel.)
#
#   scripts/trace-startup.sh /work/shared/data/traces/mooncake-synthetic.jsonl
#
# The trace is made by tiling the given Mooncake JSON-lines file until it has TRACE_ENTRIES rows:
# each tile's timestamps follow the previous tile's, and its hash ids are shifted so tiles reuse
# blocks only among themselves, as the original does.
#
# Settings (environment):
#   TRACE_ENTRIES     rows of the tiled trace (10000)
#   TRACE_RUN_S       seconds the replay runs before it is interrupted (60)
#   TRACE_MULTIPLIER  --timed-trace-sec-multiplier (0.001: Mooncake's ms as real time)
#   SERVEBENCH_BIN    a servebench binary to use instead of building the release one
#
# Output goes to results/trace-startup-<UTC date>/: run.out, run.log (stderr, each line stamped with the
# seconds since the client started), run/ (the records), sim.log and
# summary.txt. Everything listens and connects on 127.0.0.1 only.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SOURCE=${1:-}
ENTRIES=${TRACE_ENTRIES:-10000}
RUN_S=${TRACE_RUN_S:-60}
MULTIPLIER=${TRACE_MULTIPLIER:-0.001}

log() { printf 'trace-startup: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

[[ -n $SOURCE && -f $SOURCE ]] || die "usage: scripts/trace-startup.sh MOONCAKE.jsonl"
for v in ENTRIES RUN_S; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
for c in curl python3; do
    command -v "$c" >/dev/null 2>&1 || die "$c is required"
done

if [[ -n ${SERVEBENCH_BIN:-} ]]; then
    BIN=$SERVEBENCH_BIN
else
    log "building the release binary (nice -n 10 cargo build --release -p servebench-cli)"
    (cd "$REPO" && nice -n 10 cargo build --release -p servebench-cli >&2)
    BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/servebench
fi
[[ -x $BIN ]] || die "$BIN is not executable"

OUT=$REPO/results/trace-startup-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
TRACE=$OUT/trace.jsonl

python3 - "$SOURCE" "$ENTRIES" "$TRACE" <<'EOF'
import json, sys
src, want, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [json.loads(l) for l in open(src) if l.strip()]
span = max(r["timestamp"] for r in rows) + 1
top = max((max(r.get("hash_ids") or [0]) for r in rows), default=0) + 1
tokens = 0
with open(out, "w") as f:
    for i in range(want):
        tile, r = divmod(i, len(rows))
        r = dict(rows[r])
        r["timestamp"] = r["timestamp"] + tile * span
        r["hash_ids"] = [h + tile * top for h in r.get("hash_ids") or []]
        tokens += r["input_length"]
        f.write(json.dumps(r) + "\n")
print(f"{want} entries, {tokens} prompt tokens", file=sys.stderr)
EOF

PORT=$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
"$BIN" sim llama-3.1-8b --gpu h100 --host 127.0.0.1 --port "$PORT" >"$OUT/sim.log" 2>&1 </dev/null &
SIM=$!
CLIENT=
cleanup() {
    [[ -n $CLIENT ]] && kill "$CLIENT" 2>/dev/null || true
    kill "$SIM" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -f "$TRACE"
}
trap cleanup EXIT
deadline=$((SECONDS + 60))
until curl -fsS "$URL/health" >/dev/null 2>&1; do
    kill -0 "$SIM" 2>/dev/null || die "the simulator exited during start-up (see $OUT/sim.log)"
    ((SECONDS < deadline)) || die "the simulator did not answer /health within 60 s"
    sleep 0.2
done

start=$(date +%s.%N)
# The client's stderr, each line stamped with the seconds since the client started.
"$BIN" run --base-url "$URL" --model llama-3.1-8b --disable-tqdm \
    --dataset-name timed_trace --dataset-path "$TRACE" --trace-format mooncake \
    --timed-trace-sec-multiplier "$MULTIPLIER" --num-prompts "$ENTRIES" \
    --output-dir "$OUT/run" </dev/null >"$OUT/run.out" \
    2> >(python3 -u -c 'import sys, time
t0 = float(sys.argv[1])
for line in sys.stdin:
    print(f"{time.time() - t0:.3f} {line}", end="", flush=True)' "$start" >"$OUT/run.log") &
CLIENT=$!
log "replaying for ${RUN_S} s"
peak_kib=0
end=$((SECONDS + RUN_S))
while ((SECONDS < end)) && kill -0 "$CLIENT" 2>/dev/null; do
    hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$CLIENT/status" 2>/dev/null || echo 0)
    ((hwm > peak_kib)) && peak_kib=$hwm
    sleep 1
done
kill -INT "$CLIENT" 2>/dev/null || true
wait "$CLIENT" 2>/dev/null || true
CLIENT=
sleep 1
# The run's clock starts right after the traffic lines are printed (one local /metrics read
# in between); the first record's `sent` is counted from that clock.
first_ms=$(python3 - "$OUT" <<'EOF'
import glob, json, sys
out = sys.argv[1]
at = None
for line in open(f"{out}/run.log"):
    t, _, text = line.partition(" ")
    if text.startswith("Maximum request concurrency"):
        at = float(t)
records = glob.glob(f"{out}/run/*.requests.jsonl")
sent = None
if records:
    for line in open(records[0]):
        r = json.loads(line)
        if r["id"] == 0:
            sent = r["sent"]
if at is None or sent is None:
    print("unknown")
else:
    print(round(at * 1000 + sent / 1e6))
EOF
)
{
    echo "entries: $ENTRIES (tiled from $SOURCE), multiplier $MULTIPLIER, replayed ${RUN_S} s"
    echo "first request sent: $first_ms ms after the client started (target < 2000 ms)"
    echo "client peak RSS (VmHWM): $((peak_kib / 1024)) MiB (target < 1024 MiB)"
    grep -h -E "Successful requests|Dispatch lag" "$OUT/run.out" "$OUT/run.log" || true
} | tee "$OUT/summary.txt"
