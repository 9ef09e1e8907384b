"""llama.cpp's ``llama-server``, built from the sources vendored in llama-cpp-python's sdist.

PyPI carries llama.cpp only inside the ``llama-cpp-python`` source distribution, so the install
downloads that sdist with pip, builds just the ``llama-server`` target (static, no UI, no
OpenSSL: about 5.5 minutes on 2 cores) and keeps the one binary under
``<cache>/llamacpp/<version>/bin``. Later installs find the binary and take no time.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import time
from functools import partial
from pathlib import Path

from servecheck.engines.base import (
    Engine,
    EngineError,
    InstallResult,
    LaunchPlan,
    Readiness,
    clean_env,
    file_lock,
    http,
    run_logged,
)
from servecheck.engines.models import SERVED_NAME, ensure_tiny_model, reasoning_spec
from servecheck.engines.paths import cache_root, logs_dir
from servecheck.engines.spec import EngineProfile, EngineSpec, caps

VERSION = "0.3.36"  # llama-cpp-python release whose vendored llama.cpp we build
CTX_TOTAL = 2048
PARALLEL = 4
# llamacpp-agent: one slot with room for what coding agents send (issue 44): the AGENT-SIZED
# checks need 53-61k tokens with the tiny model's 2048-token vocabulary, Codex ~16k, Claude Code
# ~4.5k. The GGUF says 2048 trained positions, and llama-server caps every slot at the trained
# context ("the slot context (65536) exceeds the training context of the model (2048) - capping",
# measured 2026-12-06), so the agent set-up also overrides the GGUF's llama.context_length: the
# weights are random and RoPE has no table to outgrow, so nothing but the metadata changes.
AGENT_CTX = 65536
# A request that names no output limit (Codex sends none) is served to the context's end, and a
# random-weight model never stops on its own: CLIENT-SHAPE-CODEX's request generated ~65k tokens
# for 475 s (measured 2026-12-06). -n is llama-server's default for such requests only (a
# request's own max_tokens still wins), as an operator sets one; 1024 is above the 256 tokens
# CLIENT-SHAPE-CODEX takes for a context's end rather than a too-small default.
AGENT_DEFAULT_OUTPUT = 1024
THREADS = 1  # 2 threads on a busy 2-core machine collapsed throughput once; 1 is stable
ENV_API_KEY = "SERVECHECK_LLAMACPP_API_KEY"

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)


class LlamaCpp(Engine):
    """``llama-server`` with the tiny GGUF: ``-c 2048 -np 4`` gives 512 tokens per slot."""

    name = "llamacpp"
    default_port = 8021
    version = VERSION
    reasoning = False  # llamacpp-reasoning: the tiny reasoning model, --reasoning-format deepseek
    ctx_total, parallel = CTX_TOTAL, PARALLEL  # llamacpp-agent: AGENT_CTX in one slot

    def __init__(self, *, reasoning: bool = False, agent: bool = False) -> None:
        if reasoning:
            self.name, self.default_port, self.reasoning = "llamacpp-reasoning", 8026, True
        if agent:
            self.name, self.default_port = "llamacpp-agent", 8027
            self.ctx_total, self.parallel = AGENT_CTX, 1

    ready_timeout_s = 120.0
    stop_timeout_s = 10.0
    auth_key_env = ENV_API_KEY

    @property
    def root(self) -> Path:
        return cache_root() / "llamacpp"

    @property
    def binary(self) -> Path:
        return self.root / VERSION / "bin" / "llama-server"

    def install(self) -> InstallResult:
        """Build ``llama-server`` once (cached by version)."""
        start = time.monotonic()
        if self.binary.is_file():
            return InstallResult(0.0, True, self.binary)
        with file_lock(f"llamacpp-{VERSION}"):
            if self.binary.is_file():
                return InstallResult(time.monotonic() - start, True, self.binary)
            if not shutil.which("cmake") or not (shutil.which("c++") or shutil.which("g++")):
                raise EngineError(
                    "llamacpp: building llama-server needs cmake and a C++ compiler "
                    "(Debian: apt-get install -y cmake g++)"
                )
            log = logs_dir() / f"install-llamacpp-{VERSION}.log"
            src = self.root / f"src-{VERSION}"
            build = self.root / f"build-{VERSION}"
            if not (src / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
                dl = self.root / "sdist"
                run_logged(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "download",
                        "--no-deps",
                        "--no-binary",
                        ":all:",
                        f"llama-cpp-python=={VERSION}",
                        "-d",
                        str(dl),
                    ],
                    log,
                    timeout_s=900,
                    what="llamacpp: download sdist",
                )
                archives = sorted(dl.glob(f"llama_cpp_python-{VERSION}.tar.gz"))
                if not archives:
                    raise EngineError(f"llamacpp: sdist not found in {dl}")
                shutil.rmtree(src, ignore_errors=True)
                _extract(archives[0], src)
            vendored = src / "vendor" / "llama.cpp"
            run_logged(
                ["cmake", "-S", str(vendored), "-B", str(build), *CMAKE_FLAGS],
                log,
                timeout_s=300,
                what="llamacpp: cmake configure",
            )
            jobs = str(max(1, os.cpu_count() or 1))
            run_logged(
                ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs],
                log,
                timeout_s=3600,
                what="llamacpp: build llama-server",
            )
            built = build / "bin" / "llama-server"
            if not built.is_file():
                raise EngineError(f"llamacpp: build finished but {built} is missing; log {log}")
            self.binary.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.binary.with_suffix(".tmp")
            shutil.copy2(built, tmp)
            os.replace(tmp, self.binary)
            # The build tree is ~100x the binary; the sdist stays for a rebuild without network.
            shutil.rmtree(build, ignore_errors=True)
            shutil.rmtree(src, ignore_errors=True)
        return InstallResult(time.monotonic() - start, False, self.binary)

    def api_key(self) -> str | None:
        return os.environ.get(ENV_API_KEY) or None

    def plan(self, port: int) -> LaunchPlan:
        model = ensure_tiny_model(reasoning_spec() if self.reasoning else None)
        argv = [
            str(self.binary),
            "-m",
            str(model.gguf_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-c",
            str(self.ctx_total),
            "-np",
            str(self.parallel),
            "-t",
            str(THREADS),
            "--jinja",
            "--metrics",
            "--slots",
            "--alias",
            SERVED_NAME,
        ]
        if self.reasoning:
            argv += ["--reasoning-format", "deepseek"]
        if self.ctx_total > CTX_TOTAL:
            argv += ["--override-kv", f"llama.context_length=int:{self.ctx_total}"]
            argv += ["-n", str(AGENT_DEFAULT_OUTPUT)]
        key = self.api_key()
        if key:
            argv += ["--api-key", key]
        return LaunchPlan(
            argv=argv,
            env=clean_env({}),
            served_model=SERVED_NAME,
            context_length=self.ctx_total // self.parallel,
        )

    def probe(self, port: int) -> tuple[Readiness, str]:
        r = http("GET", f"http://127.0.0.1:{port}/health", timeout=2.0)
        if r.status == -1:
            return Readiness.STARTING, r.error
        if r.status == 200:
            return Readiness.READY, "ok"
        if r.status == 503:
            return Readiness.LOADING, r.body[:200]
        return Readiness.LOADING, f"HTTP {r.status} {r.body[:200]}"


def _extract(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        members = []
        for m in tar.getmembers():
            parts = Path(m.name).parts[1:]  # strip the top folder
            if not parts or m.issym() or m.islnk() or ".." in parts:
                continue
            m.name = str(Path(*parts))
            members.append(m)
        tar.extractall(dest, members=members, filter="data")


# The profile: what this engine legitimately does differently (engines/spec.py).
PROFILE = EngineProfile(
    # n > 1 streams and answers correctly in this build (measured 2026-11-29); an object
    # tool_choice is treated as "auto" (tools/server/README.md), so named choice is off.
    # /v1/responses is served, partially (measured 2026-12-01; targets.yaml lists what fails).
    "llamacpp",
    # /v1/messages and count_tokens are served (measured 2026-12-02; targets.yaml lists what fails).
    caps(tool_choice_named=False, seed=True, n=True, messages=True),
    deviations={
        # tools/server/README.md: "model" is accepted for compatibility and ignored.
        "model-name-ignored": "llama.cpp serves one model and ignores the model field (tools/server/README.md)",
        # server.cpp parses the body with nlohmann::json and reports the exception as a 500.
        "malformed-json-500": "llama.cpp reports JSON parse errors as 500 server_error (tools/server/server.cpp)",
        "empty-messages-accepted": "llama.cpp renders an empty conversation instead of rejecting it",
        "models-no-context-field": "llama.cpp reports the context as meta.n_ctx and in /props, not max_model_len",
        # Measured 2026-11-29 (llama-cpp-python 0.3.36's server): temperature 3.5 and -1 answered 200
        # (tools/server/README.md: temperature <= 0 is greedy); max_tokens -5 is a 400 (-1 means no limit).
        "out-of-range-accepted": "llama.cpp accepts any temperature (<= 0 means greedy sampling; tools/server/README.md)",
        # tools/server/utils.hpp (server-common.cpp) oaicompat_completion_params_parse:
        # echo true throws "Only no echo is supported", answered 400 invalid_request_error (newer
        # upstream; the b1-0c1e570 build CI runs serves echo and ignores it: a known failure).
        "echo-refused": "llama.cpp refuses echo on /v1/completions: 400 'Only no echo is supported'",
        # Measured 2026-12-01 (docs/engines.md); tools/server/server-task.cpp's final stream
        # events send output_item.done with the call whole, and no arguments .done event.
        "responses-no-args-done": "llama.cpp's /v1/responses stream sends no function_call_arguments.done (the item's done event carries the call)",
    },
    verified_live=True,
    reasoning="--reasoning-format deepseek (default auto) writes `reasoning_content`; thinking "
    "off per request via chat_template_kwargs {enable_thinking: false}, or server-wide --reasoning off",
)

LLAMACPP = EngineSpec("llamacpp", PROFILE, 8021, LlamaCpp)
LLAMACPP_REASONING = EngineSpec(
    "llamacpp-reasoning", PROFILE, 8026, partial(LlamaCpp, reasoning=True)
)
LLAMACPP_AGENT = EngineSpec("llamacpp-agent", PROFILE, 8027, partial(LlamaCpp, agent=True))
