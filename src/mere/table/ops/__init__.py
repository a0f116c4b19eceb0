"""Operations on a table: each builds changes (as data) from a :class:`~mere.table.context.TableContext`
and commits them through :mod:`mere.table.commit`; none depends on the ``Table`` facade."""
