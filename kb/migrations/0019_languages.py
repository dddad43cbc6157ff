"""Language per source and keyword search per language (issue #27).

Each chunk carries the text-search configuration of its section's language
(a `regconfig`, so the generated tsvector can be `to_tsvector(language, text)`),
the source its detected language and an editor's choice, and the Term counts
their configuration. Languages without a snowball configuration are read with
`simple_unaccent`: `simple` with accents folded (the unaccent extension).
Existing chunks and counts were English-stemmed and stay `english`.
"""

import django.contrib.postgres.search
import kb.models
from django.contrib.postgres.indexes import GinIndex
from django.db import migrations, models


SIMPLE_UNACCENT = """
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE TEXT SEARCH CONFIGURATION simple_unaccent (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION simple_unaccent
    ALTER MAPPING FOR hword, hword_part, word WITH unaccent, simple;
"""
DROP_SIMPLE_UNACCENT = "DROP TEXT SEARCH CONFIGURATION simple_unaccent;"
COUNTED_ENGLISH = """
UPDATE kb_collection SET terms_languages = jsonb_build_object('english', terms_chunks)
WHERE terms_counted IS NOT NULL;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0018_collection_embedding_model"),
    ]

    operations = [
        migrations.RunSQL(SIMPLE_UNACCENT, DROP_SIMPLE_UNACCENT),
        migrations.RemoveConstraint(
            model_name="term",
            name="term_collection_lexeme",
        ),
        migrations.AddField(
            model_name="chunk",
            name="language",
            field=kb.models.RegConfigField(
                db_default="english", default="english", max_length=64
            ),
        ),
        migrations.AddField(
            model_name="collection",
            name="terms_languages",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
        migrations.AddField(
            model_name="source",
            name="detected_language",
            field=models.CharField(blank=True, editable=False, max_length=8),
        ),
        migrations.AddField(
            model_name="source",
            name="language",
            field=models.CharField(
                blank=True,
                choices=[
                    ("ar", "Arabic"),
                    ("bg", "Bulgarian"),
                    ("ca", "Catalan"),
                    ("cs", "Czech"),
                    ("da", "Danish"),
                    ("de", "German"),
                    ("el", "Greek"),
                    ("en", "English"),
                    ("es", "Spanish"),
                    ("et", "Estonian"),
                    ("eu", "Basque"),
                    ("fa", "Persian"),
                    ("fi", "Finnish"),
                    ("fr", "French"),
                    ("ga", "Irish"),
                    ("he", "Hebrew"),
                    ("hi", "Hindi"),
                    ("hr", "Croatian"),
                    ("hu", "Hungarian"),
                    ("hy", "Armenian"),
                    ("id", "Indonesian"),
                    ("it", "Italian"),
                    ("ja", "Japanese"),
                    ("ko", "Korean"),
                    ("lt", "Lithuanian"),
                    ("ne", "Nepali"),
                    ("nl", "Dutch"),
                    ("no", "Norwegian"),
                    ("pl", "Polish"),
                    ("pt", "Portuguese"),
                    ("ro", "Romanian"),
                    ("ru", "Russian"),
                    ("sk", "Slovak"),
                    ("sl", "Slovenian"),
                    ("sr", "Serbian"),
                    ("sv", "Swedish"),
                    ("ta", "Tamil"),
                    ("th", "Thai"),
                    ("tr", "Turkish"),
                    ("uk", "Ukrainian"),
                    ("vi", "Vietnamese"),
                    ("zh", "Chinese"),
                ],
                help_text="Blank: detected for each section. Chosen: the whole source is read in it (keyword search, the answer's word matching).",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="term",
            name="language",
            field=kb.models.RegConfigField(
                db_default="english", default="english", max_length=64
            ),
        ),
        migrations.RemoveIndex(model_name="chunk", name="chunk_collection_search_gin"),
        migrations.RemoveField(model_name="chunk", name="search_vector"),
        migrations.AddField(
            model_name="chunk",
            name="search_vector",
            field=models.GeneratedField(
                db_persist=True,
                expression=models.Func(
                    "language",
                    "embedded_text",
                    function="to_tsvector",
                    output_field=django.contrib.postgres.search.SearchVectorField(),
                ),
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        migrations.AddConstraint(
            model_name="term",
            constraint=models.UniqueConstraint(
                fields=("collection", "language", "lexeme"),
                name="term_collection_language_lexeme",
            ),
        ),
        migrations.AddIndex(
            model_name="chunk",
            index=GinIndex(
                fields=["collection", "search_vector"],
                name="chunk_collection_search_gin",
                fastupdate=False,
            ),
        ),
        migrations.RunSQL(COUNTED_ENGLISH, migrations.RunSQL.noop),
    ]
