"""A representative subset of the table behaviour suite, run on an ``s3://`` warehouse (real SeaweedFS)
with SQLite and PostgreSQL catalogs: the ``cat`` fixture of ``tests/io/s3/conftest.py`` replaces the local
one for every test imported here. Upsert, delete, overwrite, CDC, partial upserts, merge operators, time
travel, explain, projections and filters, tables without key, windowed merges, splits."""

from __future__ import annotations

from table.test_table import (  # noqa: F401  (collected here, with this directory's fixtures)
    test_append_to_table_without_key,
    test_bad_input_is_rejected_and_changes_nothing,
    test_bucket_larger_than_read_window,
    test_cdc_batch_applies_changes_in_order,
    test_delete_by_keys_without_partition_columns,
    test_delete_forms,
    test_delete_in_one_partition_keeps_the_same_key_in_another,
    test_delete_then_reinsert,
    test_explain_pruning,
    test_filters_on_table_without_key_prune_row_groups_correctly,
    test_merge_operators,
    test_non_key_filter_does_not_resurrect_old_versions,
    test_null_partition_values,
    test_overwrite_whole_table_and_one_partition,
    test_partial_column_upsert_updates_only_given_columns,
    test_scan_projection_filter_and_output_formats,
    test_splits_can_be_planned_serialised_and_read_separately,
    test_time_travel_and_history,
    test_upsert_accepts_every_input_kind,
)
