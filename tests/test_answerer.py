"""The extractive answerer on passages built by hand: no database (a
SimpleTestCase refuses queries), as kb/answerer.py promises."""

from __future__ import annotations

import re

from django.test import SimpleTestCase

from kb import answerer
from kb.retrieval.passages import Location, Passage, Result, TextWindow

TOOLS = """Before you open the hive, gather the following tools:

- a smoker with dry fuel
- a hive tool
- a veil and gloves

Work slowly and calmly around the bees.
"""

OFFICES = """| Office | City | Opens |
| --- | --- | --- |
| Office 12 | Lyon | 8:00 |
| Office 57 | Porto | 9:30 |
"""


def passage(text: str, heading: str, rank: int = 1, source_id: int = 1) -> Passage:
    """All of `text` retrieved as one passage of its own source (file and section
    numbered `source_id`), its text loaded, as retrieval hands passages on."""
    location = Location(source_id, f"Guide > {heading}", 0, len(text), [0])
    found = Passage(
        source_id,
        "Guide",
        f"guide{source_id}.md",
        0,
        len(text),
        text,
        1.0,
        {"vector"},
        [location],
        rank=rank,
    )
    found.source_text = TextWindow([(0, text)])
    return found


def answer(question: str, *passages: Passage) -> answerer.Answer:
    result = Result(question, list(passages), 0, 1200, len(passages), "vector", {})
    return answerer.extractive_answer(result, {id(p): "english" for p in passages})


