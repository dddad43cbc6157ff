"""Definition lists in PDFs: terms set with a hanging indent (Texinfo's tables,
man pages, option lists) become headings one level below their section, so a
term travels in its definition's heading path (kb/readers/pdf_assembly.py)."""

from __future__ import annotations

from django.test import SimpleTestCase

from kb import parsing, readers
from tests.documents import Page, build_pdf


def _builtins_page() -> Page:
    """A manual's page of commands: each command's name at the margin (code
    font), its synopsis indented under it, its description indented less; its
    options a list nested in the description, each option's definition in a
    column of its own, starting on the option's baseline or the line below."""
    page = Page().heading("Builtins", 15)
    y = page.y

    def at(x: float, text: str, font: str = "F1", step: float = 14) -> None:
        nonlocal y
        page.text(x, y, text, 11, font)
        y -= step

    at(72, "read", "F3", 16)
    at(130, "read [-r] [-t timeout] [name ...]", "F3", 18)
    at(100, "One line is read from the standard input and split into words.", step=18)
    page.text(100, y, "-r", 11, "F3")  # its definition far right: two lines
    at(172, "Backslash does not act as an escape character.", step=18)
    at(100, "-t timeout", "F3")  # its definition on the next line
    at(172, "Cause read to time out and return failure if no line is")
    at(172, "read within timeout seconds.", step=18)
    page.text(100, y, "-p prompt", 11, "F3")  # one line, parted by a gap
    at(172, "Display prompt before reading, without a newline.")
    at(172, "The prompt shows only on a terminal.", step=18)
    at(100, "If no names are supplied, the line read is assigned to REPLY.", step=20)
    at(72, "readarray", "F3", 16)
    at(130, "readarray [-n count] [array]", "F3", 18)
    at(100, "Read lines from the standard input into an indexed array.", step=20)
    page.y = y
    return page


