"""The coding agents ``servecheck clients`` runs as they ship: Claude Code and Codex CLI.

Both are native binaries installed from npm; a small node script (its text below, written next
to the install at run time, like the SDK clients' scripts in :mod:`servecheck.clients.catalog`)
starts the binary headless in a fresh working folder that holds a README, once per task, and
prints the task lines every client prints (``{"task", "ok", "detail", "unasked"}``):

- ``stream``: a plain answer, streamed, with no tool offered (Claude Code ``--tools ""``; Codex
  offers its own tools whatever the prompt, so its plain answer may include one of them).
- ``tool``: a read-only tool round trip: Claude Code offers only ``Read`` (``--tools Read``), Codex
  runs its shell in its ``read-only`` sandbox; the model asks, the client runs the tool and sends
  its result, the model answers.

The scripts point each client at the relayed target by its documented switches (Claude Code:
``ANTHROPIC_BASE_URL``, ``ANTHROPIC_AUTH_TOKEN``, ``ANTHROPIC_MODEL`` and the per-tier model
variables; Codex: a ``config.toml`` in a fresh ``CODEX_HOME`` with a model provider whose key is
read from an environment variable). The key travels by environment only, never in argv, which a
process list shows. Every telemetry, error-report, update and other non-essential switch is off
(the ``*_QUIET`` tuples and the Codex config below), though the namespace already drops that
traffic: the switches keep the clients from waiting on connections that cannot succeed.
"""

from __future__ import annotations

# Claude Code's documented switches (code.claude.com/docs env-vars): each one named here is off.
CLAUDE_CODE_QUIET: tuple[tuple[str, str], ...] = (
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_ERROR_REPORTING", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
    ("CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY", "1"),
    ("DO_NOT_TRACK", "1"),
)
# Codex reads its switches from config.toml (CODEX_TASK writes them); these cover the rest.
CODEX_QUIET: tuple[tuple[str, str], ...] = (("DO_NOT_TRACK", "1"), ("NO_COLOR", "1"))

# What both scripts share: a working folder with a README, the child's environment without
# servecheck's own variables, a bounded run of the binary and the JSON lines it prints.
RUN_JSON_JS = r"""
// Run the binary with a time bound; its stdout as JSON events, the last stderr line kept.
function runJson(bin, args, env, ms) {
  return new Promise((resolve) => {
    // Its own process group, killed whole: a node launcher (Codex's) starts the native binary as a
    // child, and what opencode starts must not outlive the bound either.
    const child = spawn(bin, args, { cwd: work, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let out = "", err = "", late = false;
    const timer = setTimeout(() => {
      late = true;
      try { process.kill(-child.pid, "SIGKILL"); } catch { child.kill("SIGKILL"); }
    }, ms);
    child.stdout.on("data", (d) => { out += d; });
    child.stderr.on("data", (d) => { err += d; });
    child.on("close", (code) => {
      clearTimeout(timer);
      const events = [];
      for (const line of out.split("\n")) {
        try { const e = JSON.parse(line); if (e && typeof e === "object") events.push(e); } catch {}
      }
      const last = err.trim().split("\n").filter(Boolean).pop() ?? "";
      resolve({ events, code, late, last });
    });
    child.on("error", (e) => { clearTimeout(timer); resolve({ events: [], code: -1, late, last: String(e) }); });
  });
}
"""

_COMMON = (
    r"""
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";

const SC = {
  base: process.env.SC_BASE_URL, key: process.env.SC_API_KEY, model: process.env.SC_MODEL,
  budget: Number(process.env.SC_TIMEOUT_S) * 1000,
};
const README = "# servecheck\n\nservecheck: the readme says this project checks LLM servers\n";
const report = (task, ok, detail, unasked = false) =>
  console.log(JSON.stringify({ task, ok: !!ok, detail, unasked }));
const scratch = mkdtempSync(join(process.cwd(), "run-"));  // next to the install, not /tmp
const work = join(scratch, "work");
mkdirSync(work);
writeFileSync(join(work, "README.md"), README);
process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));

function childEnv(extra) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("SC_")) env[k] = v;
  return { ...env, HOME: scratch, ...extra };
}

"""
    + RUN_JSON_JS
    + r"""const ended = (r, ms) => r.late ? `no end within ${ms / 1000} s (killed)` :
  `exit status ${r.code}${r.last ? ": " + r.last.slice(0, 200) : ""}`;
const each = Math.max(5000, Math.floor(SC.budget / 2) - 2000);  // two tasks share the budget
"""
)

