"""The HNSW index's measured recall per collection (issue #26).

Measured after every publish (kb/retrieval/hnsw_recall.py); a collection past
KB_EXACT_SEARCH_CHUNKS whose recall is below KB_HNSW_MIN_RECALL is searched
exactly. Existing collections are measured at their next publish.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0016_chunk_collection_keyword_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="collection",
            name="hnsw_recall",
            field=models.FloatField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="collection",
            name="hnsw_recall_measured",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]
