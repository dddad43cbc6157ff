"""Exact tokens (issue #29): codes, options, identifiers, versions and paths
found as written, and the exact leg that finds the chunks holding them (real
database and embedder)."""

from __future__ import annotations

import signal
from contextlib import contextmanager

from django.conf import settings
from django.test import SimpleTestCase, TestCase, override_settings

from kb import exact_tokens
from kb.models import Chunk
from kb.retrieval import exact, pipeline, search
from tests.base import DemoTestCase, collection_of

CODES = """# Appendix A. Error codes

Every message the server writes has a five-character SQLSTATE code. The
first two characters name the class, the last three the condition.

| Code | Condition name | Meaning |
|------|----------------|---------|
| 22001 | string_data_right_truncation | A value is too long for its column. |
| 22003 | numeric_value_out_of_range | A number does not fit its type. |
| 22012 | division_by_zero | A division by zero was attempted. |
| 23000 | integrity_constraint_violation | Some integrity constraint failed. |
| 23502 | not_null_violation | A required column was left empty. |
| 23503 | foreign_key_violation | A referenced row does not exist. |
| 23505 | unique_violation | Another row already holds this key. |
| 23514 | check_violation | A check constraint rejected the row. |
| 42601 | syntax_error | The statement could not be parsed. |
| 42P01 | undefined_table | The table named does not exist. |
"""
# A long table (its section is read as windows around its hits): more rows of
# made-up conditions in classes 53 to 58, worded like the real ones.
OBJECTS = ("disk", "memory", "lock", "file", "socket", "queue", "buffer", "index")
STATES = ("full", "exhausted", "busy", "lost", "stale", "missing", "corrupt")
CODES += "".join(
    f"| 5{3 + n // 10}{n:03d} | {o}_{s} | The server found the {o} {s}. |\n"
    for n, (o, s) in enumerate((o, s) for o in OBJECTS for s in STATES)
)
LOGGING = """# Error reporting and logging

The server reports errors to the client and writes them to its log. Each log
line can carry the error's code, so that logs show which condition was raised.
Choose how much is logged with the logging level; conditions below it are not
written. Log lines of errors raised inside a transaction name the transaction.
"""
OPTIONS = """# Command-line options

The dump program reads these options before it connects to the server.

## -s

Dump only the schema (the definitions of tables and functions), no data.

## -S

Set the superuser name to use when disabling triggers during a restore.

## -v

Verbose mode: print detailed progress messages while dumping.

## --no-deps

Leave out the objects the dumped ones depend on.
"""
STRINGS = """# String helpers

## isBlank

Checks whether a string is empty, null or whitespace only, and returns true
then. A string of spaces is blank.

## isEmpty

Checks whether a string is empty or null. A string of spaces is not empty.

## Safe methods

The SAFE_METHODS tuple lists the request methods that change nothing on the
server: GET, HEAD and OPTIONS.
"""


