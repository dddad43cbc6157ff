"""Dates of records and the periods questions name (issue #29), as plain text work.

A record (an incident report, meeting notes, a release announcement) is told
apart from others like it by its date: three reports may share the title "All
services returning 503". `document_date` finds a document's date where records
keep it, in this order:

1. front matter: `date:`, `published:`, `created:`, `start_time:` and the
   like (ISO, time ignored);
2. the file name: `2022-09-06-dns-outage.md`, `20220906_outage.md`;
3. the title: "Outage of 6 September 2022", "2022-09-06: DNS";
4. a "Date:" line near the top ("**Date**: September 6, 2022", a table row
   "| Date | 2022-09-06 |");
5. the first dated entry under a "Timeline" heading.

Only whole dates count (day, month and year, months by name in English, French,
Spanish or Russian, or ISO): a bare number is never taken for a year, so codes
and versions are not dates.

`question_periods` reads the periods a question names: a day ("on 6 September",
"2022-09-06"), a month ("February 2023", "in February"), a season ("autumn 2022"),
a quarter ("Q3 2022") or a year after a preposition ("in 2022"). Each is a
`Period`: a range of ISO dates, or a day or month of any year when the question
gives none. Work is linear in the text read (bounded scans, no backtracking
patterns).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date

# Month names (and their usual inflections and abbreviations) -> month number.
_MONTHS: dict[str, int] = {}
for _number, _names in enumerate(
    [
        "january jan janvier janv enero ene января январь январе",
        "february feb février fevrier févr fevr febrero feb февраля февраль феврале",
        "march mar mars marzo марта март марте",
        "april apr avril abril abr апреля апрель апреле",
        "may mai mayo мая май мае",
        "june jun juin junio июня июнь июне",
        "july jul juillet juil julio июля июль июле",
        "august aug août aout agosto ago августа август августе",
        "september sep sept septembre septiembre setiembre сентября сентябрь сентябре",
        "october oct octobre octubre октября октябрь октябре",
        "november nov novembre noviembre ноября ноябрь ноябре",
        "december dec décembre decembre déc diciembre dic декабря декабрь декабре",
    ],
    1,
):
    for _name in _names.split():
        _MONTHS.setdefault(_name, _number)

# Meteorological seasons of the northern hemisphere: (first month, months).
_SEASONS: dict[str, tuple[int, int]] = {}
for _season, _names in [
    ((3, 3), "spring printemps primavera весна весной весны"),
    ((6, 3), "summer été ete verano лето летом лета"),
    ((9, 3), "autumn fall automne otoño otono осень осенью осени"),
    ((12, 3), "winter hiver invierno зима зимой зимы"),
]:
    for _name in _names.split():
        _SEASONS[_name] = _season

_MONTH = "|".join(sorted((re.escape(m) for m in _MONTHS), key=len, reverse=True))
_SEASON = "|".join(sorted((re.escape(s) for s in _SEASONS), key=len, reverse=True))
_YEAR = r"(?:19[7-9]\d|20\d\d)"
_DAY = r"(?:3[01]|[12]\d|0?[1-9])"

# 2022-09-06, 2022/09/06, 2022.09.06 (a time after it is ignored); one separator
# throughout, and with dots both parts of two digits and nothing dotted after:
# 2023.1.2 and 2022.09.06.1 are versions.
_ISO_RE = re.compile(
    rf"(?<![\d.])({_YEAR})(?:([-/])(1[0-2]|0?[1-9])\2({_DAY})(?![\d])"
    rf"|\.(1[0-2]|0[1-9])\.(3[01]|[12]\d|0[1-9])(?![\d]|\.\d))"
)
# 20220906 in file names.
_COMPACT_RE = re.compile(rf"(?<!\d)({_YEAR})(1[0-2]|0[1-9])(3[01]|[12]\d|0[1-9])(?!\d)")
# 6 September 2022, 6th of September, 6 de septiembre de 2022, 6 сентября 2022 г.
_DAY_MONTH_RE = re.compile(
    rf"(?<![\w.])({_DAY})(?:st|nd|rd|th|er)?\.?(?:\s+of|\s+de)?\s+({_MONTH})\.?"
    rf"(?:,?\s+(?:de\s+|del\s+)?({_YEAR}))?(?!\w)",
    re.IGNORECASE,
)
# September 6, 2022; Sep 6 2022; September 6th
_MONTH_DAY_RE = re.compile(
    rf"(?<![\w.])({_MONTH})\.?\s+({_DAY})(?:st|nd|rd|th)?(?:,?\s+({_YEAR}))?(?![\w:])",
    re.IGNORECASE,
)
# February 2023, février 2023, febrero de 2023, феврале 2023
_MONTH_YEAR_RE = re.compile(
    rf"(?<![\w.])({_MONTH})\.?,?\s+(?:of\s+|de\s+|del\s+)?({_YEAR})(?!\w)",
    re.IGNORECASE,
)
# "in February", "en février", "en febrero", "в феврале": a month of any year.
_IN_MONTH_RE = re.compile(
    rf"(?<!\w)(?:in|during|en|durante|в)\s+({_MONTH})(?![\w.])", re.IGNORECASE
)
_SEASON_RE = re.compile(
    rf"(?<!\w)({_SEASON})(?:\s+of|\s+de|\s+del)?\s+({_YEAR})(?!\w)", re.IGNORECASE
)
_QUARTER_RE = re.compile(rf"(?<!\w)Q([1-4])\s*({_YEAR})(?!\w)", re.IGNORECASE)
# "in 2022", "en 2022", "during 2022", "в 2022 году", "year 2022", and "the
# outage of 2021" but not "a batch of 2000 rows": after "of", nothing but
# punctuation may follow the year.
_IN_YEAR_RE = re.compile(
    rf"(?<!\w)(?:(?:in|during|en|durante|в|year|año|année)\s+({_YEAR})(?![\w.-])"
    rf"|of\s+({_YEAR})(?=\s*(?:[?!.,;:)]|$)))",
    re.IGNORECASE,
)

_FRONT_MATTER_RE = re.compile(
    r"\A---[ \t]*\n(.{0,4000}?\n)(?:---|\.\.\.)[ \t]*\n", re.S
)
_FRONT_DATE_RE = re.compile(
    r"^(?:date|published|created|incident_date|occurred|start_time|started_at|"
    r"start_date|started|start|began)[ \t]*:[ \t]*[\"']?(.{6,40})$",
    re.M | re.IGNORECASE,
)
_DATE_LINE_RE = re.compile(
    r"^[ \t>*|_-]*(?:date|fecha|дата|incident date|date of (?:the )?incident|occurred|"
    r"when)\b[*_ \t]*[:|-][ \t*_|]*(.{6,60})$",
    re.M | re.IGNORECASE,
)
_TIMELINE_RE = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*|\*\*)[^\n]{0,40}\btimeline\b", re.M | re.I
)
HEAD_CHARS = 3000  # of the text read for a "Date:" line
TIMELINE_CHARS = 1500  # of the text read after a "Timeline" heading


@dataclass(frozen=True)
class Period:
    """Dates a question names: from `start` to `end` (ISO, both included), or,
    when it gives no year, a `month` (and `day`) of any year."""

    start: str = ""
    end: str = ""
    month: int = 0
    day: int = 0

    def holds(self, iso: str) -> bool:
        """Whether an ISO date (YYYY-MM-DD) falls in the period."""
        if self.start:
            return self.start <= iso[:10] <= self.end
        return iso[5:7] == f"{self.month:02d}" and (
            not self.day or iso[8:10] == f"{self.day:02d}"
        )


def document_date(text: str, title: str = "", file_name: str = "") -> str:
    """The document's date as an ISO string, or "" (see the module docstring)."""
    front = _FRONT_MATTER_RE.match(text)
    if front:
        for found in _FRONT_DATE_RE.finditer(front.group(1)):
            if when := first_date(found.group(1)):
                return when
    name = file_name.rsplit("/", 1)[-1]
    if (iso := _ISO_RE.search(name)) and (when := _iso(*_iso_parts(iso))):
        return when
    compact = _COMPACT_RE.search(name)
    if compact and (when := _iso(*compact.groups())):
        return when
    if title and (when := first_date(title)):
        return when
    head = text[: HEAD_CHARS + (front.end() if front else 0)]
    for found in _DATE_LINE_RE.finditer(head):
        if when := first_date(found.group(1)):
            return when
    timeline = _TIMELINE_RE.search(text)
    if timeline:
        return first_date(text[timeline.end() : timeline.end() + TIMELINE_CHARS])
    return ""


