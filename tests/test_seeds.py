"""Every figure of the two source articles, recomputed; the errata appear as differences."""


import symbolic
from symbolic.library import seeds

A = {"d_in": 2048, "d_h": 4096, "n_out": 10}
B_EX = {"H": 768, "L": 12, "V": 50000, "d_ff": 3072}


def value(key, values, term=None):
    f = symbolic.formula(key)
    result = f.evaluate(f.restrict(values))
    return result.total if term is None else dict((t.key, v) for t, v in result.terms)[term]


def test_article_a_by_hand():
    params = 2048 * 4096 + 4096 * 4096 + 4096 * 2048 + 2048 * 10
    assert value("mlp.params", A) == params == 33_574_912
    assert value("mlp.params_with_bias", A) == params + 4096 + 4096 + 2048 + 10 == 33_585_162
    assert value("mlp.weights", {**A, "b": 4}) == 4 * params == 134_299_648
    assert value("mlp.optimizer.adamw", {**A, "b": 4}) == 8 * params
    assert value("mlp.optimizer.sgd_momentum", {**A, "b": 4}) == 4 * params
    assert value("mlp.activations.elements", {**A, "B": 128}) == 128 * (3 * 4096 + 2 * 2048 + 10) == 2_098_432
    total = value("mlp.total", {**A, "B": 128, "b": 4})
    assert total == 4 * 4 * params + 4 * 2_098_432
    assert round(total / 2**20) == 520
    # element size is a parameter: bf16 halves every part
    assert value("mlp.total", {**A, "B": 128, "b": 2}) * 2 == total


def test_article_b_by_hand():
    d, dff, v, n = 768, 3072, 50000, 12
    assert value("llm.params.embedding", B_EX) == v * d == 38_400_000
    assert value("llm.params.attention", B_EX) == 4 * d * d == 2_359_296
    assert value("llm.params.ffn", B_EX) == 2 * d * dff + d + dff == 4_722_432
    assert value("llm.params.layernorm", B_EX) == 2 * d == 1_536
    per_layer = 4 * d * d + (2 * d * dff + d + dff) + 2 * (2 * d)
    assert value("llm.params.layer", B_EX) == per_layer == 7_084_800
    assert value("llm.params", B_EX, "layers") == n * per_layer == 85_017_600
    assert value("llm.params", B_EX) == n * per_layer + v * d == 123_417_600
    assert value("llm.weights", {**B_EX, "b": 4}) == 4 * 123_417_600
    assert value("llm.rule.training", {**B_EX, "b": 4}) == 16 * 123_417_600


def test_listed_activations_sum_to_20E_not_14E():
    f = symbolic.formula("llm.activations.listed")
    e, b, s = symbolic.symbol("E"), symbolic.symbol("B"), symbolic.symbol("S")
    assert f.expr == 20 * e + 4 * b * s * s


def test_every_check_recomputes_and_flags_exactly_the_errata():
    rows = seeds.report()
    assert len(rows) == len(seeds.CHECKS) >= 25
    differing = {r["label"] for r in rows if not r["agrees"]}
    assert differing == {
        "activation elements per sample: 3·4096 + 2·2048 + 10",  # erratum A3
        "feed-forward 2·d·d_ff + d + d_ff", "per layer", "12 layers", "model parameters",  # erratum B1
        "model memory, fp32 (× 4 B)", "model memory, fp16 (× 2 B)",  # B1 carried into bytes
        "inference working memory 2 × 494 MB", "training memory 4 × 494 MB",  # rounded 494 MB
    }
    for r in rows:
        if not r["agrees"]:
            assert r["note"], r["label"]


def test_errata_cover_both_articles():
    from symbolic.library import errata_for
    assert [e.number for e in errata_for("article-A")] == [1, 2, 3, 4, 5]
    assert [e.number for e in errata_for("article-B")] == [1, 2, 3, 4, 5]
