"""FSDP2's whole step against ``memory --fsdp``, phase by phase (issue 28), measured over two gloo ranks on the CPU.

``fsdp_step_child.py`` runs ``fsdp_child.py``'s Llama-shaped module under torchtitan's grouping and counts each
rank's live bytes (local shards, FSDP2's in-place storage resizes, every operator's output; ``fsdp_live.py``).
Settled there: the sharded gradients accumulate block by block over one micro-batch's backward (the
reduce-scatter output becomes the sharded ``param.grad``), and in forward a block's all-gather output outlives its
copy-out until the next block's. The backward is read in two parts (the loss's and the head's, then the blocks' and
the root's): the loss's moment and FSDP2's backward buffers never coincide (``fsdp.LOSS_APART``), measured where the
blocks lead (``fsdp_child``'s sizes), where the loss does, where the root's reduce-scatter at the end does, and at an
independent size.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from symbolic import planning

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.torch, pytest.mark.slow]


LOSS_LEADS = {"H": 64, "d_ff": 192, "L": 4, "V": 16384, "batch": 2, "seq": 64}  # 8·B·S·V over the root's end
ROOT_LEADS = {**LOSS_LEADS, "batch": 1, "seq": 32}  # the root's reduce-scatter at the end of backward leads
INDEPENDENT = {"H": 48, "d_ff": 144, "L": 3, "V": 12288, "batch": 2, "seq": 40}  # checked after the rule was set


def _child(sizes: dict | None = None) -> dict:
    """One run of the child (about 12 s: two ranks, two settings)."""
    args = [json.dumps(sizes)] if sizes else []
    done = subprocess.run([sys.executable, str(HERE / "fsdp_step_child.py"), *args], capture_output=True, text=True,
                          timeout=300, check=False)
    if done.returncode != 0 and "No module named 'torch'" in done.stderr:
        pytest.skip("torch is not installed")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def measured() -> dict:
    """The child's measurements at ``fsdp_child``'s sizes (the blocks' moments lead)."""
    return _child()


def _backward(phases: dict) -> int:
    """The measured backward: the larger of its two parts."""
    return max(phases["backward"], phases["backward_blocks"])


def _plan(found: dict, tmp_path: Path, reshard: bool) -> planning.Plan:
    """The planner's view of the child's module over its ranks (its config, as ``test_fsdp.py`` writes it)."""
    config = {"model_type": "llama", "hidden_size": found["H"], "intermediate_size": found["d_ff"],
              "num_hidden_layers": found["L"], "num_attention_heads": 4, "num_key_value_heads": 4,
              "vocab_size": found["V"], "tie_word_embeddings": False, "max_position_embeddings": 64}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return planning.plan(str(path), dp=found["world"], fsdp=True, batch=found["batch"], seq=found["seq"],
                         runtime=False, reshard_after_forward=reshard)


@pytest.mark.parametrize("setting", ["reshard", "keep"])
def test_memory_fsdp_is_the_measured_step_by_phase(measured: dict, tmp_path: Path, setting: str) -> None:
    """Each phase within 1 %: forward with the kept all-gather outputs, backward with the written sharded grads."""
    phases = _plan(measured, tmp_path, setting == "reshard").as_dict()["phases"]
    for rank in measured["ranks"]:
        for phase in ("forward", "backward", "optimizer"):
            found = rank[setting]["phases"]
            found = _backward(found) if phase == "backward" else found[phase]
            assert abs(phases[phase] / found - 1) < 0.01, (phase, phases[phase], found)


@pytest.mark.parametrize(("sizes", "lead"), [(LOSS_LEADS, "backward"), (ROOT_LEADS, "backward_blocks"),
                                             (INDEPENDENT, "backward")])
def test_the_loss_and_fsdp2s_backward_buffers_never_coincide(sizes: dict, lead: str, tmp_path: Path) -> None:
    """A large vocabulary, small blocks: each phase within 1 % and the backward's peak in the part the plan's largest
    moment says. Counted beside each other (the loss's gradients with the head's unsharded gradients, the gathered
    blocks and the root's buffers) the plan was +4.6 % over where the loss leads and 5.8 % under where the root's
    reduce-scatter does (it was not counted)."""
    found = _child(sizes)
    for setting in ("reshard", "keep"):
        phases = _plan(found, tmp_path, setting == "reshard").as_dict()["phases"]
        for rank in found["ranks"]:
            step = rank[setting]["phases"]
            assert max(("backward", "backward_blocks"), key=step.__getitem__) == lead
            for phase in ("forward", "backward", "optimizer"):
                measured = _backward(step) if phase == "backward" else step[phase]
                assert abs(phases[phase] / measured - 1) < 0.01, (setting, phase, phases[phase], measured)


def test_the_backward_peak_holds_the_finished_blocks_sharded_gradients(measured: dict, tmp_path: Path) -> None:
    """With resharding the peak is in the last block but one's backward: L − 2 blocks' fp32 shards alive, as the term
    says when a block's sharded gradients outweigh its freed activations (this tiny step's): at the end of that
    block's backward, before post_backward reshards it, its bf16 unsharded gradients and the previous block's fp32
    reduce-scatter input beside them, L − 1 blocks' activations freed."""
    found = measured["ranks"][0]["reshard"]["at_peak"]["backward_blocks"]
    blocks, block = measured["L"] - 2, measured["ranks"][0]["reshard"]["block_params"]
    assert found["blocks_with_sharded_grads"] == blocks
    assert found["sharded_grads"] == blocks * 4 * block // measured["world"]  # fp32 shards
    terms = _plan(measured, tmp_path, True).terms()
    per_layer = terms["activations"] / measured["L"]
    moment = found["sharded_grads"] + (2 + 4) * block - (blocks + 1) * per_layer
    beyond_loss = 2 * measured["V"] * measured["H"] + 2 * block - terms["logits"] - terms["loss_gradients"]
    assert terms["fsdp_backward_grads"] == pytest.approx(moment + beyond_loss, rel=1e-3)


def test_without_resharding_the_peak_is_at_the_second_blocks_end(measured: dict, tmp_path: Path) -> None:
    """Without resharding the peak is at the end of the second block's backward (one block's fp32 shards alive): its
    bf16 unsharded gradients and the first block's fp32 reduce-scatter input, two blocks' activations and the first
    block's bf16 parameters freed. The first block's end holds no reduce-scatter input yet, and its copy-in comes
    after its reshard (``fsdp.block_moments``): counted there with the block still gathered, the plan was 0.2 % over."""
    found = measured["ranks"][0]["keep"]["at_peak"]["backward_blocks"]
    block = measured["ranks"][0]["keep"]["block_params"]
    assert found["blocks_with_sharded_grads"] == 1 and found["sharded_grads"] == 4 * block // measured["world"]
    terms = _plan(measured, tmp_path, False).terms()
    per_layer = terms["activations"] / measured["L"]
    moment = found["sharded_grads"] + (2 + 4) * block - 2 * block - 2 * per_layer
    beyond_loss = 2 * measured["V"] * measured["H"] - terms["logits"] - terms["loss_gradients"]
    assert terms["fsdp_backward_grads"] == pytest.approx(moment + beyond_loss, rel=1e-3)


def test_no_sharded_gradients_before_backward(measured: dict) -> None:
    assert all(rank["reshard"]["at_peak"]["backward"]["sharded_grads"] == 0 for rank in measured["ranks"])
    assert all(rank["reshard"]["at_peak"]["forward"]["sharded_grads"] == 0 for rank in measured["ranks"])
