"""What the guides state about the runtime is what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from aster_forge._demo import DemoApp, DemoSettings
from aster_forge.db import background_tasks_table

REPO = Path(__file__).resolve().parents[2]


def test_the_cli_page_shows_the_demos_real_shutdown_order(tmp_path: Path) -> None:
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    shown = re.findall(r"shutdown order: ([a-z_]+(?: -> [a-z_]+)*)", page)
    assert shown, "docs/cli.md no longer shows the shutdown order"
    app = DemoApp(DemoSettings(database_url=f"sqlite:///{tmp_path / 'demo.db'}"))
    order = app.build_runtime(install_signal_handlers=False).registry.shutdown_order()
    assert {line.replace("\n", " ") for line in shown} == {" -> ".join(order)}


def test_the_cancel_of_a_running_task_reads_the_same_on_every_page() -> None:
    # The heartbeat reads cancel_requested and the worker cancels the body: the pages
    # must not describe the store's own fallback (a later retry or release) as the path.
    for name in ("web.md", "forge.md"):
        page = (REPO / "docs" / name).read_text(encoding="utf-8")
        assert "next retry/release" not in page, name
        assert "within one heartbeat interval" in " ".join(page.split()), name


def test_the_task_store_page_lists_every_column_of_the_task_table() -> None:
    page = (REPO / "docs" / "task-store.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    listed = {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    columns = set(background_tasks_table(sa.MetaData()).c.keys())
    assert columns <= listed, f"undocumented columns: {sorted(columns - listed)}"