class HangingIndentTestCase(SimpleTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.text = readers.read("builtins.pdf", build_pdf([_builtins_page()])).text

    def test_each_term_is_a_heading_below_its_section_and_parent_term(self):
        self.assertEqual(
            self.text,
            "## Builtins\n\n"
            "### read\n\n```\nread [-r] [-t timeout] [name ...]\n```\n\n"
            "One line is read from the standard input and split into words.\n\n"
            "#### -r\n\nBackslash does not act as an escape character.\n\n"
            "#### -t timeout\n\nCause read to time out and return failure if no "
            "line is read within timeout seconds.\n\n"
            "#### -p prompt\n\nDisplay prompt before reading, without a newline. "
            "The prompt shows only on a terminal.\n\n"
            "### read\n\nIf no names are supplied, the line read is assigned to "
            "REPLY.\n\n"
            "### readarray\n\n```\nreadarray [-n count] [array]\n```\n\n"
            "Read lines from the standard input into an indexed array.\n",
        )

    def test_an_options_definition_is_found_under_its_command(self):
        document = parsing.parse(self.text, "builtins.md")
        paths = {
            section.heading_path
            for section in document.sections
            if "time out" in self.text[section.body_start : section.end]
        }
        self.assertEqual(paths, {"Builtins > read > -t timeout"})

    def test_text_after_a_nested_list_belongs_to_its_command_again(self):
        document = parsing.parse(self.text, "builtins.md")
        owner = next(
            section.heading_path
            for section in document.sections
            if "REPLY" in self.text[section.body_start : section.end]
        )
        self.assertEqual(owner, "Builtins > read")

    def test_a_term_in_a_code_font_after_an_example_is_a_term(self):
        page = Page().heading("Expansions", 15)
        page.lines(
            [
                (72, "${name:=word}", "F3", 16),
                (100, "Assigns word to name when name is unset or null.", "F1", 18),
                (128, "$ : ${colour:=blue}", "F3", 12),
                (128, "$ echo $colour", "F3", 12),
                (128, "blue", "F3", 20),
                (72, "${name:?word}", "F3", 16),
                (
                    100,
                    "Writes word to the standard error when name is unset.",
                    "F1",
                    18,
                ),
            ]
        )
        text = readers.read("expansions.pdf", build_pdf([page])).text
        self.assertIn(
            "```\n$ : ${colour:=blue}\n$ echo $colour\nblue\n```\n\n"
            "### ${name:?word}\n\nWrites word",
            text,
        )


class NotTermsTestCase(SimpleTestCase):
    def test_a_sentence_over_an_indented_example_is_text(self):
        page = Page().heading("Lists", 15)
        page.paragraph(["An and list has the form"])
        page.y += 10
        page.paragraph(["command1 && command2"], x=108)
        page.paragraph(["or"])
        page.paragraph(["command1 || command2"], x=108)
        text = readers.read("lists.pdf", build_pdf([page])).text
        self.assertNotIn("##", text.replace("## Lists", ""))
        self.assertIn("An and list has the form", text)

    def test_indented_code_under_code_is_code(self):
        page = Page().heading("Loops", 15)
        page.paragraph(
            ["A loop runs its body once for each word of its list, in order:"]
        )
        page.code(["for word in one two", "    echo $word", "done"])
        text = readers.read("loops.pdf", build_pdf([page])).text
        self.assertIn("```\nfor word in one two\n    echo $word\ndone\n```", text)


class TermTableTestCase(SimpleTestCase):
    def test_a_two_column_list_of_options_is_read_as_terms(self):
        page = Page().heading("Set", 15)
        page.paragraph(["Options, if supplied, have the following meanings:"])
        page.grid(
            [
                ["-a", "Each variable that is created is marked for export."],
                ["-e", "Exit at once if a pipeline returns a non-zero status."],
                ["", "This applies to each subshell environment separately."],
                ["-u", "Treat unset variables as an error when expanding."],
            ],
            [60, 380],
            bold_header=False,
        )
        text = readers.read("set.pdf", build_pdf([page])).text
        self.assertNotIn("|", text)
        self.assertIn(
            "### -e\n\nExit at once if a pipeline returns a non-zero status.\n\n"
            "This applies to each subshell environment separately.\n\n### -u\n\n",
            text,
        )

    def test_a_table_with_a_header_stays_a_table(self):
        page = Page().heading("Fares", 15)
        page.grid(
            [
                ["Mode", "Rule"],
                ["Rail", "First class on trips longer than four hours."],
                ["Air", "Economy on every flight, whatever its length."],
                ["Taxi", "Only at night, or with luggage over twenty kilos."],
            ],
            [60, 380],
        )
        text = readers.read("fares.pdf", build_pdf([page])).text
        self.assertIn("| Mode | Rule |\n| --- | --- |\n| Rail |", text)


class ParagraphGapTestCase(SimpleTestCase):
    def test_a_wider_gap_than_the_line_step_parts_paragraphs(self):
        """TeX parts a function's "file: ..." and "Returns: ..." lines by a
        little more than its line step, less than a blank line."""
        page = Page().heading("Reference", 15)
        for _ in range(3):  # running text enough to tell the line step
            page.paragraph(["The parser reads the file and builds the tree."] * 8)
        page.lines(  # the line step is 14
            [
                (72, "file: the path of the file to read", "F1", 17),
                (72, "definitions: the tree built from the file", "F1", 17),
                (72, "Returns: zero on success, else an error code", "F1", 17),
            ]
        )
        text = readers.read("reference.pdf", build_pdf([page])).text
        self.assertIn(
            "file: the path of the file to read\n\n"
            "definitions: the tree built from the file\n\n"
            "Returns: zero on success, else an error code\n",
            text,
        )

    def test_a_line_of_code_set_apart_inside_a_sentence_is_code(self):
        page = Page().heading("Redirections", 15)
        for _ in range(3):
            page.paragraph(
                ["The shell opens each file before it runs the command."] * 8
            )
        page.lines(
            [
                (
                    72,
                    "The order of redirections matters. For example, the command",
                    "F1",
                    17,
                ),
                (86, "ls > dirlist 2>&1", "F3", 17),
                (72, "sends both outputs to the file dirlist.", "F1", 17),
            ]
        )
        text = readers.read("redirections.pdf", build_pdf([page])).text
        self.assertIn(
            "For example, the command\n\n```\nls > dirlist 2>&1\n```\n\n"
            "sends both outputs to the file dirlist.\n",
            text,
        )
