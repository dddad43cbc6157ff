"""Question -> answer: retrieval, the configured answerer, and what only the
database knows about the answer's citations.

ask() runs it all: it searches a misspelled word as the collection's word
(kb.retrieval.spelling), retrieves, answers with the LLM (kb.llm) when
KB_LLM_URL is set, else, or when the LLM fails, extractively (kb.answerer),
unless the collection comes nowhere near the question (off_topic), warns of
the question's words no source uses, then fills in the citations (links,
chunk indexes, pages) in a query or two each (complete_citations). as_json is
the shape of the API's answers.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import formats
from django.utils.translation import (
    get_language,
    get_language_info,
    gettext,
    ngettext,
    pgettext,
)

from kb import (
    answerer,
    embedding,
    embedding_models,
    languages,
    llm,
    retrieval,
    unit_vectors,
)
from kb.answerer import Answer, Citation
from kb.citations import citation_url, original_url, text_fragment_url
from kb.models import Chunk, Section, Source
from kb.readers.reading import pages_of
from kb.retrieval import exact, keywords, search, spelling
from kb.retrieval.passages import Passage, Result


def ask(collection, question: str, **options: Any) -> tuple[Result, Answer]:
    """Retrieve, then answer (answer); an LLM failure falls back to the
    extractive answer. The citations come complete (complete_citations)."""
    # A misspelled word is searched as the collection's word it is close to
    # (issue #28); the question stays as asked in the result and the log.
    asked = retrieval.clean_question(question)
    unknown, checked = keywords.unknown_words(collection, asked)
    fixes = spelling.corrections(collection, unknown)
    result = retrieval.retrieve(
        collection, spelling.corrected(question, fixes), **options
    )
    started = time.perf_counter()
    configs = configs_of(result.passages)
    reply = _answer_or_fall_back(result, configs)
    if reply.answerer != "none":  # not declined: say what it cannot be about
        if fixes:  # the question searched is not the one asked
            unknown, checked = keywords.unknown_words(collection, result.question)
        unknown = spelling.without_slips(unknown, collection.embedding_model)
        missing = exact.unheld(collection, result.question)
        reply = _warn_of_unknown(
            collection, result, reply, unknown, checked, configs, missing
        )
    if fixes:
        reply.searched_for = [(f.asked, f.searched) for f in fixes]
        if misspelt := [f for f in fixes if not f.form]:
            reply.warnings.insert(0, _searched_for(misspelt))
        result.question = asked
    if (note := _model_note(collection, asked, configs)) is not None:
        reply.warnings.append(note)
        reply.is_trustworthy = False
    complete_citations(reply)
    result.timings_ms["answer"] = round((time.perf_counter() - started) * 1000, 2)
    result.timings_ms["total"] = round(  # retrieval's wall clock, then the answer
        result.timings_ms.get("total", 0.0) + result.timings_ms["answer"], 2
    )
    return result, reply


def _model_note(
    collection, question: str, configs: dict[int, str] | None = None
) -> str | None:
    """For a collection whose model reads English only: embedding_models.
    question_note for the question's language, when its words tell it
    (languages.recognised_code) and it is not English; else, when most of the
    passages found are in another language (`configs`: each passage's
    configuration), embedding_models.language_note over its sources (an
    English question over French pages, QA of MDN)."""
    if collection.embedding_model not in embedding_models.ENGLISH_ONLY:
        return None  # (telling the language costs a classification)
    code = languages.recognised_code(question)
    if code in ("", "en"):
        read = list((configs or {}).values())
        # (a language without a stemmer, Chinese or Polish, is read SIMPLE)
        foreign = [c for c in read if c != "english"]
        if not read or len(foreign) * 2 <= len(read):
            return None
        return embedding_models.language_note(
            collection.embedding_model, collection.source_languages()
        )
    try:
        name = str(get_language_info(code)["name_translated"])
    except KeyError:
        name = code
    if (get_language() or "en").split("-")[0] not in ("en", "de"):
        name = name.lower()  # "est en russe", "está en ruso", "русский"
    return embedding_models.question_note(collection.embedding_model, code, name)


def answer(result: Result, configs: dict[int, str] | None = None) -> Answer:
    """Answer with the configured answerer (LLM when KB_LLM_URL is set), unless the
    collection comes nowhere near the question (off_topic). `configs`: each
    passage's text-search configuration (configs_of), read when not given.
    The citations are not complete yet (complete_citations); llm.AnswerError
    when the LLM fails."""
    if (refusal := off_topic(result)) is not None:
        return refusal
    if settings.KB_LLM_URL and result.passages:
        return llm.answer(result)
    return extractive(result, configs)


def extractive(result: Result, configs: dict[int, str] | None = None) -> Answer:
    """The extractive answer (kb.answerer), given what it reads from the
    database: each passage's text-search configuration (configs_of, read when
    not given) and the stored vectors of its sections' units (meanings_of)."""
    result = within_period(result)
    if configs is None:
        configs = configs_of(result.passages)
    meanings = meanings_of(result.passages) if result.vector is not None else {}
    return answerer.extractive_answer(result, configs, meanings)


