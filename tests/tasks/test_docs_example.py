"""The runnable example in docs/tasks.md runs and prints what the page says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"


def test_docs_example_output_matches_the_page(tmp_path: Path) -> None:
    text = DOC.read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    expected = re.findall(r"Output:\n\n```\n(.*?)```", text, re.S)[0]
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=50
    )
    assert done.stdout == expected
