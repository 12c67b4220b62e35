"""What the Python MCP client tests share: their `ok:` lines, an answer's
text, and how `eukhe mcp` is started (EUKHE_BIN, with the test's
EUKHE_SOCKET and EUKHE_STATE_DIR)."""

import os

from mcp import StdioServerParameters


def step(what):
    print(f"ok: {what}", flush=True)


def text(result):
    return "".join(block.text for block in result.content if block.type == "text")


def eukhe_mcp():
    """The server: `eukhe mcp` in `/`, seeing only the test's daemon."""
    env = {
        name: os.environ[name]
        for name in ("EUKHE_SOCKET", "EUKHE_STATE_DIR", "PATH", "HOME")
        if name in os.environ
    }
    return StdioServerParameters(command=os.environ["EUKHE_BIN"], args=["mcp"], env=env, cwd="/")
