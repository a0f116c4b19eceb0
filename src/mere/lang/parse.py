"""SQL text to syntax trees: one sqlglot dialect for filters, SET expressions and statements.

sqlglot parses everything. One thing is done before it: a long parenthesised list of plain numbers or of
strings after ``IN`` (IN lists can hold millions of keys) is lifted out of the text in one regular
expression match and converted in bulk, and the parser sees a placeholder. sqlglot spends tens of
microseconds per token, which would make a million-key filter take half a minute to read.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import cast

import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from mere.errors import FilterError

# MERGE actions that take the source's columns whole. sqlglot reads neither DuckDB's BY NAME / BY POSITION
# forms nor a bare UPDATE / INSERT (both positional in DuckDB); the parser below marks each as a Var.
UPDATE_BY_NAME = "UPDATE BY NAME"
UPDATE_BY_POSITION = "UPDATE BY POSITION"
INSERT_BY_NAME = "INSERT BY NAME"
INSERT_BY_POSITION = "INSERT BY POSITION"
INSERT_DEFAULT_VALUES = "INSERT DEFAULT VALUES"
MERGE_ERROR = "ERROR"


class MereDialect(DuckDB):
    """DuckDB's SQL, plus `backtick` identifiers (Spark, MySQL) and X'00ff' byte strings."""

    class Tokenizer(DuckDB.Tokenizer):
        IDENTIFIERS = ['"', "`"]
        HEX_STRINGS = [("x'", "'"), ("X'", "'")]

    class Generator(DuckDB.Generator):  # type: ignore[misc,valid-type]  # a variable to sqlglot's typing
        def hexstring_sql(self, expression: exp.HexString, binary_function_repr: str | None = None) -> str:
            """X'..' reads back as the same bytes (DuckDB's generator writes UNHEX('..'))."""
            return f"X'{expression.this}'"

    class Parser(DuckDB.Parser):  # type: ignore[misc,valid-type]  # a variable to sqlglot's typing
        def _parse_when_matched(self) -> exp.Whens:
            """MERGE's WHEN clauses as DuckDB reads them (its grammar, not sqlglot's generic one)."""
            whens = []
            while self._match(TokenType.WHEN):
                matched = not self._match(TokenType.NOT)
                self._match_text_seq("MATCHED")
                source = (
                    False if self._match_text_seq("BY", "TARGET") else self._match_text_seq("BY", "SOURCE")
                )
                condition = self._parse_disjunction() if self._match(TokenType.AND) else None
                self._match(TokenType.THEN)
                then = self._parse_merge_action()
                whens.append(
                    self.expression(exp.When(matched=matched, source=source, condition=condition, then=then))
                )
            return cast(exp.Whens, self.expression(exp.Whens(expressions=whens)))

        def _action_ends(self) -> bool:
            ends = (
                TokenType.WHEN,
                TokenType.RETURNING,
                TokenType.SEMICOLON,
                getattr(TokenType, "SENTINEL", None),
            )
            return not self._curr or self._curr.token_type in ends  # sqlglot ends the tokens with a sentinel

        def _parse_merge_action(self) -> exp.Expression | None:
            if self._match(TokenType.UPDATE):
                if self._match_text_seq("BY", "NAME"):
                    return exp.var(UPDATE_BY_NAME)
                if self._match_text_seq("BY", "POSITION") or self._action_ends():
                    return exp.var(UPDATE_BY_POSITION)
                if not self._match(TokenType.SET):
                    self.raise_error("Expecting SET, BY NAME or BY POSITION after UPDATE")
                star = self._parse_star()  # SET *, with any EXCEPT / REPLACE it carries
                if star is not None:
                    return cast(exp.Update, self.expression(exp.Update(expressions=[star])))
                assignments = self._parse_csv(self._parse_update_assignment)
                return cast(exp.Update, self.expression(exp.Update(expressions=assignments)))
            if self._match(TokenType.INSERT):
                if self._match_text_seq("BY", "NAME"):
                    return exp.var(INSERT_BY_NAME)
                if self._match_text_seq("BY", "POSITION") or self._action_ends():
                    return exp.var(INSERT_BY_POSITION)
                if self._match_text_seq("DEFAULT", "VALUES"):
                    return exp.var(INSERT_DEFAULT_VALUES)
                star = self._parse_star()
                if star is not None:
                    return cast(exp.Insert, self.expression(exp.Insert(this=star)))
                columns = None if self._curr and self._curr.text.upper() == "VALUES" else self._parse_value()
                if not self._match_text_seq("VALUES"):
                    self.raise_error("Expecting VALUES")
                values = self._parse_value()
                return cast(exp.Insert, self.expression(exp.Insert(this=columns, expression=values)))
            if self._match(TokenType.DELETE):
                return exp.var("DELETE")
            if self._match_text_seq("DO", "NOTHING"):
                return exp.var("DO NOTHING")
            if self._match_text_seq("ERROR"):
                self._parse_primary()  # DuckDB's optional message
                return exp.var(MERGE_ERROR)
            self.raise_error("Expecting UPDATE, INSERT, DELETE, DO NOTHING or ERROR")
            return None


_NUM = r"-?(?:\d+(?:\.\d*)?|\.\d+)"
_STR = r"'(?:[^']|'')*+'"
# Quoted text and comments are skipped whole, so a list inside them is never lifted out.
_BULK_LIST = re.compile(
    rf"""(?P<skip>{_STR}|"(?:[^"]|"")*+"|`(?:[^`]|``)*+`|--[^\n]*+|/\*.*?\*/)
    |(?P<head>\bIN\s*)(?P<list>\((?>\s*{_NUM}\s*,){{15,}}+\s*{_NUM}\s*\)|\((?>\s*{_STR}\s*,){{15,}}+\s*{_STR}\s*\))""",
    re.VERBOSE | re.DOTALL | re.IGNORECASE,
)
_STR_ITEM = re.compile(r"'((?:[^']|'')*+)'")
LIST_PREFIX = "mere_list_"


