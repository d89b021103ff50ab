"""The generic path's probing shortcuts (``_fewer_layers``, ``_fit_units``), without torch: a fake model.

A layer pattern's fields that only change tensor dimensions are probed on a copy with fewer layers,
and fields that change nothing there are rebuilt at the base together; the formulas must be the ones
probing every field at the base gives, with fewer builds of the base.
"""

from __future__ import annotations

import pytest

from symbolic.networks.generic import probes as generic

BASE = {"num_hidden_layers": 24, "hidden_size": 64, "intermediate_size": 176, "vocab_size": 1000,
        "attn_period": 8, "attn_offset": 3, "max_position_embeddings": 2048, "num_labels_like": 5}


def fake_shapes(d: dict) -> dict[str, tuple[int, ...]] | None:
    """Attention every ``attn_period``-th layer from ``attn_offset``, an MLP elsewhere, a norm everywhere;
    ``num_labels_like`` builds only at its own value (a field whose change the model refuses)."""
    layers, h, f, p, off = (d[k] for k in ("num_hidden_layers", "hidden_size", "intermediate_size", "attn_period",
                                           "attn_offset"))
    if d["num_labels_like"] != 5 or off >= p:
        return None
    out: dict[str, tuple[int, ...]] = {"embed.weight": (d["vocab_size"], h)}
    for i in range(layers):
        if i % p == off:
            out[f"layers.{i}.attn.weight"] = (h, h)
        else:
            out[f"layers.{i}.mlp.weight"] = (f, h)
        out[f"layers.{i}.norm.weight"] = (h,)
    return out


def _fit(data: dict, shortcut: bool) -> tuple[dict, bool, list[int]]:
    builds: list[int] = []

    def probe(d: dict) -> dict | None:
        got = fake_shapes(d)
        builds.append(d["num_hidden_layers"])
        return got

    fields = generic.int_fields(data)
    sym = generic.symbols_for(list(fields))
    bases = [(d, shapes, small if shortcut else None)
             for d, shapes, small in generic._fewer_layers(data, probe(data), probe)]  # noqa: SLF001
    # the analysis's own choice among the bases, with the fake config as the real one
    exprs, verified = generic._best_fit(bases, sym, probe, generic.units(fake_shapes(data)),  # noqa: SLF001
                                        {sym[p]: v for p, v in fields.items()})
    return exprs, verified, builds


@pytest.mark.parametrize("period, offset", [(2, 1), (8, 3), (6, 5)])
def test_shortcuts_give_the_formulas_of_probing_every_field_at_the_base(period, offset) -> None:
    data = BASE | {"attn_period": period, "attn_offset": offset}
    fast, fast_verified, fast_builds = _fit(data, True)
    slow, slow_verified, slow_builds = _fit(data, False)
    assert fast == slow and fast_verified == slow_verified
    if period == 2:  # every other layer: every count is a product of fields (L/2), so nothing is left as a number
        assert all(e is not None for e in fast.values())
    # the shortcut rebuilds the 24-layer base fewer times (layer counts and the pattern's fields only)
    assert fast_builds.count(24) < slow_builds.count(24)
    # at the real sizes the formula is the count of every tensor
    point = {generic.symbols_for(list(generic.int_fields(data)))[p]: v for p, v in generic.int_fields(data).items()}
    shapes = fake_shapes(data)
    units = generic.units(shapes)
    found = {u: generic._evaluate(e, point) for u, e in fast.items() if e is not None}  # noqa: SLF001
    assert found and found == {u: c * generic._numel(s) for u, (c, s) in units.items() if u in found}  # noqa: SLF001


FIRST_DENSE = {"num_hidden_layers": 24, "hidden_size": 64, "intermediate_size": 176, "vocab_size": 1000,
               "first_k_dense": 3, "num_experts": 8}


def first_dense_shapes(d: dict) -> dict[str, tuple[int, ...]]:
    """The first ``first_k_dense`` layers with a dense MLP, the others with ``num_experts`` experts (DeepSeek's)."""
    layers, h, f, k, e = (d[n] for n in ("num_hidden_layers", "hidden_size", "intermediate_size", "first_k_dense",
                                         "num_experts"))
    out: dict[str, tuple[int, ...]] = {"embed.weight": (d["vocab_size"], h)}
    for i in range(layers):
        out[f"layers.{i}.mlp.weight" if i < k else f"layers.{i}.experts.weight"] = (f, h) if i < k else (e, f, h)
        out[f"layers.{i}.norm.weight"] = (h,)
    return out


