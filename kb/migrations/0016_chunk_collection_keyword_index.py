"""The keyword index keyed by collection first (issue #26).

On the words alone, the GIN index handed a search every collection's matches,
filtered by collection afterwards: a 504-chunk collection's keyword search took
2.9 ms alone and 51 ms beside two collections of 20,160 chunks. Each chunk now
carries its source's collection, kept by triggers (whatever writes the rows:
ingestion, a shadow swap moving chunks onto live sources, an editor moving a
source, the benchmarks' SQL), and the index is on (collection, words), so GIN
intersects the collection's entries with the words' (btree_gin).
"""

import django.db.models.deletion
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import BtreeGinExtension
from django.db import migrations, models

TRIGGERS = """
CREATE FUNCTION kb_chunk_collection() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT s.collection_id INTO NEW.collection_id FROM kb_source s
    WHERE s.id = NEW.source_id;
    RETURN NEW;
END $$;
CREATE TRIGGER kb_chunk_collection BEFORE INSERT OR UPDATE OF source_id, collection_id
ON kb_chunk FOR EACH ROW EXECUTE FUNCTION kb_chunk_collection();
CREATE FUNCTION kb_source_collection() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE kb_chunk SET collection_id = NEW.collection_id WHERE source_id = NEW.id;
    RETURN NULL;
END $$;
CREATE TRIGGER kb_source_collection AFTER UPDATE OF collection_id ON kb_source
FOR EACH ROW WHEN (OLD.collection_id IS DISTINCT FROM NEW.collection_id)
EXECUTE FUNCTION kb_source_collection();
UPDATE kb_chunk c SET collection_id = s.collection_id FROM kb_source s
WHERE s.id = c.source_id;
"""
DROP_TRIGGERS = """
DROP TRIGGER kb_source_collection ON kb_source;
DROP FUNCTION kb_source_collection();
DROP TRIGGER kb_chunk_collection ON kb_chunk;
DROP FUNCTION kb_chunk_collection();
"""


class Migration(migrations.Migration):
    dependencies = [("kb", "0015_question_repeats")]

    operations = [
        BtreeGinExtension(),
        migrations.AddField(
            model_name="chunk",
            name="collection",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="kb.collection",
            ),
        ),
        migrations.RunSQL(TRIGGERS, DROP_TRIGGERS),
        migrations.RemoveIndex(model_name="chunk", name="chunk_search_vector_gin"),
        migrations.AddIndex(
            model_name="chunk",
            index=GinIndex(
                fields=["collection", "search_vector"],
                name="chunk_collection_search_gin",
                fastupdate=False,
            ),
        ),
    ]
