"""A second ask of a probed module reads the cache and runs none of the user's code, nor torch (issue 29).

The file case runs the CLI in child processes (the probe needs torch); the stored library source
is checked in-process with a source made by hand (no library is imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from symbolic.networks.module import cache, resolve, stored
from symbolic.networks.module.source import Input, ModuleSource

ROOT = Path(__file__).resolve().parents[1]
NET = '''
import pathlib
import torch.nn as nn

pathlib.Path(__file__).with_name("imported.log").open("a").write("imported\\n")


class Net(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.fc = nn.Linear(8, width)

    def forward(self, x):
        return self.fc(x)
'''
# the CLI in a child; prints its JSON answer, then whether torch was imported
RUNNER = """
import contextlib, io, json, sys
from symbolic.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": json.loads(out.getvalue()), "torch": "torch" in sys.modules}))
"""


def _ask(folder: Path, cache_dir: Path) -> dict:
    env = {**os.environ, "SYMBOLIC_CACHE": str(cache_dir), "PYTHONPATH": str(ROOT)}
    argv = ["memory", f"{folder / 'net.py'}:Net", "--input", "x=B,8", "--loss", "mean", "--batch", "4",
            "--precision", "fp32", "--json"]
    proc = subprocess.run([sys.executable, "-c", RUNNER, *argv], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    if proc.returncode != 0 and "No module named 'torch'" in proc.stderr:
        pytest.skip("needs torch")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _imports(folder: Path) -> int:
    log = folder / "imported.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.torch
def test_second_ask_of_a_file_imports_neither_the_file_nor_torch(tmp_path: Path) -> None:
    folder, cache_dir = tmp_path / "net", tmp_path / "cache"
    folder.mkdir()
    (folder / "net.py").write_text(NET)
    first = _ask(folder, cache_dir)
    assert first["torch"] and _imports(folder) == 1  # probed: the file ran, with torch
    again = _ask(folder, cache_dir)
    assert not again["torch"] and _imports(folder) == 1  # from the cache: neither ran
    assert again["out"] == first["out"]
    (folder / "helper.py").write_text("WIDTH = 3\n")  # a neighbour it may import changed: probed again
    assert _ask(folder, cache_dir)["torch"] and _imports(folder) == 2


def _made(prefix: str, name: str) -> ModuleSource:
    return ModuleSource(label=f"{prefix}:{name}", origin=prefix, build=lambda a: None, arguments={"n": 3},
                        inputs=(Input("x", ("B", 3, "H", "W")), Input("t", ("B",), "int64", 1000)),
                        sizes={"H": 224, "W": 224}, loss="cross-entropy", fingerprint=(prefix, "9.9", name),
                        task="image-classification", notes=("built by hand",))


def test_a_library_source_reads_back_field_by_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMBOLIC_CACHE", str(tmp_path))
    made = []

    def make() -> ModuleSource:
        made.append(1)
        return _made("torchvision", "resnet18")

    def builder(task: str | None) -> stored.Builder:
        return lambda arguments: task

    first = stored.cached_source("k", make, builder)
    again = stored.cached_source("k", make, builder)
    assert made == [1]  # the second came from the cache
    fields = ("label", "origin", "arguments", "inputs", "sizes", "loss", "fingerprint", "task", "notes")
    assert all(getattr(again, f) == getattr(first, f) for f in fields)
    assert again.build({}) == "image-classification"  # the builder of the stored task


def test_stored_data_that_does_not_read_back_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMBOLIC_CACHE", str(tmp_path))
    data = stored.source_data(_made("timm", "vit_tiny"))
    for broken in ({**data, "inputs": [["x", [1, 2]]]}, {**data, "sizes": {"H": "__import__('os')"}},
                   {k: v for k, v in data.items() if k != "label"}):
        cache.write("k", broken)
        assert stored.cached_source("k", lambda: _made("timm", "other"), lambda t: lambda a: None).label == "timm:other"


def test_a_library_source_is_keyed_by_the_installed_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMBOLIC_CACHE", str(tmp_path))
    import symbolic.networks.module.libraries as libraries

    calls = []

    def library_source(prefix, name, arguments, config):
        calls.append(prefix)
        return _made(prefix, name)

    monkeypatch.setattr(libraries, "library_source", library_source)
    monkeypatch.setattr(cache, "package_version", lambda package: "1.0")
    for _ in range(2):
        assert resolve.module_source("torchvision:resnet18").label == "torchvision:resnet18"
    assert calls == ["torchvision"]
    monkeypatch.setattr(cache, "package_version", lambda package: "2.0")  # an upgrade: resolved again
    resolve.module_source("torchvision:resnet18")
    assert calls == ["torchvision", "torchvision"]
