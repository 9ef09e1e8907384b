"""The clients ``servecheck clients`` can run, pinned, and how each is installed and started.

Each client is installed on demand into ``<cache>/clients/<name>-<version>/`` (the cache root of
:mod:`servecheck.engines.paths`): a PyPI client as a venv there, an npm client with
``npm install --prefix`` there. An install runs once per version (a marker file holds what was
installed) under a file lock, and logs to ``<cache>/logs/install-<name>-<version>.log``
(npm: ``install-clients-<name>.log``). Installs
run on the host, from the registries; only the task itself runs in the namespace.

A client's task is a small script (its text below, written next to the install at run time) that
prints one JSON line per task: ``{"task": "stream" | "tool", "ok": bool, "detail": str,
"unasked": bool}`` (``unasked``: the model answered without asking for the tool).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from servecheck.clients.coding import (
    CLAUDE_CODE_QUIET,
    CLAUDE_CODE_TASK,
    CODEX_QUIET,
    CODEX_TASK,
)
from servecheck.clients.frameworks import (
    LANGCHAIN_QUIET,
    LANGCHAIN_TASK,
    PYDANTIC_AI_QUIET,
    PYDANTIC_AI_TASK,
)
from servecheck.clients.opencode import OPENCODE_QUIET, OPENCODE_TASK
from servecheck.engines.base import (
    InstallResult,
    PipStep,
    clean_env,
    file_lock,
    install_venv,
    run_logged,
)
from servecheck.engines.paths import cache_root, logs_dir

INSTALL_TIMEOUT_S = 900.0
TOOL_RESULT = "servecheck: the readme says this project checks LLM servers"


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """One client: what to install (pinned), which routes it speaks, its task script."""

    name: str
    title: str
    registry: str  # pypi | npm
    version: str  # the client's own version, named in every verdict
    packages: tuple[str, ...]  # pinned install arguments
    routes: tuple[str, ...]  # chat | responses | messages
    script: str  # the task script's file name
    telemetry_env: tuple[tuple[str, str], ...] = ()  # its documented switches, all off

    @property
    def label(self) -> str:
        return f"{self.title} {self.version}"

    @property
    def folder(self) -> Path:
        return cache_root() / "clients" / f"{self.name}-{self.version}"

    @property
    def installed(self) -> bool:
        marker = self.folder / ".servecheck-installed"
        return marker.is_file() and marker.read_text() == " ".join(self.packages)


CLIENTS: dict[str, ClientSpec] = {
    c.name: c
    for c in (
        ClientSpec(
            "openai-agents",
            "OpenAI Agents SDK",
            "pypi",
            "0.24.0",
            ("openai-agents==0.24.0",),
            ("chat", "responses"),
            "agents_task.py",
            (("OPENAI_AGENTS_DISABLE_TRACING", "1"), ("DO_NOT_TRACK", "1")),
        ),
        ClientSpec(
            "ai-sdk",
            "Vercel AI SDK",
            "npm",
            "6.0.333",
            ("ai@6.0.333", "@ai-sdk/openai-compatible@2.0.92", "zod@4.1.12"),
            ("chat",),
            "ai_sdk_task.mjs",
            (("DO_NOT_TRACK", "1"), ("NEXT_TELEMETRY_DISABLED", "1")),
        ),
        ClientSpec(
            "claude-code",
            "Claude Code",
            "npm",
            "2.1.332",
            ("@anthropic-ai/claude-code@2.1.332",),
            ("messages",),
            "claude_code_task.mjs",
            CLAUDE_CODE_QUIET,
        ),
        ClientSpec(
            "codex",
            "Codex CLI",
            "npm",
            "0.171.0",
            ("@openai/codex@0.171.0",),
            ("responses",),
            "codex_task.mjs",
            CODEX_QUIET,
        ),
        ClientSpec(
            "pydantic-ai",
            "pydantic-ai",
            "pypi",
            "2.78.0",
            ("pydantic-ai-slim[openai]==2.78.0",),
            ("chat",),
            "pydantic_ai_task.py",
            PYDANTIC_AI_QUIET,
        ),
        ClientSpec(
            "langchain",
            "LangChain (langchain-openai)",
            "pypi",
            "1.8.1",
            ("langchain-openai==1.8.1",),
            ("chat",),
            "langchain_task.py",
            LANGCHAIN_QUIET,
        ),
        ClientSpec(
            "opencode",
            "opencode",
            "npm",
            "1.18.33",
            # the plugin package opencode installs into its config folder at start (from npm),
            # installed here with it so that nothing is fetched in the namespace
            ("opencode-ai@1.18.33", "@opencode-ai/plugin@1.18.33"),
            ("chat",),
            "opencode_task.mjs",
            OPENCODE_QUIET,
        ),
    )
}


def install(spec: ClientSpec) -> InstallResult:
    """Install ``spec`` into its cache folder once; the seconds it took (0 when cached)."""
    want = " ".join(spec.packages)
    if spec.registry == "pypi":
        step = PipStep(("install", *spec.packages), INSTALL_TIMEOUT_S, f"{spec.label}: pip install")
        return install_venv(f"clients-{spec.name}", spec.folder, want, [step])  # folder: the venv
    start = time.monotonic()
    if spec.installed:
        return InstallResult(0.0, True, spec.folder)
    with file_lock(f"clients-{spec.name}-{spec.version}"):
        spec.folder.mkdir(parents=True, exist_ok=True)
        run_logged(
            [
                "npm",
                "install",
                "--prefix",
                str(spec.folder),
                "--no-audit",
                "--no-fund",
                "--save-exact",
                *spec.packages,
            ],
            logs_dir() / f"install-clients-{spec.name}.log",
            timeout_s=INSTALL_TIMEOUT_S,
            env=clean_env({"npm_config_update_notifier": "false", "DO_NOT_TRACK": "1"}),
            what=f"{spec.label}: npm install",
        )
        (spec.folder / ".servecheck-installed").write_text(want)
    return InstallResult(time.monotonic() - start, False, spec.folder)


def task_argv(spec: ClientSpec) -> list[str]:
    """Write the client's task script next to its install; the command that runs it."""
    path = spec.folder / spec.script
    # Written aside and renamed: a second run of the client never reads a half-written script.
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    aside.write_text(SCRIPTS[spec.script])
    aside.replace(path)
    if spec.registry == "pypi":
        return [str(spec.folder / "bin" / "python"), str(path)]
    return ["node", str(path)]  # next to node_modules, so its imports resolve


