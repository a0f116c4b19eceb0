"""Filter expressions: parsing, binding, lowering to pyarrow and pruning analysis.

A filter reaches mere as SQL-like text, as an :class:`Expr` tree or as an opaque
``pyarrow.compute.Expression``; :func:`to_expr` turns all three into an ``Expr``. Text
combined with an expression (``(col("a") > 1) & "b = 2"``) stays text (:class:`FilterText`)
until :func:`to_expr` or :func:`bind` reads it, where a table takes the filter.

Semantics follow SQL three-valued logic. A comparison with a NULL column value is
NULL; ``NOT NULL`` is NULL; ``x IN (1, NULL)`` is TRUE when ``x = 1`` and NULL
otherwise; a row is kept only when the filter is TRUE. An empty ``IN ()`` list is
FALSE for every row, NULL included.

Numbers follow SQL. Text with a decimal point and no exponent (``1.5``, ``.5``,
``-0.25``) is an exact decimal literal (``decimal.Decimal``, every digit kept); text with
an exponent (``1e5``, ``2.5E-3``) is an approximate literal (``float``); other numbers
are integers. On an integer or decimal column a literal keeps its exact value: one the
column type cannot hold is not an error but makes the comparison what it exactly is
(``i = 1.5`` is FALSE, ``i < 1.5`` is ``i <= 1``, ``int8_col < 1000`` is TRUE; NULL rows
stay NULL). A float literal compares as SQL compares a double: with the column value converted to a
double (``i64 = 9.007199254740992e15`` holds for 2**53 and 2**53 + 1). On a float column an integer or
decimal literal becomes the nearest value of the column's float type; a float literal a float32 column
cannot hold is between two of its values (``f32 = 1e-1`` is FALSE, as in Spark SQL and DuckDB).

Floats follow Spark SQL, PostgreSQL and DuckDB, not IEEE: ``-0.0`` equals ``0.0`` and NaN
equals NaN and is greater than every other value, ``+Infinity`` included (so ``f > 1`` is
TRUE for NaN and ``f < 1`` FALSE). On a float column the strings ``'NaN'``,
``'Infinity'``, ``'-Infinity'``, ``'inf'`` and ``'-inf'`` (any case) name those values, and
``DOUBLE 'NaN'`` is a float literal anywhere. Bind a filter (:func:`bind`) before lowering
or analysing it: the float rules apply where the literal is a float, which binding ensures
for float columns.

Literal values are always plain Python values (``int``, ``float``, ``Decimal``,
``str``, ``bytes``, ``bool``, ``datetime.date``, ``datetime.datetime``, ``datetime.time``,
``datetime.timedelta``). :func:`bind` casts them to the column's Arrow type and stores
the result again as a Python value of that type (``pa.Scalar.as_py()``); timestamps are
kept at microsecond precision as ``datetime.datetime`` (tz-aware for tz columns).

The package's modules, from the bottom up: :mod:`~mere.expr.literals` (literal values: SQL spelling,
binding to a column's type, comparison), :mod:`~mere.expr.nodes` (the expression nodes and ``col()``),
:mod:`~mere.expr.logic` (boolean structure), :mod:`~mere.expr.evaluate` (evaluation in Python),
:mod:`~mere.expr.prune` (bucket and row-group pruning), :mod:`~mere.expr.arrow` (lowering to pyarrow),
:mod:`~mere.expr.parse` (filters as users give them) and :mod:`~mere.expr.bind` (binding to a schema).
The SQL front end, :mod:`mere.lang`, builds on ``nodes`` and ``literals`` only; ``parse`` and ``bind``
use it. Every public name is available here.
"""

from mere.expr.arrow import to_pyarrow
from mere.expr.bind import bind
from mere.expr.evaluate import evaluate_constant
from mere.expr.literals import Gap, bind_scalar
from mere.expr.logic import columns, conjunction, conjuncts, split_by_columns
from mere.expr.nodes import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    ArrowPredicate,
    Col,
    Compare,
    CompareOp,
    Expr,
    FilterText,
    In,
    IsNull,
    Not,
    Or,
    Sql,
    col,
    flip,
    render,
)
from mere.expr.parse import parse, to_expr
from mere.expr.prune import ColumnStats, key_points, might_match

__all__ = [
    "AlwaysFalse",
    "AlwaysTrue",
    "And",
    "ArrowPredicate",
    "Col",
    "ColumnStats",
    "Compare",
    "CompareOp",
    "Expr",
    "FilterText",
    "Gap",
    "In",
    "IsNull",
    "Not",
    "Or",
    "Sql",
    "bind",
    "bind_scalar",
    "col",
    "columns",
    "conjunction",
    "conjuncts",
    "evaluate_constant",
    "flip",
    "key_points",
    "might_match",
    "parse",
    "render",
    "split_by_columns",
    "to_expr",
    "to_pyarrow",
]
