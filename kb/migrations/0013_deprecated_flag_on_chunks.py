"""Deprecation is a control field (kb/metadata.py CONTROL_FIELDS): stored on every
chunk of a deprecated source whatever the metadata policy, where the searches read
it. Chunks indexed before, under a policy that ignored the field, get it here, so
those sources leave answers without waiting for a re-index."""

from django.db import migrations

FLAG_CHUNKS = """
UPDATE kb_chunk c SET metadata = c.metadata || '{"deprecated": true}'::jsonb
FROM kb_source s
WHERE s.id = c.source_id AND s.metadata @> '{"deprecated": true}'::jsonb
  AND NOT c.metadata ? 'deprecated'
"""


class Migration(migrations.Migration):
    dependencies = [("kb", "0012_drop_is_index_stale")]

    operations = [migrations.RunSQL(FLAG_CHUNKS, migrations.RunSQL.noop)]
