"""Module-level payload types and bodies of the Forge tests (annotations must resolve)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, Field


class Thumbnail(BaseModel):
    file_id: int
    width: int = Field(default=64, gt=0, le=4096)


class ThumbnailResult(BaseModel):
    path: str


@dataclass
class Shop:
    """A product resource: what bodies receive as their state."""

    prefix: str = "media"
    seen: list[int] = field(default_factory=list)
