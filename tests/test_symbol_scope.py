"""One vocabulary: every project symbol is declared in ``core/symbols.py``, and a model found at run
time (the generic torch path) declares its config fields in its own ``SymbolScope``, not in the table."""

import re
from pathlib import Path

import pytest
import sympy

import symbolic
from symbolic.core import symbols as symtab
from symbolic.core.term import Term
from symbolic.math.formula import Formula
from symbolic.networks.generic import probes as generic
from symbolic.text import printing

PACKAGE = Path(symbolic.__file__).parent
FIELDS = {"hidden_size": 64, "num_hidden_layers": 2, "zz_scope_width": 24, "zz_scope_groups": 3, "W": 5}


def _fields():
    return generic.int_fields(FIELDS)


def test_only_the_symbol_table_declares_symbols():
    """No module but core/symbols.py calls ``declare`` (user terms declare the user's own names)."""
    allowed = {PACKAGE / "core" / "symbols.py", PACKAGE / "math" / "userterms.py"}
    offenders = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
                 if path not in allowed and re.search(r"(?<![\w.])declare\(|symtab\.declare\(|symbols\.declare\(",
                                                      path.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_time_symbols_are_in_the_table_without_importing_the_library():
    names = {entry.name for entry in symtab.all_symbols()}
    assert {"T", "F_fwd", "F_tok", "F_peak", "P_gpu", "M_kv", "t_dec", "F_step"} <= names
    from symbolic.library import flops, timing
    from symbolic.planning import time

    assert flops.F_tok is symtab.lookup("F_tok") and timing.P_gpu is symtab.P_gpu and time.t_dec is symtab.t_dec


def test_a_models_field_symbols_stay_in_its_scope():
    before = [entry.name for entry in symtab.all_symbols()]
    scope = symtab.SymbolScope()
    sym = generic.symbols_for(list(_fields()), scope)
    assert [entry.name for entry in symtab.all_symbols()] == before  # the table is as it was
    width = sym[("zz_scope_width",)]
    assert width.name == "zz_scope_width" and scope.lookup("zz_scope_width") is width
    assert sym[("W",)].name == "cfg_W"  # a table name is not reused for a field with another meaning
    assert sym[("hidden_size",)] is symtab.H  # a field the project knows is the project's symbol
    with pytest.raises(symtab.UnknownSymbolError):
        symbolic.symbol("zz_scope_width")  # by name only through the scope, explicitly
    assert symtab.lookup("zz_scope_width", scope) is width
    assert symtab.info(width).description == generic.FIELD_DOC.format("zz_scope_width")
    assert printing.latex(width) == r"\mathrm{zz\_scope\_width}"


def test_a_formula_in_scoped_symbols_evaluates_compiles_and_keeps_the_scope_order():
    scope = symtab.SymbolScope()
    sym = generic.symbols_for(list(_fields()), scope)
    width, groups = sym[("zz_scope_width",)], sym[("zz_scope_groups",)]
    expr = symtab.L * groups * width + symtab.H
    formula = Formula("test.scoped", "scoped", [Term("w", "w", expr, "params", "project")], source="project",
                      name="N")
    values = {"L": 2, "H": 64, "zz_scope_width": 24, "zz_scope_groups": 3}
    expected = expr.xreplace({symtab.L: 2, symtab.H: 64, width: 24, groups: 3})
    assert formula.evaluate(values).total == expected
    assert int(formula.compile()(values)) == int(expected)
    assert [e.name for e in scope.symbols()] == ["cfg_W", "zz_scope_groups", "zz_scope_width"]
    assert [s.name for s in formula.inputs] == ["H", "L", "zz_scope_groups", "zz_scope_width"]  # table, then scope
    with pytest.raises(symbolic.UserError, match="zz_scope_groups"):
        formula.evaluate({**values, "zz_scope_groups": 1.5})  # a count: whole numbers only, from the scope's entry


def test_a_scope_refuses_a_table_name_and_a_second_meaning():
    scope = symtab.SymbolScope()
    with pytest.raises(ValueError, match="symbol table"):
        scope.declare("B", "B", "another batch")
    x = scope.declare("zz_x", "x", "a width")
    assert scope.declare("zz_x", "x", "a width") is x and len(scope) == 1
    with pytest.raises(ValueError, match="differently"):
        scope.declare("zz_x", "x", "another width")
    assert symtab.SymbolScope().declare("zz_x", "x", "a width") == x  # same name and meaning: equal symbols


def test_a_scoped_symbol_prints_and_sorts_as_a_plain_one():
    scope = symtab.SymbolScope()
    d_state = scope.declare("zz_state", r"\mathrm{zz\_state}", "a width")
    plain = sympy.Symbol("zz_state", positive=True, integer=True)
    assert str(symtab.L * symtab.d_ff * d_state) == str(symtab.L * symtab.d_ff * plain)


def test_a_scoped_symbol_survives_copies_and_pickles():
    import copy
    import pickle

    scope = symtab.SymbolScope()
    x = scope.declare("zz_copied", r"\mathrm{zz}", "a width")
    expr = 2 * x + symtab.B
    assert copy.copy(x) is x and copy.deepcopy(expr) == expr
    back = pickle.loads(pickle.dumps(expr))
    assert back == expr
    assert {symtab.info(s).latex for s in back.free_symbols} == {r"\mathrm{zz}", "B"}