class ExtractiveAnswerTestCase(SimpleTestCase):
    def test_it_answers_with_the_whole_list_a_sentence_introduces(self):
        reply = answer(
            "Which tools do I gather to open a hive?", passage(TOOLS, "Tools")
        )
        intro, items = reply.text.split("\n\n", 1)
        self.assertEqual(
            intro, "Before you open the hive, gather the following tools: [1]"
        )
        for item in ("a smoker with dry fuel", "a hive tool", "a veil and gloves"):
            self.assertIn(f"- {item}", items)
        self.assertNotIn("Work slowly", reply.text)

    def test_a_bold_sentence_introducing_a_list_brings_it(self):
        """QA over React's Russian docs: "**React will call setup and cleanup
        several times:**" (in bold) ended an answer with its list left out."""
        text = "**" + TOOLS.replace(":\n", ":**\n", 1)
        reply = answer(
            "Which tools do I gather to open a hive?", passage(text, "Tools")
        )
        intro, items = reply.text.split("\n\n", 1)
        self.assertEqual(
            intro, "**Before you open the hive, gather the following tools:** [1]"
        )
        self.assertIn("- a smoker with dry fuel\n- a hive tool\n", items)

    def test_a_command_comes_with_what_the_sentence_after_it_says_it_does(self):
        # QA over Debian's French maint-guide: the answer was the command
        # alone, and the steps "Cela fera ... :" lists were left out
        build = (
            "Ensuite, exécutez la commande suivante dans les sources :\n\n"
            "```\n$ dpkg-buildpackage -us -uc\n```\n\n"
            "Cela fera tout le nécessaire à votre place :\n\n"
            "- nettoyage de l'arbre des sources ;\n"
            "- construction du paquet source ;\n"
            "- création du fichier `.changes`.\n\n"
            "Signez ensuite les fichiers avec debsign.\n"
        )
        result = Result(
            "Quelles étapes effectue dpkg-buildpackage -us -uc ?",
            [passage(build, "Reconstruction complète")],
            0, 1200, 1, "vector", {},
        )  # fmt: skip
        reply = answerer.extractive_answer(result, {id(result.passages[0]): "french"})
        text = re.sub(r" ?\[\d\]", "", reply.text)
        self.assertIn(
            "``` $ dpkg-buildpackage -us -uc ``` Cela fera tout le nécessaire à "
            "votre place : - nettoyage de l'arbre des sources ;",
            " ".join(text.split()),
        )
        self.assertIn("- création du fichier `.changes`.", text)
        self.assertNotIn("debsign", text)
        # a sentence that opens with "It" says something else (review)
        other = build.replace("Cela fera tout", "It is also possible to do all")
        result.passages = [passage(other, "Reconstruction complète")]
        reply = answerer.extractive_answer(result, {id(result.passages[0]): "french"})
        self.assertNotIn("It is also possible", reply.text)

    def test_a_nested_item_stays_under_its_parent(self):
        """QA over React's Russian docs: the two steps under "2. After every
        render with changed dependencies:" were quoted as items of the outer
        list, at its level."""
        text = (
            "React calls setup and cleanup several times:\n\n"
            "1. When the component mounts, setup runs.\n"
            "2. After every render with changed dependencies:\n"
            "   - cleanup runs with the old props.\n"
            "   - setup runs with the new props.\n"
            "3. When the component unmounts, cleanup runs.\n"
        )
        reply = answer(
            "When does React call setup and cleanup?", passage(text, "Effects")
        )
        self.assertIn(
            "2. After every render with changed dependencies:\n"
            "   - cleanup runs with the old props.\n"
            "   - setup runs with the new props.\n3. When",
            reply.text,
        )

    def test_a_definition_list_is_quoted_as_a_list_of_its_terms(self):
        text = (
            "Each request takes these paging parameters:\n\n"
            "limit\n: Integer. How many frames a page holds; at most 40.\n\n"
            "min_id\n: String. Frames right after this one: a cursor that "
            "pages forward.\n\nPaging is the same on every endpoint.\n"
        )
        reply = answer(
            "Which paging parameters does a request take?", passage(text, "Paging")
        )
        self.assertIn(
            "- limit: Integer. How many frames a page holds; at most 40.\n"
            "- min_id: String. Frames right after this one: a cursor that pages "
            "forward.",
            reply.text,
        )
        self.assertTrue(reply.text.startswith("Each request takes these paging"))
        # several definitions of one term, each said
        self.assertEqual(answerer.one_line("color\n: red\n: blue"), "color: red; blue")

    def test_a_hugo_shortcode_is_quoted_as_the_text_it_shows(self):
        text = (
            'A hive record lists its [frames]({{< relref "entities/Frame" >}}) '
            "and the weight of each {{% deprecated %}}.\n"
        )
        reply = answer("What does a hive record list?", passage(text, "Records"))
        self.assertTrue(
            reply.text.startswith(
                "A hive record lists its frames and the weight of each."
            ),
            reply.text,
        )

    def test_an_html_table_row_is_quoted_as_its_cells(self):
        text = (
            "The frame attributes:\n\n<table>\n<tr><th>name</th><th>default</th>"
            '</tr>\n<tr>\n  <td><a href="#w">weight</a></td>\n  <td>'
            '<abbr title="kilograms">2 kg</abbr>. Set by the scale.</td>\n'
            "</tr>\n</table>\n"
        )
        reply = answer("What is the default frame weight?", passage(text, "Frames"))
        self.assertIn("weight | 2 kg. Set by the scale. [1]", reply.text)
        self.assertNotIn("<", reply.text)

    def test_mdn_macros_are_quoted_as_the_names_they_show(self):
        text = (
            '{{HTMLSidebar}}\n\nThe {{HTMLElement("hive")}} element sets the '
            '{{cssxref("frame-count")}} of a box {{Deprecated_Inline}}.\n\n'
            '{{EmbedLiveSample("Example", 600)}}\n'
        )
        reply = answer("What does the hive element set?", passage(text, "Hive"))
        self.assertEqual(
            reply.text, "The `<hive>` element sets the frame-count of a box. [1]"
        )

    def test_a_github_alert_is_quoted_under_its_label(self):
        text = (
            "The scale weighs each frame.\n\n> [!WARNING]\n> Never weigh a "
            "frame while the bees are on it.\n"
        )
        reply = answer("Can I weigh a frame with bees on it?", passage(text, "Scale"))
        self.assertIn(
            "**Warning:** Never weigh a frame while the bees are on it. [1]",
            reply.text,
        )
        self.assertNotIn("[!", reply.text)

    def test_a_long_list_is_quoted_from_its_start_with_its_cut_shown(self):
        """QA over opensource.guide: "here's how to submit a pull request:" was
        quoted without any of its 7 long steps."""
        steps = [
            f"- Step {n}: " + " ".join(["check the frame and the comb"] * 5) + "."
            for n in range(1, 8)
        ]
        text = "Here is how to inspect a hive:\n\n" + "\n".join(steps) + "\n"
        reply = answer("How do I inspect a hive?", passage(text, "Inspection"))
        intro, items = reply.text.split("\n\n", 1)
        self.assertEqual(intro, "Here is how to inspect a hive: [1]")
        lines = items.strip().splitlines()
        self.assertEqual(lines[0], steps[0])
        self.assertEqual(lines[-1], "- …")
        self.assertLess(len(lines), len(steps) + 1)

    def test_a_typed_field_without_a_description_is_not_quoted(self):
        """QA over a Sphinx reference: "- Parameters signed_value (Union[str,
        bytes]) –" opened the answer about a parameter, saying nothing."""
        text = (
            "Checks a signed frame.\n\n- Parameters frame_id (Union[str, bytes]) –\n"
            "- salt (str) – The salt the frame was signed with.\n"
        )
        reply = answer("What is the salt parameter of a frame?", passage(text, "Check"))
        self.assertNotIn("frame_id", reply.text)
        self.assertIn("The salt the frame was signed with.", reply.text)

    def test_two_quoted_steps_of_a_procedure_bring_the_whole_procedure(self):
        """QA over React's French docs: steps 1 to 4 of "Formatage à la
        sauvegarde" were quoted as sentences, one after another, and step 5
        ("make sure the option is ticked"), which shares no word with the
        question, was left out: the procedure read as done."""
        text = (
            "Ideally, you format your code on every save.\n\n"
            "1. In the editor, open the command palette.\n"
            "2. Type *settings* in the command palette to open the settings.\n"
            "3. Press Enter.\n"
            "4. In the search bar of the settings, type *format on save*.\n"
            "5. Make sure the option is ticked!\n\n"
            "Your linter may have rules that fight the formatter.\n"
        )
        reply = answer(
            "How do I turn on format on save in the editor settings?",
            passage(text, "Formatting on save"),
        )
        self.assertIn(
            "3. Press Enter.\n4. In the search bar of the settings, type *format on "
            "save*.\n5. Make sure the option is ticked! [1]",
            reply.text,
        )

    def test_two_entries_of_an_option_list_do_not_bring_the_others(self):
        """Over Poetry's docs: asked whether `add` can limit a dependency to some
        operating systems, the answer quoted all twelve options of the command,
        `--platform` seventh: two entries of a reference list chosen brought
        the whole list, as steps of a procedure do."""
        text = (
            "### Options\n\n"
            "* `--group (-G)`: The group to put it in.\n"
            "* `--dev (-D)`: Put it in the development group.\n"
            "* `--editable (-e)`: Path requirements as editable.\n"
            "* `--python`: Python version for which the dependency must be installed.\n"
            "* `--platform`: Platforms for which the dependency must be installed.\n"
            "* `--source`: Name of the source to use to install the package.\n"
            "* `--lock`: Only update the lockfile.\n"
        )
        reply = answer(
            "Can I add a dependency that is only installed on some platforms?",
            passage(text, "add > Options"),
        )
        self.assertTrue(reply.text.startswith("* `--platform`: Platforms"), reply.text)
        for other in ("--group", "--dev", "--editable"):
            self.assertNotIn(other, reply.text)

    def test_a_how_question_gets_the_code_its_section_shows(self):
        """Over RQ's docs: "How do I find out how many jobs are ahead of mine?"
        quoted "it is possible to get the position of a job" and not the code
        below it, `job.get_position()`, which shares no word with the
        question. A question asking how, a command or an example, answered
        from a section with code, quotes its code; one asking how many does
        not."""
        text = (
            "For user feedback it is possible to get the position of a job "
            "within the work queue.\n\n"
            "This iterates over all jobs within the queue and is slow on very "
            "large queues.\n\n"
            "```python\nj = q.enqueue(say_hello)\nj.get_position()\n```\n"
        )
        reply = answer(
            "How do I find out where my job stands in the queue?",
            passage(text, "Feedback"),
        )
        self.assertIn("j.get_position()", reply.text)
        self.assertTrue(reply.text.startswith("For user feedback"), reply.text)
        reply = answer(
            "How many jobs does it iterate over in a very large queue?",
            passage(text, "Feedback"),
        )
        self.assertNotIn("get_position", reply.text)

    def test_a_list_of_commands_is_quoted_with_each_items_code(self):
        """QA over Debian's Russian FAQ: "Frequently used commands:", a list
        whose every item introduces its command in a code block, was quoted
        as its first item alone, and the command of the third item, chosen on
        its own, stood right below it as if it were the first's."""
        text = (
            "Frequently used hive commands:\n\n"
            "- Find the hives whose description holds a word:\n\n"
            "```\nhive search word\n```\n\n"
            "- Show the details of a hive:\n\n"
            "```\nhive show name\n```\n\n"
            "- Show what a hive depends on:\n\n"
            "```\nhive depends name\n```\n"
        )
        reply = answer(
            "Which frequently used hive commands are there?",
            passage(text, "Hive commands"),
        )
        self.assertIn(
            "Frequently used hive commands: [1]\n\n"
            "- Find the hives whose description holds a word:\n\n"
            "  ```\n  hive search word\n  ```\n\n"
            "- Show the details of a hive:\n\n  ```\n  hive show name\n  ```\n\n"
            "- Show what a hive depends on:\n\n  ```\n  hive depends name\n  ```",
            reply.text,
        )

    def test_a_list_of_commands_stays_whole_when_a_later_item_is_best(self):
        """Review of 03349e2: when the question matched the third item, its
        command opened the answer, and the second item's code was quoted apart
        from its item, outside the list."""
        text = (
            "Frequently used apt commands:\n\n"
            "- Find the packages whose description holds a word:\n\n"
            "```\napt search word\n```\n\n"
            "- Show the details of a package:\n\n```\napt show name\n```\n\n"
            "- Hold a package so upgrades leave it alone:\n\n"
            "```\napt-mark hold name\n```\n"
        )
        reply = answer(
            "Which frequently used apt command holds a package so upgrades leave "
            "it alone?",
            passage(text, "Apt"),
        )
        self.assertTrue(
            reply.text.startswith("Frequently used apt commands: [1]"), reply.text
        )
        self.assertIn(
            "- Show the details of a package:\n\n  ```\n  apt show name\n  ```\n\n"
            "- Hold a package",
            reply.text,
        )

    def test_code_nested_in_a_list_item_keeps_its_own_indentation(self):
        """Review of 03349e2: a block indented under its item in the source
        was indented twice, its closing fence too far in to close it."""
        text = (
            "Set up the hive:\n\n1. Install the tools:\n"
            "   - Fetch the hive tool:\n\n     ```\n     hive fetch tool\n     ```\n\n"
            "   - Check the smoker:\n\n     ```\n     hive check smoker\n     ```\n\n"
            "2. Open the hive.\n"
        )
        reply = answer("How do I set up the hive?", passage(text, "Hive"))
        self.assertIn(
            "   - Fetch the hive tool:\n\n     ```\n     hive fetch tool\n     ```",
            reply.text,
        )

    def test_steps_named_in_bold_are_a_procedure(self):
        """Review of 3b5cce9: steps labelled in bold ("- **Verify**: ...") were
        taken for a reference's entries and quoted apart, out of order."""
        text = (
            "To write the installer image to a USB stick:\n\n"
            "- **Download**: fetch the ISO image of the installer from a mirror.\n"
            "- **Verify**: check the ISO image against the signed SHA256SUMS file.\n"
            "- **Write**: copy the ISO image to the USB stick with dd.\n"
            "- **Boot**: restart the machine from the USB stick.\n"
        )
        reply = answer(
            "How do I verify the ISO image and copy the ISO image to the USB stick?",
            passage(text, "Installer"),
        )
        self.assertIn("- **Download**: fetch", reply.text)
        self.assertLess(reply.text.index("**Verify**"), reply.text.index("**Write**"))

    def test_a_sentence_saying_the_following_brings_its_code(self):
        """QA over Debian's Spanish reference: "... contiene lo siguiente."
        ends with a full stop, and was quoted without the `keyserver` line it
        introduces; a sentence running into its code without any mark
        ("... can be pinned with the command") is another such."""
        text = (
            "A good default key server set in ~/.gnupg/gpg.conf contains the "
            "following.\n\n```\nkeyserver hkp://keys.example.net\n```\n\n"
            "With apt a package can be pinned with the command\n\n"
            "```\napt-mark hold name\n```\n"
        )
        reply = answer(
            "What does a good default key server set in gpg.conf contain?",
            passage(text, "Keys"),
        )
        self.assertIn("following.\n\n```\nkeyserver hkp", reply.text)
        reply = answer("With apt, how can a package be pinned?", passage(text, "Keys"))
        self.assertIn("with the command\n\n```\napt-mark hold name", reply.text)

    def test_a_default_of_a_star_is_no_introduction(self):
        """Review of d7e3ea9: "Default: *" read as a sentence introducing what
        follows once emphasis marks were set aside, and, three words long
        with nothing after it, was left out: it is the answer."""
        text = (
            "allow_origins\n\nThe origins allowed to call the API.\n\n"
            "Default: *\n\nSet it to your own domain in production.\n"
        )
        reply = answer(
            "What is the default value of allow_origins?",
            passage(text, "Settings > allow_origins"),
        )
        self.assertIn("Default: * [1]", reply.text)

    def test_a_sentence_counting_steps_brings_them(self):
        """QA over Debian's French reference: "This process involves 2 steps."
        was quoted with "2. Set the system wide default locale ..." alone,
        step 1 left out: the procedure read as starting at 2."""
        text = (
            "Reconfiguring the hive entrance takes 2 steps.\n\n"
            "1. Select the frames to be kept over winter.\n"
            "2. Set the default width in the hive settings file.\n\n"
            "The width may be overridden for each hive.\n"
        )
        reply = answer(
            "How many steps does reconfiguring the hive entrance take?",
            passage(text, "Reconfiguring"),
        )
        self.assertIn(
            "takes 2 steps. [1]\n\n1. Select the frames to be kept over winter.\n"
            "2. Set the default",
            reply.text,
        )

    def test_two_steps_of_a_list_the_passage_cuts_show_it_goes_on(self):
        """Review of 1adc6fd: a procedure whose passage ends after step 4 of
        6 was quoted as steps 1 to 4, as if whole."""
        text = (
            "1. Open the hive lid.\n2. Lift the first frame of the hive.\n"
            "3. Check the frame for eggs.\n4. Put the frame back.\n"
            "5. Close the hive lid.\n6. Write down what you saw.\n"
        )
        end = text.index("5.")
        location = Location(1, "Guide > Inspection", 0, end, [0])
        cut = Passage(
            1, "Guide", "guide1.md", 0, end, text[:end], 1.0, {"vector"}, [location]
        )
        cut.source_text = TextWindow([(0, text)])
        reply = answer("How do I check a hive frame for eggs?", cut)
        self.assertIn("4. Put the frame back.\n- … [1]", reply.text)

    def test_a_list_the_passage_cuts_shows_it_goes_on(self):
        """QA over a Russian PDF: the budget cut a list of five places to ask
        after its first, and the answer read as if that were all."""
        text = (
            "Ask for help in these places:\n\n- the mentors mailing list\n"
            "- the IRC channel\n- the forum\n"
        )
        end = text.index("- the IRC")
        location = Location(1, "Guide > Help", 0, end, [0])
        cut = Passage(
            1, "Guide", "guide1.md", 0, end, text[:end], 1.0, {"vector"}, [location]
        )
        cut.source_text = TextWindow([(0, text)])
        reply = answer("Where can I ask for help?", cut)
        self.assertIn("- the mentors mailing list\n- …", reply.text)

    def test_a_sentence_qualifying_the_quoted_one_comes_with_it(self):
        """The rule and its catch: "Be aware ..." shares no word with the
        question, and is what "is there a downside?" asks (RQ's `rq info`)."""
        text = (
            "The monitor refreshes the hive scale every second. You may give a "
            "fraction of a second as the refresh interval. Be aware that short "
            "intervals drain the battery.\n\nThe scale weighs up to 150 kg. "
            "However, it is not waterproof."
        )
        reply = answer(
            "Can the monitor refresh faster than once a second?",
            passage(text, "Monitor"),
        )
        self.assertIn("Be aware that short intervals drain the battery.", reply.text)
        # Only the sentence right after a quoted one, in its paragraph.
        self.assertNotIn("waterproof", reply.text)

    def test_an_answer_opens_with_a_members_description_not_its_signature(self):
        """QA of issue #29 over Python's reference: answers opened with
        `exception KeyboardInterrupt` or `os.path.join(path, *paths)`."""
        # An exact token (the entry headed by it opens with its description)
        # and a plain word (the section's best prose opens).
        for name in ("KeyboardTrap", "Keytrap"):
            text = (
                f"```\nexception {name}\n```\n\nRaised when the user presses "
                f"the trap key. {name} inherits from BaseTrap, so that code "
                "catching Trap does not catch it by mistake.\n"
            )
            reply = answer(
                f"What is the {name} exception?",
                passage(text, f"Exceptions > {name}"),
            )
            with self.subTest(name):
                self.assertFalse(reply.text.startswith("```"), reply.text)

    def test_the_rest_of_a_broken_sentence_does_not_open_the_answer(self):
        """git's --amend entry: "but can be used to amend a merge commit."
        ends a sentence a code block broke; it opened the answer."""
        text = (
            "Replace the tip of the current branch by creating a new commit, "
            "amending the last one. It is a rough equivalent for:\n\n"
            "```\ngit reset --soft HEAD^\n```\n\n"
            "but can be used to amend a merge commit.\n"
        )
        reply = answer(
            "Can amend rewrite a merge commit?", passage(text, "OPTIONS > --amend")
        )
        self.assertIn("but can be used", reply.text)
        # the entry's name opens it: the sentence does not say it
        self.assertTrue(
            reply.text.startswith("**`--amend`**: Replace the tip"), reply.text
        )

    def test_a_sentence_introducing_a_table_comes_with_it(self):
        """QA over React's docs in Russian: "Ниже сравнение рефа и состояния:"
        was quoted without the table it introduces."""
        text = (
            "Refs and state both keep values. Here is how refs and state compare:"
            "\n\n| refs | state |\n| --- | --- |\n"
            "| Changing it does not re-render. | Changing it re-renders. |\n"
            "| Mutable outside rendering. | Immutable: use the setter. |\n\n"
            "Most of the time you want state.\n"
        )
        reply = answer("How do refs differ from state?", passage(text, "Refs"))
        intro, table = reply.text.split("\n\n")[:2]
        self.assertTrue(intro.rstrip().endswith("refs and state compare: [1]"))
        self.assertEqual(
            table,
            "| refs | state |\n| --- | --- |\n| Changing it does not re-render. | "
            "Changing it re-renders. |\n| Mutable outside rendering. | Immutable: "
            "use the setter. |\n[1]",
        )

    def test_a_short_definition_is_still_an_entry_s_definition(self):
        text = "Suppress output\n\nThe exit status is still set on failure.\n"
        reply = answer("What does --quiet do?", passage(text, "Options > --quiet"))
        self.assertTrue(
            reply.text.startswith("**`--quiet`**: Suppress output [1]"), reply.text
        )

    def test_inline_tags_are_quoted_as_the_text_they_wrap(self):
        """QA over React's Spanish docs: "¿Qué devuelve useRef?" quoted
        "`useRef` devuelve un <CodeStep step={1}>objeto ref</CodeStep> ..."."""
        text = (
            "`useRef` returns a <CodeStep step={1}>ref object</CodeStep> with a "
            "single <CodeStep step={2}>`current` property</CodeStep>, set to the "
            "<s>first</s> initial value you passed, and `<b>` stays code.\n"
        )
        reply = answer("What does useRef return?", passage(text, "Referencing"))
        # angle brackets around anything else are text (review of f7a6bb6)
        plain = "To restore a backup, run restore <archive> <target-dir> as root.\n"
        restored = answer("How do I restore a backup?", passage(plain, "Backups"))
        self.assertIn("restore <archive> <target-dir> as root.", restored.text)
        self.assertTrue(
            reply.text.startswith(
                "`useRef` returns a ref object with a single `current` property, "
                "set to the first initial value you passed, and `<b>` stays code."
            ),
            reply.text,
        )

    def test_a_code_block_is_quoted_without_its_highlighting_marks(self):
        """QA over React's docs: quoted code opened with `js [[1, 2,
        "passwordHintId"]]` and `js {1-2}`, MDX's lines to highlight."""
        text = (
            "Call useId at the top level of your component to generate a "
            'unique ID:\n\n```js [[1, 2, "passwordHintId"]]\nimport { useId } '
            "from 'react';\n\nfunction PasswordField() {\n  const passwordHintId"
            " = useId();\n}\n```\n"
        )
        reply = answer(
            "How do I generate a unique ID with useId?", passage(text, "Usage")
        )
        self.assertIn("```js\nimport { useId } from 'react';", reply.text)
        self.assertNotIn("[[1, 2", reply.text)

    def test_an_entry_s_label_lines_do_not_open_its_answer(self):
        """Node.js's API pages: "History" (over a table of versions) and "Added
        in: v0.1.90" were taken for the definition of the entry asked."""
        for label in (
            "History",
            "Added in: v0.1.90",
            "Stable since Rust version 1.27.0, const since 1.32.0.",  # rustdoc
            "Stable since Rust version 1.40.0, const unstable.",
        ):
            text = (
                f"{label}\n\n| Version | Changes |\n| --- | --- |\n"
                "| v6.0.0 | Passing a non-string now throws. |\n\n"
                "The `path.basename()` method returns the last portion of a path.\n"
            )
            reply = answer(
                "What does path.basename return?",
                passage(text, "Path > `path.basename(path[, suffix])`"),
            )
            with self.subTest(label):
                self.assertTrue(
                    reply.text.startswith("The `path.basename()` method"), reply.text
                )

    def test_what_is_quoted_from_a_content_tab_says_its_label(self):
        """QA over pydantic's docs: the code of a tab labelled "Bad" was the
        answer to "where should I create a TypeAdapter?", its label dropped."""
        text = (
            'Create the adapter once.\n\n=== "Bad"\n\n    ```python\n    def f(x):'
            "\n        return TypeAdapter(int).validate_python(x)\n    ```\n\n"
            '=== "Good"\n\n    ```python\n    ta = TypeAdapter(int)\n    def f(x):'
            "\n        return ta.validate_python(x)\n    ```\n"
        )
        reply = answer(
            "Where should I create a TypeAdapter?", passage(text, "Performance")
        )
        self.assertIn("*Bad*: \n\n```python\ndef f(x):", reply.text)
        self.assertIn("*Good*: \n\n```python\nta = TypeAdapter(int)", reply.text)
        self.assertTrue(reply.text.startswith("Create the adapter once. [1]"))
        # Docusaurus' tabs (typescript-eslint's docs)
        text = (
            "Extend the recommended configs.\n\n<Tabs>\n<TabItem value='flat' "
            "label='Flat Config'>\n\n```js\n// the recommended configs\nexport "
            "default recommended;\n```\n\n</TabItem>\n<TabItem value='legacyConfig'>"
            "\n\n```js\n// the recommended configs\nmodule.exports = recommended;\n"
            "```\n\n</TabItem>\n</Tabs>\n"
        )
        reply = answer("How do I extend the recommended configs?", passage(text, "S"))
        self.assertIn("*Flat Config*: \n\n```js\n// the recommended", reply.text)
        self.assertIn("*legacyConfig*: \n\n```js\n// the recommended", reply.text)

    def test_code_quoted_from_a_tab_closes_its_fence(self):
        """QA over pydantic's docs (MkDocs): code in a content tab was quoted
        with its closing fence indented four spaces, which closes nothing where
        the answer is shown: the block swallowed the marker and what follows."""
        text = (
            '=== "pip"\n\n    Install it with pip:\n\n    ```bash\n'
            "    pip install 'pydantic[email]'\n    ```\n\nThen import it.\n"
        )
        reply = answer(
            "How do I install pydantic with the email extra using pip?",
            passage(text, "Install"),
        )
        self.assertIn("```bash\npip install 'pydantic[email]'\n```\n[1]", reply.text)

    def test_a_sentence_cut_from_bold_text_is_bold_whole(self):
        """QA over React's docs: a sentence of a bold passage was quoted with
        its opening "**" alone, which shows as two stars."""
        text = (
            "**Strict Mode always calls your render function twice in "
            "development. An impure component shows its bug then.** Pure ones "
            "do not change.\n"
        )
        reply = answer("How often does Strict Mode call render?", passage(text, "S"))
        self.assertIn(
            "**Strict Mode always calls your render function twice in "
            "development.** [1]",
            reply.text,
        )
        # a lone "**" nothing around it pairs is text
        text = "The glob src/** matches every file below src. Use it for tests.\n"
        reply = answer("What does the glob src/** match?", passage(text, "S"))
        self.assertTrue(reply.text.startswith("The glob src/** matches"), reply.text)

    def test_a_component_s_tags_are_not_quoted(self):
        """QA over React's docs (MDX): "</Sandpack> [5]" closed an answer."""
        text = (
            "<Pitfall>\n\nStrict Mode runs your effects twice in development.\n\n"
            "</Pitfall>\n\nUse it to find bugs early.\n"
        )
        reply = answer(
            "What is the pitfall of Strict Mode?", passage(text, "Strict Mode")
        )
        self.assertIn("runs your effects twice", reply.text)
        self.assertNotIn("Pitfall>", reply.text)

    def test_an_entry_s_name_opens_what_is_quoted_from_it(self):
        """A QA pass over libxslt's reference and Valgrind's manual: "which
        function registers all EXSLT extensions?" was answered "Registers all
        available EXSLT extensions", and an option's default, in its heading
        alone, never reached the answer."""
        cases = [
            (
                "Which function registers all EXSLT extensions?",
                "Registers all available EXSLT extensions.\n",
                "Details > exsltRegisterAll ()",
                "**`exsltRegisterAll ()`**: Registers all available EXSLT extensions.",
            ),
            (
                "What is the default of the leak check?",
                "When enabled, search for memory leaks when the program ends.\n",
                "Options > `--leak-check=<no|summary|full> [default: summary]`",
                "**`--leak-check=<no|summary|full> [default: summary]`**: When",
            ),
            (  # the sentence names it: said once
                "What does path.basename do?",
                "The path.basename() method returns the last portion of a path.\n",
                "Path > `path.basename(path[, suffix])`",
                "The path.basename() method returns",
            ),
            (  # a longer name is not this one's (QA over Sphinx: dump, dumps)
                "What does dump do?",
                "Like `dumps()` but dumps into a file.\n",
                "Serializer > dump(obj, f)",
                "**`dump(obj, f)`**: Like `dumps()` but dumps into a file.",
            ),
            (  # nor one with a word in parentheses
                "How do I install it on Windows?",
                "Download the installer and run it.\n",
                "Setup > Installation (Windows)",
                "Download the installer",
            ),
            (  # a heading of prose names no entry
                "Why does the default operation vary?",
                "The default operation varies with the operating system.\n",
                "Path > Windows vs. POSIX",
                "The default operation varies",
            ),
            (  # a signature's parameters are no prose (review of 388ecc8)
                "Which TinyXML call gives an attribute's integer value?",
                "Returns the value of the attribute as an integer.\n",
                "Reference > TiXmlElement::Attribute (const char *name, int *i)",
                "**`TiXmlElement::Attribute (const char *name, int *i)`**: Returns",
            ),
            (  # nor one of prose naming code (QA over Debian's Russian FAQ)
                "Where are the binary packages of stable?",
                "The binary packages themselves are in the pool directory.\n",
                "FAQ > 6.8. What is in the directories under `dists/stable/main`?",
                "The binary packages themselves",
            ),
        ]
        for question, text, heading, opening in cases:
            with self.subTest(heading):
                reply = answer(question, passage(text, heading))
                self.assertTrue(reply.text.startswith(opening), reply.text)

    def test_the_definition_of_the_option_asked_opens_its_entry(self):
        """rsync's --compress entry: a later caveat shares more of the
        question's words ("rsync", "-z"), but the entry's definition says what
        the option does and opens the answer."""
        text = (
            "With this option, data is made smaller as it is sent.\n\n"
            "Some old rsync servers reject a rsync -z option unless you give "
            "-zz; ignore this weirdness otherwise.\n"
        )
        reply = answer(
            "what does rsync -z do", passage(text, "OPTIONS > --compress, -z")
        )
        self.assertTrue(
            reply.text.startswith("**`--compress, -z`**: With this option"), reply.text
        )

    def test_it_opens_with_the_sentence_sharing_the_rare_words(self):
        first = passage(
            "In spring a hive grows fast. Bees drink water daily.", "Colony"
        )
        second = passage(
            "Feed sugar syrup to a hive in early spring when its stores run low.",
            "Stores",
            rank=2,
            source_id=2,
        )
        reply = answer("When do I feed a hive sugar syrup in spring?", first, second)
        self.assertTrue(reply.text.startswith("Feed sugar syrup"), reply.text)
        self.assertIn("In spring a hive grows fast. [2]", reply.text)
        self.assertEqual([c.source_id for c in reply.citations], [2, 1])

    def test_it_shows_a_table_row_under_its_header_line(self):
        reply = answer("When does the Porto office open?", passage(OFFICES, "Offices"))
        lines = reply.text.splitlines()
        self.assertEqual(
            lines[:2], ["| Office | City | Opens |", "| --- | --- | --- |"]
        )
        self.assertIn("| Office 57 | Porto | 9:30 |", lines)

    def test_a_tables_caption_comes_before_it(self):
        """QA over Debian's French reference: the caption "Options importantes
        de la commande aptitude(8)", quoted with the row asked about, came
        after the table as a sentence of its own."""
        text = "Opening hours of the offices\n\n" + OFFICES
        reply = answer("When does the Porto office open?", passage(text, "Offices"))
        self.assertTrue(
            reply.text.startswith(
                "Opening hours of the offices [1] \n\n| Office | City |"
            ),
            reply.text,
        )

    def test_its_citations_wait_for_their_links(self):
        reply = answer("When does the Porto office open?", passage(OFFICES, "Offices"))
        (cite,) = reply.citations
        # kb.answering links them and narrows the chunks to the cited range.
        self.assertEqual((cite.url, cite.chunk_indexes, cite.section_id), ("", [0], 1))
        self.assertIn("| Office 57 | Porto | 9:30 |", OFFICES[cite.start : cite.end])

    def test_the_best_sentence_of_a_section_opens_the_answer(self):
        text = (
            "Check a hive in spring for a laying queen. Inspect a hive every "
            "week in spring and look for eggs."
        )
        reply = answer(
            "How often should I inspect a hive in spring?", passage(text, "Care")
        )
        self.assertTrue(reply.text.startswith("Inspect a hive every week"), reply.text)
        self.assertIn("Check a hive in spring for a laying queen.", reply.text)

    def test_a_best_sentence_that_leans_on_the_one_before_follows_it(self):
        # QA over Debian's Russian aptitude manual: "Use full-upgrade to
        # upgrade these packages too" opened the answer, before the sentence
        # saying which packages
        text = (
            "Sometimes a package must be removed to upgrade another package, "
            "and safe-upgrade cannot upgrade such packages. Use full-upgrade "
            "to upgrade these packages too."
        )
        reply = answer(
            "What does full-upgrade do to packages?",
            passage(text, "Upgrades"),
        )
        self.assertTrue(reply.text.startswith("Sometimes a package"), reply.text)
        self.assertIn("Use full-upgrade", reply.text)

    def test_a_list_item_that_answers_opens_with_its_introduction(self):
        question = "Which tools do I gather to open the hive: a veil and gloves?"
        reply = answer(question, passage(TOOLS, "Tools"))
        self.assertTrue(reply.text.startswith("Before you open the hive"), reply.text)
        self.assertIn("- a veil and gloves", reply.text)


