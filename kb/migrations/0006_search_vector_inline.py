"""Keep each chunk's tsvector in its row (issue #8).

With the default storage (EXTENDED), PostgreSQL moved about 70 % of the stored
tsvectors out of line, to the TOAST table, as rows with an embedding are wide:
ranking 1,000 keyword matches then read about 4,300 buffers instead of 1,000,
and keyword search took 10 ms instead of 7.5 (p50 at 100,000 chunks). MAIN keeps
a value in the row, compressed when it must, and moves it out only as a last
resort. Rows written before this migration keep their layout until their source
is re-indexed.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("kb", "0005_keyword_terms")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE kb_chunk ALTER COLUMN search_vector SET STORAGE MAIN",
            "ALTER TABLE kb_chunk ALTER COLUMN search_vector SET STORAGE EXTENDED",
        )
    ]
