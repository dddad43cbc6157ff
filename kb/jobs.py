"""RQ entry points: ids in, domain code called, outcome recorded on the rows."""

from __future__ import annotations

import logging
import os

from django.db import connection

logger = logging.getLogger(__name__)


def check_worker() -> dict:
    """Report what a worker process sees: its pid, the database and pgvector."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    return {
        "pid": os.getpid(),
        "database": connection.settings_dict["NAME"],
        "vendor": connection.vendor,
        "pgvector": row[0] if row else None,
    }
