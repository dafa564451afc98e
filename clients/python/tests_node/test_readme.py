"""The README's first program, run as written: its code block is taken
from README.md byte for byte and run as a script against this build's
node (``SHARDALLOC_NODE`` points it there), and what it prints is what the
README says it prints."""

import asyncio
import os
import re
import sys
import unittest
from pathlib import Path

from node import FAST, Node

README = Path(__file__).resolve().parent.parent / "README.md"


def first_program() -> str:
    """The first ``python`` block of the README."""
    found = re.search(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert found is not None, "the README has no python block"
    return found.group(1)


class ReadmeProgram(unittest.IsolatedAsyncioTestCase):
    async def test_the_readmes_first_program_runs_as_written(self) -> None:
        program = first_program()
        self.assertLessEqual(len(program.strip().splitlines()), 20, "the opening program grew")
        node = await Node.start(["--type", "cart", *FAST])
        self.addAsyncCleanup(node.stop)
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", program,
            env={**os.environ, "SHARDALLOC_NODE": node.base},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(120):
            out, err = await child.communicate()
        self.assertEqual(child.returncode, 0, err.decode())
        self.assertEqual(
            out.decode().splitlines(),
            ["start tenant-7/order-42 1", "deliver tenant-7/order-42 b'hi'", "stop tenant-7/order-42"],
            err.decode(),
        )


if __name__ == "__main__":
    unittest.main()
