#!/usr/bin/env bash
# Bring the real local engines up for CI (issue 4): install what is missing into
# ~/.cache/servecheck (or $SERVECHECK_CACHE), start each server on its fixed port, print the
# time each step took, and leave them running for the test run.
#
#   scripts/ci-engines.sh                 # vllm llamacpp xinference litellm
#   ENGINES="llamacpp litellm" scripts/ci-engines.sh
#   scripts/ci-engines.sh down            # stop everything it started
#
# The llama.cpp build is CPU-bound (~5.5 min on 2 cores) and the pip installs mostly wait on
# disk, so the build runs in the background while the venvs install. Every step has a timeout;
# a second run finds everything cached and only starts the servers (~1-2 min).
set -uo pipefail

cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
PY=$PYTHON
ENGINES=${ENGINES:-"vllm llamacpp xinference litellm"}
SC=("$PY" -m servecheck.cli engine)
LOGDIR=${SERVECHECK_CACHE:-$HOME/.cache/servecheck}/logs
mkdir -p "$LOGDIR"

if [[ "${1:-}" == "down" ]]; then
    timeout 120 "${SC[@]}" down all
    exit $?
fi

now() { date +%s; }
t_start=$(now)
failed=()

echo "== engines: tiny model"
timeout 300 "${SC[@]}" model || { echo "engines: model generation failed"; exit 1; }

has() { [[ " $ENGINES " == *" $1 "* ]]; }

build_pid=""
if has llamacpp || has litellm || has llamacpp-reasoning || has llamacpp-embed || has llamacpp-agent; then
    echo "== engines: llamacpp install (background)"
    timeout 2400 "${SC[@]}" install llamacpp > "$LOGDIR/ci-install-llamacpp.out" 2>&1 &
    build_pid=$!
fi

for name in vllm xinference litellm; do
    if has "$name" || { [[ $name == vllm ]] && { has vllm-chunked || has vllm-reasoning || has vllm-embed || has vllm-cache || has vllm-vision || has vllm-lora; }; } \
        || { [[ $name == litellm ]] && has litellm-reasoning; }; then
        echo "== engines: $name install"
        if ! timeout 1800 "${SC[@]}" install "$name"; then
            failed+=("$name(install)")
        fi
    fi
done

if [[ -n "$build_pid" ]]; then
    if wait "$build_pid"; then
        cat "$LOGDIR/ci-install-llamacpp.out"
    else
        cat "$LOGDIR/ci-install-llamacpp.out"
        failed+=("llamacpp(install)")
    fi
fi

# Start order: llama.cpp first (LiteLLM routes to it), the heavy Python servers one at a time;
# litellm-reasoning routes to vllm-reasoning, so it comes after it.
for name in llamacpp llamacpp-reasoning llamacpp-embed llamacpp-agent vllm vllm-chunked vllm-reasoning vllm-embed \
    vllm-cache vllm-vision vllm-lora xinference litellm litellm-reasoning; do
    has "$name" || continue
    base=${name%%-*}  # vllm-embed and vllm-cache use the vllm install, llamacpp-embed llamacpp's
    [[ " ${failed[*]:-} " == *" $base(install)"* ]] && continue
    echo "== engines: $name up"
    if ! timeout 900 "${SC[@]}" up "$name" --no-install; then
        failed+=("$name(up)")
    fi
done

timeout 60 "${SC[@]}" status
echo "engines: setup took $(( $(now) - t_start )) s; failed: ${failed[*]:-none}"
[[ ${#failed[@]} -eq 0 ]]