def test_a_pattern_that_repeats_within_half_the_base_is_fitted_there() -> None:
    """The first 3 layers dense: 1, 9 and 21 expert layers at 4, 12 and 24, on one line, so the 12-layer
    copy is the base (the 24-layer one its fallback); it gives the whole base's formulas with cheaper builds."""
    builds: list[int] = []

    def probe(d: dict) -> dict:
        builds.append(d["num_hidden_layers"])
        return first_dense_shapes(d)

    bases = generic._fewer_layers(FIRST_DENSE, probe(FIRST_DENSE), probe)  # noqa: SLF001
    assert [b[0]["num_hidden_layers"] for b in bases] == [12, 24]
    sym = generic.symbols_for(list(generic.int_fields(FIRST_DENSE)))
    fits, cost = [], []
    for data, shapes, small in bases:
        builds.clear()
        fits.append(generic._fit_units(shapes, data, generic.int_fields(data), sym, probe, small))  # noqa: SLF001
        cost.append(sum(builds))  # a build costs about its layer count
    half, whole = fits
    assert half == whole and half[1] and None not in half[0].values()
    assert cost[0] < 0.6 * cost[1]
    H, L, V, d_ff = (sym[(n,)] for n in ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size"))
    k, e = sym[("first_k_dense",)], sym[("num_experts",)]
    assert half[0][("layers.*.experts.weight", 0)] == e * d_ff * H * (L - k)
    assert half[0][("layers.*.mlp.weight", 0)] == d_ff * H * k and half[0][("embed.weight", 0)] == V * H


def test_a_period_the_half_cannot_hold_falls_back_to_the_whole_base() -> None:
    """Attention every 2nd layer repeats within 12 layers, but the period doubled twice (8) does not fit
    there: the half leaves the MLP's count unexplained and the whole base gives every formula."""
    data = BASE | {"attn_period": 2, "attn_offset": 1}
    bases = generic._fewer_layers(data, fake_shapes(data), fake_shapes)  # noqa: SLF001
    assert [b[0]["num_hidden_layers"] for b in bases] == [12, 24]
    sym = generic.symbols_for(list(generic.int_fields(data)))
    half, whole = (generic._fit_units(shapes, d, generic.int_fields(d), sym, fake_shapes, small)  # noqa: SLF001
                   for d, shapes, small in bases)
    assert None in half[0].values() and None not in whole[0].values()
    assert generic._covers(whole, half) and not generic._covers(half, whole)  # noqa: SLF001
    exprs, verified, _ = _fit(data, True)
    assert (exprs, verified) == whole


def test_the_half_is_kept_only_where_it_is_as_good_as_the_whole_base(monkeypatch) -> None:
    """A fit of the half that explains more but was not checked at a second point (its joint build failed)
    does not replace the whole base's checked fit; a perfect first fit needs no fallback."""
    H, d_ff = generic.field_symbol("hidden_size"), generic.field_symbol("intermediate_size")
    units = {("a", 0): (1, (4, 4)), ("b", 0): (1, (8, 4))}
    fits = {"all, unchecked": ({("a", 0): H**2, ("b", 0): H * d_ff}, False),
            "all, checked": ({("a", 0): H**2, ("b", 0): H * d_ff}, True),
            "one missing, checked": ({("a", 0): H**2, ("b", 0): None}, True)}
    fitted: list[str] = []

    def fit_units(shapes, data, fields, sym, probe, small):  # noqa: ANN001, ANN202
        fitted.append(data["name"])
        return fits[data["name"]]

    monkeypatch.setattr(generic, "_fit_units", fit_units)

    def pick(half: str, whole: str) -> str:
        fitted.clear()
        got = generic._best_fit([({"name": half}, {}, None), ({"name": whole}, {}, None)], {},  # noqa: SLF001
                                lambda d: None, units, {H: 4, d_ff: 8})
        return next(n for n in (half, whole) if fits[n] == got)

    assert pick("all, unchecked", "one missing, checked") == "one missing, checked"
    assert pick("one missing, checked", "all, unchecked") == "all, unchecked"  # explains more: the whole base
    assert pick("all, checked", "one missing, checked") == "all, checked" and fitted == ["all, checked"]


def test_a_pattern_field_inert_on_the_small_copy_is_probed_at_the_base() -> None:
    """Doubling the period (8 -> 16) keeps layer 3 the only attention layer of an 8-layer copy, but moves
    layer 11's at 24 layers: its effect on the instance counts comes from a build of the base."""
    data = BASE | {"attn_period": 8, "attn_offset": 3}
    builds: list[dict] = []

    def probe(d: dict) -> dict | None:
        builds.append(d)
        return fake_shapes(d)

    [(base_data, base_shapes, small)] = generic._fewer_layers(data, probe(data), probe)  # noqa: SLF001
    assert small is not None and small[0]["num_hidden_layers"] < 24
    doubled_period = [d for d in builds if d["attn_period"] == 16 and d["num_hidden_layers"] == 24]
    assert not doubled_period
    generic._fit_units(base_shapes, base_data, generic.int_fields(base_data),  # noqa: SLF001
                       generic.symbols_for(list(generic.int_fields(data))), probe, small)
    assert [d for d in builds if d["attn_period"] == 16 and d["num_hidden_layers"] == 24]


def test_no_smaller_copy_when_a_kind_of_layer_is_missing_there() -> None:
    """Attention only from layer 13 on (offset 13 of 16): no copy of 4, 8 or 12 layers holds it."""
    data = BASE | {"attn_period": 16, "attn_offset": 13}
    [(_, _, small)] = generic._fewer_layers(data, fake_shapes(data), fake_shapes)  # noqa: SLF001
    assert small is None


@pytest.mark.torch
def test_a_probe_build_skips_the_derived_generation_config_and_restores_transformers() -> None:
    """``shapes`` builds with a default GenerationConfig (one derived from the config is a copy of it per probe),
    also for a model that derives one itself (SmolVLM, unguarded), and puts transformers back: after nested
    uses and after an error. The shapes are the plain build's."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers import GenerationConfig

    before = GenerationConfig.__dict__["from_model_config"]
    config = transformers.AutoConfig.for_model("gpt2", n_layer=1, n_embd=32, n_head=2, n_positions=16, vocab_size=64,
                                               bos_token_id=5, eos_token_id=6)
    vlm = transformers.SmolVLMConfig(
        text_config={"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 128},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 16})
    for cfg, cls in ((config, transformers.GPT2LMHeadModel), (vlm, transformers.SmolVLMForConditionalGeneration)):
        plain = generic.build(cfg, cls)
        assert generic.shapes(cfg, cls) == {n: tuple(p.shape) for n, p in plain.named_parameters()}, cls.__name__
        assert GenerationConfig.__dict__["from_model_config"] is before
    with generic._no_generation_config(), generic._no_generation_config():
        probed = generic.build(config, transformers.GPT2LMHeadModel)
    derived = generic.build(config, transformers.GPT2LMHeadModel).generation_config
    assert (derived.bos_token_id, probed.generation_config.bos_token_id) == (5, None)
    assert GenerationConfig.__dict__["from_model_config"] is before and not generic._SWAPS
    with pytest.raises(RuntimeError), generic._no_generation_config():
        raise RuntimeError("a failed build")
    assert GenerationConfig.__dict__["from_model_config"] is before and not generic._SWAPS


def test_swapped_attributes_come_back_when_the_last_user_leaves() -> None:
    """Overlapping uses (two threads, or nested) restore the original once, also for an attribute the owner
    only inherits (deleted again, not copied onto it)."""

    class Base:
        def greet(self) -> str:
            return "base"

    class Owner(Base):
        size = 1

    with generic._swapped(Owner, {"size": 2, "greet": lambda self: "swapped"}):
        with generic._swapped(Owner, {"size": 3}):
            assert Owner.size == 2  # the first entry's value holds until the last exit
        assert Owner.size == 2 and Owner().greet() == "swapped"
    assert Owner.size == 1 and Owner().greet() == "base" and "greet" not in vars(Owner)
    assert not generic._SWAPS


@pytest.mark.torch
def test_a_meta_build_patches_torch_init_only_while_it_runs() -> None:
    """``torch.nn.init``'s initialisers are no-ops inside a probe build and the originals come back after it,
    also when the model's constructor fails."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.nn import init

    before = dict(vars(init))
    inside: list[bool] = []

    class Failing(transformers.GPT2LMHeadModel):
        def __init__(self, config, *args, **kwargs) -> None:
            inside.append(init.normal_ is not before["normal_"])
            raise RuntimeError("a failed build")

    config = transformers.AutoConfig.for_model("gpt2", n_layer=1, n_embd=32, n_head=2, n_positions=16, vocab_size=64,
                                               bos_token_id=5, eos_token_id=6)
    generic.build(config, transformers.GPT2LMHeadModel)
    assert vars(init) == before and not generic._SWAPS
    with pytest.raises(RuntimeError, match="a failed build"):
        generic.build(config, Failing)
    assert inside == [True]  # patched while the constructor ran ...
    assert vars(init) == before and not generic._SWAPS  # ... and put back after the error


@pytest.mark.torch
def test_a_crosscheck_build_leaves_transformers_logging_as_it_found_it() -> None:
    """``crosscheck.build`` quiets transformers for its own build only (issue 26: no hidden global state)."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from symbolic.measured import crosscheck

    config = {"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 16, "vocab_size": 64,
              "architectures": ["GPT2LMHeadModel"]}
    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_info()
    try:
        crosscheck.build(crosscheck.Target("tiny", "gpt2", config), 1, "fp32", "eager")
        assert transformers.logging.get_verbosity() == transformers.logging.INFO
    finally:
        transformers.logging.set_verbosity(level)
