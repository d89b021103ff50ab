"""An installed torchvision imports beside the CPU torch (networks/torch_env.py, issue 29)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

pytestmark = pytest.mark.torch

HAVE_TORCHVISION = importlib.util.find_spec("torchvision") is not None


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)


@pytest.mark.skipif(not HAVE_TORCHVISION, reason="torchvision is not installed")
def test_torchvision_and_a_vision_transformer_import_after_ready() -> None:
    """After ready(), torchvision's models and a transformers vision model import in a fresh process."""
    done = _run("from symbolic.networks import torch_env; torch_env.ready()\n"
                "import torchvision\n"
                "from transformers import AutoConfig, AutoModel\n"
                "import torch\n"
                "with torch.device('meta'):\n"
                "    print(type(AutoModel.from_config(AutoConfig.for_model('vit'))).__name__,"
                " torchvision.models.resnet18().fc.out_features)\n")
    assert done.returncode == 0, done.stderr[-800:]
    assert done.stdout.split() == ["ViTModel", "1000"]


def test_ready_is_false_or_true_without_raising_and_only_once() -> None:
    """ready() is cached: a second call returns the same answer without declaring anything twice."""
    done = _run("from symbolic.networks import torch_env\n"
                "a = torch_env.ready(); b = torch_env.ready(); print(a == b, len(torch_env._LIBRARIES) <= 1)")
    assert done.returncode == 0, done.stderr[-800:]
    assert done.stdout.split() == ["True", "True"]


def test_install_imports_nothing_until_torchvision_is_imported() -> None:
    """install() and looking for torchvision import no torch; importing transformers' models then works."""
    done = _run("import sys, importlib.util\n"
                "from symbolic.networks import torch_env; torch_env.install(); torch_env.install()\n"
                "importlib.util.find_spec('torchvision')\n"
                "print('torch' in sys.modules)\n"
                "from transformers import BertForMaskedLM\n"
                "print(BertForMaskedLM.__name__)\n")
    assert done.returncode == 0, done.stderr[-800:]
    assert done.stdout.split() == ["False", "BertForMaskedLM"]
