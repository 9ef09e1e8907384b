#!/usr/bin/env bash
# Install the peer load tools that benchmarks/bench_peers.py runs beside `servecheck load`
# (issue 5): GuideLLM, AIPerf and inference-perf, each in its OWN venv under
# ~/.cache/servecheck/peers/<tool>/ (or $SERVECHECK_CACHE/peers). Never into the project's .venv:
# they are benchmark-only and their pins (torch, transformers, pydantic, aiohttp) conflict with
# ours and with each other.
#
#   scripts/install-peers.sh                      # all three
#   scripts/install-peers.sh guidellm aiperf      # some
#
# Idempotent: a venv whose stamp file matches the pinned version is left alone. pip from PyPI
# only (plus the local wheel cache pip is configured with). GuideLLM needs torch: the CPU
# build is installed first so pip does not pull the multi-GB CUDA one.
set -uo pipefail

PEERS=${SERVECHECK_CACHE:-$HOME/.cache/servecheck}/peers
# torch's local CPU wheel is cp311; inference-perf needs Python >= 3.12.
find_python() {  # a working pythonX.Y: on PATH, else a pyenv install of it
    local v=$1 p
    for p in "python$v" "$HOME"/.pyenv/versions/"$v".*/bin/"python$v"; do
        if "$p" -c "" >/dev/null 2>&1; then command -v "$p"; return 0; fi
    done
    echo "python$v"
}
PY311=${PEER_PYTHON311:-$(find_python 3.11)}
PY312=${PEER_PYTHON312:-$(find_python 3.12)}

GUIDELLM_VERSION=0.8.1
AIPERF_VERSION=0.13.0
INFERENCE_PERF_VERSION=0.7.0
TORCH_VERSION=2.13.0

TOOLS=("$@")
[[ ${#TOOLS[@]} -eq 0 ]] && TOOLS=(guidellm aiperf inference-perf)

quiet() {  # pip's notes about this machine's extra local indexes are noise here
    "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory"
    return "${PIPESTATUS[0]}"
}

install_one() {
    local py=$1 tool=$2 version=$3; shift 3
    local dir=$PEERS/$tool stamp=$PEERS/$tool/.installed
    if [[ -f $stamp && "$(cat "$stamp")" == "$tool==$version" && -x $dir/bin/python ]]; then
        echo "== peers: $tool $version already installed in $dir"
        return 0
    fi
    echo "== peers: $tool $version -> $dir"
    rm -rf "$dir"
    timeout 300 "$py" -m venv "$dir" || return 1
    quiet timeout 300 "$dir/bin/python" -m pip install -q --upgrade pip || return 1
    local pre
    for pre in "$@"; do
        quiet timeout 1800 "$dir/bin/python" -m pip install -q "$pre" || return 1
    done
    quiet timeout 1800 "$dir/bin/python" -m pip install -q "$tool==$version" || return 1
    "$dir/bin/python" -m pip freeze > "$dir/freeze.txt"
    echo "$tool==$version" > "$stamp"
}

failed=()
mkdir -p "$PEERS"
for tool in "${TOOLS[@]}"; do
    case $tool in
        guidellm) install_one "$PY311" guidellm "$GUIDELLM_VERSION" "torch==$TORCH_VERSION" || failed+=(guidellm) ;;
        aiperf) install_one "$PY311" aiperf "$AIPERF_VERSION" || failed+=(aiperf) ;;
        inference-perf) install_one "$PY312" inference-perf "$INFERENCE_PERF_VERSION" || failed+=(inference-perf) ;;
        *) echo "unknown tool: $tool (guidellm, aiperf, inference-perf)"; failed+=("$tool") ;;
    esac
done
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "peers: install failed: ${failed[*]}"
    exit 1
fi
echo "peers: installed in $PEERS"
