"""Compute capability per catalogue GPU and the two optional keys of a custom GPU file (cuda_memory, compute_capability).

Expected capabilities are NVIDIA's CUDA GPUs table (https://developer.nvidia.com/cuda-gpus): Tesla V100 7.0, T4 7.5,
A100 8.0, A10G and GeForce RTX 3090 8.6, L4, L40S and GeForce RTX 4090 8.9, H100 and H200 9.0, B200 10.0.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from helpers import run

from symbolic.catalogs import GPUS, get, make_budget
from symbolic.catalogs.capabilities import CAPABILITIES, NOT_CUDA
from symbolic.core.errors import InputFileError
from symbolic.networks.module import cuda_attention
from symbolic.networks.module.kernels import cuda_arch, cuda_kernels

NVIDIA_TABLE = {"v100-16gb": "7.0", "v100-32gb": "7.0", "t4": "7.5", "a100-40gb": "8.0", "a100-80gb": "8.0",
                "a10g": "8.6", "rtx-3090": "8.6", "l4": "8.9", "l40s": "8.9", "rtx-4090": "8.9", "h100-80gb": "9.0",
                "h100-94gb": "9.0", "h200-141gb": "9.0", "b200": "10.0"}
BASE = 'name = "mine"\nmemory_bytes = 85_520_809_984\nsource = "our nvidia-smi"\n'


def test_every_catalogue_gpu_has_nvidias_capability_or_says_why_not() -> None:
    assert {n: g.capability for n, g in GPUS.items() if g.capability} == NVIDIA_TABLE
    assert set(CAPABILITIES) | set(NOT_CUDA) == set(GPUS)  # a new GPU needs its entry
    assert GPUS["mi300x"].compute_capability is None and "AMD" in GPUS["mi300x"].capability_source
    assert all("developer.nvidia.com/cuda-gpus" in GPUS[n].capability_source for n in NVIDIA_TABLE)


def test_gpus_shows_the_capability_in_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "gpus", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert code == 0 and {n: r["compute_capability"] for n, r in rows.items() if n in NVIDIA_TABLE} == NVIDIA_TABLE
    assert rows["mi300x"]["compute_capability"] is None
    code, out, _ = run(capsys, "gpus")
    header, *lines = out.splitlines()
    assert " sm " in header and "8.9" in next(line for line in lines if line.startswith("rtx-4090 "))


def test_the_kernels_key_holds_the_arch_except_sm90() -> None:
    # the probe cache's key: unchanged "cuda" for the sm90 default, so earlier cached fits stay valid
    assert cuda_kernels(None) == cuda_kernels((9, 0)) == "cuda" and cuda_arch("cuda") == (9, 0)
    assert [cuda_arch(cuda_kernels(a)) for a in ((8, 9), (10, 0), (7, 5))] == [(8, 9), (10, 0), (7, 5)]


def test_the_rules_sentence_follows_the_dispatcher_bounds() -> None:
    assert "memory-efficient" in cuda_attention.rules((8, 9)) and "192" in cuda_attention.rules((8, 6))
    assert "no flash" in cuda_attention.rules((7, 5)) and "as on sm90" in cuda_attention.rules((8, 0))


def _gpu(tmp_path, extra: str):  # noqa: ANN001, ANN202
    path = tmp_path / "gpu.toml"
    path.write_text(BASE + extra)
    return get(str(path))


def test_a_custom_file_takes_cuda_memory_and_compute_capability(tmp_path) -> None:  # noqa: ANN001
    gpu = _gpu(tmp_path, 'cuda_memory = "79.18GiB"\ncompute_capability = "8.9"\n')
    assert gpu.cuda_bytes == int(Fraction("79.18") * 2**30)  # the size parser's exact value, floored
    assert gpu.compute_capability == (8, 9) and gpu.capability == "8.9"
    assert make_budget(gpu).over_cuda().bytes == gpu.cuda_bytes  # what the serving engines read
    plain = _gpu(tmp_path, "")
    assert plain.cuda_bytes is None and plain.compute_capability is None


@pytest.mark.parametrize(("extra", "needle"), [
    ('cuda_memory = "90GiB"\n', "more than the GPU's memory"),
    ("cuda_memory = 79\n", "size with its unit in quotes"),
    ('cuda_memory = "79"\n', "has no unit"),
    ('cuda_memory = "__import__(\'os\')"\n', "cuda_memory"),
    ('compute_capability = "9"\n', '"MAJOR.MINOR"'),
    ("compute_capability = 9.0\n", '"MAJOR.MINOR"'),
    ('compute_capability = "0.5"\n', '"MAJOR.MINOR"'),
])
def test_bad_custom_keys_are_one_line_errors(tmp_path, extra: str, needle: str) -> None:  # noqa: ANN001
    with pytest.raises(InputFileError, match=None) as err:
        _gpu(tmp_path, extra)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_bad_key_on_the_command_line_exits_2_in_one_line(tmp_path, capsys) -> None:  # noqa: ANN001
    path = tmp_path / "gpu.toml"
    path.write_text(BASE + 'compute_capability = "sm90"\n')
    code, out, err = run(capsys, "memory", "gpt2", "--gpu", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "compute_capability" in err


def test_vllm_budgets_from_a_custom_files_cuda_memory(tmp_path, capsys) -> None:  # noqa: ANN001
    from symbolic.engines.vllm import DEFAULT_UTILIZATION

    path = tmp_path / "gpu.toml"
    path.write_text(BASE + 'cuda_memory = "79.18GiB"\n')
    code, out, _ = run(capsys, "serve", "gpt2", "--engine", "vllm", "--gpu", str(path), "--max-model-len", "1024",
                       "--json")
    cuda = int(Fraction("79.18") * 2**30)
    assert code == 0 and json.loads(out)["budget_bytes"] == -(-cuda * Fraction(str(DEFAULT_UTILIZATION)) // 1)