@contextmanager
def time_limit(seconds: int):
    """Raise TimeoutError when the block runs longer (a hang fails the test)."""

    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class ExtractionTestCase(SimpleTestCase):
    def _tokens(self, text: str) -> list[str]:
        return exact_tokens.tokens(text)

    def test_it_finds_codes(self):
        found = self._tokens("SQLSTATE 23505, HRESULT 0x80070005 and rustc E0425.")
        self.assertEqual(found, ["23505", "0x80070005", "E0425"])

    def test_it_finds_options_with_their_dashes(self):
        found = self._tokens("Pass -S or `--no-deps` (not -- or a - b).")
        self.assertEqual(found, ["-S", "--no-deps"])

    def test_it_finds_search_terms_with_their_tilde(self):
        # aptitude's "~g" was the word "g", dropped (QA over its manuals)
        found = self._tokens("Que fait ~g ? Et ~ahold, pas ~ seul ni ~/.config.")
        self.assertEqual(found, ["~g", "~ahold", "~/.config"])

    def test_it_finds_identifiers(self):
        text = "isBlank, max_connections, unique_violation and SAFE_METHODS"
        found = self._tokens(text)
        self.assertEqual(
            found, ["isBlank", "max_connections", "unique_violation", "SAFE_METHODS"]
        )

    def test_it_finds_versions_and_paths(self):
        text = "Since 1.2.3, read /etc/kb.conf then ~/.config/kb and docs/index.md."
        found = self._tokens(text)
        for token in ("1.2.3", "/etc/kb.conf", "~/.config/kb", "docs/index.md"):
            self.assertIn(token, found)
        self.assertIn("kb.conf", found)  # a part of the path

    def test_it_finds_the_parts_of_a_qualified_name(self):
        found = self._tokens("StringUtils.isBlank(CharSequence) and std::vector")
        for token in ("StringUtils.isBlank", "isBlank", "StringUtils", "std::vector"):
            self.assertIn(token, found)

    def test_a_configuration_key_is_told_from_a_qualified_name(self):
        # APT's keys end in hyphenated words, which no identifier holds: a
        # document that names one writes it whole
        self.assertTrue(exact_tokens.is_config_key("APT::Get::Assume-Yes"))
        self.assertTrue(exact_tokens.is_config_key("Aptitude::CmdLine::Auto-Reboot"))
        for name in ("std::vector::push_back", "File::set_modified", "a::-b"):
            with self.subTest(name):
                self.assertFalse(exact_tokens.is_config_key(name))

    def test_prose_has_none(self):
        text = (
            "Use it and/or the other, e.g. a well-known read/write step 2 of 10, "
            "or a 500 error. "
            "SQLSTATE codes, HTTP and JSON are words. The end."
        )
        self.assertEqual(self._tokens(text), [])

    def test_a_chunk_stores_folded_forms_beside_the_written_ones(self):
        found = exact_tokens.lexemes("isBlank -S -s 23505")
        self.assertEqual(found, ["isBlank", "-S", "-s", "23505", "^isblank", "^-s"])

    def test_a_capital_in_a_question_is_matched_as_written(self):
        self.assertEqual(exact_tokens.question_lexemes("what is -S?"), {"-S": 1.0})

    def test_an_option_in_small_letters_is_matched_as_written(self):
        """QA of issue #29: "python -b" was answered with -B first."""
        self.assertEqual(exact_tokens.question_lexemes("what does -b do?"), {"-b": 1.0})
        found = exact_tokens.question_lexemes("what does --no-deps do?")
        self.assertEqual(found, {"--no-deps": 1.0})

    def test_small_letters_in_a_question_match_any_case_for_less(self):
        found = exact_tokens.question_lexemes("what is in safe_methods")
        self.assertEqual(found, {"safe_methods": 1.0, "^safe_methods": 0.5})
        # A word like any other: left to the keyword leg, which lowercases it.
        self.assertEqual(exact_tokens.question_lexemes("what is isblank"), {})

    def test_a_megabyte_line_of_punctuation_takes_linear_time(self):
        lines = ["-." * 500_000, "a_" * 500_000, "/:" * 500_000, "(-a." * 250_000]
        with time_limit(20):
            for line in lines:
                exact_tokens.lexemes(line)
            self.assertEqual(len(exact_tokens.tokens("a_b " * 250_000)), 1)


class ExactSearchTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of(
            "Manual",
            {
                "codes.md": CODES,
                "logging.md": LOGGING,
                "options.md": OPTIONS,
                "strings.md": STRINGS,
            },
        )

    def _first(self, question: str) -> str:
        """The first passage's text."""
        return pipeline.retrieve(self.collection, question).passages[0].text

    def _exact_first(self, question: str) -> Chunk:
        ids = exact.search(self.collection, question, 10).ids
        return Chunk.objects.select_related("section").get(pk=ids[0])

    def test_a_chunk_stores_its_tokens(self):
        chunk = Chunk.objects.get(source__file_name="codes.md", text__contains="23505")
        self.assertIn("23505", chunk.exact_tokens)
        self.assertIn("unique_violation", chunk.exact_tokens)

    def test_an_error_code_finds_its_row(self):
        for question in (
            "What does error 23505 mean?",
            "Our logs show SQLSTATE 23505: what condition is that?",
        ):
            with self.subTest(question):
                self.assertIn("| 23505 | unique_violation |", self._first(question))

    def test_an_option_finds_its_entry_and_not_another_case(self):
        self.assertEqual(self._exact_first("what does -S do?").section.heading, "-S")
        self.assertIn("superuser name", self._first("what does -S do?"))
        self.assertEqual(self._exact_first("what does -s do?").section.heading, "-s")

    def test_an_identifier_is_found_as_written_or_in_small_letters(self):
        first = self._exact_first("What condition is unique_violation?")
        self.assertIn("23505", first.text)
        first = self._exact_first("What does isBlank return?")
        self.assertEqual(first.section.heading, "isBlank")
        for question in ("What does isBlank return?", "what does isblank return"):
            with self.subTest(question):
                self.assertIn("whitespace only", self._first(question))
        for question in ("What is SAFE_METHODS?", "what is in safe_methods"):
            with self.subTest(question):
                self.assertIn("GET, HEAD and OPTIONS", self._first(question))

    def test_an_option_question_is_answered_though_it_reads_like_nothing(self):
        """ "what does -S do?" is far from every chunk for the embedding model
        (below the off-topic floor), but names an option two chunks hold as
        written: it is answered, from the -S entry (QA of issue #29)."""
        from kb import answering, embedding_models

        result, reply = answering.ask(self.collection, "what does -S do?")
        floor = embedding_models.min_similarity(embedding_models.DEFAULT)
        self.assertLess(result.top_similarity, floor)
        self.assertNotEqual(reply.answerer, "none", reply.warnings)
        self.assertIn("superuser name", reply.text)

    def test_a_code_no_source_holds_is_named_in_a_warning(self):
        """QA of issue #29: "what does error 99999 mean?" answered with other
        rows and said nothing of 99999, which no source holds."""
        from kb import answering
        from kb.retrieval import keywords

        keywords.count_terms(self.collection)  # as the job after an ingestion does
        self.collection.refresh_from_db()
        _, reply = answering.ask(self.collection, "What does error 99999 mean?")
        self.assertTrue(any("99999" in w for w in reply.warnings), reply.warnings)
        _, reply = answering.ask(self.collection, "What does error 23505 mean?")
        self.assertFalse(any("23505" in w for w in reply.warnings), reply.warnings)

    def test_an_identifier_or_option_no_source_holds_is_named_in_a_warning(self):
        """QA of issue #28 over rustdoc: "How do I set a file's modification
        time with File::set_modified?" over docs without it was answered from
        set_len's entry, as trustworthy: the word check reads "set_modified"
        as "set" and "modified", words the docs use."""
        from kb import answering
        from kb.retrieval import keywords

        keywords.count_terms(self.collection)
        self.collection.refresh_from_db()
        for question, missing in (
            ("How do I reset unique_violations?", "unique_violations"),
            ("What does Strings::is_blanks return?", "is_blanks"),
            ("Which superuser name does -Z set for a restore?", "-Z"),
            ("Which superuser name does ~Z set for a restore?", "~Z"),
            # an APT-style key no source names (QA over aptitude's Spanish
            # manual: answered from Download-Only's entry, as trustworthy)
            (
                "What is the default of Pg::Restore::Auto-Vacuum?",
                "Pg::Restore::Auto-Vacuum",
            ),
        ):
            with self.subTest(question):
                _, reply = answering.ask(self.collection, question)
                self.assertFalse(reply.is_trustworthy)
                self.assertTrue(
                    any(f"“{missing}”" in w for w in reply.warnings), reply.warnings
                )
        # held as written, in other capitals, or split from its owner; a
        # negative number, the parts of the asker's own path (review of d39bdfa)
        for question in (
            "What condition is UNIQUE_VIOLATION?",
            "What does -S do?",
            "What is Settings::SAFE_METHODS?",
            "Does a limit of -1 set no limit on the superuser name?",
            "Is /home/me/my_project/settings.py read for the superuser name?",
        ):
            with self.subTest(question):
                _, reply = answering.ask(self.collection, question)
                self.assertFalse(
                    any("No source" in w for w in reply.warnings), reply.warnings
                )

    def test_a_question_without_exact_tokens_runs_no_exact_search(self):
        found = exact.search(self.collection, "What is a blank string?", 10)
        self.assertEqual(found, exact.Found())


