"""`eukhe mcp`'s `log` with output windows (issue 54), with the protocol's
official Python SDK: one run's first and last lines, a byte range and a
grep, each answer under the output cap and saying what it left out and
how to read it.

Run by tests/mcp.rs like client.py (EUKHE_BIN, EUKHE_SOCKET,
EUKHE_STATE_DIR). Prints one `ok:` line per step; any failure raises.
"""

import re
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from common import eukhe_mcp, step, text

OUTPUT_CAP_BYTES = 32 * 1024


async def call(session, tool, arguments):
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} {arguments} failed: {text(result)}"
    said = text(result)
    if tool == "log":
        assert len(said.encode()) <= OUTPUT_CAP_BYTES, f"{tool} {arguments}: {len(said)} bytes"
    return result


async def main():
    async with stdio_client(eukhe_mcp()) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            schema = tools["log"].input_schema["properties"]
            for name in ("head", "tail_lines", "bytes", "grep", "context", "max_count"):
                assert name in schema, sorted(schema)
            step("log takes head, tail_lines, bytes, grep, context and max_count")

            await call(session, "new_session", {"name": "windows", "cwd": "/"})
            ran = await call(session, "bash", {"session": "windows", "command": "seq 1 100000"})
            run = ran.structured_content["bash"]
            size = f"[run {run}: 588895 bytes, 100000 lines of output"

            tail = await call(session, "log", {"session": "windows", "run": run, "tail_lines": 3})
            said = text(tail)
            assert said.startswith("99998\n99999\n100000\n"), said
            assert f"{size}; this window holds lines 99998-100000]" in said, said
            assert f"`log` session=windows, run={run}" in said and "left out" in said, said
            assert tail.structured_content["lines"] == 100000, tail.structured_content
            step(f"tail_lines=3: the last three lines, the size, what is left out ({said.splitlines()[-1]!r})")

            head = await call(session, "log", {"session": "windows", "run": run, "head": 100000})
            said = text(head)
            assert said.startswith("1\n2\n3\n"), said[:20]
            reads_on = re.search(r"bytes=(\d+): reads on", said)
            assert reads_on and "cut at the 32768-byte cap" in said, said[-500:]
            at = int(reads_on.group(1))
            on = await call(session, "log", {"session": "windows", "run": run, "bytes": f"{at}:{at + 12}"})
            shown = head.structured_content["text"]
            expected = "".join(f"{i}\n" for i in range(1, 100001))
            assert shown == expected[: len(shown)] and at == len(shown), (at, len(shown))
            assert on.structured_content["text"] == expected[at : at + 12], on.structured_content
            step(f"head=100000 is cut at the cap and names the bytes= that read on ({at})")

            grep = await call(
                session, "log", {"session": "windows", "run": run, "grep": "^5000[0-1]$", "context": 1}
            )
            said = text(grep)
            assert said.startswith("49999-49999\n50000:50000\n50001:50001\n50002-50002\n"), said
            assert "[2 matching lines: every one in the output]" in said, said
            capped = await call(session, "log", {"session": "windows", "run": run, "grep": "7$", "max_count": 2})
            said = text(capped)
            assert said.startswith("7:7\n17:17\n") and "stopped at max_count" in said, said
            step("grep with context numbers lines as grep -n; max_count says more may match")

            refused = await session.call_tool("log", {"session": "windows", "head": 3})
            assert refused.is_error and "need run" in text(refused), text(refused)
            step(f"a window without run is refused in one line ({text(refused)!r})")
            await call(session, "remove_session", {"session": "windows", "force": True})


if __name__ == "__main__":
    anyio.run(main)
    print("all steps passed")
    sys.exit(0)
