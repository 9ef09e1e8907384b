"""opencode as ``servecheck clients`` runs it: ``opencode run`` headless, on chat completions.

opencode (npm ``opencode-ai``, a native binary) reaches the target through a custom provider of
its config, ``@ai-sdk/openai-compatible`` with ``baseURL`` and ``apiKey`` (the key read from an
environment variable by opencode's ``{env:...}`` substitution, never in argv or a file). A small
node script (its text below, written next to the install at run time, like the other clients'
scripts in :mod:`servecheck.clients.catalog`) runs ``opencode run --format json`` once per task in
a fresh working folder that holds a README, and prints the task lines every client prints:

- ``stream``: a plain answer with every tool switched off (opencode always streams).
- ``tool``: a read-only round trip: only opencode's own ``read`` tool is on (``bash``, ``edit``,
  ``write``, ``webfetch`` and the rest are off, and denied by permission as well, so a model, the
  scripted reference's included, can run nothing else); the model asks, opencode reads, the model
  answers. A call opencode could not parse (it repairs it into its ``invalid`` tool) fails it.

What opencode would fetch at start is kept out of the namespace: the ``@opencode-ai/plugin``
package it installs into its config folder from npm is installed with it (the task's config
folder links to the install), the models.dev catalogue is not fetched
(``OPENCODE_DISABLE_MODELS_FETCH``; opencode falls back to the snapshot it ships), and
auto-update, sharing, the default plugins, LSP downloads and Claude Code's files are switched
off by their documented switches. opencode's state (its database, logs, snapshots) lives in the
task's own folder (``HOME`` and the ``XDG_*`` folders), removed at the end.
"""

from __future__ import annotations

from servecheck.clients.coding import RUN_JSON_JS

OPENCODE_QUIET: tuple[tuple[str, str], ...] = (
    ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
    ("OPENCODE_DISABLE_SHARE", "1"),
    ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
    ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1"),
    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
    ("OPENCODE_DISABLE_CLAUDE_CODE", "1"),
    ("OPENCODE_DISABLE_EXTERNAL_SKILLS", "1"),
    ("DO_NOT_TRACK", "1"),
    ("NO_COLOR", "1"),
)

OPENCODE_TASK = (
    r"""
import { spawn } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const SC = {
  base: process.env.SC_BASE_URL, key: process.env.SC_API_KEY, model: process.env.SC_MODEL,
  budget: Number(process.env.SC_TIMEOUT_S) * 1000,
};
const README = "# servecheck\n\n" + @TOOL_RESULT@ + "\n";
const report = (task, ok, detail, unasked = false) =>
  console.log(JSON.stringify({ task, ok: !!ok, detail, unasked }));
const here = process.cwd();  // the install folder
const scratch = mkdtempSync(join(here, "run-"));
const work = join(scratch, "work");
mkdirSync(work);
writeFileSync(join(work, "README.md"), README);
process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));
// opencode installs @opencode-ai/plugin into its config folder at start unless the folder's
// node_modules already holds what its package.json asks for: the install's own does.
const conf = join(scratch, "config", "opencode");
mkdirSync(conf, { recursive: true });
for (const f of ["package.json", "package-lock.json"]) copyFileSync(join(here, f), join(conf, f));
symlinkSync(join(here, "node_modules"), join(conf, "node_modules"));

const bin = join(here, "node_modules", ".bin", "opencode");
const DENY = { edit: "deny", bash: "deny", webfetch: "deny", websearch: "deny", task: "deny",
  external_directory: "deny" };
function config(tools) {
  return {
    autoupdate: false, share: "disabled", lsp: false, formatter: false,
    provider: { target: {
      npm: "@ai-sdk/openai-compatible", name: "servecheck target",
      options: { baseURL: SC.base, apiKey: "{env:SC_OPENCODE_KEY}" },
      models: { [SC.model]: { name: SC.model } },
    } },
    model: `target/${SC.model}`, small_model: `target/${SC.model}`,
    tools, permission: DENY,
  };
}
function childEnv(tools) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("SC_")) env[k] = v;
  return { ...env, HOME: scratch, XDG_CONFIG_HOME: join(scratch, "config"),
    XDG_DATA_HOME: join(scratch, "data"), XDG_CACHE_HOME: join(scratch, "cache"),
    XDG_STATE_HOME: join(scratch, "state"), SC_OPENCODE_KEY: SC.key,
    OPENCODE_CONFIG_CONTENT: JSON.stringify(config(tools)) };
}

// One `opencode run`, bounded: its JSON events, its exit, the last stderr line.
function run(prompt, tools, ms) {
  return runJson(bin, ["run", "--format", "json", "-m", `target/${SC.model}`, prompt],
    childEnv(tools), ms);
}
"""
    + RUN_JSON_JS
    + r"""const each = Math.max(5000, Math.floor(SC.budget / 2) - 2000);  // two tasks share the budget

// How a run ended: the first error event opencode printed, else its exit.
function failure(r) {
  const e = r.events.find((x) => x.type === "error");
  if (e) return `${e.error?.name ?? "Error"}: ${String(e.error?.data?.message ?? "").slice(0, 300)}`;
  if (r.late) return `no end within ${each / 1000} s (killed)`;
  if (r.code !== 0) return `exit status ${r.code}${r.last ? ": " + r.last.slice(0, 200) : ""}`;
  return "";
}
const toolError = (p) => `${p.tool}: ${String(p.state?.error ?? p.state?.status ?? "").slice(0, 200)}`;
const texts = (r) => r.events.filter((e) => e.type === "text").map((e) => String(e.part?.text ?? ""));

{
  const r = await run("Say hello in one short line.", { "*": false }, each);
  const text = texts(r).join("");
  const bad = failure(r);
  report("stream", !bad && text, bad || `${text.length} characters streamed`);
}
{
  const r = await run("What is this project? Read README.md with the read tool before you answer.",
    { "*": false, read: true }, each);
  const uses = r.events.filter((e) => e.type === "tool_use").map((e) => e.part ?? {});
  // The read tool ran on a call that parsed: it read, or it said the (scripted) path is missing.
  const ran = uses.filter((p) => p.tool === "read" && typeof p.state?.input?.filePath === "string" &&
    (p.state.status === "completed" || /^File not found/.test(String(p.state.error ?? ""))));
  const broken = uses.find((p) => !ran.includes(p));
  const answer = texts(r).join("");
  const bad = failure(r);
  let detail = `read called ${ran.length} time(s)` +
    (ran.length ? ` (${ran[0].state.status === "completed" ? "read" : "file not found"})` : "") +
    `; answer ${answer.length} characters`;
  if (broken) detail += `; a tool call opencode could not use: ${toolError(broken)}`;
  if (bad) detail = `${bad}; ${detail}`;
  report("tool", !bad && !broken && ran.length && answer, detail, uses.length === 0 && !bad);
}
"""
)

__all__ = ["OPENCODE_QUIET", "OPENCODE_TASK"]