def first_date(text: str) -> str:
    """The first whole date (day, month and year) in `text`, ISO, or ""."""
    found = []
    if m := _ISO_RE.search(text):
        found.append((m.start(), _iso(*_iso_parts(m))))
    for m in _DAY_MONTH_RE.finditer(text):
        if m.group(3):
            found.append((m.start(), _iso(m.group(3), m.group(2), m.group(1))))
            break
    for m in _MONTH_DAY_RE.finditer(text):
        if m.group(3):
            found.append((m.start(), _iso(m.group(3), m.group(1), m.group(2))))
            break
    found = [f for f in found if f[1]]
    return min(found)[1] if found else ""


def question_periods(question: str) -> list[Period]:
    """The periods a question names, most precise first (see the module docstring)."""
    periods: list[Period] = []
    taken: list[tuple[int, int]] = []

    def add(match: re.Match, period: Period | None) -> None:
        span = match.span()
        if period is None or any(s < span[1] and span[0] < e for s, e in taken):
            return
        taken.append(span)
        periods.append(period)

    for m in _ISO_RE.finditer(question):
        when = _iso(*_iso_parts(m))
        add(m, Period(when, when) if when else None)
    for m in _DAY_MONTH_RE.finditer(question):
        add(m, _day_period(m.group(3), m.group(2), m.group(1)))
    for m in _MONTH_DAY_RE.finditer(question):
        add(m, _day_period(m.group(3), m.group(1), m.group(2)))
    for m in _MONTH_YEAR_RE.finditer(question):
        add(m, _months(int(m.group(2)), _month(m.group(1)), 1))
    for m in _SEASON_RE.finditer(question):
        first, count = _SEASONS[m.group(1).casefold()]
        add(m, _months(int(m.group(2)), first, count))
    for m in _QUARTER_RE.finditer(question):
        add(m, _months(int(m.group(2)), 3 * int(m.group(1)) - 2, 3))
    for m in _IN_MONTH_RE.finditer(question):
        if m.group(1).casefold() not in ("may", "mar", "jun", "jul", "sep", "dec"):
            add(m, Period(month=_month(m.group(1))))
    for m in _IN_YEAR_RE.finditer(question):
        add(m, _months(int(m.group(1) or m.group(2)), 1, 12))
    return periods