ERRORS = """Errors carry a five-character code; test the code, not the message text.

| Code | Condition |
| --- | --- |
| 23503 | foreign_key_violation |
| 23505 | unique_violation |
| 23514 | check_violation |
"""


class ExactTokenRowTestCase(SimpleTestCase):
    def test_an_option_quoted_with_its_command_and_a_verb_keeps_its_row(self):
        """Review of 1fcdfcd: «apt-get install -y» made "install" a word the
        row of -y had to say, and the row lost its weight."""
        opts = (
            "| Option | Meaning |\n| --- | --- |\n"
            "| `-d`, `--download-only` | Download only; packages are retrieved but "
            "not unpacked or installed. |\n"
            "| `-y`, `--yes` | Automatic yes to prompts; run non-interactively. |\n"
            "| `-q`, `--quiet` | Quiet; output suitable for logging. |\n"
        )
        reply = answer(
            'How do I make "apt-get install -y" run without prompts?',
            passage(opts, "apt-get(8) > Options"),
        )
        rows = [ln for ln in reply.text.splitlines() if ln.startswith("| `")]
        self.assertEqual(rows[0][:9], "| `-y`, `", reply.text)

    def test_both_commands_a_question_quotes_are_quoted_and_no_other(self):
        """QA over Debian's Spanish reference: asked the difference between
        «git add .» and «git add -A .», the answer left out the row of `git add
        .` (it does not hold "-A") and quoted `ls -A`'s, of another table."""
        git = (
            "| Command | Function |\n| --- | --- |\n"
            "| `git init` | create a repository |\n"
            "| `git add .` | add the files already in the index |\n"
            "| `git add -A .` | add all the files, removals included |\n"
            "| `git commit -a` | add all changes and commit them |\n"
        )
        ls = (
            "| Command | Function |\n| --- | --- |\n"
            "| `ls` | list the files of the directory |\n"
            "| `ls -A` | list all the files of the directory, hidden ones added |\n"
        )
        reply = answer(
            "What is the difference between «git add .» and «git add -A .»?",
            passage(git, "Git commands", rank=1, source_id=1),
            passage(ls, "Shell commands", rank=2, source_id=2),
        )
        self.assertIn(
            "| `git add .` | add the files already in the index |\n"
            "| `git add -A .` | add all the files",
            reply.text,
        )
        self.assertNotIn("ls -A", reply.text)

    def test_the_row_of_the_code_asked_about_opens_the_answer(self):
        """A table row's stored vector is its whole chunk's, so every row reads
        alike and the prose above can read nearer the question; the row that
        holds the question's code as written is what was asked (issue #29's
        "error-code answers lead with neighbouring rows")."""
        import numpy as np

        errors = passage(ERRORS, "Error codes")
        question = np.array([1.0, 0.0], dtype=np.float32)
        lines = [(m.start(), m.end()) for m in re.finditer(r"[^\n]+", ERRORS)]
        near = {0: [0.9, 0.436]}  # the prose sentence reads nearest
        vectors = np.array(
            [near.get(i, [0.2, 0.98]) for i in range(len(lines))], dtype=np.float32
        )
        result = Result(
            "What condition does error 23505 report?",
            [errors],
            0,
            1200,
            1,
            "vector",
            {},
            vector=question,
        )
        reply = answerer.extractive_answer(
            result, {id(errors): "english"}, {1: (np.array(lines), vectors)}
        )
        rows = [line for line in reply.text.splitlines() if line.startswith("| 2")]
        self.assertEqual(rows[0], "| 23505 | unique_violation |", reply.text)
        self.assertTrue(reply.text.startswith("| Code | Condition |"), reply.text)


