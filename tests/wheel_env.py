"""A clean copy of the sources, and the wheel built from it installed into a new venv (for the tests of an installed report).

The venv finds the dependencies (sympy, jinja2, WeasyPrint...) through a ``.pth`` line naming the
project venv's site-packages, appended after its own: the project venv's editable install of
symbolic is not active there (``.pth`` files in an appended folder are not processed), so
``import symbolic`` comes from the wheel.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def copy_sources(target: Path, *, pictures: bool = False) -> None:
    """What a release is built from, without build leftovers (and without the PDFs and pictures unless asked)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", *(() if pictures else ("*.pdf", "*.png")))
    shutil.copytree(ROOT / "symbolic", target / "symbolic", symlinks=True, ignore=ignore)
    shutil.copytree(ROOT / "reports", target / "reports", ignore=ignore)
    if pictures:
        shutil.copytree(ROOT / "docs", target / "docs", ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, target / name)


def wheel_metadata(wheel: Path) -> email.message.Message:
    """The wheel's METADATA (name, licence, requirements, extras, classifiers)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


def clean_environment() -> dict[str, str]:
    """This process's environment without PYTHONPATH: a checkout on it would stand in for the wheel
    (pip would find the checkout's ``symbolic_memory.egg-info`` there and skip installing the wheel)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@dataclass(frozen=True)
class Installed:
    """A wheel and the venv it is installed in."""

    wheel: Path
    bin: Path  # the venv's bin folder
    purelib: Path  # where the venv installs packages


def install_wheel(folder: Path) -> Installed:
    """Build the wheel from a clean copy of the sources and install it into a new venv, all under ``folder``."""
    source, wheels, env_dir = folder / "src", folder / "wheels", folder / "venv"
    copy_sources(source)
    env = clean_environment()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(source)], check=True, capture_output=True, cwd=folder, env=env)
    wheel = next(wheels.glob("symbolic_memory-*.whl"))
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True, env=env).stdout.strip())
    (purelib / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True, cwd=folder, env=env)
    return Installed(wheel=wheel, bin=env_dir / "bin", purelib=purelib)
