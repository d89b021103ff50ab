"""`symbolic serve` as a user runs it: text, -q, -v, --json, --check and one-line errors (issue 27)."""

import json

import pytest
from helpers import run

import symbolic
from symbolic.text import printing

REQUIRED = {"weights_bytes", "kv_cache_bytes", "kv_cache_tokens", "max_concurrency", "non_kv_bytes", "budget_bytes",
            "engine"}


def test_json_has_the_issue_fields_and_the_python_answer(capsys) -> None:
    code, out, _ = run(capsys, "serve", "llama-3-8b", "--seq", "8192", "--batch", "8", "--json")
    data = json.loads(out)
    plan = symbolic.serve("llama-3-8b", seq=8192, batch=8)
    assert code == 0 and REQUIRED <= set(data)
    assert data == json.loads(json.dumps(plan.as_dict()))
    assert data["engine"] == "torch" and data["fits"] is True and data["prefill"] == "chunks of 8,192 tokens"
    assert sum(t["bytes"] for t in data["terms"]) == data["non_kv_bytes"] + sum(
        t["bytes"] for t in data["terms"] if t["key"] == "kv_cache")


def test_text_is_a_per_gpu_table_then_the_job_and_the_two_questions(capsys) -> None:
    code, out, _ = run(capsys, "serve", "llama-3-8b", "--seq", "8192", "--batch", "8")
    plan = symbolic.serve("llama-3-8b", seq=8192, batch=8)
    lines = out.splitlines()
    assert code == 0
    assert lines[0].startswith("llama-3-8b served with torch") and "prefill: chunks of 8,192 tokens" in lines[1]
    assert lines[2].split()[:3] == ["per", "GPU", "bytes"]
    kv = next(line for line in lines if line.strip().startswith("KV pool"))
    assert f"{plan.kv_cache_bytes:,}" in kv and f"{plan.kv_cache_tokens:,} tokens" in kv
    assert f"  maximum concurrency at 8,192 tokens per request: {plan.max_concurrency}" in lines
    assert f"  longest context at 8 requests at once: {plan.max_context:,} tokens" in lines
    assert any(line.startswith("job, 1 GPU: weights") for line in lines)
    assert any(line.startswith("  note: ") for line in lines)


def test_quiet_prints_the_essential_line_and_verbose_the_formulas(capsys) -> None:
    plan = symbolic.serve("llama-3-8b", seq=4096)
    code, out, _ = run(capsys, "serve", "llama-3-8b", "--seq", "4096", "-q")
    assert code == 0 and out.count("\n") == 1
    assert f"{plan.max_concurrency} requests of 4,096 tokens at once" in out
    code, out, _ = run(capsys, "serve", "llama-3-8b", "--seq", "4096", "-v")
    kv = next(t for t in plan.terms if t.key == "kv_cache")
    assert code == 0 and printing.text(kv.expr) in out and "C_p" in out


@pytest.mark.parametrize("target", ["file-type", "gpu-layers", "context"])
def test_quiet_line_of_a_llamacpp_fit_says_the_setting_found(capsys, target) -> None:
    weights = None if target == "file-type" else "gguf:Q4_K_M"  # the file type is what file-type finds
    plan = symbolic.serve("llama-3.1-70b", "llamacpp", "24GiB", weights=weights, tp=2, ctx_size=8192, fit=target)
    argv = ("llama-3.1-70b", "--engine", "llamacpp", "--gpu", "24GiB", "--tp", "2", "--ctx-size", "8192", "--fit",
            target, *(("--weights", weights) if weights else ()))
    code, out, _ = run(capsys, "serve", *argv, "-q")
    assert code == 0 and out.count("\n") == 1
    assert out.rstrip().endswith(f"; --fit {target}: {plan.figures['fit_answer']}")


def test_nothing_fits_is_said_plainly_and_check_exits_3(capsys) -> None:
    args = ("serve", "llama-3-70b", "--gpu", "24GiB", "--seq", "8192")
    code, out, err = run(capsys, *args)
    assert code == 0 and err == ""
    assert out.splitlines()[2].startswith("  nothing fits, even one request of 8,192 tokens:")
    code, out, _ = run(capsys, *args, "-q", "--check")
    assert code == 3 and out.count("\n") == 1 and "nothing fits" in out
    code, out, _ = run(capsys, *args, "--json", "--check")
    assert code == 3 and json.loads(out)["fits"] is False
    code, _, _ = run(capsys, "serve", "llama-3-8b", "--seq", "4096", "-q", "--check")
    assert code == 0


def test_prefill_chunk_zero_is_whole_prompts(capsys) -> None:
    code, out, _ = run(capsys, "serve", "llama-3-8b", "--seq", "4096", "--prefill-chunk", "0", "--json")
    data = json.loads(out)
    assert code == 0 and data["prefill"] == "whole prompts at once: B·S tokens" and data["prefill_chunk"] is None
    assert data["max_concurrency"] == symbolic.serve("llama-3-8b", seq=4096, prefill_chunk=0).max_concurrency


def test_gpu_fraction_sizes_the_torch_budget(capsys) -> None:
    from symbolic.catalogs.budget import make_budget

    code, out, _ = run(capsys, "serve", "llama-3-8b", "--gpu-fraction", "0.9", "--reserve", "x=1GiB", "--json")
    assert code == 0 and json.loads(out)["budget_bytes"] == make_budget("h100-80gb", 0.9, {"x": "1GiB"}).bytes


@pytest.mark.parametrize(("argv", "words"), [
    (("--engine", "vllm", "--gpu-fraction", "0.9"), "--gpu-fraction sizes the torch engine's budget, not vllm's"),
    (("--engine", "sglang", "--reserve", "x=1GiB"), "its own fraction is --mem-fraction-static"),
    (("--engine", "vllm", "--prefill-chunk", "512"), "--prefill-chunk is a flag of torch"),
    (("--gpu-fraction", "1.5"), "1.5"),
    (("--reserve", "nothing"), "NAME=SIZE"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv: tuple[str, ...], words: str) -> None:
    code, out, err = run(capsys, "serve", "llama-3-8b", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err


def test_memory_says_which_prefill_it_assumed(capsys) -> None:
    code, out, _ = run(capsys, "memory", "llama-3-8b", "--mode", "infer")
    assert code == 0 and "  prefill: whole prompts at once: B·S tokens" in out
    code, out, _ = run(capsys, "memory", "llama-3-8b", "--mode", "infer", "--prefill-chunk", "2048")
    assert code == 0 and "note: prefill: chunks of 2,048 tokens" in out and "prefill-chunk 2048" in out
    code, out, _ = run(capsys, "fit", "llama-3-8b", "--mode", "infer", "--gpu", "h100-80gb", "--for", "batch")
    assert code == 0 and "prefill: whole prompts at once" in out
