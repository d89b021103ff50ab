"""Hugging Face hub ids resolved offline, from the local cache only (nothing is downloaded).

``Qwen/Qwen3-8B`` is looked up as ``$HF_HUB_CACHE/models--Qwen--Qwen3-8B/snapshots/REV/config.json``
(``HF_HUB_CACHE`` else ``$HF_HOME/hub`` else ``~/.cache/huggingface/hub``). The revision named
by ``refs/main`` is preferred; otherwise the most recently modified snapshot with a config.json.
``refs/main`` is read bounded and must hold a revision (a commit hash), else a one-line error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..core.errors import InputFileError, UnknownNameError
from ..core.userfiles import read_user_file

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}$")
REVISION = re.compile(r"[0-9a-fA-F]{7,64}")  # a commit hash: 40 hex digits (64 in SHA-256 repositories)
MAX_REF = 256  # bytes of refs/main: a hash and a line break, with room for stray whitespace


def looks_like_hub_id(text: str) -> bool:
    """Whether ``text`` has the ORG/NAME form of a hub id (and is not a path that exists)."""
    return bool(HUB_ID.fullmatch(text)) and ".." not in text and not text.endswith(".json")


def cache_dir() -> Path:
    """The hub cache folder the way huggingface_hub finds it: HF_HUB_CACHE, HF_HOME/hub, ~/.cache."""
    explicit = os.environ.get("HF_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def cached_config(hub_id: str) -> Path:
    """The config.json of a cached hub id; a clear error naming the folder searched when absent."""
    org, name = hub_id.split("/", 1)
    root = cache_dir()
    repo = root / f"models--{org}--{name}"
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file():
        revision = read_revision(ref)
        if (snapshots / revision / "config.json").is_file():
            return snapshots / revision / "config.json"
    found = sorted((p for p in snapshots.glob("*/config.json") if p.is_file()),
                   key=lambda p: p.stat().st_mtime, reverse=True) if snapshots.is_dir() else []
    if found:
        return found[0]
    raise UnknownNameError(f"{hub_id}: not in the local Hugging Face cache (looked for "
                           f"{snapshots}/*/config.json; set HF_HUB_CACHE or HF_HOME, nothing is downloaded)")


def read_revision(ref: Path) -> str:
    """The commit hash a ``refs/`` file names; at most MAX_REF bytes are read, anything else is one line."""
    raw = read_user_file(ref, limit=MAX_REF, what="a revision file (a commit hash)")
    text = raw.decode("ascii", errors="replace").strip()
    if not REVISION.fullmatch(text):
        raise InputFileError(f"{ref}: not a revision (expected a commit hash of 7 to 64 hex digits)")
    return text
