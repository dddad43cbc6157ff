"""The optional LLM answerer: an OpenAI-compatible chat API asked to answer from
the numbered passages, and its answer checked like the extractive one.

Contract: the API key and the question go only to KB_LLM_URL (https, or http to
a loopback host: url_problem; a redirect is an error, never followed). Any
failure is logged for the operator and raised as AnswerError with a generic
message for askers. check_answer removes markers citing passages never given
and flags an answer citing none as untrustworthy. No database: the citations
get their links from kb.answering (tests/test_imports.py checks it).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import urllib.parse
import urllib.request

from django.conf import settings
from django.utils.translation import gettext, gettext_lazy

from kb.answerer import MARKER_RE, Answer, Citation
from kb.retrieval.passages import Passage, Result

logger = logging.getLogger(__name__)

TIMEOUT_S = 60
SERVICE_UNAVAILABLE = gettext_lazy("The answer service is unavailable")
SYSTEM_PROMPT = (
    "You answer questions from staff using only the numbered sections you are given. "
    "After every sentence, cite the section(s) it comes from as [n]. If the sections "
    "do not contain the answer, say so. Never cite a number you were not given."
)


class AnswerError(Exception):
    """The LLM service gave no answer (down, refused, or not to be called).

    Its message is shown to askers: say what happened, never the raw error.
    """


def answer(result: Result) -> Answer:
    """The LLM's answer from `result`'s passages (at least one), checked
    (check_answer); AnswerError when the service fails."""
    prompt = "\n\n".join(
        f"[{p.rank}] {p.source_title} > {p.heading_path}\n{p.text}"
        for p in result.passages
    )
    text = _chat(f"Sections:\n\n{prompt}\n\nQuestion: {result.question}")
    return check_answer(text, result)


def check_answer(text: str, result: Result) -> Answer:
    """Keep markers that refer to given sections; flag an answer without any."""
    given = {p.rank: p for p in result.passages}
    warnings: list[str] = []
    unknown = sorted({int(m) for m in MARKER_RE.findall(text)} - set(given))
    if unknown:
        warnings.append(
            gettext("Removed citations to sections never given: %(markers)s")
            % {"markers": unknown}
        )
        text = MARKER_RE.sub(
            lambda m: m.group(0) if int(m.group(1)) in given else "", text
        )
    used = sorted({int(m) for m in MARKER_RE.findall(text)})
    if not used:
        warnings.append(gettext("The answer cites no section: do not trust it."))
    citations = [_passage_citation(given[n]) for n in used]
    return Answer(
        text=text.strip(),
        citations=citations,
        answerer="llm",
        is_trustworthy=bool(used) and not unknown,
        warnings=warnings,
    )


def _passage_citation(p: Passage) -> Citation:
    """A whole passage cited, as the section it was chosen for (no link yet)."""
    loc = p.lead or p.locations[0]
    return Citation(
        n=p.rank,
        source_id=p.source_id,
        source=p.source_title,
        file=p.file_name,
        section_id=loc.section_id,
        heading_path=p.heading_path,
        chunk_indexes=p.chunk_indexes,
        start=p.start,
        end=p.end,
    )


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is an error: following it would send the API key to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError for the 3xx


_OPENER = urllib.request.build_opener(_NoRedirects)


def url_problem(url: str) -> str | None:
    """Why KB_LLM_URL may not be used, or None: the API key and the question
    travel in clear over http, so only a loopback host may go without TLS."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return f"KB_LLM_URL {url!r} is not a URL."
    if parts.scheme == "https" and host:
        return None
    if parts.scheme == "http" and _is_loopback(host):
        return None
    return (
        f"KB_LLM_URL must be an https:// URL (http:// only for a loopback host), "
        f"not {url!r}."
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _chat(user: str) -> str:
    """The assistant's reply to `user` (after SYSTEM_PROMPT), at temperature 0."""
    body = json.dumps(
        {
            "model": settings.KB_LLM_MODEL,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": user},
            ],
            "temperature": 0,
        }
    ).encode()
    request = urllib.request.Request(
        settings.KB_LLM_URL.rstrip("/") + "/chat/completions",
        data=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {settings.KB_LLM_API_KEY}",
        },
    )
    if problem := url_problem(settings.KB_LLM_URL):
        logger.error("LLM answerer not called: %s", problem)
        raise AnswerError(str(SERVICE_UNAVAILABLE))
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as response:
            payload = json.load(response)
        content = payload["choices"][0]["message"]["content"]
        if not isinstance(content, str):
            raise TypeError(f"the content is {type(content).__name__}, not text")
        return content
    except (
        OSError,  # URLError, HTTPError (a 3xx included), timeouts, resets
        http.client.HTTPException,
        KeyError,
        IndexError,
        TypeError,
        ValueError,
        RecursionError,
    ):
        # The detail (host, status, error text) is for the operator's log only.
        logger.exception("LLM answerer failed at %s", settings.KB_LLM_URL)
        raise AnswerError(str(SERVICE_UNAVAILABLE)) from None
