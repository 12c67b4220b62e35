"""An agent at a terminal through `eukhe mcp`, with the protocol's official
Python SDK: it answers a `read -p` prompt and drives `git rebase -i` in vim
using only the tools `bash` (tty: true), `screen`, `send_keys` and
`wait_for`, as a person looks, types and looks again. No step sleeps.

Run by tests/mcp.rs as client.py is (EUKHE_BIN, EUKHE_SOCKET,
EUKHE_STATE_DIR). Prints one `ok:` line per step; any failure raises.
"""

import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from common import eukhe_mcp, step, text

INVALID_PARAMS = -32602
WAIT_MS = 20000


async def call(session, tool, arguments):
    """A call that must succeed (no isError); its structured content."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} {arguments} failed: {text(result)}"
    return result.structured_content, text(result)


async def wait_for(session, name, **until):
    """`wait_for` that must meet its condition; its answer."""
    answer, said = await call(session, "wait_for", {"session": name, "timeout_ms": WAIT_MS, **until})
    assert answer["met"] is not None and not answer["timed_out"], said
    return answer


def rows(screen):
    return "\n".join(screen["lines"])


async def prompt(session, name):
    # The prompt: `bash` with a terminal answers when the command waits for
    # input, or at its timeout, never hanging on the prompt.
    started, said = await call(session, "bash", {
        "session": name,
        "command": 'read -p "Continue? [y/N] " a; echo "got $a"',
        "tty": True,
        "timeout_ms": WAIT_MS,
    })
    run = started["bash"]
    assert started["running"] is True and started["exit_status"] is None, said
    # It answers because the prompt waits for input, long before its timeout.
    assert started["waiting"] is True, said
    assert "wait_for" in said, said
    step(f"bash tty=true answered while run {run} waits at its prompt (waiting: {started['waiting']})")

    asked = await wait_for(session, name, run=run, match=r"Continue\? \[y/N\]")
    assert asked["met"] == {"kind": "screen", "regex": r"Continue\? \[y/N\]"}, asked
    shown, said = await call(session, "screen", {"session": name})
    assert shown["screen"]["input"] == run and "Continue? [y/N]" in said, said
    step("wait_for match and screen show the prompt")

    typed, said = await call(session, "send_keys", {"session": name, "keys": ["y", "Enter"]})
    assert typed["typed_bytes"] == 2, said
    ended = await wait_for(session, name, run=run, end=True)
    assert ended["screen"]["ended"] == 0 and "got y" in rows(ended["screen"]), ended
    step("send_keys y Enter, wait_for end: `got y`, exit 0")

    # A command that never prompts: the answer is its end, with its screen.
    done, said = await call(session, "bash", {"session": name, "command": "printf 'a\\nb\\n'; exit 3", "tty": True, "rows": 10, "cols": 40})
    assert done["exit_status"] == 3 and done["running"] is False, said
    assert done["screen"]["rows"] == 10 and done["screen"]["cols"] == 40, done
    assert done["screen"]["lines"][:2] == ["a", "b"], done
    step("bash tty=true of a command that ends: its screen and status 3")


async def rebase(session, name, verb):
    """Drive `git rebase -i HEAD~2` in vim: the second commit becomes `verb`."""
    await call(session, "bash", {
        "session": name,
        "command": f"mkdir repo-{verb} && cd repo-{verb} && git init -q && "
                   "git config user.name agent && git config user.email agent@example.invalid && "
                   "for n in one two three; do echo $n > $n; git add $n; git commit -qm $n; done",
    })
    started, _ = await call(session, "bash", {
        "session": name,
        "command": "TERM=xterm GIT_EDITOR='vim -u NONE -N' git rebase -i HEAD~2",
        "tty": True,
        "timeout_ms": 2000,
    })
    run = started["bash"]
    await wait_for(session, name, run=run, match=r"(?m)^pick \w+ two\npick \w+ three")
    await call(session, "send_keys", {"session": name, "run": run, "keys": [f":2s/^pick/{verb}/", "Enter", ":wq", "Enter"]})
    if verb == "squash":
        await wait_for(session, name, run=run, match="This is a combination of 2 commits")
        await call(session, "send_keys", {"session": name, "run": run, "keys": [":wq", "Enter"]})
    ended = await wait_for(session, name, run=run, end=True)
    assert ended["screen"]["ended"] == 0, ended
    logged, said = await call(session, "bash", {"session": name, "command": "git log --format=%s; cd .."})
    assert logged["output"] == "two\none\n", said
    step(f"git rebase -i in vim: {verb} the second commit; `git log` shows two, one")


async def errors(session, name):
    bad = await session.call_tool("wait_for", {"session": name, "match": "[y"})
    assert bad.is_error and "invalid regular expression" in text(bad), text(bad)
    try:
        await session.call_tool("wait_for", {"session": name})
    except MCPError as e:
        assert e.error.code == INVALID_PARAMS, e.error
    else:
        raise AssertionError("wait_for with no condition was answered")
    both = await session.call_tool("send_keys", {"session": name, "keys": ["y"], "text": "y"})
    assert both.is_error and "exactly one" in text(both), text(both)
    nothing = await session.call_tool("send_keys", {"session": name, "keys": ["y"]})
    assert nothing.is_error and "nothing runs" in text(nothing), text(nothing)
    unknown = await session.call_tool("screen", {"session": name, "run": 999})
    assert unknown.is_error and "input 999 has no screen" in text(unknown), text(unknown)
    step("an invalid regex, no condition, keys and text, keys with nothing running, an unknown run: each refused in one line")


async def main():
    async with stdio_client(eukhe_mcp()) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            # The test's own directory (the state directory's parent): the
            # repositories are made there.
            scratch = os.path.dirname(os.environ["EUKHE_STATE_DIR"])
            await call(session, "new_session", {"name": "agent", "cwd": scratch})
            await prompt(session, "agent")
            await rebase(session, "agent", "drop")
            await rebase(session, "agent", "squash")
            await errors(session, "agent")
            await call(session, "remove_session", {"session": "agent", "force": True})


if __name__ == "__main__":
    anyio.run(main)
    print("all steps passed")
    sys.exit(0)