class PinpointTestCase(SimpleTestCase):
    def test_a_token_few_chunks_hold_weighs_more_than_one_many_hold(self):
        """ "-Z" in one row of an options table names what the question is about;
        "TestClient" across a framework's docs does not (kb.retrieval.search)."""
        self.assertEqual(search.pinpoints(exact.Found([7], {7}, 1)), {7})
        few = list(range(search.PINPOINT_CHUNKS))
        self.assertEqual(search.pinpoints(exact.Found(few, set(few), 3)), set(few))
        many = few + [99]
        self.assertEqual(search.pinpoints(exact.Found(many, set(many), 4)), set())
        self.assertEqual(search.pinpoints(exact.Found()), set())
        # Boosted, the exact leg's first chunk outweighs the vector leg's first.
        self.assertGreater(search.PINPOINT_BOOST * settings.KB_EXACT_WEIGHT, 1.0)

    def test_few_chunks_holding_all_the_tokens_are_pinpointed(self):
        """ "pg_basebackup -S": many chunks hold each, one holds both."""
        found = exact.Found(list(range(10)), {0}, 1)
        self.assertEqual(search.pinpoints(found), {0})
        found = exact.Found(list(range(10)), {0, 1, 2, 3}, 4)
        self.assertEqual(search.pinpoints(found), set())


def _command_page(command: str, purpose: str, entries: dict[str, str]) -> str:
    """A reference page of a command's options, as a manual prints them."""
    lines = [f"# {command}", "", f"{command} {purpose}", "", "## Options", ""]
    for option, text in entries.items():
        lines += [f"### {option}", "", text, ""]
    return "\n".join(lines)


# Four commands that each have a -S option, and more options naming -S in
# their text: "-S" alone is in too many chunks to pinpoint one, and so is
# each command's name, which every option entry of its page holds.
COMMANDS = {
    "pg_dump": _command_page(
        "pg_dump",
        "writes a database out as a script.",
        {
            "-S username": "Sets the superuser user name to use when disabling "
            "triggers. It is only relevant with --disable-triggers.",
            "-s": "Dumps only the object definitions, not the data; see -S.",
            "-O": "Leaves out the commands that set the ownership of objects.",
            "-Z level": "Sets the compression level of the output file.",
        },
    ),
    "pg_basebackup": _command_page(
        "pg_basebackup",
        "takes a base backup of a running cluster.",
        {
            "-S slotname": "Sets the replication slot to use. It holds back the "
            "removal of write-ahead log the server still needs.",
            "-C": "Creates the replication slot named by -S before the backup.",
            "-R": "Writes the recovery settings into the output directory.",
            "-Z level": "Sets the compression level of the tar files.",
        },
    ),
    "pg_restore": _command_page(
        "pg_restore",
        "restores a database from an archive made by pg_dump.",
        {
            "-S username": "Sets the superuser name to use when disabling "
            "triggers during the restore.",
            "-O": "Leaves out the commands that set the ownership of objects.",
            "-s": "Restores only the schema, not the data; see -S.",
        },
    ),
    "pg_receivewal": _command_page(
        "pg_receivewal",
        "streams write-ahead log from a running cluster.",
        {
            "-S slotname": "Sets the replication slot to stream from, so the "
            "server keeps the log this program has not read.",
            "--create-slot": "Creates the slot named by -S and exits.",
            "-Z level": "Sets the compression level of the log files.",
        },
    ),
}