_MONTH_NAMES = [calendar.month_name[i] for i in range(13)]


def spoken(value: str) -> str:
    """An ISO date as words ("2022-09-06": "6 September 2022"), what a question
    says and the model reads; anything else as it is."""
    found = _ISO_RE.fullmatch(value.strip()[:10]) if value else None
    when = found and _iso(*_iso_parts(found))
    if not when:
        return value
    year, month, day = (int(part) for part in when.split("-"))
    return f"{day} {_MONTH_NAMES[month]} {year}"


def _month(name: str) -> int:
    return _MONTHS[name.casefold().rstrip(".")]


def _iso_parts(match: re.Match) -> tuple[str, str, str]:
    """(year, month, day) of an _ISO_RE match, dashed or dotted."""
    year, _, month, day, dotted_month, dotted_day = match.groups()
    return year, month or dotted_month, day or dotted_day


def _iso(year: str, month: str, day: str) -> str:
    """YYYY-MM-DD of a valid date (month by number or name), else ""."""
    number = int(month) if month.isdigit() else _MONTHS.get(month.casefold(), 0)
    try:
        return date(int(year), number, int(day)).isoformat()
    except ValueError:
        return ""


def _day_period(year: str | None, month: str, day: str) -> Period | None:
    if year:
        when = _iso(year, month, day)
        return Period(when, when) if when else None
    number, day_number = _month(month), int(day)
    if day_number > calendar.monthrange(2024, number)[1]:  # 2024: 29 February
        return None
    return Period(month=number, day=day_number)


def _months(year: int, first: int, count: int) -> Period:
    """`count` months from month `first` of `year` (a winter runs into the next)."""
    last_month = first + count - 1
    last_year = year + (last_month - 1) // 12
    last_month = (last_month - 1) % 12 + 1
    end = calendar.monthrange(last_year, last_month)[1]
    return Period(
        date(year, first, 1).isoformat(), date(last_year, last_month, end).isoformat()
    )
