"""Torch modules under --recompute full (their repeated blocks checkpointed, measured on the meta device) and
under --fsdp (FSDP2 with those blocks as its units), issue 29.

torch runs in ``recompute_child.py`` (the test process never imports it). Every expected number comes from torch
on the CPU there: a real step of the module running its blocks under ``torch.utils.checkpoint(use_reentrant=
False)`` in its own forward (timm's ``set_grad_checkpointing`` for timm's ViT), measured with
``measure.saved_tensors`` and ``measure.step_peak``, at shapes the fit did not use; or from the FLOP formula itself.
FSDP2's terms come from ``library.fsdp`` (checked against two gloo ranks in ``test_fsdp.py`` for the table family):
here the module's units against the same formulas and the table family's plan of the same matrices.
"""

from __future__ import annotations

import pytest
from helpers import torch_child

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def child() -> dict:
    return torch_child("recompute_child.py")


def _close(case: dict) -> None:
    """Parameters exact, saved bytes within 1 %, the step's peak within 2 % (the issue's bounds)."""
    plan, measured = case["plan"], case["measured"]
    assert plan["params"] == measured["params"]
    assert abs(plan["saved"] - measured["saved"]) <= 0.01 * measured["saved"]
    assert abs(plan["peak"] - measured["peak"]) <= 0.02 * measured["peak"]


@pytest.mark.parametrize("case", [("vit", "full"), ("vit", "every2"), ("vit", "mixed"), ("vit", "lora"), ("rescnn", "full"),
                                  ("timm", "full")])
def test_checkpointed_step_against_a_cpu_step(child: dict, case: tuple[str, str]) -> None:
    name, how = case
    if not child[name]:
        pytest.skip("timm is not installed")
    _close(child[name][how])


def test_blocks_are_the_repeated_stack(child: dict) -> None:
    assert child["vit"]["blocks"] == [f"blocks.{i}" for i in range(4)]  # nn.ModuleList of 4 Block (blocks.py)
    assert child["rescnn"]["blocks"] == [f"stage.{i}" for i in range(3)]  # nn.Sequential of 3 Residual
    if child["timm"]:
        assert child["timm"]["blocks"] == [f"blocks.{i}" for i in range(3)]  # what timm's checkpoint(blk, x) wraps


def test_every_second_block_keeps_more_than_every_block(child: dict) -> None:
    """The real steps say so too: half the blocks keep all they save (per sample, batch 5 against batch 7)."""
    vit = child["vit"]
    assert vit["every2"]["measured"]["saved"] / 5 > vit["full"]["measured"]["saved"] / 7
    assert vit["every2"]["plan"]["saved"] / 5 > vit["full"]["plan"]["saved"] / 7


def test_time_counts_the_blocks_forward_again(child: dict) -> None:
    """Training FLOPs with recompute full = without + every module inside a checkpointed block's forward."""
    out = child["flops"]
    again = sum(v for m, v in out["forward"].items() if m.startswith("blocks."))
    assert again > 0 and out["full"] == out["none"] + again


def test_plan_searches_full_only_where_there_are_blocks(child: dict) -> None:
    assert child["search"] == {"vit": ["full", "none"], "plain": ["none"]}


def test_memory_says_which_blocks_were_checkpointed(child: dict) -> None:
    done = child["refusals"]["memory"]
    assert done["code"] == 0, done["err"]
    assert "4 of 4 (blocks.0, blocks.1, blocks.2, blocks.3)" in done["out"]
    assert "use_reentrant=False" in done["out"]


@pytest.mark.parametrize(("case", "needle"), [("plain", "no repeated blocks"), ("every", "4 repeated blocks"),
                                              ("selective", "recompute full checkpoints"), ("ops", "recompute ops"),
                                              ("fsdp", "fsdp_param_dtype bf16"),
                                              ("unknown", "--checkpoint-modules Nope: no submodule"),
                                              ("lone", "give one of them (alone it changes nothing)"),
                                              ("fp16_units", "fsdp_param_dtype fp16 with precision bf16-mixed")])