# A name most of the guides write ("GitHub" in a guide to open source): a
# token as the exact leg reads tokens (a capital inside a word), and no code.
GUIDES = {
    "contributing.md": "# Contributing\n\n## Opening a pull request\n\nFork the "
    "repository, push your branch, then open a pull request from it on HiveHub. "
    "Describe what the change does and link the issue it fixes. A maintainer "
    "reviews it, asks for changes if needed, and merges it.\n\n## Finding an "
    "issue\n\nLook for issues labelled good first issue.\n",
    "accessibility.md": "# Accessibility\n\n## Assistants\n\nHiveHub Pilot "
    "suggests alt text.\n\n## Colours\n\nKeep the contrast high in every "
    "theme.\n",
    "legal.md": "# Legal\n\n## Public repositories\n\nA public HiveHub "
    "repository is not open source without a licence.\n",
    "security.md": "# Security\n\n## Alerts\n\nHiveHub alerts list the "
    "vulnerable dependencies.\n",
    "funding.md": "# Funding\n\n## Sponsors\n\nHiveHub Sponsors lets people "
    "fund a maintainer.\n",
    "metrics.md": "# Metrics\n\n## Traffic\n\nHiveHub shows the visitors of "
    "a repository.\n",
}


class CommonTokenTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of("Guides", GUIDES)

    def test_a_name_most_sources_write_does_not_rank_by_itself(self):
        """QA over opensource.guide: "How do I submit a pull request on GitHub?"
        ranked "Leverage GitHub Copilot" and "Are public GitHub projects open
        source?" first, the exact leg's best chunks for a token in most of
        the guides; the right section came fifth."""
        self.assertEqual(
            exact.search(self.collection, "pull request on HiveHub?", 20).ids, []
        )
        result = pipeline.retrieve(
            self.collection, "How do I open a pull request on HiveHub?"
        )
        self.assertEqual(
            result.passages[0].heading_path, "Contributing > Opening a pull request"
        )


class PinpointSearchTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of(
            "Commands", {f"{name}.md": text for name, text in COMMANDS.items()}
        )

    def test_an_option_asked_with_its_command_finds_that_commands_entry(self):
        """QA of issue #29: "What does pg_basebackup -S set?" was answered from
        another command's -S, the option being in more than PINPOINT_CHUNKS
        chunks and the command in every entry of its page."""
        cases = {
            "What does pg_basebackup -S set?": "pg_basebackup > Options > -S",
            "What does pg_restore -S set?": "pg_restore > Options > -S",
            "What does pg_receivewal -S set?": "pg_receivewal > Options > -S",
            "What does pg_dump -S set?": "pg_dump > Options > -S",
            "What does pg_dump -s dump?": "pg_dump > Options > -s",
        }
        for question, path in cases.items():
            with self.subTest(question):
                found = exact.search(self.collection, question, 20)
                self.assertGreater(len(found.ids), search.PINPOINT_CHUNKS)
                hits = pipeline.retrieve(self.collection, question).hits
                self.assertEqual(hits[0].heading_path.split(" ")[:5], path.split(" "))

    def test_the_answer_opens_with_the_entry_of_the_option_asked(self):
        """The entry headed "-S slotname" never writes "-S" in its sentences:
        its heading names what is asked, and the answer quotes it first."""
        from kb import answering

        cases = {
            "What does pg_basebackup -S set?": (
                "Sets the replication slot to use.",
                "pg_basebackup > Options > -S slotname",
            ),
            "What does pg_dump -S set?": (
                "Sets the superuser user name to use",
                "pg_dump > Options > -S username",
            ),
            "What does pg_restore -O do?": (
                "Leaves out the commands that set",
                "pg_restore > Options > -O",
            ),
        }
        for question, (opening, path) in cases.items():
            with self.subTest(question):
                _, reply = answering.ask(self.collection, question)
                entry = path.rsplit(" > ", 1)[-1]  # named: its sentence does not
                self.assertTrue(
                    reply.text.startswith(f"**`{entry}`**: {opening}"), reply.text
                )
                self.assertEqual(reply.citations[0].heading_path, path)


