"""Reading JSON that users send (API bodies, JSON Lines files): every way it can
be unreadable becomes one exception with the reason, never a 500 or a traceback.

json.loads raises more than JSONDecodeError on hostile input: RecursionError on
deep nesting ("[" * 100000) and ValueError on an integer of over 4,300 digits
(Python's integer string conversion limit)."""

from __future__ import annotations

import json
from typing import Any


class JsonError(ValueError):
    """Unreadable JSON; the message completes "The body ..." or "line 3 ..."
    ("is not JSON (Expecting value)")."""


def loads(data: str | bytes) -> Any:
    """json.loads, with every failure a JsonError saying why."""
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise JsonError("is not UTF-8 encoded JSON") from None
    except json.JSONDecodeError as exc:
        raise JsonError(f"is not JSON ({exc.msg})") from None
    except RecursionError:
        raise JsonError("is nested too deeply") from None
    except ValueError:  # an integer of over 4,300 digits
        raise JsonError("holds a number too long to read") from None
