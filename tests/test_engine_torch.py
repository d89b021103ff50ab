"""The torch engine (``symbolic.serve(..., engine="torch")``) and the planner's chunked prefill (issue 27).

Every number here comes from the planner's own formulas: the concurrency is the planner's fit, the
pool the budget less the plan's non-KV bytes, the chunked working set the formula written by hand
from the model's config (Llama-3-8B: H 4096, d_ff 14336 gated, 32 heads, V 128256).
"""

import pytest

import symbolic
from symbolic import planning
from symbolic.catalogs.budget import make_budget
from symbolic.engines import pytorch as torch_engine
from symbolic.engines.flags import EngineFlagError
from symbolic.options.table import PlanOptionError

MODEL, GPU, SEQ = "llama-3-8b", "h100-80gb", 8192
H, D_FF, HEADS, V = 4096, 14336, 32, 128256  # Llama-3-8B's config.json (symbolic/presets)
ACT = 2  # bf16 activations (the weights' compute dtype)


@pytest.fixture(scope="module")
def served():
    return symbolic.serve(MODEL, "torch", GPU, seq=SEQ, batch=8)


def test_concurrency_is_the_planners_fit_and_the_pool_is_budget_less_non_kv(served) -> None:
    budget = make_budget(GPU)
    answer = planning.fit_batch(MODEL, budget, "infer", seq=SEQ, prefill_chunk=torch_engine.DEFAULT_PREFILL_CHUNK)
    at = answer.plan
    assert served.max_concurrency == answer.value == at.regime.batch
    assert served.budget_bytes == budget.bytes
    assert served.non_kv_bytes == at.total - at.cache_bytes
    assert served.kv_cache_bytes == budget.bytes - served.non_kv_bytes
    per_token = at.cache_bytes / (at.regime.batch * SEQ)
    assert served.kv_cache_tokens == int(served.kv_cache_bytes // per_token)
    assert served.weights_bytes == at.terms()["weights"] + at.terms()["embeddings"]
    longest = planning.fit_seq(MODEL, budget, "infer", batch=8, prefill_chunk=torch_engine.DEFAULT_PREFILL_CHUNK)
    assert served.max_context == longest.value


def test_terms_are_the_planners_own_with_formula_and_source(served) -> None:
    at = planning.fit_batch(MODEL, make_budget(GPU), "infer", seq=SEQ,
                            prefill_chunk=torch_engine.DEFAULT_PREFILL_CHUNK).plan
    planned = {t.key: t for t in at.layout.components()}
    found = served.term_bytes()
    for term in served.terms:
        assert term == planned[term.key]  # the planner's Term: formula, title, source
        assert found[term.key] == at.terms()[term.key]
    assert sum(found.values()) == at.total  # the resident terms and the peak phase's, nothing else
    assert {t.source for t in served.terms} >= {"shazeer2019", "project"} and "pytorch" in {t.source for t in served.terms}


def test_chunked_prefill_raises_the_concurrency_the_whole_prompt_caps() -> None:
    whole = symbolic.serve(MODEL, "torch", GPU, seq=4096, prefill_chunk=0)
    chunked = symbolic.serve(MODEL, "torch", GPU, seq=4096, prefill_chunk=2048)
    budget = make_budget(GPU)
    assert whole.max_concurrency == planning.fit_batch(MODEL, budget, "infer", seq=4096).value
    assert chunked.max_concurrency == planning.fit_batch(MODEL, budget, "infer", seq=4096, prefill_chunk=2048).value
    assert chunked.max_concurrency > 1.5 * whole.max_concurrency  # prefill activations capped the whole-prompt answer
    assert whole.figures["prefill"] == "whole prompts at once: B·S tokens" and whole.figures["prefill_chunk"] is None
    assert chunked.figures["prefill"] == "chunks of 2,048 tokens"


@pytest.mark.parametrize("flash", [True, False])
def test_chunked_working_set_by_hand(flash: bool) -> None:
    batch, seq, chunk = 4, 1000, 2048  # B·S = 4000 tokens > C: one step runs the chunk's 2048
    terms = planning.plan(MODEL, "infer", batch=batch, seq=seq, prefill_chunk=chunk, flash=flash).terms()
    scores = 0 if flash else ACT * HEADS * chunk * seq  # C×S scores per head, no S²
    assert terms["activations"] == ACT * chunk * (2 * H + 3 * D_FF) + scores
    assert terms["prefill_logits"] == 4 * batch * V  # min(B, C) = B sequences end in the chunk at most
    assert terms["logits"] == 4 * batch * V  # decode keeps every sequence's last logits


def test_a_chunk_larger_than_every_prompt_is_the_whole_prompt() -> None:
    batch, seq = 2, 1000  # B·S = 2000 < C
    whole = planning.plan(MODEL, "infer", batch=batch, seq=seq)
    chunked = planning.plan(MODEL, "infer", batch=batch, seq=seq, prefill_chunk=8192)
    assert chunked.terms()["activations"] == whole.terms()["activations"] == ACT * batch * seq * (2 * H + 3 * D_FF)


def test_memory_default_is_still_whole_prompts_and_says_so() -> None:
    plan = planning.plan(MODEL, "infer", batch=8, seq=4096)
    assert plan.terms()["activations"] == ACT * 8 * 4096 * (2 * H + 3 * D_FF)
    assert "prefill_chunk" not in plan.regime.options()  # reports list it only when it is set
    assert plan.as_dict()["prefill_assumed"] == "whole prompts at once: B·S tokens"
    chunked = planning.plan(MODEL, "infer", batch=8, seq=4096, prefill_chunk=512)
    assert chunked.regime.options()["prefill_chunk"] == 512
    assert chunked.as_dict()["prefill_assumed"] == "chunks of 512 tokens"
    assert any(n.startswith("prefill: chunks of 512 tokens") for n in chunked.notes)


@pytest.mark.parametrize(("mode", "chunk", "words"), [("infer", 0, "prefill_chunk must be between 1"),
                                                      ("train", 512, "applies to mode infer")])
def test_prefill_chunk_refused_in_one_line(mode: str, chunk: int, words: str) -> None:
    with pytest.raises(PlanOptionError, match=words):
        planning.plan(MODEL, mode, prefill_chunk=chunk)


def test_gpu_fraction_and_reserve_shape_the_torch_budget_only() -> None:
    plan = symbolic.serve(MODEL, "torch", GPU, seq=4096, gpu_fraction=0.5, reserve={"other": "2GiB"})
    assert plan.budget_bytes == make_budget(GPU, 0.5, {"other": "2GiB"}).bytes
    with pytest.raises(EngineFlagError, match="its own fraction is gpu_memory_utilization"):
        symbolic.serve(MODEL, "vllm", GPU, gpu_fraction=0.9)


def test_nothing_fits_is_an_answer_not_an_error() -> None:
    plan = symbolic.serve("llama-3-70b", "torch", "24GiB", seq=8192)
    assert not plan.fits and plan.max_concurrency == 0 and plan.kv_cache_bytes == 0 and plan.kv_cache_tokens == 0
    assert plan.non_kv_bytes > plan.budget_bytes
    assert "nothing fits" in repr(plan)


def test_display_repr_html_and_frame(served) -> None:
    text = repr(served)
    assert text.startswith("<ServePlan llama-3-8b on 1 × h100-80gb with torch:")
    assert f"{served.max_concurrency} × 8,192 tokens" in text and "\n" not in text
    page = served._repr_html_()
    assert page.startswith('<table class="symbolic">') and "shazeer2019" in page
    assert f"maximum concurrency at 8,192 tokens: {served.max_concurrency}" in page
    assert "prefill: chunks of 8,192 tokens" in page
    pd = pytest.importorskip("pandas")
    frame = served.to_frame()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame["term"]) == [t.key for t in served.terms]
    assert dict(zip(frame["term"], frame["bytes"], strict=True)) == served.term_bytes()