def within_period(result: Result) -> Result:
    """For a question naming a period, the passages of the records dated in it
    (the dated leg's sources), when there are some and others beside them:
    reports that share their wording ("The root cause was ...") would otherwise
    have another record's cause quoted (QA of issue #29). Else `result`."""
    dated = {hit.source_id for hit in result.hits if hit.dated_rank}
    kept = [p for p in result.passages if p.source_id in dated]
    if not kept or len(kept) == len(result.passages):
        return result
    return dataclasses.replace(result, passages=kept)


def _answer_or_fall_back(result: Result, configs: dict[int, str]) -> Answer:
    try:
        return answer(result, configs)
    except llm.AnswerError as exc:
        reply = extractive(result, configs)
        reply.warnings.append(
            gettext("%(problem)s; showing the retrieved passages instead.")
            % {"problem": exc}
        )
        return reply


_UNITS = """
SELECT c.section_id, c.unit_offsets, c.unit_vectors FROM kb_chunk c
WHERE c.section_id = ANY(%(sections)s) AND c.unit_offsets IS NOT NULL
  AND EXISTS (
    SELECT 1 FROM unnest(%(sections)s, %(starts)s, %(ends)s) AS l(section_id, lo, hi)
    WHERE l.section_id = c.section_id AND c.start < l.hi AND c."end" > l.lo)
"""


