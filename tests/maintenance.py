"""Table properties for tests that count versions or bytes read: no automatic maintenance in between."""

MANUAL = {"compaction.auto": "off", "retention.max-age": "off"}
