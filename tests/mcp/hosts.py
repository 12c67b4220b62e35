"""One `eukhe mcp --host a --host b --host down --host silent` serving two
machines (two sshd on loopback, each with its own eukhe state directory)
and two that never answer (a closed port; a port that accepts and says
nothing), with the protocol's official Python SDK (issue 55).

Run by tests/hosts.rs: EUKHE_BIN, EUKHE_MCP_ENV (a JSON object: the
server's environment, with XDG_CONFIG_HOME holding hosts.toml and
EUKHE_SSH), EUKHE_MCP_HOSTS (the `--host` names, comma-separated),
HOST_ANSWER_MS (each host's deadline). Prints one `ok:` line per step
and writes the markers each host's session echoed to MARKERS_OUT; any
failure raises.
"""

import json
import os
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from common import step, text

# What a loaded machine may add to the deadline: far below ssh's own
# timeouts (a silent server is waited for without end).
MARGIN_S = 5.0


def server():
    args = ["mcp"]
    for name in os.environ["EUKHE_MCP_HOSTS"].split(","):
        args += ["--host", name]
    env = json.loads(os.environ["EUKHE_MCP_ENV"])
    return StdioServerParameters(command=os.environ["EUKHE_BIN"], args=args, env=env, cwd="/")


async def call(session, tool, arguments):
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} {arguments} failed: {text(result)}"
    return result


async def listed(session):
    started = time.monotonic()
    result = await call(session, "list_sessions", {})
    return result.structured_content, time.monotonic() - started


async def main():
    deadline_s = int(os.environ["HOST_ANSWER_MS"]) / 1000
    async with stdio_client(server()) as (read, write):
        async with ClientSession(read, write) as session:
            initialized = await session.initialize()
            assert "HOST:NAME" in initialized.instructions, initialized.instructions

            created = await call(session, "new_session", {"name": "a:work"})
            assert created.structured_content["ref"] == "a:work", created.structured_content
            assert "session=a:work" in text(created), text(created)
            created = await call(session, "new_session", {"name": "b:work"})
            assert created.structured_content["host"] == "b", created.structured_content
            step("new_session makes a session on the host its name carries")

            unnamed = await session.call_tool("new_session", {"name": "work"})
            assert unnamed.is_error and "HOST:NAME" in text(unnamed), text(unnamed)
            step("a reference without a host is refused, saying how to write one")

            markers = {}
            for host in ("a", "b"):
                marker = f"ran-on-{host}-{os.getpid()}"
                ran = await call(
                    session, "bash", {"session": f"{host}:work", "command": f"echo {marker}"}
                )
                assert ran.structured_content["output"].strip() == marker, text(ran)
                assert ran.structured_content["exit_status"] == 0, text(ran)
                markers[host] = marker
            with open(os.environ["MARKERS_OUT"], "w") as out:
                json.dump(markers, out)
            step("bash runs on each host's session")

            failed = await call(session, "bash", {"session": "a:work", "command": "exit 3"})
            assert failed.structured_content["exit_status"] == 3, text(failed)
            logged = await call(session, "log", {"session": "b:work"})
            assert markers["b"] in text(logged) and markers["a"] not in text(logged), text(logged)
            step("each host keeps its own transcript")

            listing, took = await listed(session)
            refs = sorted(s["ref"] for s in listing["sessions"])
            assert refs == ["a:work", "b:work"], listing
            assert {s["host"] for s in listing["sessions"]} == {"a", "b"}, listing
            reasons = {u["host"]: u["reason"] for u in listing["unreachable"]}
            assert set(reasons) == {"down", "silent"}, listing
            assert "Connection refused" in reasons["down"], reasons
            assert reasons["silent"] == f"no answer within {int(deadline_s)} s", reasons
            assert took < deadline_s + MARGIN_S, f"list_sessions took {took:.1f} s"
            step(f"list_sessions lists both hosts and the two silent ones in {took:.1f} s")

            down = await session.call_tool("bash", {"session": "down:x", "command": "true"})
            assert down.is_error and "Connection refused" in text(down), text(down)
            step("a call routed to an unreachable host fails with ssh's reason")

    print("all steps passed", flush=True)


anyio.run(main)