AGENTS_TASK = f'''
import asyncio, json, os
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel
from openai import AsyncOpenAI
from openai.types.responses import ResponseTextDeltaEvent

set_tracing_disabled(True)
client = AsyncOpenAI(base_url=os.environ["SC_BASE_URL"], api_key=os.environ["SC_API_KEY"],
                     max_retries=0, timeout=float(os.environ["SC_TIMEOUT_S"]))
name = os.environ["SC_MODEL"]
if os.environ["SC_ROUTE"] == "responses":
    model = OpenAIResponsesModel(name, client)
else:
    model = OpenAIChatCompletionsModel(name, client)
calls = []


@function_tool
def read_file(path: str) -> str:
    """Read a file of the project (read-only)."""
    calls.append(path)
    return {TOOL_RESULT!r}


def report(task, ok, detail, unasked=False):
    line = {{"task": task, "ok": bool(ok), "detail": detail, "unasked": unasked}}
    print(json.dumps(line), flush=True)


async def main():
    plain = Agent(name="plain", instructions="Answer in one short line.", model=model)
    try:
        run = Runner.run_streamed(plain, "Say hello.")
        text = ""
        async for event in run.stream_events():
            if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
                text += event.data.delta
        report("stream", text, f"{{len(text)}} characters streamed")
    except Exception as exc:
        report("stream", False, f"{{type(exc).__name__}}: {{exc}}")
    agent = Agent(name="tools", instructions="Look with read_file before you answer.",
                  model=model, tools=[read_file])
    try:
        result = await Runner.run(agent, "What is this project?", max_turns=4)
        answer = str(result.final_output or "")
        report("tool", calls and answer,
               f"read_file called {{len(calls)}} time(s); answer {{len(answer)}} characters",
               unasked=not calls)
    except Exception as exc:
        report("tool", False, f"{{type(exc).__name__}}: {{exc}}")


asyncio.run(main())
'''

AI_SDK_TASK = f"""
import {{ streamText, generateText, tool, stepCountIs }} from "ai";
import {{ createOpenAICompatible }} from "@ai-sdk/openai-compatible";
import {{ z }} from "zod";

const provider = createOpenAICompatible({{
  name: "target", baseURL: process.env.SC_BASE_URL, apiKey: process.env.SC_API_KEY,
}});
const model = provider.chatModel(process.env.SC_MODEL);
const report = (task, ok, detail, unasked = false) =>
  console.log(JSON.stringify({{ task, ok: !!ok, detail, unasked }}));
const why = (e) => `${{e?.name ?? "Error"}}: ${{e?.message ?? e}}`;

try {{
  let failed = null;
  const run = streamText({{ model, prompt: "Say hello.", maxRetries: 0, onError: ({{ error }}) => {{ failed = error; }} }});
  let text = "";
  for await (const delta of run.textStream) text += delta;
  if (failed) report("stream", false, why(failed));
  else report("stream", text, `${{text.length}} characters streamed`);
}} catch (e) {{ report("stream", false, why(e)); }}

let calls = 0;
try {{
  const result = await generateText({{
    model, prompt: "What is this project?", maxRetries: 0, stopWhen: stepCountIs(4),
    tools: {{
      read_file: tool({{
        description: "Read a file of the project (read-only).",
        inputSchema: z.object({{ path: z.string() }}),
        execute: async () => {{ calls += 1; return {TOOL_RESULT!r}; }},
      }}),
    }},
  }});
  report("tool", calls > 0 && result.text,
    `read_file called ${{calls}} time(s); answer ${{result.text.length}} characters`, calls === 0);
}} catch (e) {{ report("tool", false, why(e)); }}
"""

SCRIPTS = {
    "agents_task.py": AGENTS_TASK,
    "ai_sdk_task.mjs": AI_SDK_TASK,
    "claude_code_task.mjs": CLAUDE_CODE_TASK,
    "codex_task.mjs": CODEX_TASK,
}

SCRIPTS.update(
    {
        "pydantic_ai_task.py": PYDANTIC_AI_TASK.replace("@TOOL_RESULT@", repr(TOOL_RESULT)),
        "langchain_task.py": LANGCHAIN_TASK.replace("@TOOL_RESULT@", repr(TOOL_RESULT)),
        "opencode_task.mjs": OPENCODE_TASK.replace("@TOOL_RESULT@", repr(TOOL_RESULT)),
    }
)
__all__ = ["CLIENTS", "ClientSpec", "install", "task_argv"]
