#!/usr/bin/env bash
# `scripts/ui-cost.sh`: client CPU per million output tokens and dispatch lag p99, with the live dashboard on (under a
# pseudo-terminal) and off, against the scripted server in its own process.
# Build first: cargo build --release -p servebench-cli -p servebench-testserver (R=DIR to use another).
set -euo pipefail
R=${R:-target/release}
W=$(mktemp -d /tmp/uicost.XXXX)
"$R/bench-server" --port 18777 --first-token-ms 20 --itl-ms 5 > "$W/server.txt" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null || true; rm -rf "$W"' EXIT
sleep 1
common="run --base-url http://127.0.0.1:18777 --model scripted-model --dataset-name random --ignore-eos --random-input-len 100 --random-output-len 200 --num-prompts 6000 --request-rate 100 --max-concurrency 512 --save-result --result-filename r.json --no-db"
for round in 1 2; do
for ui in none dashboard; do
  d="$W/$ui-$round"; mkdir -p "$d"
  if [ "$ui" = dashboard ]; then
    script -qfec "/usr/bin/time -o $d/time.txt -f '%U %S %M' $R/servebench $common --ui dashboard --result-dir $d --output-dir $d" /dev/null > /dev/null
  else
    /usr/bin/time -o "$d/time.txt" -f '%U %S %M' "$R/servebench" $common --ui none --result-dir "$d" --output-dir "$d" > /dev/null 2>&1
  fi
  python3 - "$d" "$ui" <<'PY'
import json, sys, glob
d, ui = sys.argv[1], sys.argv[2]
u, s, m = open(f"{d}/time.txt").read().split()[-3:]
r = json.load(open(f"{d}/r.json"))
nat = json.load(open(glob.glob(f"{d}/*.servebench.json")[0]))
lag = nat["summary"]["dispatch_lag"]
tok = r["total_output_tokens"]
cpu = float(u) + float(s)
p99 = [p["value"] for p in lag["percentiles"] if p["p"] == 99.0][0]
print(f"{ui:10s} completed {r['completed']:5d} out_tok {tok:8d} cpu_s {cpu:6.2f} cpu_s_per_M {cpu/tok*1e6:6.3f} peak_rss_MB {int(m)/1024:6.1f} lag_p99_ms {p99:.3f}")
PY
done
done
