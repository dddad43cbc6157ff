"""Exact tokens on chunks (issue #29): codes, options, identifiers, versions and
paths as written, beside the stemmed search_vector, for the keyword search's
exact leg. Existing chunks get theirs from their embedded text, as a publish
would give them (kb.exact_tokens as it is when the migration runs); rows
inserted without the column (raw SQL) get none until re-indexed.
"""

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
from django.db import migrations, models

BATCH = 2000


def fill(apps, schema_editor):
    from kb import exact_tokens

    Chunk = apps.get_model("kb", "Chunk")
    batch = []
    for chunk in Chunk.objects.only("id", "embedded_text").iterator(BATCH):
        chunk.exact_tokens = exact_tokens.lexemes(chunk.embedded_text)
        if chunk.exact_tokens:
            batch.append(chunk)
        if len(batch) >= BATCH:
            Chunk.objects.bulk_update(batch, ["exact_tokens"])
            batch = []
    Chunk.objects.bulk_update(batch, ["exact_tokens"])


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0028_answer_floor"),
    ]

    operations = [
        migrations.AddField(
            model_name="chunk",
            name="exact_tokens",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.TextField(),
                blank=True,
                db_default=[],
                default=list,
                editable=False,
                size=None,
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="chunk",
            index=django.contrib.postgres.indexes.GinIndex(
                fastupdate=False,
                fields=["collection", "exact_tokens"],
                name="chunk_collection_exact_gin",
            ),
        ),
    ]
