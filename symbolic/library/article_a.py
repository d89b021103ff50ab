"""Article A: memory of a small four-layer network during training (P, G, O, A).

Network: gat = Linear(2048, 4096), up = Linear(4096, 4096), down = Linear(4096, 2048),
out = Linear(2048, 10). Every formula here is the article's, with the element size b made a
parameter (its erratum 2) and its errata recorded in ``errata.py``.
"""

from __future__ import annotations

import sympy

from ..core.symbols import B, N, b, d_h, d_in, n_out
from ..core.term import Term
from ..math.formula import Formula
from .registry import register

SRC = "article-A"
NETWORK = {"d_in": 2048, "d_h": 4096, "n_out": 10}
# the key of article A's network in the saved-tensor and step models (library.activations_pytorch, peak_pytorch)
SAVED_FAMILY = "mlp"


def _t(key: str, title: str, expr: sympy.Expr, unit: str, where: str, note: str = "") -> Term:
    return Term(key, title, expr, unit, SRC, where, note)


WEIGHTS = (
    _t("gat", "gat.weight: Linear(2048, 4096)", d_in * d_h, "params", "P",
       "The article writes 2024 × 4096 (erratum 1); its total uses 2048."),
    _t("up", "up.weight: Linear(4096, 4096)", d_h * d_h, "params", "P"),
    _t("down", "down.weight: Linear(4096, 2048)", d_h * d_in, "params", "P"),
    _t("out", "out.weight: Linear(2048, 10)", d_in * n_out, "params", "P"),
)
BIASES = (
    Term("gat_bias", "gat.bias", d_h, "params", "pytorch", "nn.Linear(bias=True)"),
    Term("up_bias", "up.bias", d_h, "params", "pytorch", "nn.Linear(bias=True)"),
    Term("down_bias", "down.bias", d_in, "params", "pytorch", "nn.Linear(bias=True)"),
    Term("out_bias", "out.bias", n_out, "params", "pytorch", "nn.Linear(bias=True)"),
)

params = register(Formula(
    "mlp.params", "Parameters of article A's network (weights only, as the article counts)", WEIGHTS,
    source=SRC, where="P", name="N", example=NETWORK,
    note="Biases are ignored, as in the article (erratum 4); see mlp.params_with_bias."))

params_with_bias = register(Formula(
    "mlp.params_with_bias", "Parameters of article A's network including the nn.Linear biases",
    WEIGHTS + BIASES, source="pytorch", name="N", example=NETWORK,
    note="What sum(p.numel() for p in model.parameters()) counts for the real nn.Linear layers."))

_DEFS = {N: params}
_EX_B = {**NETWORK, "b": 4}

P = _t("P", "P: parameters", N * b, "bytes", "P", "Number of parameters × bytes per element.")
G = _t("G", "G: gradients", N * b, "bytes", "G", "One gradient per parameter (G = P).")
O_ADAMW = _t("O", "O: AdamW moments", 2 * N * b, "bytes", "O", "Two moments per parameter (O = 2P).")
O_SGDM = _t("O", "O: SGD momentum", N * b, "bytes", "O", "One momentum buffer per parameter (O = P).")

weights = register(Formula("mlp.weights", "P: parameter memory", (P,), source=SRC, where="P",
                           name="P", definitions=_DEFS, example=_EX_B))
grads = register(Formula("mlp.grads", "G: gradient memory", (G,), source=SRC, where="G",
                         name="G", definitions=_DEFS, example=_EX_B))
adamw = register(Formula("mlp.optimizer.adamw", "O: AdamW optimizer states", (O_ADAMW,), source=SRC,
                         where="O", name="O", definitions=_DEFS, example=_EX_B))
sgd_momentum = register(Formula("mlp.optimizer.sgd_momentum", "O: SGD-with-momentum optimizer state",
                                (O_SGDM,), source=SRC, where="O", name="O", definitions=_DEFS, example=_EX_B))

ACTIVATION_ELEMENTS = (
    _t("gat_proj", "relu(gat(x)): B × 4096", B * d_h, "elements", "A"),
    _t("up_proj", "relu(up(g)): B × 4096", B * d_h, "elements", "A"),
    _t("sum_relu", "relu(g + u): B × 4096", B * d_h, "elements", "A"),
    _t("down_proj", "relu(down(g)): B × 2048", B * d_in, "elements", "A"),
    _t("residual", "g + x: B × 2048", B * d_in, "elements", "A"),
    _t("softmax", "softmax(out(g)): B × 10", B * n_out, "elements", "A",
       "The article counts the 10 outputs of the last layer here."),
)
activation_elements = register(Formula(
    "mlp.activations.elements", "A: activation elements kept for backward (article's list)", ACTIVATION_ELEMENTS,
    source=SRC, where="A", name="A_n", example={**NETWORK, "B": 128},
    note="A rough model (erratum 5): PyTorch also keeps the input and pre-activation outputs."))

activations = register(Formula(
    "mlp.activations", "A: activation memory", tuple(t.replace(expr=t.expr * b, unit="bytes") for t in ACTIVATION_ELEMENTS),
    source=SRC, where="A", name="A", example={**NETWORK, "B": 128, "b": 4}, note=activation_elements.note))

A = _t("A", "A: activations", sympy.factor_terms(activation_elements.expr) * b, "bytes", "A",
       "B · (3·4096 + 2·2048 + 10) elements × b (the article writes 16349 for 16,394: erratum 3).")

total = register(Formula(
    "mlp.total", "Training memory of article A's network with AdamW (P + G + O + A)", (P, G, O_ADAMW, A),
    source=SRC, where="total", name="M", definitions=_DEFS, example={**NETWORK, "B": 128, "b": 4}))
total_sgd = register(Formula(
    "mlp.total.sgd_momentum", "Training memory of article A's network with SGD and momentum", (P, G, O_SGDM, A),
    source=SRC, where="total", name="M", definitions=_DEFS, example={**NETWORK, "B": 128, "b": 4}))
