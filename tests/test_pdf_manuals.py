"""PDF manuals as TeX, Texinfo and dblatex typeset them: what a QA pass over
Debian's gcrypt.pdf, gnuplot.pdf and dblatex's manual found read wrong
(kb/readers/pdf_assembly.py, pdf_lines.py)."""

from __future__ import annotations

from django.test import SimpleTestCase

from kb import readers
from tests.documents import Page, build_pdf


def _read(*pages: Page) -> str:
    return readers.read("manual.pdf", build_pdf(list(pages))).text


class TexFontsTestCase(SimpleTestCase):
    def test_a_heading_in_texs_bold_extended_font_is_a_heading(self):
        # gnuplot's subsections ("Boxplot") are CMBX10 at body size: read as
        # text, a 430-line section swallowed them all
        page = Page().heading("Plotting styles", 15)
        page.lines(
            [
                (72, "Boxplot", "F8", 18),
                (72, "Boxplots are a common way to represent a statistical", "F1", 14),
                (72, "distribution of values.", "F1", 24),
                (72, "Candlesticks", "F8", 18),
                (72, "The candlesticks style draws a box and two whiskers.", "F1", 14),
            ],
        )
        text = _read(page)
        self.assertIn("\n#### Boxplot\n\nBoxplots are a common way", text)
        self.assertIn("\n#### Candlesticks\n\nThe candlesticks style", text)


class TexinfoTermsTestCase(SimpleTestCase):
    def test_several_terms_over_one_definition_are_one_heading(self):
        # Texinfo's @itemx: gcrypt's "GCRY_CIPHER_AES", "GCRY_CIPHER_AES128"
        # ... over "AES (Rijndael) with a 128 bit key." read as code
        page = Page().heading("Available ciphers", 15)
        page.lines(
            [
                (72, "GCRY_CIPHER_IDEA", "F3", 14),
                (130, "This is the IDEA algorithm.", "F1", 20),
                (72, "GCRY_CIPHER_AES", "F3", 14),
                (72, "GCRY_CIPHER_AES128", "F3", 14),
                (72, "GCRY_CIPHER_RIJNDAEL", "F3", 14),
                (130, "AES (Rijndael) with a 128 bit key.", "F1", 20),
                (72, "GCRY_CIPHER_AES256", "F3", 14),
                (130, "AES (Rijndael) with a 256 bit key.", "F1", 20),
            ],
        )
        text = _read(page)
        self.assertIn(
            "### GCRY_CIPHER_AES, GCRY_CIPHER_AES128, GCRY_CIPHER_RIJNDAEL\n\n"
            "AES (Rijndael) with a 128 bit key.\n\n### GCRY_CIPHER_AES256\n",
            text,
        )
        self.assertNotIn("```", text)

    def test_a_long_term_in_a_code_font_is_a_term(self):
        page = Page().heading("Controlling the library", 15)
        page.lines(
            [
                (72, "GCRYCTL_INIT_SECMEM; Arguments: unsigned int nbytes", "F3", 14),
                (130, "This command allocates a pool of secure memory.", "F1", 20),
                (
                    72,
                    "GCRYCTL_AUTO_EXPAND_SECMEM; Arguments: unsigned int chunksize",
                    "F3",
                    14,
                ),
                (
                    130,
                    "This command enables on-the-fly expanding of the pool.",
                    "F1",
                    14,
                ),
            ],
        )
        text = _read(page)
        self.assertIn(
            "### GCRYCTL_AUTO_EXPAND_SECMEM; Arguments: unsigned int chunksize\n\n"
            "This command enables",
            text,
        )


