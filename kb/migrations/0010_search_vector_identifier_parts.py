"""Keyword search that reads code identifiers as words too (issue #17).

PostgreSQL's parser reads `tool.poetry.group`, `pyproject.toml` or a URL as one
token (a host or a file name), so a question asking about the "poetry group" or
"pyproject" never matched them; a camelCase name (`SpawnWorker`) likewise stays
one word. Each chunk's tsvector now also holds the parts of such identifiers
(kb_search_text: the text, then the parts of its dotted, slashed and camelCase
names), and questions are split at dots, slashes and hyphens inside words
(kb_split_identifiers; kb.keywords), so `include-optional` in a question matches
`include_optional` in the text as well as the reverse. The whole identifiers stay
in the tsvector: an exact name still matches. Term counts are recounted, as the
tsvectors changed.
"""

import django.contrib.postgres.search
from django.db import migrations, models

INDEX = "chunk_search_vector_gin"

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION kb_split_identifiers(t text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN regexp_replace(t, '([[:alnum:]])[./-]+(?=[[:alnum:]])', '\1 ', 'g');

CREATE OR REPLACE FUNCTION kb_search_text(t text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT t || coalesce(E'\n' || string_agg(
        regexp_replace(regexp_replace(m[1], '[./_-]+', ' ', 'g'),
                       '([[:lower:][:digit:]])([[:upper:]])', '\1 \2', 'g'), ' '), '')
    FROM regexp_matches(
        t,
        '([[:alnum:]_-]*[[:alnum:]][./]+[[:alnum:]][[:alnum:]_./-]*'
        '|[[:alnum:]]*[[:lower:]][[:upper:]][[:alnum:]]*)',
        'g') AS m;
END;
"""


def column(text: str) -> list[str]:
    # One ALTER TABLE: the rows are written once, already with MAIN storage (0006).
    return [
        "ALTER TABLE kb_chunk DROP COLUMN search_vector",
        "ALTER TABLE kb_chunk ADD COLUMN search_vector tsvector GENERATED ALWAYS AS "
        f"(to_tsvector('english'::regconfig, COALESCE({text}, ''))) STORED, "
        "ALTER COLUMN search_vector SET STORAGE MAIN",
        f"CREATE INDEX {INDEX} ON kb_chunk USING gin (search_vector) "
        "WITH (fastupdate = off)",
    ]


RECOUNT = """
DELETE FROM kb_term;
INSERT INTO kb_term (collection_id, lexeme, chunks)
SELECT k.id, t.word, t.ndoc FROM kb_collection k CROSS JOIN LATERAL ts_stat(
    format('SELECT c.search_vector FROM kb_chunk c JOIN kb_source s '
           'ON s.id = c.source_id WHERE s.collection_id = %s', k.id)) t
WHERE k.terms_counted IS NOT NULL;
"""


class Migration(migrations.Migration):
    dependencies = [("kb", "0009_section_pages_source_reading")]

    operations = [
        migrations.RunSQL(
            FUNCTIONS,
            "DROP FUNCTION kb_search_text(text); DROP FUNCTION kb_split_identifiers(text)",
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    [*column("kb_search_text(embedded_text)"), RECOUNT],
                    [*column("embedded_text"), RECOUNT],
                )
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="chunk",
                    name="search_vector",
                    field=models.GeneratedField(
                        db_persist=True,
                        expression=django.contrib.postgres.search.SearchVector(
                            models.Func(
                                models.F("embedded_text"),
                                function="kb_search_text",
                                output_field=models.TextField(),
                            ),
                            config="english",
                        ),
                        output_field=django.contrib.postgres.search.SearchVectorField(),
                    ),
                )
            ],
        ),
    ]