class EntryNamedByAWordTestCase(SimpleTestCase):
    def test_an_entry_named_by_a_word_beside_an_option_is_quoted(self):
        """QA over Bash's PDF manual: "shopt -s globstar" names the entry
        "-s" (an option, written as it is) and the entry "globstar" (a word)
        under "shopt"; globstar's definition, which writes neither, was left
        out for the "-s" entry's and sentences naming shopt and -s."""
        reply = answer(
            "What does shopt -s globstar do?",
            passage(
                "Toggle the values of settings of the shell with shopt. With -s, "
                "shopt sets each option; with -u, shopt unsets it.",
                "shopt",
                source_id=1,
            ),
            passage("Enable (set) each optname.", "shopt > -s", 2, 2),
            passage(
                "When the globstar option is set with shopt -s, two stars match "
                "more than a name.",
                "Pattern Matching",
                2,
                3,
            ),
            passage(
                "Each word is a valid argument for the -s option to the shopt "
                "builtin. The options are those reported as on by shopt.",
                "BASHOPTS",
                3,
                4,
            ),
            passage(
                "If set, the pattern ** used in a filename expansion context "
                "will match all files and zero or more directories.",
                "shopt > globstar",
                4,
                5,
            ),
        )
        self.assertIn("the pattern ** used in a filename expansion", reply.text)