class TexinfoSignaturesTestCase(SimpleTestCase):
    def test_a_signature_in_a_code_font_beside_its_category_is_code_alone(self):
        # gcrypt: the category, a line of its own, was written into the text
        # that followed ("\[Function] This function returns ...")
        page = Page().heading("General cipher functions", 15)
        page.text(72, page.y, "size_t gcry_cipher_get_algo_keylen (algo)", 11, "F3")
        page.text(470, page.y, "[Function]", 11, "F1")
        page.y -= 14
        page.lines(
            [
                (
                    100,
                    "This function returns the length of the key for algo.",
                    "F1",
                    14,
                ),
                (100, "On error 0 is returned.", "F1", 14),
            ],
        )
        text = _read(page)
        self.assertIn(
            "```\nsize_t gcry_cipher_get_algo_keylen (algo)\n```\n\n"
            "This function returns the length of the key for algo. On error 0 "
            "is returned.\n",
            text,
        )
        self.assertNotIn("Function]", text)

    def test_signatures_set_close_are_no_table(self):
        # gcrypt p88: "| void gcry_mpi_swap (...) | \[Function] |" rows
        page = Page().heading("Calculations", 15)
        page.grid(
            [
                ["void gcry_mpi_swap (gcry_mpi_t a, gcry_mpi_t b)", "[Function]"],
                ["Swap the values of a and b.", ""],
                ["void gcry_mpi_neg (gcry_mpi_t w, gcry_mpi_t u)", "[Function]"],
                ["Set the sign of w to the negative of u.", ""],
                ["void gcry_mpi_abs (gcry_mpi_t w)", "[Function]"],
                ["Clear the sign of w.", ""],
            ],
            [400, 80],
            bold_header=False,
        )
        text = _read(page)
        self.assertNotIn("|", text)
        self.assertIn(
            "```\nvoid gcry_mpi_neg (gcry_mpi_t w, gcry_mpi_t u)\n```\n\n"
            "Set the sign of w to the negative of u.\n",
            text,
        )


class CodeBlocksTestCase(SimpleTestCase):
    def test_a_listing_shaded_line_by_line_is_one_block(self):
        # dblatex shades each line of a listing with a rectangle of its own
        page = Page().heading("Customising", 15)
        page.paragraph(["The style file loads two packages:"])
        y = page.y
        for line in (
            "\\usepackage{titlesec}",
            "\\usepackage{titletoc}",
            "\\begin{doc}",
        ):
            page.rect(70, y - 3, 300, 12)
            page.text(72, y, line, 10, "F3")
            y -= 12
        page.y = y - 10
        page.paragraph(["Both come with TeX Live."])
        text = _read(page)
        self.assertIn(
            "```\n\\usepackage{titlesec}\n\\usepackage{titletoc}\n\\begin{doc}\n```",
            text,
        )

    def test_code_going_on_over_a_page_break_is_one_block(self):
        # gcrypt p13-14: the second half of an example opened with "*/"
        first = Page().heading("Initializing the library", 15)
        first.paragraph(["Initialize the library like this:"])
        first.y = 90
        first.code(["if (!gcry_check_version (NEED_VERSION))", "  {", "    /* fail"])
        second = Page(top=760)
        second.code(["     */", "    exit (2);", "  }"])
        second.paragraph(["Then disable secure memory."])
        text = _read(first, second)
        self.assertIn("    /* fail\n     */\n    exit (2);", text)
        self.assertEqual(text.count("```"), 2)

    def test_the_columns_of_an_aligned_listing_stay_on_their_line(self):
        # A browser prints each tab-separated piece of a listing as a text
        # object of its own (Chromium's PDF of the Debian Reference, ch. 4):
        # each piece was a code block, "password" cut from "requisite"
        page = Page().heading("Stricter password rule", 15)
        page.paragraph(["/etc/pam.d/common-password looks like:"])
        page.lines(
            [
                (72, "# here are the per-package modules", "F3", 12),
                (72, "password", "F3", 0),
                (156, "requisite", "F3", 0),
                (330, "pam_cracklib.so retry=3", "F3", 12),
                (72, "password", "F3", 0),
                (156, "[success=1 default=ignore]", "F3", 0),
                (330, "pam_unix.so obscure", "F3", 24),
            ],
            size=10,
        )
        page.paragraph(["Then the fallback comes."])
        text = _read(page)
        listing = text.split("```")[1]
        lines = listing.strip("\n").splitlines()
        self.assertEqual(len(lines), 3, listing)
        self.assertEqual(
            lines[1].split(),
            ["password", "requisite", *"pam_cracklib.so retry=3".split()],
        )
        # each column starts where it starts on the page
        self.assertEqual(lines[1].index("requisite"), lines[2].index("[success=1"))
        self.assertEqual(lines[1].index("pam_cracklib"), lines[2].index("pam_unix"))
        self.assertEqual(text.count("```"), 2)