def meanings_of(passages: list[Passage]) -> answerer.Meanings:
    """The stored vectors of the units (kb.unit_vectors) of the chunks the
    passages' locations overlap, by section id, in one query."""
    places = [(at.section_id, at.start, at.end) for p in passages for at in p.locations]
    if not places:
        return {}
    sections, starts, ends = (list(column) for column in zip(*places, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(_UNITS, {"sections": sections, "starts": starts, "ends": ends})
        return unit_vectors.by_section(cursor.fetchall())


def configs_of(passages: list[Passage]) -> dict[int, str]:
    """The text-search configuration each passage is read in, by id(passage)
    (kb.answerer.passage_configs), its sources' languages read in one query."""
    ids = {p.source_id for p in passages}
    rows = Source.objects.filter(pk__in=ids).values_list(
        "pk", "language", "detected_language"
    )
    chosen = {pk: (language, detected) for pk, language, detected in rows}
    return answerer.passage_configs(passages, chosen)


def off_topic(result: Result) -> Answer | None:
    """No answer when even the nearest chunk is far from the question.

    Sentences picked from passages that are not about the question read like an
    answer and are not one. The threshold is the floor of the collection's model
    (kb.embedding_models.min_similarity), set below every answerable golden
    question measured with that model, so it catches questions from elsewhere
    (general knowledge, other products), not the near misses a collection is
    silent on: those still need a reader.
    """
    model = result.embedding_model or embedding_models.DEFAULT
    floor = embedding_models.min_similarity(model)
    similarity = result.top_similarity
    if not floor or similarity is None or similarity >= floor or not result.passages:
        return None
    if search.pinpointed(result.hits) or search.dated_match(result.hits):
        # "What does -S do?" reads like nothing to an embedding model (0.17 for
        # MiniLM) but names, as written, what few chunks hold: on topic. So
        # does a date that a record is dated in (issue #29's QA: 0.24).
        return None
    return _declined(
        gettext(
            "The nearest passage has a cosine similarity of only %(similarity)s "
            "to the question; an answer needs %(floor)s, the floor of the "
            "collection's model (%(model)s). The closest sections are listed for "
            "you to check."
        )
        % {
            "similarity": formats.number_format(similarity, 2),
            "floor": formats.number_format(floor, 2),
            "model": model,
        }
    )


def _declined(why: str) -> Answer:
    """No answer: the collection does not seem to cover the question; `why`."""
    return Answer(
        text=gettext("This collection does not seem to cover the question."),
        citations=[],
        answerer="none",
        is_trustworthy=False,
        warnings=[why],
    )


def complete_citations(reply: Answer) -> None:
    """Fill in what the citations need from the database: their links
    (link_citations), an extractive answer's chunk indexes (cover_chunks) and
    PDF pages (add_pages); a query or two each, for all the citations."""
    if reply.answerer == "extractive":
        cover_chunks(reply.citations)
    link_citations(reply.citations)
    add_pages(reply.citations)
    add_originals(reply.citations)


def link_citations(citations: list[Citation]) -> None:
    """Give each citation its link (citation_url), with the version of its
    source's text that was indexed (one query)."""
    versions = indexed_versions({c.source_id for c in citations})
    for cite in citations:
        cite.url = citation_url(
            cite.section_id,
            cite.start,
            cite.end,
            cite.source_id,
            versions.get(cite.source_id),
        )


def cover_chunks(citations: list[Citation]) -> None:
    """Each citation's chunk indexes: its section's chunks holding part of the
    cited range (one query for all); a citation none holds keeps its own."""
    if not citations:
        return
    wanted = Q()
    for c in citations:
        wanted |= Q(section_id=c.section_id, start__lt=c.end, end__gt=c.start)
    rows = list(
        Chunk.objects.filter(wanted).values_list(
            "section_id", "start", "end", "chunk_index"
        )
    )
    for cite in citations:
        found = [
            index
            for section_id, start, end, index in rows
            if section_id == cite.section_id and start < cite.end and end > cite.start
        ]
        cite.chunk_indexes = sorted(found) or cite.chunk_indexes


def indexed_versions(source_ids: set[int]) -> dict[int, int | None]:
    """The version of each source's text its index was built from."""
    rows = Source.objects.filter(pk__in=source_ids)
    return dict(rows.values_list("pk", "indexed_version"))


def _warn_of_unknown(
    collection,
    result: Result,
    reply: Answer,
    unknown: list[str],
    checked: int,
    configs: dict[int, str],
    missing: tuple[str, ...] | list[str] = (),
) -> Answer:
    """`reply` warning of the question's words no source uses (`unknown`, of
    `checked` words) that name something, and of its exact tokens none holds
    (`missing`: exact.unheld), and not trustworthy then (QA: "How do I make
    WebStorm fix on save?" was answered from another editor's page as
    trustworthy); declined when no word is known."""
    if unknown and len(unknown) == checked:
        return _no_word_known(unknown)
    language = _question_language(collection, result, configs)
    vocabulary = embedding.vocabulary(collection.embedding_model)
    named = [
        w for w in unknown if _names_a_thing(w, result.question, vocabulary, language)
    ]
    said = {w.casefold() for w in named}
    named += [t for t in missing if t.casefold() not in said]
    if named:  # the answer cannot be about what no source names
        reply.warnings.append(_unknown_warning(named))
        reply.is_trustworthy = False
    return reply


def _question_language(collection, result: Result, configs: dict[int, str]) -> str:
    """The question's language (ISO code) among its collection's, the language
    of the passages retrieved for it first (`configs`: configs_of)."""
    found = [languages.code_for(config) for config in configs.values()]
    found += [languages.code_for(c) for c in keywords.configs(collection)]
    return languages.question_language(result.question, [c for c in found if c])


CODE_DIGITS = 5  # a number this long is a code (23505), not a count or a year


def _names_a_thing(
    word: str, question: str, vocabulary: frozenset[str], language: str = "en"
) -> bool:
    """A word worth naming as unknown to the collection: a name (capitalised past
    the question's first word, or in capitals: "GraphQL", "AWS"), a code of
    CODE_DIGITS digits or more ("error 99999") or, in an
    English question, a word the model's English vocabulary lacks (a
    misspelling, another language, a coined term). A plain word the sources
    happen not to use ("instead") says little about what the answer can be
    about; in another language, the vocabulary cannot tell which words are
    plain, so only names are named."""
    if word.isdigit():  # "3 days" says nothing; an error code 99999 does
        return len(word) >= CODE_DIGITS
    if len(word) > 1 and word.isupper():
        return True
    if word[0].isupper() and not question.lstrip("¿¡\"'(").startswith(word):
        return True
    if language != "en":
        return False
    lower = word.lower()
    return lower not in vocabulary and lower.rstrip("s") not in vocabulary


def _named(words: list[str]) -> str:
    """The words quoted as the reader's language quotes (« mot » in French)."""
    return ", ".join(
        pgettext("a word quoted in a warning", "“%(word)s”") % {"word": w}
        for w in words
    )


def _unknown_warning(words: list[str]) -> str:
    return ngettext(
        "No source in this collection uses the word %(words)s (a name it does not "
        "know, or a misspelling?): the answer is about the rest of the question, "
        "not about it.",
        "No source in this collection uses the words %(words)s (a name it does not "
        "know, or a misspelling?): the answer is about the rest of the question, "
        "not about them.",
        len(words),
    ) % {"words": _named(words)}


def _searched_for(fixes) -> str:
    return ngettext(
        "Searched for %(words)s: no source uses the word %(asked)s.",
        "Searched for %(words)s: no source uses the words %(asked)s.",
        len(fixes),
    ) % {
        "words": _named([f.searched for f in fixes]),
        "asked": _named([f.asked for f in fixes]),
    }


def _no_word_known(words: list[str]) -> Answer:
    """A question none of whose words any source uses (another language, another
    product): the sentences an answer would quote share nothing with it."""
    return _declined(
        gettext(
            "No source in this collection uses any word of the question "
            "(%(words)s). Ask in the documents' words; the closest sections "
            "are listed for you to check."
        )
        % {"words": _named(words)}
    )


def add_pages(citations: list[Citation]) -> None:
    """Give the citations of PDF sources the page of their first cited
    character, by the source's page map (one query); a source indexed before
    it had one gives its section's first page (one more)."""
    maps = dict(
        Source.objects.filter(pk__in={c.source_id for c in citations})
        .exclude(page_map=[])
        .values_list("pk", "page_map")
    )
    for cite in citations:
        found = pages_of(maps.get(cite.source_id, ()), cite.start, cite.start + 1)
        if found:
            cite.page = found[0]
    rest = {c.section_id for c in citations if c.page is None}
    if rest:
        rows = Section.objects.filter(pk__in=rest, page_start__isnull=False)
        firsts = dict(rows.values_list("pk", "page_start"))
        for cite in citations:
            if cite.page is None:
                cite.page = firsts.get(cite.section_id)
    for cite in citations:
        cite.pages = "" if cite.page is None else str(cite.page)


def add_originals(citations: list[Citation]) -> None:
    """Give each citation of a source with a web address (metadata "url", http
    or https only: an uploaded page's, a synced site's page or a synced
    repository file's) the address of the cited place in it: the section
    heading's id when it had one (a Javadoc member), else a text fragment
    that opens the page at the cited sentence (one query)."""
    rows = Section.objects.filter(
        pk__in={c.section_id for c in citations}, source__metadata__has_key="url"
    )
    found = {
        pk: (meta.get("url"), anchor)
        for pk, anchor, meta in rows.values_list("pk", "anchor", "source__metadata")
    }
    texts = _cited_texts([c for c in citations if c.section_id in found])
    for cite in citations:
        url, anchor = found.get(cite.section_id, (None, ""))
        if anchor:
            cite.original = original_url(url, anchor)
        else:
            cite.original = text_fragment_url(url, texts.get(cite.n, ""))


def _cited_texts(citations: list[Citation]) -> dict[int, str]:
    """The cited text of each citation, by its number."""
    if not citations:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.n, substr(s.text, w.start + 1, w.length) "
            "FROM unnest(%s::int[], %s::bigint[], %s::int[], %s::int[]) "
            "AS w(n, source_id, start, length) JOIN kb_source s ON s.id = w.source_id",
            [
                [c.n for c in citations],
                [c.source_id for c in citations],
                [c.start for c in citations],
                [max(0, c.end - c.start) for c in citations],
            ],
        )
        return dict(cursor.fetchall())


def as_json(result: Result, reply: Answer) -> dict[str, Any]:
    """The shape of POST /api/ask and `kb_ask --json`."""
    return {
        "question": result.question,
        "answer": reply.text,
        "answerer": reply.answerer,
        "trustworthy": reply.is_trustworthy,
        "warnings": reply.warnings,
        "searched_for": [{"asked": a, "searched": s} for a, s in reply.searched_for],
        "citations": [c.as_dict() for c in reply.citations],
        "sections": [p.as_dict() for p in result.passages],
        "context_tokens": result.context_tokens,
        "budget_tokens": result.budget_tokens,
        "top_similarity": (
            None if result.top_similarity is None else round(result.top_similarity, 4)
        ),
        "k": result.k,
        "retrieval": result.mode,
        "timings_ms": result.timings_ms,
        # Added (issue #17): null unless KB_RERANKER_DIR is set.
        "reranking": result.reranking and result.reranking.as_dict(),
    }
