"""The Python agent frameworks ``servecheck clients`` runs: pydantic-ai and LangChain.

Each is a PyPI package installed into its own venv in the cache (:mod:`servecheck.clients.catalog`
holds the pins); its task script (the text below, written next to the install at run time) points
the framework's own OpenAI-compatible client at the relayed target and prints the task lines every
client prints (``{"task", "ok", "detail", "unasked"}``):

- pydantic-ai: an ``Agent`` over ``OpenAIChatModel`` with its ``OpenAICompatibleProvider`` (the
  provider for a service that is not OpenAI); ``stream``: ``run_stream`` and ``stream_text``;
  ``tool``: ``run`` with a ``read_file`` tool, its calls validated against the tool's schema.
- LangChain: ``ChatOpenAI`` (langchain-openai) with ``base_url``; ``stream``: ``.stream``;
  ``tool``: ``bind_tools`` and a small tool loop (at most four model turns) whose turns are
  streamed too, so the streamed tool-call deltas go through LangChain's own chunk merging.

Neither sends telemetry unless asked (pydantic-ai: ``instrument`` off, logfire not installed;
LangChain: LangSmith tracing only with ``LANGSMITH_TRACING``); the switches below say so anyway,
and the namespace drops any other traffic. The SDK's retries are off, so one refused request
fails the task at once, and its timeout is half the run's bound (two tasks share it).

``@TOOL_RESULT@`` in a script is replaced by the tool's answer (the catalog's ``TOOL_RESULT``).
"""

from __future__ import annotations

PYDANTIC_AI_QUIET: tuple[tuple[str, str], ...] = (
    ("DO_NOT_TRACK", "1"),
    ("OTEL_SDK_DISABLED", "true"),
    ("LOGFIRE_SEND_TO_LOGFIRE", "false"),
)
LANGCHAIN_QUIET: tuple[tuple[str, str], ...] = (
    ("DO_NOT_TRACK", "1"),
    ("LANGSMITH_TRACING", "false"),
    ("LANGCHAIN_TRACING_V2", "false"),
    ("OTEL_SDK_DISABLED", "true"),
)

# What both scripts share: the environment the run sets, and one JSON line per task.
_COMMON = """
import json, os

BASE, KEY, MODEL = os.environ["SC_BASE_URL"], os.environ["SC_API_KEY"], os.environ["SC_MODEL"]
# each request's bound: two tasks share the budget, so a stalled one fails by name
TIMEOUT = max(5.0, float(os.environ["SC_TIMEOUT_S"]) / 2 - 2)
calls = []


def report(task, ok, detail, unasked=False):
    line = {"task": task, "ok": bool(ok), "detail": detail, "unasked": unasked}
    print(json.dumps(line), flush=True)


def why(exc):
    return f"{type(exc).__name__}: {exc}"[:600]
"""

PYDANTIC_AI_TASK = (
    _COMMON
    + """
import asyncio
from openai import AsyncOpenAI
from pydantic_ai import Agent, UsageLimits
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

Agent.instrument_all(False)
client = AsyncOpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=TIMEOUT)
model = OpenAIChatModel(MODEL, provider=OpenAICompatibleProvider("target", openai_client=client))


def read_file(path: str) -> str:
    \"\"\"Read a file of the project (read-only).\"\"\"
    calls.append(path)
    return @TOOL_RESULT@


def parts(messages, kind):
    return [p for m in messages for p in getattr(m, "parts", []) if p.part_kind == kind]


async def main():
    plain = Agent(model, instructions="Answer in one short line.")
    try:
        text = ""
        async with plain.run_stream("Say hello.") as run:
            async for delta in run.stream_text(delta=True):
                text += delta
        report("stream", text, f"{len(text)} characters streamed")
    except Exception as exc:
        report("stream", False, why(exc))
    agent = Agent(model, instructions="Look with read_file before you answer.",
                  tools=[read_file], retries=1)
    try:
        result = await agent.run("What is this project?",
                                 usage_limits=UsageLimits(request_limit=4))
        answer = str(result.output or "")
        messages = result.all_messages()
        asked = parts(messages, "tool-call")
        detail = f"read_file called {len(calls)} time(s); answer {len(answer)} characters"
        if asked and not calls:  # asked for, but the call did not validate: never run
            said = parts(messages, "retry-prompt") + parts(messages, "tool-return")
            why_not = str(said[0].content)[:240] if said else "no reason given"
            detail += f"; the model's call was refused by pydantic-ai's validation: {why_not}"
        report("tool", calls and answer, detail, unasked=not asked)
    except Exception as exc:
        report("tool", False, why(exc))


asyncio.run(main())
"""
)

LANGCHAIN_TASK = (
    _COMMON
    + """
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

llm = ChatOpenAI(model=MODEL, base_url=BASE, api_key=KEY, max_retries=0, timeout=TIMEOUT)


@tool
def read_file(path: str) -> str:
    \"\"\"Read a file of the project (read-only).\"\"\"
    calls.append(path)
    return @TOOL_RESULT@


def streamed(model, messages):
    \"\"\"One model turn, streamed: its chunks added up as LangChain's agents do.\"\"\"
    whole = None
    for chunk in model.stream(messages):
        whole = chunk if whole is None else whole + chunk
    if whole is None:
        raise RuntimeError("the stream ended without a chunk")
    return whole


try:
    text = ""
    for chunk in llm.stream([SystemMessage("Answer in one short line."), HumanMessage("Say hello.")]):
        text += chunk.text
    report("stream", text, f"{len(text)} characters streamed")
except Exception as exc:
    report("stream", False, why(exc))

try:
    bound = llm.bind_tools([read_file])
    messages = [SystemMessage("Look with read_file before you answer."),
                HumanMessage("What is this project?")]
    broken, answer = [], ""
    for _ in range(4):
        turn = streamed(bound, messages)
        messages.append(turn)
        broken += [f"{c.get('name') or '(no name)'} with arguments {c.get('args')!r}"
                   + (f": {c['error']}" if c.get("error") else "") for c in turn.invalid_tool_calls]
        if broken or not turn.tool_calls:
            answer = turn.text
            break
        for call in turn.tool_calls:
            messages.append(read_file.invoke(call))
    detail = f"read_file called {len(calls)} time(s); answer {len(answer)} characters"
    if broken:
        detail += f"; tool call LangChain could not parse: {broken[0][:200]}"
    report("tool", calls and answer and not broken, detail, unasked=not calls and not broken)
except Exception as exc:
    report("tool", False, why(exc))
"""
)

__all__ = ["LANGCHAIN_QUIET", "LANGCHAIN_TASK", "PYDANTIC_AI_QUIET", "PYDANTIC_AI_TASK"]