class TablesTestCase(SimpleTestCase):
    def test_a_ruled_table_of_two_columns_stays_a_table(self):
        page = Page().heading("Options", 15)
        page.table(
            [
                ["-b", "Sets the backend used to produce the output."],
                ["-c", "Reads the configuration from the file given."],
                ["-p", "Uses the XSL stylesheet given instead of the default."],
            ],
            [60, 380],
            bold_header=False,
        )
        text = _read(page)
        self.assertIn("| -c | Reads the configuration from the file given. |", text)
        self.assertNotIn("### -c", text)


class IndexTestCase(SimpleTestCase):
    def test_an_index_without_leaders_is_not_text(self):
        # dblatex's index: "latex.index.tool, 39 , 70 , 71" in two columns,
        # read as a table whose entries outranked the sections they point to
        body = Page().heading("Tables", 15)
        body.paragraph(["The newtbl.autowidth parameter sets how columns are sized."])
        index = Page().heading("Index", 15)
        y = index.y
        for i, (left, right) in enumerate(
            [
                ("latex.index.tool, 39 , 70 , 71", "ulink.footnotes, 43 , 102"),
                ("latex.unicode.use, 42 , 62", "ulink.show, 43 , 102"),
                ("linenumbering.default, 96", "use.id.as.filename, 14 , 105"),
                ("literal.class, 35 , 97", "xetex.font, 100 , 112 , 113"),
                ("newtbl.autowidth, 23 , 24 , 76", "xref.hypermarkup, 85"),
                ("page.height, 105 , 108", "preface.tocdepth, 18 , 68 -71"),
            ]
        ):
            index.text(72, y - 14 * i, left, 10)
            index.text(320, y - 14 * i, right, 10)
        text = _read(body, index)
        self.assertIn("The newtbl.autowidth parameter sets how columns", text)
        self.assertNotIn("70 , 71", text)
        self.assertNotIn("xref.hypermarkup", text)


class OrdinaryDocumentsTestCase(SimpleTestCase):
    """What the French and Spanish QA pass found the term rules took from
    ordinary documents (LibreOffice's PDFs, DocBook's, Chromium's)."""

    def test_a_symbol_bullet_list_is_a_list_not_terms(self):
        # LibreOffice writes Symbol's bullet as U+F0B7: each became a heading
        page = Page().heading("Cuentas", 15)
        page.paragraph(["Cada campo separado por dos puntos significa:"])
        for text in ("Nombre de acceso", "Entrada de contrasena", "ID de usuario"):
            page.text(90, page.y, "\x85", 11, "F5")
            page.text(108, page.y, text, 11)
            page.y -= 14
        text = _read(page)
        self.assertIn("- Nombre de acceso\n- Entrada de contrasena\n- ID de", text)
        self.assertNotIn("\uf0b7", text)

    def test_an_em_dash_list_is_a_list(self):
        page = Page().heading("Relations", 15)
        page.paragraph(["Les paquets peuvent dépendre les uns des autres :"])
        for text in ("Depends", "Recommends", "Suggests"):
            page.text(72, page.y, f"\x86 {text}", 11, "F5")
            page.y -= 14
        text = _read(page)
        self.assertIn("- Depends\n- Recommends\n- Suggests", text)

    def test_an_icons_text_over_a_note_is_no_term(self):
        page = Page().heading("Précautions", 15)
        page.lines(
            [
                (72, "[Avertissement]", "F1", 16),
                (100, "Ne pas installer de paquets venant de suites mêlées.", "F1", 20),
                (72, "La version stable convient au débutant.", "F1", 14),
            ]
        )
        text = _read(page)
        self.assertNotIn("# \\[Avertissement]", text)
        self.assertIn("Ne pas installer de paquets", text)

    def test_a_line_over_its_footnotes_is_no_term(self):
        page = Page().heading("Ramas", 15)
        page.paragraph(
            ["Estas órdenes utilizan tres ramas en la gestión del paquete."] * 3
        )
        page.text(72, page.y, "Puedes configurar gbp 12", 11)
        page.text(90, page.y - 18, "12 Hay algunas restricciones para estas ramas.", 8)
        page.text(90, page.y - 28, "Consulta la referencia de Debian.", 8)
        page.y -= 40
        text = _read(page)
        self.assertNotIn("## Puedes", text.replace("## Ramas", ""))