class DemoWithoutExactTokensTestCase(DemoTestCase):
    log_in = False

    def test_questions_without_exact_tokens_retrieve_as_without_the_leg(self):
        questions = [
            "When should I roll back a deploy?",
            "What does a pro-rated refund actually mean?",
            "What shell command fetches an API bearer token?",
        ]
        for question in questions:
            with self.subTest(question):
                self.assertEqual(exact_tokens.tokens(question), [])
                found = self._passages(question)
                with override_settings(KB_EXACT_WEIGHT=0):
                    self.assertEqual(found, self._passages(question))

    def _passages(self, question: str) -> list[tuple]:
        result = pipeline.retrieve(self.demo, question)
        return [(p.source_id, p.start, p.end, p.text) for p in result.passages]


def _setting(name: str, kind: str, default: str, description: str) -> str:
    variable = "TIDE_" + name.upper().replace(".", "_").replace("-", "_")
    return (
        f"### `{name}`\n\n**Type**: `{kind}`\n\n**Default**: `{default}`\n\n"
        f"**Environment Variable**: `{variable}`\n\n*Introduced in 2.1.0*\n\n"
        f"{description}\n\n"
    )


SETTINGS_PAGE = "# Configuration\n\n## Available settings\n\n" + "".join(
    [
        _setting(
            "cache.shared",
            "boolean",
            "false",
            "Keep one package cache for every project of the user instead of "
            "one per project. Projects then share downloads.",
        ),
        _setting(
            "fetch.ranges",
            "boolean",
            "true",
            "Fetch only the metadata of an archive with range requests instead "
            "of downloading the whole archive.",
        ),
        _setting(
            "workers.max",
            "int",
            "4",
            "Set the largest number of packages installed at the same time. "
            "Values above the number of cores are lowered to it.",
        ),
    ]
)


class SettingEntryTestCase(TestCase):
    """A setting's entry opens with labelled fields (type, default, variable)
    and a note of the version; the answer opens with what the setting does."""

    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of("Tide", {"configuration.md": SETTINGS_PAGE})

    def test_the_answer_opens_with_the_settings_description(self):
        from kb import answering

        cases = {
            "What does the fetch.ranges setting change?": (
                "**`fetch.ranges`**: Fetch only the metadata"
            ),
            "What is workers.max for?": (
                "**`workers.max`**: Set the largest number of packages"
            ),
        }
        for question, opening in cases.items():
            with self.subTest(question):
                _, reply = answering.ask(self.collection, question)
                self.assertTrue(reply.text.startswith(opening), reply.text)


OPTIONS_FR = (
    "# Référence\n\n## Options\n\n"
    "### `Tide::Cache-Shared`\n\nValeur par défaut : `false`\n\n"
    "Description : Garde un seul cache de paquets pour tous les projets de "
    "l'utilisateur.\n\n"
    "### `Tide::Fetch-Ranges`\n\nValeur par défaut : `true`\n\n"
    "Description : Ne télécharge que les métadonnées d'une archive.\n\n"
)


class FrenchOptionEntryTestCase(TestCase):
    """aptitude's French option reference: each option's entry opens with
    "Valeur par défaut : ...", which was quoted as what the option is, and
    its description was not."""

    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of("Tide fr", {"options.md": OPTIONS_FR})

    def test_the_answer_opens_with_the_options_description(self):
        from kb import answering

        _, reply = answering.ask(
            self.collection, "À quoi sert l'option Tide::Cache-Shared ?"
        )
        self.assertTrue(
            reply.text.startswith("**`Tide::Cache-Shared`**: Description : Garde"),
            reply.text,
        )