CLAUDE_CODE_TASK = (
    _COMMON
    + r"""
const bin = join(process.cwd(), "node_modules", ".bin", "claude");
// Claude Code appends /v1/messages itself: the base is the target without its /v1.
const env = childEnv({
  ANTHROPIC_BASE_URL: SC.base.replace(/\/v1\/?$/, ""), ANTHROPIC_AUTH_TOKEN: SC.key,
  ANTHROPIC_MODEL: SC.model, ANTHROPIC_SMALL_FAST_MODEL: SC.model,
  ANTHROPIC_DEFAULT_OPUS_MODEL: SC.model, ANTHROPIC_DEFAULT_SONNET_MODEL: SC.model,
  ANTHROPIC_DEFAULT_HAIKU_MODEL: SC.model, CLAUDE_CONFIG_DIR: join(scratch, ".claude"),
});
// The prompt goes first: --tools and --allowedTools take every word after them as a tool name.
const base = (prompt) => ["-p", prompt, "--output-format", "stream-json", "--verbose", "--model", SC.model,
  "--no-session-persistence", "--permission-mode", "dontAsk"];

// The result event says how the run ended; its text is the API error when one broke it.
function outcome(r) {
  const result = r.events.find((e) => e.type === "result");
  const blocks = (role, type) => r.events.filter((e) => e.type === role)
    .flatMap((e) => e.message?.content ?? []).filter((b) => typeof b === "object" && b.type === type);
  const deltas = r.events.filter((e) => e.type === "stream_event" &&
    e.event?.delta?.type === "text_delta").length;
  const ok = result && result.subtype === "success" && !result.is_error;
  // An API error ends the run as "success" with is_error set and the error as its text.
  const said = result ? String(result.result ?? result.errors ?? "").slice(0, 240) : "";
  const why = result ? (said || result.subtype) : ended(r, each);
  return { ok, why, text: ok ? String(result.result ?? "") : "", deltas,
    uses: blocks("assistant", "tool_use"), results: blocks("user", "tool_result") };
}

{
  const r = outcome(await runJson(bin, [...base("Say hello in one short line."),
    "--include-partial-messages", "--tools", ""], env, each));
  if (!r.ok) report("stream", false, r.why);
  else report("stream", r.deltas > 0, `${r.deltas} text deltas streamed; answer ${r.text.length} characters`);
}
{
  const r = outcome(await runJson(bin, [...base(
    "Read README.md with the Read tool, then say in one line what this project is."),
    "--tools", "Read", "--allowedTools", "Read"], env, each));
  const ran = r.uses.filter((u) => u.name === "Read").length;
  const detail = `Read asked for ${ran} time(s), ${r.results.length} tool result(s) sent` +
    (r.results.some((b) => b.is_error) ? " (the tool said it failed)" : "");
  if (!r.ok) report("tool", false, `${r.why}; ${detail}`);  // broken, whether asked or not
  else report("tool", ran > 0 && r.results.length > 0 && r.text,
    `${detail}; answer ${r.text.length} characters`, ran === 0);
}
"""
)

CODEX_TASK = (
    _COMMON
    + r"""
const bin = join(process.cwd(), "node_modules", ".bin", "codex");
const home = join(scratch, ".codex");
mkdirSync(home);
const q = (s) => JSON.stringify(String(s));  // a TOML basic string
// Every non-essential switch Codex documents, off; plugins off too (they fetch a public Git host).
writeFileSync(join(home, "config.toml"), `model = ${q(SC.model)}
model_provider = "servecheck"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[features]
plugins = false

[model_providers.servecheck]
name = "servecheck target"
base_url = ${q(SC.base)}
env_key = "SERVECHECK_TARGET_KEY"
wire_api = "responses"
`);
const env = childEnv({ CODEX_HOME: home, SERVECHECK_TARGET_KEY: SC.key });
const base = ["exec", "--json", "--ephemeral", "--skip-git-repo-check", "--sandbox", "read-only",
  "--color", "never", "--model", SC.model];

function outcome(r) {
  const items = r.events.filter((e) => e.type === "item.completed").map((e) => e.item ?? {});
  const said = items.filter((i) => i.type === "agent_message").map((i) => String(i.text ?? "")).join("");
  const failed = r.events.find((e) => e.type === "turn.failed" || e.type === "error");
  const done = r.events.some((e) => e.type === "turn.completed");
  const why = failed ? String(failed.error?.message ?? failed.message ?? "turn failed").slice(0, 300)
    : (done ? "" : ended(r, each));
  return { ok: done && !failed, why, said, shell: items.filter((i) => i.type === "command_execution") };
}

{
  const r = outcome(await runJson(bin, [...base, "Say hello in one short line."], env, each));
  if (!r.ok) report("stream", false, r.why);
  else report("stream", r.said, `answer ${r.said.length} characters` +
    (r.shell.length ? `; ${r.shell.length} command(s) run on the way` : ""));
}
{
  const r = outcome(await runJson(bin, [...base,
    "Run `cat README.md` in the shell, then say in one line what this project is."], env, each));
  const detail = `${r.shell.length} shell command(s) run`;
  if (!r.ok) report("tool", false, `${r.why}; ${detail}`);  // broken, whether asked or not
  else report("tool", r.shell.length > 0 && r.said,
    `${detail}; answer ${r.said.length} characters`, r.shell.length === 0);
}
"""
)

__all__ = ["CLAUDE_CODE_QUIET", "CLAUDE_CODE_TASK", "CODEX_QUIET", "CODEX_TASK"]