class FramedCodeTestCase(SimpleTestCase):
    def test_code_in_a_frame_of_rules_is_code_not_a_table(self):
        # Sphinx's LaTeX frames every code block: "| Column 1 |\n| $ gpg ... |"
        page = Page().heading("Claves", 15)
        page.paragraph(["Para generar una nueva clave GPG, ejecute:"])
        top = page.y + 12
        for line in ("$ gpg --gen-key", "$ gpg --list-keys"):
            page.text(76, page.y, line, 10, "F3")
            page.y -= 12
        bottom = page.y + 6
        page.rect(72, top, 300, 0.6)  # the frame: four thin rules
        page.rect(72, bottom, 300, 0.6)
        page.rect(72, bottom, 0.6, top - bottom)
        page.rect(372, bottom, 0.6, top - bottom)
        page.y -= 14
        page.paragraph(["GPG primero le preguntará qué tipo de clave desea."])
        text = _read(page)
        self.assertIn("```\n$ gpg --gen-key\n$ gpg --list-keys\n```", text)
        self.assertNotIn("|", text)


class InnerRulesTableTestCase(SimpleTestCase):
    def test_a_table_ruled_between_its_columns_only_is_one_table(self):
        """QA over the Debian Reference's French PDF (dblatex): rules between
        the columns and across the rows, none on the outer edges. The inner
        columns were one table, the outer two another, paired with each other:
        "| pop3 | 995 |" where the page shows pop3 110, pop3s 995."""
        page = Page().heading("Services", 15)
        page.paragraph(["Les services sûrs et non sûrs, et leurs ports."])
        rows = [
            ("service", "port", "service sûr", "port"),
            ("www", "80", "https", "443"),
            ("imap2", "143", "imaps", "993"),
            ("pop3", "110", "pop3s", "995"),
        ]
        lefts, edges = (76, 196, 256, 376), (192, 252, 372)
        top = page.y + 12
        for n, cells in enumerate(rows):
            for x, cell in zip(lefts, cells, strict=True):
                page.text(x, page.y, cell, 10, "F1" if n else "F2")  # a bold header
            page.rect(72, page.y - 4, 360, 0.5)  # the rule under the row
            page.y -= 16
        bottom = page.y + 12
        page.rect(72, top, 360, 0.5)
        for x in edges:  # between the columns only
            page.rect(x, bottom, 0.5, top - bottom)
        page.y -= 10
        page.paragraph(["Le chiffrement coûte du temps processeur."])
        text = _read(page)
        self.assertIn(
            "| service | port | service sûr | port |\n| --- | --- | --- | --- |", text
        )
        self.assertIn("| pop3 | 110 | pop3s | 995 |", text)
        self.assertEqual(sum(ln.startswith("| ---") for ln in text.split("\n")), 1)


class WrappedCodeLineTestCase(SimpleTestCase):
    def test_a_wrapped_line_of_code_keeps_its_listing_whole(self):
        """QA over the Debian Reference's French PDF: dblatex marks a line of
        code it wraps with "←-" at the right margin, and the script read as
        two code blocks with the mark between them."""
        page = Page().heading("Script", 15)
        page.paragraph(["Ce script choisit un fichier et l'affiche."])
        lines = [
            "DATA=$(zenity --file-selection --title=Select",
            '    ") || exit 1',
            'echo "$DATA"',
        ]
        for n, line in enumerate(lines):
            page.text(76, page.y, line, 9, "F3")
            if n == 0:
                page.text(420, page.y, "\x87-", 9, "F5")  # the mark
            page.y -= 11
        page.y -= 8
        page.paragraph(["Ce genre d'approche est simple."])
        text = _read(page)
        self.assertNotIn("\u2190", text)
        self.assertIn(
            "```\nDATA=$(zenity --file-selection --title=Select\n"
            '    ") || exit 1\necho "$DATA"\n```',
            text,
        )


