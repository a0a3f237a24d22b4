"""What a user installs: the wheel and sdist carry the license and honest metadata, no dev tools."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEV_TOOLS = {"pytest", "mypy", "ruff", "playwright", "hypothesis", "mkdocs", "hatchling"}
# Markdown images whose target is not an absolute URL break on a package index.
RELATIVE_IMAGE = re.compile(r"!\[[^\]]*\]\((?!https?://)[^)]+\)|<img [^>]*src=\"(?!https?://)")


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def wheel_metadata(dist: Path) -> tuple[Message, str, list[str]]:
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        text = archive.read(metadata_name).decode("utf-8")
    message = HeaderParser().parsestr(text)
    return message, str(message.get_payload()), names


def test_the_wheel_carries_the_mit_license(dist: Path) -> None:
    message, _body, names = wheel_metadata(dist)
    (license_name,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(license_name).decode().startswith("MIT License")
    assert message["License-Expression"] == "MIT"
    assert message.get_all("License-File") == ["LICENSE"]


def test_the_wheel_carries_every_backends_sql_file(dist: Path) -> None:
    # The stores read their raw SQL from these at import: a wheel without them is broken.
    _message, _body, names = wheel_metadata(dist)
    shipped = {n for n in names if n.startswith("aster_forge/db/sql/")}
    in_tree = {
        f"aster_forge/db/sql/{path.name}"
        for path in (REPO / "src/aster_forge/db/sql").glob("*.sql")
    }
    assert in_tree
    assert shipped == in_tree


def test_published_extras_hold_no_developer_tools(dist: Path) -> None:
    message, _body, _names = wheel_metadata(dist)
    extras = set(message.get_all("Provides-Extra") or [])
    assert {"postgres", "mysql", "web", "cli", "migrations", "uvloop", "all"} <= extras
    assert not extras & {"dev", "docs", "test"}
    required = {
        re.split(r"[\s;<>=!~\[]", requirement, maxsplit=1)[0].lower()
        for requirement in message.get_all("Requires-Dist") or []
    }
    assert not required & DEV_TOOLS, required & DEV_TOOLS


def test_the_long_description_has_no_relative_image(dist: Path) -> None:
    message, body, _names = wheel_metadata(dist)
    assert message["Description-Content-Type"] == "text/markdown"
    assert "# aster-forge" in body
    assert not RELATIVE_IMAGE.findall(body)


def test_the_sdist_carries_license_and_changelog(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {
            Path(name).relative_to(Path(name).parts[0]).as_posix() for name in archive.getnames()
        }
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml"} <= names


def test_the_changelog_opens_with_the_package_version() -> None:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "Keep a Changelog" in text
    version = re.search(
        r'^version = "([^"]+)"$',
        (REPO / "pyproject.toml").read_text(encoding="utf-8"),
        flags=re.MULTILINE,
    )
    assert version is not None
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    # The newest section is this version: "0.1.0 (unreleased)", or its release date.
    release = rf"{re.escape(version[1])} \((unreleased|\d{{4}}-\d{{2}}-\d{{2}})\)"
    assert re.fullmatch(release, headings[0]), headings[0]