class MemberNamedInTheQuestionTestCase(SimpleTestCase):
    """QA over pydoc and rustdoc pages: a member the question names is quoted
    by its own description, first, although that shares few of its words."""

    def test_a_member_named_by_its_plain_name_opens_with_its_description(self):
        """ "mkdir" is no exact token (no capital, dot or underscore), and
        "Create a new directory at this given path." shares only "path" with
        the question: the answer opened with the class's docstring and then
        the bare signature of Path.mkdir."""
        reply = answer(
            "What does the mkdir method of pathlib.Path do?",
            passage(
                "Path represents a filesystem path but unlike PurePath, also "
                "offers methods to do system calls on path objects.",
                "module pathlib > class Path(PurePath)",
                2,
                1,
            ),
            passage(
                "```\nmkdir(self, mode=511, parents=False, exist_ok=False)\n```"
                "\n\nCreate a new directory at this given path.\n",
                "module pathlib > class Path(PurePath) > Path.mkdir",
                1,
                2,
            ),
            passage(
                "```\nrmdir(self)\n```\n\nRemove this directory. The directory "
                "must be empty.\n",
                "module pathlib > class Path(PurePath) > Path.rmdir",
                3,
                3,
            ),
        )
        self.assertTrue(
            reply.text.startswith("**`Path.mkdir`**: Create a new directory"),
            reply.text,
        )

    def test_two_members_compared_are_each_quoted_by_their_description(self):
        """File::open and File::create each have "Errors" and "Examples" parts:
        five sections named, over the three an entry may be, so neither was
        an entry. The answer opened with "See the `OpenOptions::open`
        function for more details." and left open's description out."""
        parts = [
            (
                "File::open",
                "```\npub fn open<P: AsRef<Path>>(path: P) -> Result<File>\n```"
                "\n\nAttempts to open a file in read-only mode.\n\nSee the "
                "`OpenOptions::open` method for more details.\n",
            ),
            (
                "File::open > Errors",
                "This function will return an error if `path` does not already "
                "exist. Other errors may also be returned according to "
                "`OpenOptions::open`.\n",
            ),
            (
                "File::open > Examples",
                "```\nuse std::fs::File;\n\nfn main() -> std::io::Result<()> {\n"
                '    let mut f = File::open("foo.txt")?;\n    Ok(())\n}\n```\n',
            ),
            (
                "File::create",
                "```\npub fn create<P: AsRef<Path>>(path: P) -> Result<File>\n```"
                "\n\nOpens a file in write-only mode.\n\nThis function will "
                "create a file if it does not exist, and will truncate it if it "
                "does.\n\nSee the `OpenOptions::open` function for more "
                "details.\n",
            ),
            (
                "File::create > Examples",
                "```\nuse std::fs::File;\n\nfn main() -> std::io::Result<()> {\n"
                '    let mut f = File::create("foo.txt")?;\n    Ok(())\n}\n```\n',
            ),
        ]
        text, locations = "", []
        for section, (heading, part) in enumerate(parts, start=1):
            path = f"Struct std::fs::File > impl File > {heading}"
            locations.append(
                Location(section, path, len(text), len(text) + len(part), [section])
            )
            text += part + "\n"
        found = Passage(
            1, "File", "file.html", 0, len(text), text, 1.0, {"vector"}, locations
        )
        found.source_text = TextWindow([(0, text)])
        examples = passage(
            "The difference between File::open and File::create shows in the "
            "examples below. Each example opens or creates a file with File::open "
            "or File::create and reads the difference. Compare the difference "
            "between the two: File::open and File::create differ.",
            "Struct std::fs::File > Examples",
            2,
            2,
        )
        reply = answer(
            "What is the difference between File::open and File::create?",
            found,
            examples,
        )
        self.assertIn("Attempts to open a file in read-only mode.", reply.text)
        self.assertIn("Opens a file in write-only mode.", reply.text)
        self.assertFalse(reply.text.startswith("See the"), reply.text)

    def test_a_see_also_line_is_no_answer(self):
        """QA over Doxygen pages: "What is the difference between
        InsertEndChild and LinkEndChild?" opened with "- See also:
        InsertEndChild", which names the member and says nothing of it."""
        reply = answer(
            "What is the difference between InsertEndChild and LinkEndChild?",
            passage(
                "Add a new node related to this. Adds a child past the "
                "LastChild.\n\n- See also: InsertEndChild\n\nThe node is "
                "henceforth owned and deleted by the document; no copy is made.",
                "TiXmlNode > TiXmlNode::LinkEndChild",
                source_id=1,
            ),
            passage(
                "Add a new node related to this. Adds a copy of the child past "
                "the LastChild.\n\n- See also: LinkEndChild\n",
                "TiXmlNode > TiXmlNode::InsertEndChild",
                2,
                2,
            ),
        )
        self.assertNotIn("See also", reply.text)
        self.assertIn("Adds a copy of the child", reply.text)

    def test_a_file_name_is_no_member(self):
        """Review of 77c214d: "json" of "package.json" was taken for a member
        the question names, and its section's first sentence quoted."""
        reply = answer(
            "How do I make the command line tool print its results as json?",
            passage(
                "Pass --format json to the command line tool to print its "
                "results as json.",
                "CLI > Output",
                source_id=1,
            ),
            passage(
                "Every project has a package.json at its root. It lists the "
                "dependencies.",
                "Files > package.json",
                2,
                2,
            ),
        )
        self.assertNotIn("package.json at its root", reply.text)

    def test_a_member_named_by_an_english_word_is_not_taken_for_the_entry(self):
        """ "counter" is a word: "the counter" of a question about a shop is
        not Manager.counter, whose description would then open the answer."""
        reply = answer(
            "How long does the counter stay open on Sundays?",
            passage(
                "The counter at the front stays open from ten to four on Sundays.",
                "Opening hours",
                source_id=1,
            ),
            passage(
                "Return a new progress bar registered with this manager.",
                "API > Manager.counter()",
                2,
                2,
            ),
        )
        self.assertTrue(reply.text.startswith("The counter at the front"), reply.text)
        self.assertNotIn("progress bar", reply.text)


