"""Drives `eukhe mcp` as an agent's MCP client would, with the protocol's
official Python SDK (`mcp`), over standard input and output.

Run by tests/mcp.rs with EUKHE_BIN (the built binary), EUKHE_SOCKET and
EUKHE_STATE_DIR (a private daemon, not running yet: the server starts it).
Prints one `ok:` line per step; any failure raises, and the exit status
is not zero.
"""

import os
import re
import signal
import sys
import time

import anyio
from mcp import ClientSession
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from common import eukhe_mcp, step, text

INVALID_PARAMS = -32602
TOOLS = {
    "new_session", "list_sessions", "bash", "send", "log", "cancel", "remove_session",
    "send_keys", "screen", "wait_for", "wait",
}


async def call(session, tool, arguments):
    """A call that must succeed (no isError)."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} {arguments} failed: {text(result)}"
    return result


async def invalid_params(session, tool, arguments):
    """A call that must be refused as invalid params (a JSON-RPC error)."""
    try:
        result = await session.call_tool(tool, arguments)
    except MCPError as e:
        assert e.error.code == INVALID_PARAMS, f"{tool}: {e.error}"
        return e.error.message
    raise AssertionError(f"{tool} {arguments} was answered, not refused: {result}")


async def log_until(session, arguments, what, condition, within=15.0):
    """Read `log` until `condition(text)` holds; returns the text."""
    deadline = time.monotonic() + within
    while True:
        seen = text(await call(session, "log", arguments))
        if condition(seen):
            return seen
        assert time.monotonic() < deadline, f"timed out waiting until {what}; last log:\n{seen}"
        await anyio.sleep(0.2)


async def session_record(session, session_id, what, condition, within=15.0):
    """The `list_sessions` record of `session_id` once `condition` holds."""
    deadline = time.monotonic() + within
    while True:
        listed = (await call(session, "list_sessions", {})).structured_content["sessions"]
        record = next(s for s in listed if s["id"] == session_id)
        if condition(record):
            return record
        assert time.monotonic() < deadline, f"timed out waiting until {what}: {record}"
        await anyio.sleep(0.05)


async def main():
    async with stdio_client(eukhe_mcp()) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.name == "eukhe", init.server_info
            step(f"initialize (protocol {init.protocol_version})")

            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(tools) == TOOLS, sorted(tools)
            for tool in tools.values():
                assert tool.description and len(tool.description) > 80, tool.name
                assert tool.input_schema["type"] == "object", tool.name
            # `command` may be left out with `restart` (a fresh shell only).
            assert set(tools["bash"].input_schema["required"]) == {"session"}, tools["bash"].input_schema
            for name in ("command", "timeout_ms", "restart", "force"):
                assert name in tools["bash"].input_schema["properties"], name
            step("list tools: each with a description and a JSON schema")

            created = (await call(session, "new_session", {"name": "mcp-test", "cwd": "/"})).structured_content
            assert created["name"] == "mcp-test" and len(created["id"]) == 8, created
            step(f"new_session: {created}")

            first = (await call(session, "bash", {"session": "mcp-test", "command": "cd /tmp && export X=1"})).structured_content
            assert first["exit_status"] == 0 and first["running"] is False, first

            listed = (await call(session, "list_sessions", {})).structured_content["sessions"]
            record = next(s for s in listed if s["id"] == created["id"])
            worker, kernel = record["pid"], record["kernel_pid"]
            assert worker and kernel, record
            os.kill(worker, signal.SIGKILL)
            step(f"SIGKILL the session's worker (pid {worker})")
            # As `eukhe bash` does, a call made while the supervisor has not
            # yet seen the worker die is refused; this waits for its restart.
            record = await session_record(session, created["id"], "the worker restarts", lambda r: r["pid"] not in (None, worker))
            assert record["failures_in_window"] == 1 and record["kernel_pid"] == kernel, record

            after = await call(session, "bash", {"session": "mcp-test", "command": "pwd; echo $X"})
            assert after.structured_content["output"] == "/tmp\n1\n", after.structured_content
            assert after.structured_content["exit_status"] == 0
            step("bash after the kill: /tmp and 1 (cd and export kept)")

            # A worker killed while a bash call waits on it: the call follows
            # the command in the transcript and still answers with all of
            # its output and its status.
            async with anyio.create_task_group() as group:
                answers = []

                async def long_bash():
                    answers.append(await call(session, "bash", {"session": "mcp-test", "command": "echo before; sleep 1.5; echo after $X; exit 4"}))

                group.start_soon(long_bash)
                await log_until(
                    session,
                    {"session": "mcp-test", "tail": 3},
                    "the long bash has started",
                    lambda seen: "echo before; sleep 1.5" in seen and "before\n" in seen.split("exit 4", 1)[-1],
                )
                worker = (await session_record(session, created["id"], "the worker is listed", lambda r: r["pid"])).get("pid")
                os.kill(worker, signal.SIGKILL)
            ridden = answers[0].structured_content
            assert ridden["output"] == "before\nafter 1\n" and ridden["exit_status"] == 4, ridden
            step(f"a bash whose worker (pid {worker}) was killed mid-run still answers: {ridden['output']!r}, exit 4")

            failing = (await call(session, "bash", {"session": "mcp-test", "command": "echo out; echo err >&2; exit 3"})).structured_content
            assert failing["exit_status"] == 3, failing
            assert failing["output"] == "out\n[stderr] err\n", failing
            step("bash: exit status and standard error marked")

            started = time.monotonic()
            slow = await call(
                session,
                "bash",
                {"session": "mcp-test", "command": "echo early; sleep 2; echo late-output", "timeout_ms": 500},
            )
            waited = time.monotonic() - started
            timed_out = slow.structured_content
            assert waited < 1.8, f"the call waited {waited:.1f} s for a 500 ms timeout"
            assert timed_out["running"] is True and timed_out["exit_status"] is None, timed_out
            number = timed_out["bash"]
            assert "early" in timed_out["output"], timed_out
            assert f"`log` session=mcp-test, run={number}" in text(slow), text(slow)
            later = await log_until(
                session,
                {"session": "mcp-test", "run": number},
                "the timed-out command's output is in the log",
                lambda seen: f"[bash {number} exited 0]" in seen,
            )
            assert "early\nlate-output\n" in later, later
            step(f"bash past its timeout returned after {waited:.1f} s; its output later in `log` run={number}")

            message = await invalid_params(session, "bash", {"command": "true"})
            assert "session" in message, message
            await invalid_params(session, "bash", {"session": "mcp-test", "command": "true", "timeout": 5})
            await invalid_params(session, "no_such_tool", {})
            step("a call without `session`, with an unknown argument, an unknown tool: invalid params")

            unknown = await session.call_tool("bash", {"session": "no-such-session", "command": "true"})
            assert unknown.is_error, unknown
            assert "no session" in text(unknown) and "\n" not in text(unknown).strip(), text(unknown)
            step(f"an unknown session: an isError result ({text(unknown)!r})")

            for tool in ("bash", "send"):
                for command in ("echo a\0b; echo c", "", "  "):
                    refused = await session.call_tool(tool, {"session": "mcp-test", "command": command})
                    assert refused.is_error, (tool, command, refused)
                    said = text(refused)
                    assert ("NUL byte" in said) if "\0" in command else ("empty" in said), (tool, command, said)
            step("a command with a NUL byte, or an empty one: an isError result, nothing run")

            kept = await call(session, "bash", {"session": "mcp-test", "command": "echo still serving"})
            assert kept.structured_content["output"] == "still serving\n"
            step("the server keeps serving after those errors")

            cancelled = None
            with anyio.move_on_after(1.0) as scope:
                cancelled = await session.call_tool(
                    "bash", {"session": "mcp-test", "command": "sleep 30; echo never-printed"}
                )
            assert scope.cancelled_caught and cancelled is None, cancelled
            seen = await log_until(
                session,
                {"session": "mcp-test", "tail": 4},
                "the cancelled command has ended",
                lambda seen: re.search(
                    r"\[bash (\d+)\] \$ sleep 30; echo never-printed\n\[bash \1 cancelled: signal 2\]", seen
                ),
                within=10.0,
            )
            assert "never-printed\n" not in seen.replace("echo never-printed", ""), seen
            step("notifications/cancelled for a bash call cancels its command (cancelled: signal 2)")

            long_running = (await call(session, "bash", {"session": "mcp-test", "command": "sleep 30", "timeout_ms": 200})).structured_content
            assert long_running["running"], long_running
            stopped = await call(session, "cancel", {"session": "mcp-test", "run": long_running["bash"]})
            assert stopped.structured_content["cancelled"] == long_running["bash"], stopped.structured_content
            await log_until(
                session,
                {"session": "mcp-test", "run": long_running["bash"]},
                "the command cancelled by number has ended",
                lambda seen: f"[bash {long_running['bash']} cancelled: signal 2]" in seen,
            )
            step("`cancel` with run=N stops a bash still running after its timeout")

            big = await call(session, "bash", {"session": "mcp-test", "command": "head -c 100000 /dev/zero | tr '\\0' a; echo; echo the-end"})
            out = big.structured_content
            assert out["truncated"] is True and out["exit_status"] == 0, {k: v for k, v in out.items() if k != "output"}
            assert len(out["output"]) < 33 * 1024, len(out["output"])
            assert out["output"].endswith("the-end\n"), out["output"][-100:]
            assert f"`log` session=mcp-test, run={out['bash']}" in out["output"], "no word on the rest"
            step(f"bash output capped ({len(out['output'])} bytes of 100008), the rest named in `log`")

            chunks = await call(
                session,
                "bash",
                {
                    "session": "mcp-test",
                    "command": "for i in $(seq 1 40); do head -c 2000 /dev/zero | tr '\\0' x; echo \" chunk $i\"; sleep 0.02; done",
                },
            )
            number = chunks.structured_content["bash"]
            pages, since, shown = 0, None, ""
            while True:
                arguments = {"session": "mcp-test", "run": number}
                if since is not None:
                    arguments["since"] = since
                page = await call(session, "log", arguments)
                pages += 1
                shown += page.structured_content["log"]
                if not page.structured_content["more"]:
                    break
                assert f"since={page.structured_content['last_seq']}" in text(page), text(page)[-300:]
                since = page.structured_content["last_seq"]
                assert pages < 20, "log pages never end"
            found = [int(n) for n in re.findall(r" chunk (\d+)\n", shown)]
            assert found == list(range(1, 41)), found
            assert pages >= 2, pages
            step(f"log pages ({pages}) under the cap hold every chunk once, read on with since")

            # `wait` wakes on a run's end, from a cursor, with its status.
            ending = (await call(session, "send", {"session": "mcp-test", "command": "sleep 1; exit 5"})).structured_content
            woken = await call(session, "wait", {"session": "mcp-test", "run": ending["run"], "timeout_ms": 30000})
            facts = woken.structured_content
            assert facts["timed_out"] is False and facts["status"] == 5, facts
            assert facts["events"][0]["event"]["kind"] == "run_finished", facts
            assert f"next_since: {facts['next_since']}" in text(woken), text(woken)
            later = await call(session, "wait", {"session": "mcp-test", "any_run": True, "since": facts["next_since"], "timeout_ms": 300})
            assert later.structured_content["timed_out"] is True, later.structured_content
            assert later.structured_content["next_since"] >= facts["next_since"], later.structured_content
            message = await invalid_params(session, "wait", {"session": "mcp-test"})
            assert "needs" in message, message
            step(f"wait wakes on run {ending['run']}'s end (status 5), times out from its cursor, refuses no condition")

            queued = (await call(session, "send", {"session": "mcp-test", "command": "sleep 30"})).structured_content
            refused = await session.call_tool("remove_session", {"session": "mcp-test"})
            assert refused.is_error, refused
            said = text(refused)
            assert "busy" in said and "`force: true`" in said and "--force" not in said, said
            step(f"a refused remove_session: an isError result ({text(refused)!r})")
            removed = (await call(session, "remove_session", {"session": "mcp-test", "force": True})).structured_content
            assert removed["id"] == created["id"], (removed, queued)
            left = (await call(session, "list_sessions", {})).structured_content["sessions"]
            assert all(s["id"] != created["id"] for s in left), left
            step("remove_session with force removes a busy session")


if __name__ == "__main__":
    anyio.run(main)
    print("all steps passed")
    sys.exit(0)