@dataclass
class Parsed:
    """A syntax tree and the bulk IN lists its placeholders stand for."""

    tree: exp.Expression
    text: str
    lists: dict[str, list[object]] = field(default_factory=dict)


def list_values(text: str) -> list[object]:
    """The values of a bulk list, converted at once (numbers as in :func:`number`)."""
    body = text[1:-1]
    if body.lstrip().startswith("'"):
        items = _STR_ITEM.findall(body)
        return [item.replace("''", "'") for item in items] if "''" in body else items
    parts = body.split(",")
    if "." not in body:
        return list(map(int, parts))  # int() ignores the whitespace around each number
    return [Decimal(part) if "." in part else int(part) for part in parts]


def lift_lists(text: str) -> tuple[str, dict[str, list[object]]]:
    """``text`` with its long IN lists replaced by placeholders, and the lists' values by placeholder name."""
    lists: dict[str, list[object]] = {}
    if len(text) < 64:
        return text, lists

    def replace(m: re.Match[str]) -> str:
        if m.group("skip") is not None:
            return m.group()
        name = f"{LIST_PREFIX}{len(lists)}"
        try:
            lists[name] = list_values(m.group("list"))
        except ValueError as exc:  # e.g. an integer beyond Python's digit limit
            raise FilterError(f"invalid IN list ({exc})") from None
        return f"{m.group('head')} :{name} "

    return _BULK_LIST.sub(replace, text), lists


def _position(text: str, line: int, col: int) -> int:
    lines = text.split("\n")
    return sum(len(x) + 1 for x in lines[: max(line - 1, 0)]) + max(col - 1, 0)


def syntax_error(text: str, pos: int | None, message: str, what: str = "filter") -> FilterError:
    """A :class:`FilterError` pointing at a position of ``text``."""
    if pos is None:
        return FilterError(f"{message} ({what}: {text!r})")
    if pos >= len(text.rstrip()):
        return FilterError(f"{message} at end of {what} ({what}: {text!r})")
    excerpt = text[pos : pos + 20] + ("..." if pos + 20 < len(text) else "")
    return FilterError(f"{message} at position {pos} near {excerpt!r} ({what}: {text!r})")


def _parse(text: str, what: str) -> Parsed:
    if not isinstance(text, str):
        raise FilterError(f"{what} text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise FilterError(f"empty {what}")
    lifted, lists = lift_lists(text)
    try:
        tree = sqlglot.parse_one(lifted, read=MereDialect)
    except TokenError as exc:
        quote = next((q for q in ("'", '"', "`") if lifted.count(q) % 2), None)
        detail = "unterminated quoted text" if quote else f"cannot read the {what} ({exc})"
        raise syntax_error(text, lifted.rfind(quote) if quote else None, detail, what) from None
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        description = str(first.get("description", exc)).replace("Invalid expression / ", "")
        if description.startswith("Required keyword"):
            description = "incomplete expression"
        line, col, highlight = first.get("line"), first.get("col"), str(first.get("highlight", ""))
        pos = None
        if isinstance(line, int) and isinstance(col, int) and not lists:
            pos = _position(lifted, line, col) - len(highlight) + 1
            if description.startswith(("Expecting", "incomplete")) and pos + len(highlight) >= len(
                lifted.rstrip()
            ):
                pos = len(lifted)  # what was expected is missing at the end
        elif lists:
            pos = len(text) if description.startswith("Expecting") else None
        raise syntax_error(text, pos, description, what) from None
    if tree is None:
        raise FilterError(f"empty {what}")
    return Parsed(cast(exp.Expression, tree), text, lists)


def parse_expression(text: str, what: str = "filter") -> Parsed:
    """Parse one scalar expression (a filter, a condition or a SET value)."""
    parsed = _parse(text, what)
    tree = parsed.tree
    if isinstance(tree, exp.Alias):
        raise syntax_error(
            text, text.rfind(tree.alias) if tree.alias else None, "unexpected text after the expression", what
        )
    if isinstance(tree, exp.Query | exp.DDL | exp.DML | exp.Command):
        raise FilterError(
            f"a {what} is one expression, not a {tree.key.upper()} statement ({what}: {text!r})"
        )
    return parsed


def parse_statement(text: str) -> Parsed:
    """Parse one MERGE INTO, UPDATE or DELETE statement."""
    parsed = _parse(text, "statement")
    if not isinstance(parsed.tree, exp.Merge | exp.Update | exp.Delete):
        raise FilterError(
            f"mere.sql runs MERGE INTO, UPDATE and DELETE statements; got {parsed.tree.key.upper()} "
            "(mere is not a SQL engine: read tables into DuckDB, Polars or Spark for queries)"
        )
    return parsed


@functools.lru_cache(maxsize=4096)
def is_plain_identifier(name: str) -> bool:
    """Whether ``name`` reads back as the same identifier without quotes."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return False
    try:
        tokens = MereDialect().tokenize(name)
    except TokenError:
        return False
    if len(tokens) != 1 or tokens[0].token_type != TokenType.VAR:
        return False
    try:
        tree = sqlglot.parse_one(f"{name} = 1", read=MereDialect)
    except ParseError:
        return False
    return isinstance(tree, exp.EQ) and isinstance(tree.this, exp.Column) and tree.this.name == name