class LocationShareTestCase(SimpleTestCase):
    SMOKER = (
        "Light the smoker with paper and add dry fuel once it burns. "
        "Puff the smoker a few times so the fuel keeps burning. "
        "Keep the smoker burning by adding fuel every twenty minutes. "
        "A smoker that stops burning needs fresh dry fuel and a few puffs. "
        "Burning burlap keeps a smoker going for an hour. "
        "Never leave a burning smoker on dry grass."
    )

    def test_a_weak_match_elsewhere_does_not_take_a_stronger_sentences_place(self):
        """Another section's best sentence has a place of its own in the answer
        only when it weighs half the best one: a weaker one ("Store dry fuel"
        shares two words) competes with the best section's other sentences."""
        reply = answer(
            "How do I keep a smoker burning with dry fuel?",
            passage(self.SMOKER, "Smoker", 1, 1),
            passage("Store dry fuel in a tin, far from the bees.", "Storage", 2, 2),
        )
        self.assertIn("Burning burlap keeps a smoker going for an hour.", reply.text)
        self.assertNotIn("Store dry fuel", reply.text)

    def test_an_option_entry_is_quoted_beside_a_heading_of_more_words(self):
        """Review: a heading holding more of the question's plain words ("Show
        renamed files in log output") hid the entry of the option asked."""
        reply = answer(
            "How do I make git log --follow show renamed files?",
            passage(
                "Renamed files are shown under their new name in the git log "
                "output. To show renamed files with their old names, git log "
                "takes a format. Git log can show files renamed in a merge too.",
                "Show renamed files in log output",
                1,
                1,
            ),
            passage(
                "Keep listing the history past a move of the path.",
                "git log > Options > --follow",
                2,
                2,
            ),
        )
        self.assertIn("Keep listing the history past a move of the path.", reply.text)