class AdmonitionLabelTestCase(SimpleTestCase):
    def test_a_notes_label_is_no_heading(self):
        """QA over the Debian Reference's PDFs: dblatex sets a note's label
        ("Note", "ASTUCE", "nota") in bold on a line of its own, and each
        became a heading holding the text after it: citations named "Note"."""
        page = Page().heading("El cursor", 15)
        page.paragraph(["Al iniciar el sistema aparece la pantalla de inicio."])
        page.text(72, page.y, "nota", 11, "F2")
        page.y -= 16
        page.paragraph(["El nombre de usuario y la contraseña son sensibles."])
        page.paragraph(["El sistema muestra el mensaje de bienvenida."])
        text = _read(page)
        self.assertEqual(
            [ln for ln in text.split("\n") if ln.startswith("#")], ["## El cursor"]
        )
        self.assertIn("contraseña son sensibles", text)


class ReviewTestCase(SimpleTestCase):
    """What a review of the term and gap rules found them take from ordinary
    documents (each read right before those rules)."""

    def test_a_paragraph_indented_on_its_first_line_stays_whole(self):
        page = Page().heading("Method", 16)
        page.lines(
            [
                (72, "Participants", "F2", 16),
                (
                    108,
                    "Forty students of the university took part in the study and "
                    "each of",
                    "F1",
                    14,
                ),
                (
                    72,
                    "them signed a form of consent before the first session began, "
                    "as the",
                    "F1",
                    14,
                ),
                (72, "board had asked of every study run that year.", "F1", 16),
            ]
        )
        text = _read(page)
        self.assertIn("each of them signed a form of consent", text)
        self.assertEqual(text.count("Method"), 1)

    def test_prices_and_decimal_numbers_are_no_index(self):
        page = Page().heading("Preisliste", 16)
        page.paragraph(["Alle Preise in Euro."])
        page.paragraph(
            ["Kaffee 2,50", "Tee 2,20", "Kakao 3,10", "Wasser 1,80", "Saft 2,90"]
            + ["Bier 3,60", "Wein 4,50", "Kuchen 3,20", "Brezel 1,40"]
        )
        text = _read(page)
        self.assertIn("Kaffee 2,50", text)
        self.assertIn("Brezel 1,40", text)

    def test_a_sentence_going_on_at_a_looser_leading_is_one_paragraph(self):
        page = Page().heading("Report", 15)
        for _ in range(9):
            page.lines(
                [
                    (
                        72,
                        "This is a line of ordinary running text in a single",
                        "F1",
                        13.4,
                    ),
                    (
                        72,
                        "spaced paragraph that goes on for a while over a few",
                        "F1",
                        13.4,
                    ),
                    (72, "lines, as a word processor sets its Normal style.", "F1", 20),
                ]
            )
        page.lines(
            [
                (
                    72,
                    "Here the style has a line spacing of one point fifteen and",
                    "F1",
                    15.4,
                ),
                (
                    72,
                    "the sentence simply goes on over the next line of the same",
                    "F1",
                    15.4,
                ),
                (72, "paragraph until it ends here.", "F1", 20),
            ]
        )
        text = _read(page)
        self.assertIn("fifteen and the sentence simply goes on over the next", text)

    def test_a_heading_wrapped_over_two_lines_is_written_again_whole(self):
        page = Page()
        page.lines(
            [
                (72, "Commands that the shell runs itself without", "F2", 18),
                (72, "starting another program", "F2", 24),
            ],
            size=15,
        )
        page.lines(
            [
                (72, "cd", "F2", 16),
                (100, "Change the current directory to the one given.", "F1", 18),
                (72, "The shell also offers other builtins described later.", "F1", 14),
            ]
        )
        text = _read(page)
        heading = "## Commands that the shell runs itself without starting another"
        self.assertEqual(text.count(f"{heading} program\n"), 2)

    def test_a_checklist_with_bracketed_states_stays_a_table(self):
        page = Page().heading("Release checklist", 16)
        for task, state in [
            ("Back up the database", "[Done]"),
            ("Tag the release in git", "[Done]"),
            ("Announce it on the list", "[Pending]"),
            ("Update the web site", "[Skipped]"),
        ]:
            page.text(72, page.y, task, 11)
            page.text(400, page.y, state, 11)
            page.y -= 14
        text = _read(page)
        self.assertIn("| Announce it on the list | \\[Pending] |", text)
        self.assertNotIn("```", text)

    def test_terms_under_no_heading_are_no_title(self):
        page = Page()
        page.lines(
            [
                (72, "This note lists the settings of the service.", "F1", 18),
                (72, "timeout", "F2", 16),
                (100, "Seconds to wait for an answer before giving up.", "F1", 18),
            ]
        )
        text = _read(page)
        self.assertIn("\n## timeout\n", text)
        self.assertNotIn("# timeout", text.replace("## timeout", ""))

    def test_a_staircase_of_terms_names_each_term_once(self):
        page = Page(top=760)
        for k in range(12):
            page.lines(
                [
                    (72 + 3 * k, f"Term{k:02d}", "F2", 8),
                    (82 + 3 * k, f"Definition number {k} ends here.", "F1", 8),
                ],
                size=5,
            )
        text = _read(page)
        longest = max(len(line) for line in text.splitlines() if line.startswith("#"))
        self.assertLess(longest, 40)