def test_what_does_not_apply_is_one_line(child: dict, case: str, needle: str) -> None:
    done = child["refusals"][case]
    assert done["code"] == 2 and done["out"] == ""
    assert done["err"].count("\n") == 1 and needle in done["err"] and "Traceback" not in done["err"]


def _llama_counts() -> tuple[int, int, int]:
    """(one block's parameters, the root's, bytes per fp32 element) of tests/data/modules/llama_blocks.py."""
    h, f, v = 64, 192, 128  # its defaults
    block = 4 * h * h + 3 * h * f + 2 * h  # q, k, v, o; gate, up, down; two RMSNorms
    return block, 2 * v * h + h, 4  # the embedding, the head and the final norm stay in the root


def test_fsdp_units_are_the_blocks_and_the_root(child: dict) -> None:
    out = child["fsdp"]
    block, root, _ = _llama_counts()
    assert out["units"] == [block] * 3 and out["params"] == 3 * block + root
    assert any("3 blocks each a fully_shard unit" in n for n in out["notes"])


def test_fsdp_terms_are_the_library_formulas_with_the_modules_units(child: dict) -> None:
    """library.fsdp at n_s = 4: sharded states; the running block and the prefetched one; the root; the buffers (the
    root's gradients in the step, probed with them kept; a block's, or the root's reduce-scatter at the end)."""
    terms, kept = child["fsdp"]["module"], child["fsdp"]["kept"]
    block, root, b = _llama_counts()
    total = 3 * block + root
    assert terms["weights"] == terms["gradients"] == b * total // 4
    assert terms["optimizer_states"] == 2 * b * total // 4  # AdamW's two moments of the shard
    assert terms["fsdp_unsharded_layers"] == b * 2 * block and kept["fsdp_unsharded_layers"] == b * 3 * block
    assert terms["fsdp_root_unsharded"] == b * root
    assert "fsdp_reduce_scatter" not in terms  # the root's grads are the step's; a block's in fsdp_backward_grads:
    shards = 3 * b * block // 4
    blocks, root_end = b * block + b * block + shards, b * root + 4 * root + b * root // 4 + shards  # fp32 reduce
    assert 0 <= terms["fsdp_backward_grads"] <= max(blocks, root_end)


