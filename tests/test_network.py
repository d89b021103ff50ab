"""One ``Network`` interface (issue 26): the planner asks capabilities, never a model's name or type string.

The generic torch path's implementation is checked against real modules in ``test_generic_torch.py``
(torch runs in a child process there); these checks need no torch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from symbolic.library import activations_pytorch as pyacts
from symbolic.library import article_a, lora
from symbolic.networks.network import KINDS, Network, load
from symbolic.networks.shape import ARTICLE_A_MODELS, DROPOUT_TYPES
from symbolic.planning import plan

PACKAGE = Path(__file__).resolve().parent.parent / "symbolic"
# the layers above the library and the networks: none of them may test what a model is called
ABOVE = ("planning", "report", "cli", "measured", "options")


def _type_tests(path: Path) -> list[str]:
    """Comparisons with a ``model_type`` attribute and "mlp" string constants outside docstrings, as 'line: text'."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(side, ast.Attribute) and side.attr == "model_type" for side in sides):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and node.value in ARTICLE_A_MODELS and id(node) not in docstrings:
            found.append(f"{node.lineno}: {node.value!r}")
    return found


def test_planner_report_and_cli_never_test_a_models_type_or_name() -> None:
    found = {str(path.relative_to(PACKAGE)): hits for layer in ABOVE for path in sorted((PACKAGE / layer).rglob("*.py"))
             if (hits := _type_tests(path))}
    assert found == {}


@pytest.mark.parametrize("name", ["llama-3-8b", "gpt2", "mixtral-8x7b", "mlp", "mlp-nobias"])
def test_table_families_and_article_a_are_networks(name: str) -> None:
    network = load(name)
    assert isinstance(network, Network) and network.kind in KINDS
    assert network.total == int(network.params.evaluate(network.params.restrict(network.numbers)).total)


def test_article_a_says_what_it_is_by_capabilities() -> None:
    network = load("mlp")
    assert (network.sequence, network.has_attention, network.pytorch_family) == (False, False, article_a.SAVED_FAMILY)
    assert network.total == article_a.params_with_bias.evaluate(article_a.NETWORK).total
    assert network.layer_kinds == {"mlp": 1} and network.cannot_say == {}
    # what the planner used to decide from the string "mlp" it now asks: training only, activations pytorch
    trained = plan("mlp", "train", batch=128, precision="fp32")
    assert trained.regime.activations == "pytorch" and not trained.regime.sequence


@pytest.mark.parametrize("name", ["gpt2", "llama-3-8b", "qwen2-7b", "mistral-7b"])
def test_table_capabilities_come_from_the_family(name: str) -> None:
    network = load(name)
    assert network.sequence and network.has_attention
    assert network.dropout_default == (network.model_type in DROPOUT_TYPES)
    assert network.lora_targets == tuple(lora.DEFAULT_TARGETS.get(network.model_type, ()))
    assert network.pytorch_family == pyacts.family_for(network.config)[0]
    assert network.attention_bias == bool(network.config.get("attention_bias", network.model_type == "qwen2"))


def test_mixture_of_experts_active_count_is_the_tables() -> None:
    from symbolic.networks import transformer as architectures

    network = load("mixtral-8x7b")
    assert network.active == architectures.load("mixtral-8x7b").active_param_count() < network.total
    assert network.layer_kinds["moe"] == network.numbers["L"]


@pytest.mark.parametrize("model_type", [[], {}, None, 3])
def test_a_config_whose_model_type_is_not_text_gets_one_line_without_torch(model_type) -> None:
    """Found by the CLI fuzz test on a machine without torch: a list model_type was an internal TypeError."""
    from symbolic.networks.generic.network import unsupported_message

    message = unsupported_message({"model_type": model_type})
    assert "has no family table" in message and "\n" not in message