def _chapter(heading: str, *lines: str) -> Page:
    """A page of a chapter's heading over four paragraphs of `lines`: enough
    body text for the reader to tell the body's size from the headings'."""
    page = Page().heading(heading, 18)
    for _ in range(4):
        page.paragraph(list(lines))
    return page


class TitlePageTestCase(SimpleTestCase):
    def test_a_date_and_page_numbers_are_no_headings(self):
        # Debian Edu's French manual: "Date de publication : 31-01-2024", as
        # big as the title, headed every section's path, and each page number
        # of the contents was a heading of its own
        cover = Page().heading("Manuel de Debian Edu", 24)
        cover.heading("Date de publication : 31-01-2024", 24)
        cover.heading("Table des matières", 18)
        for number, (title, page) in enumerate((("Manuel", "1"), ("Besoins", "53"))):
            cover.heading(f"{number + 1} {title}", 11)
            cover.heading(page, 11)
        body = _chapter(
            "Démarrage rapide",
            "Installez le serveur principal en premier, puis les postes",
            "de travail du réseau pédagogique, un par un, dans cet ordre.",
        )
        text = _read(cover, body)
        self.assertIn("Manuel de Debian Edu\n\nDate de publication : 31-01-2024", text)
        self.assertNotIn("# Date", text)
        self.assertNotIn("# 53", text)
        self.assertIn("# Démarrage rapide\n", text)

    def test_a_table_of_contents_without_leaders_is_dropped(self):
        # Debian Edu's and LinuxCNC's manuals: each chapter's entry, bold, its
        # page number alone on its baseline at the right: each read as a
        # heading, the number as another, "Contents > 7 Quick start"
        contents = Page().heading("Contents", 18)
        chapters = ["Introduction", "Requirements", "Installation", "Quick start"]
        for number, title in enumerate(chapters, 1):
            contents.text(72, contents.y, f"{number} {title}", 11, "F2")
            contents.text(520, contents.y, str(number * 7), 11, "F2")
            contents.y -= 18
            for part in (1, 2):  # its sections' entries, with leaders
                leader = " ." * 30
                entry = f"{number}.{part} Part {part}{leader} {number * 7 + part}"
                contents.text(90, contents.y, entry, 11)
                contents.y -= 18
        body = _chapter(
            "1 Introduction",
            "Debian Edu is a complete operating system for schools, set",
            "up for a network of workstations around one main server.",
        )
        text = _read(contents, body)
        self.assertEqual(text.count("Introduction"), 1, text)
        self.assertNotIn("Quick start", text)
        self.assertIn("# 1 Introduction\n\nDebian Edu is", text)