def test_fsdp_matches_the_table_familys_plan_of_the_same_matrices(child: dict) -> None:
    """The same sharded states; blocks and root as the table's, less its spreading of the final norm (H) over the
    L layers (torchtitan's root holds it, as the module's does)."""
    module, table = child["fsdp"]["module"], child["fsdp"]["table"]
    block, root, b = _llama_counts()
    h, layers = 64, 3
    for key in ("weights", "gradients", "optimizer_states"):
        assert module[key] == table[key]
    assert table["fsdp_unsharded_layers"] == -(-b * 2 * (layers * block + h) // layers)  # rounded up, as the plan
    assert module["fsdp_root_unsharded"] == table["fsdp_root_unsharded"] + b * h
    assert "fsdp_reduce_scatter" not in table  # the head's grads in fsdp_backward_grads, apart from the loss's moment


def test_plan_searches_fsdp_and_recompute_and_each_layout_is_memorys(child: dict) -> None:
    """Each searched layout's memory is ``memory``'s for its flags, FSDP2 and recompute full among them."""
    out = child["searched"]
    assert "error" not in out, out.get("error")
    kinds = {(lay["fsdp"], lay["recompute"]) for lay in out["layouts"]}
    assert {(True, "full"), (True, "none"), (False, "full"), (False, "none")} <= kinds
    assert [lay["memory_bytes"] for lay in out["layouts"]] == out["memory"]


@pytest.mark.parametrize("recompute", ["0", "1"])
def test_backward_without_gradients_against_a_cpu_step(child: dict, recompute: str) -> None:
    """What FSDP2's terms are added to: backward with each gradient dropped as it accumulates, byte for byte."""
    out = child["freed"][recompute]
    assert out["planned"] == out["measured"]


def test_checkpoint_modules_names_the_blocks(child: dict) -> None:
    """blocks.1 and blocks.3 named are the blocks --recompute-every 2 checkpoints: the same step (batch 5)."""
    import json

    done = child["refusals"]["named"]
    assert done["code"] == 0, done["err"]
    assert json.loads(done["out"])["total_bytes"] == child["vit"]["every2"]["plan"]["peak"]


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_fsdp_under_bf16_mixed_matches_the_table_familys_both_ways(child: dict, dtype: str) -> None:
    """param_dtype bf16 (the default, no autocast) or fp32 (autocast in the forward): fp32 shards and AdamW states
    as the table's; the units gathered, and their gradients written, in param_dtype; the reduce-scatter input in
    fp32. The table's blocks and buffers spread the final norm (H) over the L layers, as in the fp32 check."""
    module, table = child["fsdp_mixed"][dtype]["module"], child["fsdp_mixed"][dtype]["table"]
    block, root, fp32 = _llama_counts()
    b = {"bf16": 2, "fp32": 4}[dtype]
    h, layers = 64, 3
    total = 3 * block + root
    for key in ("weights", "gradients"):
        assert module[key] == table[key] == fp32 * total // 4
    assert module["optimizer_states"] == table["optimizer_states"] == 2 * fp32 * total // 4
    assert module["fsdp_unsharded_layers"] == b * 2 * block
    assert table["fsdp_unsharded_layers"] == -(-b * 2 * (layers * block + h) // layers)
    assert module["fsdp_root_unsharded"] == b * root == table["fsdp_root_unsharded"] + b * h
    assert "fsdp_reduce_scatter" not in module and "fsdp_reduce_scatter" not in table  # the step's; fsdp.LOSS_APART
    blocks = (b + fp32) * block + 2 * fp32 * block // 4  # nothing freed: k = 2
    root_end = max((b + fp32) * root, b * root + 5 * fp32 * root // 4) + 3 * fp32 * block // 4  # fsdp.root_end_moment
    assert 0 <= module["fsdp_backward_grads"] <= max(blocks, root_end)


def test_fsdp_under_bf16_mixed_probes_the_step_each_setup_runs(child: dict) -> None:
    """param_dtype bf16: the step computes in bf16 (no autocast), so it saves what a pure bf16 step saves;
    param_dtype fp32: the forward under autocast saves what a bf16-mixed step saves. The note says which."""
    out = child["fsdp_mixed"]
    assert out["bf16"]["saved"] == out["bf16-pure"] != out["bf16-mixed-plain"] == out["fp32"]["saved"]
    assert any("MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) and no autocast" in n
               for n in out["bf16"]["notes"])
    assert any("units gathered in fp32 and the forward under torch.autocast" in n for n in out["fp32"]["notes"])


def test_memory_plans_fsdp_under_bf16_mixed(child: dict) -> None:
    done = child["refusals"]["mixed_fsdp"]
    assert done["code"] == 0, done["err"]
    assert "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)" in done["out"]
    searched = child["refusals"]["mixed_plan"]  # plan: FSDP2's layouts, the setup said
    assert searched["code"] == 0, searched["err"]
    assert "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)" in searched["out"]


def test_bf16_backward_without_gradients_against_a_cpu_step(child: dict) -> None:
    """The pure bf16 step FSDP2's default bf16-mixed setup adds its terms to, against a real CPU bf16 step that
    frees each gradient in backward: byte for byte (the probe gives layer_norm's mean and rstd the CPU's bf16, where
    the meta kernel, as CUDA's, returns fp32: norm_stats.py)."""
    out = child["freed_bf16"]
    assert out["planned"] == out["measured"]


def test_a_reports_module_table_names_the_blocks(child: dict) -> None:
    """[module] checkpoint_modules = ["blocks.1", "blocks.3"]: the blocks the report's network checkpoints."""
    assert child["report_blocks"] == ["blocks.1", "blocks.3"]
