// Drives `eukhe mcp` with the protocol's official TypeScript SDK
// (@modelcontextprotocol/sdk, pinned in package.json beside this file and
// installed by scripts/setup under target/mcp-ts), over standard input and
// output: initialize, every tool tools/list names, the persistent bash
// tool's restart, a long command answered at its timeout, and errors.
//
// Run by tests/mcp.rs with EUKHE_BIN (the built binary), EUKHE_SOCKET and
// EUKHE_STATE_DIR (a private daemon, not running yet: the server starts
// it) and EUKHE_MCP_TS_MODULES (the SDK's node_modules). Prints one `ok:`
// line per step; any failure throws, and the exit status is not zero.

import assert from "node:assert/strict";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.EUKHE_MCP_TS_MODULES;
assert.ok(modules, "EUKHE_MCP_TS_MODULES names the SDK's node_modules");
const sdk = (path) =>
  import(pathToFileURL(join(modules, "@modelcontextprotocol/sdk/dist/esm", path)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");
const { McpError, ErrorCode } = await sdk("types.js");

const WAIT_MS = 20000;
const S = "ts-test";

function step(what) {
  console.log(`ok: ${what}`);
}

function text(result) {
  return result.content
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("");
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const env = {};
for (const name of ["EUKHE_SOCKET", "EUKHE_STATE_DIR", "PATH", "HOME"]) {
  if (process.env[name] !== undefined) env[name] = process.env[name];
}
const transport = new StdioClientTransport({
  command: process.env.EUKHE_BIN,
  args: ["mcp"],
  env,
  cwd: "/",
  stderr: "inherit",
});
const client = new Client({ name: "eukhe-ts-test", version: "1.0.0" });

// The tools called, so every tool listed is shown to be called.
const called = new Set();

/** A call that must succeed (no isError): its result. */
async function call(tool, args) {
  called.add(tool);
  const result = await client.callTool({ name: tool, arguments: args });
  assert.ok(!result.isError, `${tool} ${JSON.stringify(args)} failed: ${text(result)}`);
  return result;
}

/** A call that must be answered with isError: its one line. */
async function failing(tool, args) {
  called.add(tool);
  const result = await client.callTool({ name: tool, arguments: args });
  assert.ok(result.isError, `${tool} ${JSON.stringify(args)} did not fail: ${text(result)}`);
  const line = text(result).trim();
  assert.ok(!line.includes("\n"), `not one line: ${line}`);
  return line;
}

/** A call that must be refused as invalid params (a JSON-RPC error). */
async function invalidParams(tool, args) {
  try {
    const result = await client.callTool({ name: tool, arguments: args });
    assert.fail(`${tool} ${JSON.stringify(args)} was answered, not refused: ${text(result)}`);
  } catch (e) {
    assert.ok(e instanceof McpError, `${tool}: ${e}`);
    assert.equal(e.code, ErrorCode.InvalidParams, `${tool}: ${e.message}`);
    return e.message;
  }
}

/** Read `log` until `condition(text)` holds; the text. */
async function logUntil(args, what, condition, within = 15000) {
  const deadline = Date.now() + within;
  for (;;) {
    const seen = text(await call("log", args));
    if (condition(seen)) return seen;
    assert.ok(Date.now() < deadline, `timed out waiting until ${what}; last log:\n${seen}`);
    await sleep(200);
  }
}

await client.connect(transport);
const server = client.getServerVersion();
assert.equal(server.name, "eukhe", JSON.stringify(server));
assert.ok(client.getServerCapabilities().tools, "the server offers tools");
step(`initialize (server ${server.name} ${server.version})`);

const { tools } = await client.listTools();
const listed = new Map(tools.map((tool) => [tool.name, tool]));
for (const tool of tools) {
  assert.ok(tool.description && tool.description.length > 80, tool.name);
  assert.equal(tool.inputSchema.type, "object", tool.name);
}
const bashSchema = listed.get("bash").inputSchema;
assert.deepEqual(bashSchema.required, ["session"], JSON.stringify(bashSchema));
for (const name of ["command", "restart", "force", "timeout_ms", "tty"]) {
  assert.ok(name in bashSchema.properties, `bash takes ${name}`);
}
step(`list tools: ${[...listed.keys()].sort().join(", ")}`);

// new_session, list_sessions
const created = (await call("new_session", { name: S, cwd: "/" })).structuredContent;
assert.equal(created.name, S);
assert.equal(created.id.length, 8, JSON.stringify(created));
const sessions = (await call("list_sessions", {})).structuredContent.sessions;
const record = sessions.find((s) => s.id === created.id);
assert.ok(record && record.name === S && record.cwd === "/", JSON.stringify(sessions));
step(`new_session ${created.id}; list_sessions lists it (${record.state})`);

// bash: the shell persists from call to call.
const set = (await call("bash", { session: S, command: "cd /tmp && export X=1; f(){ echo f-here; }" }))
  .structuredContent;
assert.equal(set.exit_status, 0, JSON.stringify(set));
const kept = (await call("bash", { session: S, command: "pwd; echo $X; f" })).structuredContent;
assert.equal(kept.output, "/tmp\n1\nf-here\n");
const failed = (await call("bash", { session: S, command: "echo out; echo err >&2; exit 3" }))
  .structuredContent;
assert.equal(failed.exit_status, 3);
assert.equal(failed.output, "out\n[stderr] err\n");
step("bash: cd, export and a function persist; exit status and stderr marked");

// A long command answers at its timeout with its number and the output so
// far, goes on, and its whole output is kept.
const started = Date.now();
const slow = await call("bash", {
  session: S,
  command: "echo early; sleep 2; echo late-output",
  timeout_ms: 500,
});
const waited = Date.now() - started;
assert.ok(waited < 1800, `the call waited ${waited} ms for a 500 ms timeout`);
const running = slow.structuredContent;
assert.equal(running.running, true, JSON.stringify(running));
assert.equal(running.exit_status, null);
assert.ok(running.output.includes("early"), running.output);
assert.ok(text(slow).includes(`\`log\` session=${S}, run=${running.bash}`), text(slow));
const whole = await logUntil(
  { session: S, run: running.bash },
  "the long command's end is in the log",
  (seen) => seen.includes(`[bash ${running.bash} exited 0]`),
);
assert.ok(whole.includes("early\nlate-output\n"), whole);
step(`bash past its timeout_ms answered after ${waited} ms as bash ${running.bash}; all its output in \`log\``);

// restart: a fresh shell, the transcript kept with one notice.
const restarted = await call("bash", { session: S, restart: true });
assert.equal(restarted.structuredContent.restarted, true);
assert.ok(text(restarted).includes("fresh shell"), text(restarted));
const fresh = (await call("bash", { session: S, command: "pwd; echo ${X-unset}; type -t f || echo no-f" }))
  .structuredContent;
assert.equal(fresh.output, "/\nunset\nno-f\n", "the shell after restart is the session's first one");
const afterRestart = text(await call("log", { session: S }));
assert.equal(afterRestart.split("restarted at the user's request").length - 1, 1, afterRestart);
assert.ok(afterRestart.includes("late-output\n"), "the transcript is kept");
const both = await call("bash", { session: S, restart: true, command: "cd /tmp; echo in $PWD" });
assert.equal(both.structuredContent.restarted, true);
assert.equal(both.structuredContent.output, "in /tmp\n");
step("bash restart=true: fresh shell (directory and variables back), transcript kept, one notice");

// send and log: a queued run, its end read from the transcript.
const queued = (await call("send", { session: S, command: "echo queued-run; exit 4" })).structuredContent;
const ran = await logUntil(
  { session: S, run: queued.run },
  "the queued run has ended",
  (seen) => seen.includes(`[run ${queued.run} exited 4]`),
);
assert.ok(ran.includes("queued-run\n"), ran);
const tail = text(await call("log", { session: S, tail: 3 }));
assert.ok(tail.includes(`[run ${queued.run} exited 4]`), tail);
step(`send: run ${queued.run}; log run=N and tail=3 show its output and exit 4`);

// A restart is refused while a run runs; force ends it, recorded interrupted.
const busy = (await call("send", { session: S, command: "echo sleeping; sleep 300" })).structuredContent;
await logUntil({ session: S, run: busy.run }, "the run has started", (seen) =>
  seen.includes("\nsleeping\n"),
);
const refused = await failing("bash", { session: S, restart: true });
assert.ok(
  refused.includes("busy (a run)") && refused.includes("`bash` with `restart: true, force: true`"),
  refused,
);
await call("bash", { session: S, restart: true, force: true });
await logUntil({ session: S, run: busy.run }, "the forced run is interrupted", (seen) =>
  seen.includes(`[run ${busy.run} interrupted]`),
);
step(`a restart while run ${busy.run} runs: refused (${refused}); with force it ends interrupted`);

// cancel: a command still running after its timeout, by its number.
const sleeper = (await call("bash", { session: S, command: "sleep 30", timeout_ms: 200 })).structuredContent;
assert.equal(sleeper.running, true);
const cancelled = (await call("cancel", { session: S, run: sleeper.bash })).structuredContent;
assert.equal(cancelled.cancelled, sleeper.bash, JSON.stringify(cancelled));
await logUntil({ session: S, run: sleeper.bash }, "the cancelled command has ended", (seen) =>
  seen.includes(`[bash ${sleeper.bash} cancelled: signal 2]`),
);
step(`cancel run=${sleeper.bash}: the command ends (signal 2)`);

// A terminal run: bash tty=true, screen, send_keys, wait_for.
const prompt = (await call("bash", {
  session: S,
  command: 'read -p "Name? " n; echo "hello $n"',
  tty: true,
  timeout_ms: WAIT_MS,
})).structuredContent;
assert.equal(prompt.waiting, true, JSON.stringify(prompt));
const shown = (await call("screen", { session: S, run: prompt.bash })).structuredContent;
assert.ok(shown.screen.lines.join("\n").includes("Name?"), JSON.stringify(shown.screen));
const typed = (await call("send_keys", { session: S, run: prompt.bash, keys: ["ts", "Enter"] }))
  .structuredContent;
assert.equal(typed.typed_bytes, 3, JSON.stringify(typed));
const ended = (await call("wait_for", { session: S, run: prompt.bash, end: true, timeout_ms: WAIT_MS }))
  .structuredContent;
assert.equal(ended.timed_out, false, JSON.stringify(ended));
assert.equal(ended.screen.ended, 0, JSON.stringify(ended.screen));
assert.ok(ended.screen.lines.join("\n").includes("hello ts"), JSON.stringify(ended.screen));
step(`bash tty=true waits at its prompt; screen, send_keys, wait_for end: "hello ts"`);

// wait: it wakes on a run's end, from a cursor, with the run's status;
// from the next cursor it times out, and everything goes on.
const sleepy = (await call("send", { session: S, command: "sleep 1; exit 5" })).structuredContent;
const t0 = Date.now();
const woke = await call("wait", { session: S, run: sleepy.run, timeout_ms: WAIT_MS });
const wokeAfter = Date.now() - t0;
const facts = woke.structuredContent;
assert.equal(facts.timed_out, false, JSON.stringify(facts));
assert.equal(facts.status, 5, JSON.stringify(facts));
assert.equal(facts.events.at(-1).event.kind, "run_finished", JSON.stringify(facts));
assert.ok(wokeAfter < WAIT_MS / 2, `the wait woke after ${wokeAfter} ms`);
assert.ok(text(woke).includes(`next_since: ${facts.next_since}`), text(woke));
const quiet = (await call("wait", { session: S, any_run: true, since: facts.next_since, timeout_ms: 300 }))
  .structuredContent;
assert.equal(quiet.timed_out, true, JSON.stringify(quiet));
await invalidParams("wait", { session: S });
step(`wait run=${sleepy.run} woke on its end (status 5) after ${wokeAfter} ms; from next_since it times out`);

// Errors: arguments that do not fit are invalid params; a valid call that
// fails is an isError result of one line.
const noSession = await invalidParams("bash", { command: "true" });
assert.ok(noSession.includes("session"), noSession);
await invalidParams("bash", { session: S, command: "true", stray: 1 });
await invalidParams("bash", { session: S });
await invalidParams("log", { session: S, tail: "ten" });
const unknown = await failing("bash", { session: "no-such-session", command: "true" });
assert.ok(unknown.includes("no session"), unknown);
const unknownLog = await failing("log", { session: "no-such-session" });
assert.ok(unknownLog.includes("no session"), unknownLog);
step(`bad arguments: invalid params; an unknown session: one line (${unknown})`);

// remove_session.
const removed = (await call("remove_session", { session: S, force: true })).structuredContent;
assert.equal(removed.id, created.id);
const left = (await call("list_sessions", {})).structuredContent.sessions;
assert.ok(left.every((s) => s.id !== created.id), JSON.stringify(left));
step("remove_session removes it");

const missed = [...listed.keys()].filter((tool) => !called.has(tool));
assert.deepEqual(missed, [], `tools listed but never called: ${missed.join(", ")}`);
step(`every listed tool was called (${called.size})`);

await client.close();
console.log("all steps passed");
