"""End to end in headless Chromium: log in, ask, follow a citation (issue 6)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from kb.demo import load_demo, load_french_demo
from kb.management.commands.kb_screenshots import QUESTION
from kb.models import Collection, EvalRun, GoldenCase, Source
from tests.documents import build_pdf, running_pages


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text))


def _superuser() -> None:
    """The admin the browser logs in as (_log_in's defaults)."""
    get_user_model().objects.create_superuser("staff", "s@example.invalid", "pw-1")


def _log_in(page: Page, live_server, next_url: str, user="staff", password="pw-1"):
    page.goto(f"{live_server.url}/admin/login/?next={next_url}")
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("input[type=submit]")


def _wait_until_listed_as_indexed(page: Page) -> None:
    """The source list an upload lands on reloads itself while indexing runs;
    wait for it to show the source indexed, as an editor does. Navigating
    elsewhere meanwhile would race the page's own reload."""
    expect(page.locator("#result_list")).to_contain_text("Indexed", timeout=15_000)
    expect(page.locator("#kb-refresh-note")).to_have_count(0)


def _ask(page: Page, question: str, collection: Collection) -> None:
    page.fill("#id_q", question)
    page.select_option("#id_collection", str(collection.pk))
    page.click("form[role=search] button[type=submit]")


def _select_in_source(page: Page, wanted: str) -> None:
    """Select `wanted` in the golden-case form's source text, as an editor would."""
    page.locator(".kb-span-source").evaluate(
        """(pre, wanted) => {
          const node = pre.firstChild, at = node.data.indexOf(wanted);
          const range = document.createRange();
          range.setStart(node, at);
          range.setEnd(node, at + wanted.length);
          getSelection().removeAllRanges();
          getSelection().addRange(range);
        }""",
        wanted,
    )


# live_server runs in another thread with its own connection, so it only sees
# committed rows: hence transactional_db rather than the usual TestCase rollback.
# transactional_db comes first so the session's test database outlives the server.
@pytest.mark.slow
def test_it_asks_and_follows_a_citation(transactional_db, live_server, page: Page):
    _superuser()
    demo = load_demo(sync=True)

    _log_in(page, live_server, "/")
    page.wait_for_url(f"{live_server.url}/")

    _ask(page, QUESTION, demo)
    cite = page.locator("#answer a.cite").first
    expect(cite).to_be_visible()

    # The answer reads "sentence [1] sentence [2]": the text before a marker is
    # the sentence it cites.
    sentence = cite.evaluate("a => a.previousSibling.textContent")
    assert _squash(sentence), "no sentence before the first citation"
    cite.click()
    page.wait_for_url(
        re.compile(r"/kb/sections/\d+/\?start=\d+&end=\d+&source=\d+&v=\d+#cited$")
    )
    mark = page.locator("mark#cited")
    expect(mark).to_be_visible()
    # The answer shows the sentence formatted (no backticks), the mark the source.
    assert _words(sentence) in _words(mark.inner_text())
    # The formatted section marks the blocks holding the cited sentences.
    expect(page.locator(".section-formatted .cited").first).to_be_visible()


@pytest.mark.slow
def test_a_golden_case_is_created_by_selecting_text(
    transactional_db, live_server, page: Page
):
    _superuser()
    collection = Collection.objects.create(name="Animals")
    # A leading newline: HTML drops the first newline after <pre>, which once put
    # every picked span one character early.
    text = "\n# Animals\n\nFoxes.\n\nThe quick brown fox jumps over the lazy dog.\n"
    Source.objects.create(
        collection=collection, title="Animals", file_name="animals.md", text=text
    )

    _log_in(page, live_server, "/admin/kb/goldencase/add/")
    page.select_option("#id_collection", str(collection.pk))
    page.select_option("#kb-span-file", "animals.md")
    _select_in_source(page, "quick brown fox")
    page.click("#kb-span-add")
    page.fill("#id_external_id", "fox")
    page.fill("#id_question", "What jumps over the lazy dog?")
    page.select_option("#id_kind", "definition")
    page.click("input[name=_save]")
    page.wait_for_url(f"{live_server.url}/admin/kb/goldencase/")

    start = text.index("quick brown fox")
    case = GoldenCase.objects.get(external_id="fox")
    span = {"file": "animals.md", "start": start, "end": start + 15}
    assert case.required_spans == [{**span, "text": "quick brown fox"}]


@pytest.mark.slow
def test_auto_refresh_never_throws_away_what_an_editor_types(
    transactional_db, live_server, page: Page
):
    _superuser()
    collection = Collection.objects.create(name="Busy")
    source = Source.objects.create(
        collection=collection,
        title="Busy",
        file_name="busy.md",
        text="# Busy\n\nText.\n",
        status=Source.Status.QUEUED,
    )
    url = f"{live_server.url}/admin/kb/source/{source.pk}/change/"
    _log_in(page, live_server, url)
    page.wait_for_url(url)
    expect(page.locator("#kb-refresh-note")).to_contain_text("refreshes itself")

    # Untouched, the page reloads itself while the source is being indexed.
    page.evaluate("window.kbMarker = 1")
    # (wait_for_function would evaluate a string in the page: the CSP forbids it)
    page.wait_for_event("load", timeout=10_000)
    assert page.evaluate("window.kbMarker") is None

    page.fill("#id_author", "Ada")
    page.wait_for_timeout(4_000)  # past the refresh interval
    assert page.input_value("#id_author") == "Ada"
    expect(page.locator("#kb-refresh-note")).to_contain_text("stopped")


@pytest.mark.slow
def test_setting_the_floor_asks_first(transactional_db, live_server, page: Page):
    _superuser()
    collection = Collection.objects.create(name="Gate")
    run = EvalRun.objects.create(
        collection=collection, status="done", aggregate={"recall_at_k": 0.9}
    )
    url = f"{live_server.url}/admin/kb/evalrun/dashboard/?collection={collection.pk}"
    _log_in(page, live_server, url)
    page.wait_for_url(url)
    asked = []

    def answer(dialog, accept: bool):
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda dialog: answer(dialog, False))
    page.click(f"button[form=floor-{run.pk}]")
    page.wait_for_timeout(500)
    assert "Raise the recall floor of Gate to 0.900?" in asked[0]
    collection.refresh_from_db()
    assert collection.recall_floor is None  # dismissed: nothing posted
    page.once("dialog", lambda dialog: answer(dialog, True))
    page.click(f"button[form=floor-{run.pk}]")
    expect(page.locator(".messagelist")).to_contain_text("Recall floor raised to 0.900")
    collection.refresh_from_db()
    assert collection.recall_floor == 0.9
    # At the floor now: no button to set it again from the same run.
    expect(page.locator(f"button[form=floor-{run.pk}]")).to_have_count(0)


@pytest.mark.slow
def test_a_pdf_uploaded_in_the_admin_is_cited_with_its_page(
    transactional_db, live_server, page: Page, tmp_path
):
    from tests.base import forget_jobs, run_burst_worker
    from tests.documents import MEALS_Q, handbook_pages

    _superuser()
    handbook = Collection.objects.create(name="Handbook")
    pdf = tmp_path / "handbook.pdf"
    pdf.write_bytes(build_pdf(handbook_pages()))

    _log_in(page, live_server, "/admin/kb/source/upload/")
    page.select_option("#id_collection", str(handbook.pk))
    page.set_input_files("#id_files", str(pdf))
    page.click("input[type=submit][value='Upload and index']")
    expect(page.locator("ul.messagelist")).to_contain_text(
        "handbook.pdf: created, queued for indexing"
    )
    run_burst_worker()  # the worker reads the PDF, then indexes it
    forget_jobs()
    _wait_until_listed_as_indexed(page)

    page.goto(f"{live_server.url}/")
    _ask(page, MEALS_Q, handbook)
    citation = page.locator("ol.citations li", has_text="Meals").first
    expect(citation).to_contain_text("handbook.pdf, p. 2,")
    # The page named opens the original at that page (issue #28).
    on_page = citation.locator("a.page-link")
    assert on_page.get_attribute("href").endswith("/file/#page=2")
    citation.locator("a").first.click()
    page.wait_for_url(
        re.compile(r"/kb/sections/\d+/\?start=\d+&end=\d+&source=\d+&v=\d+#cited$")
    )
    expect(page.locator("mark#cited")).to_contain_text("sixty euros in Paris")
    original = page.locator("a.page-link:not(.cited-page)")
    expect(original).to_have_text("p. 2 of the original")
    assert original.get_attribute("href").endswith("/file/#page=2")
    cited = page.locator("a.cited-page")
    expect(cited).to_have_text("cited: p. 2 of the original")
    assert cited.get_attribute("href").endswith("/file/#page=2")


STARTER_KIT = [
    (0, "a laptop with a charger and a padded sleeve"),
    (0, "a photo badge that opens the front doors"),
    (0, "a noise-cancelling headset for calls"),
    (0, "a desk lamp with a warm white bulb"),
]


def _starter_pages() -> list:
    """Three pages; "First day" starts on page 2 and runs onto page 3, where a
    sentence introduces a bulleted list."""
    one, two, three = running_pages("Lumen Works - Welcome pack")
    one.heading("Welcome pack", 22).paragraph(
        ["This pack explains what happens before and on your first day."]
    )
    one.heading("Before you arrive", 15).paragraph(
        ["Your manager sends a short timetable for the first week by post."]
    )
    two.heading("First day", 15).paragraph(
        ["Reception greets you at nine and walks you to your team's floor."]
    )
    two.paragraph(["Your team buddy shows you the kitchen and the quiet rooms."])
    three.paragraph(["Every new starter receives the following equipment:"])
    three.bullets(STARTER_KIT)
    three.heading("Parking", 15).paragraph(
        ["Bicycles go in the covered racks behind the east entrance."]
    )
    return [one, two, three]


@pytest.mark.slow
def test_a_list_answer_is_cited_with_the_pdf_page_it_is_on(
    transactional_db, live_server, page: Page, tmp_path
):
    """Issue #28: an editor uploads a PDF whose list sits on the second page of
    its section; staff ask, get the list whole under the sentence introducing
    it, and follow the citation to that page."""
    from tests.base import forget_jobs, run_burst_worker

    _superuser()
    welcome = Collection.objects.create(name="Welcome")
    pdf = tmp_path / "welcome-pack.pdf"
    pdf.write_bytes(build_pdf(_starter_pages()))

    _log_in(page, live_server, "/admin/kb/source/upload/")
    page.select_option("#id_collection", str(welcome.pk))
    page.set_input_files("#id_files", str(pdf))
    page.click("input[type=submit][value='Upload and index']")
    expect(page.locator("ul.messagelist")).to_contain_text(
        "welcome-pack.pdf: created, queued for indexing"
    )
    run_burst_worker()
    forget_jobs()
    _wait_until_listed_as_indexed(page)

    page.goto(f"{live_server.url}/")
    _ask(page, "What equipment does a new starter receive?", welcome)
    answer = page.locator("#answer .answer")
    intro = "Every new starter receives the following equipment:"
    expect(answer).to_contain_text(intro)
    # The whole list, as a list, right after the sentence introducing it.
    items = [text for _, text in STARTER_KIT]
    expect(answer.locator("ul > li")).to_have_text(items)
    lines = [_squash(line) for line in answer.inner_text().splitlines()]
    lines = [line for line in lines if line]
    first = next(i for i, line in enumerate(lines) if line.startswith(intro))
    assert lines[first + 1 : first + 1 + len(items)] == items, lines

    citation = page.locator("ol.citations li", has_text="First day").first
    expect(citation).to_contain_text("welcome-pack.pdf, p. 3,")
    on_page = citation.locator("a.page-link")
    assert on_page.get_attribute("href").endswith("/file/#page=3")
    citation.locator("a").first.click()
    page.wait_for_url(
        re.compile(r"/kb/sections/\d+/\?start=\d+&end=\d+&source=\d+&v=\d+#cited$")
    )
    mark = page.locator("mark#cited")
    expect(mark).to_contain_text(intro)
    expect(mark).to_contain_text(STARTER_KIT[-1][1])
    # The section runs over pages 2 and 3; the cited text is on page 3.
    original = page.locator("a.page-link:not(.cited-page)")
    expect(original).to_have_text("p. 2–3 of the original")
    assert original.get_attribute("href").endswith("/file/#page=2")
    cited = page.locator("a.cited-page")
    expect(cited).to_have_text("cited: p. 3 of the original")
    assert cited.get_attribute("href").endswith("/file/#page=3")


@pytest.mark.slow
def test_a_question_marked_not_helpful_becomes_a_golden_case(
    transactional_db, live_server, page: Page
):
    from django.contrib.auth.models import Group

    from kb import permissions

    _superuser()
    permissions.ensure_groups()
    editor = get_user_model().objects.create_user(
        "editor", "e@example.invalid", "pw-2", is_staff=True
    )
    editor.groups.add(Group.objects.get(name=permissions.CONTENT_EDITOR))
    demo = load_demo(sync=True)

    # Staff ask, and find the answer not helpful.
    _log_in(page, live_server, "/")
    page.wait_for_url(f"{live_server.url}/")
    _ask(page, QUESTION, demo)
    expect(page.locator("#answer a.cite").first).to_be_visible()
    page.fill("#id_note", "It leaves out who approves a roll-forward.")
    page.click("#feedback-not-helpful")
    expect(page.locator("#message")).to_contain_text("feedback is recorded")
    expect(page.locator("#feedback-given")).to_contain_text("not helpful")
    page.click("header form.logout button")

    # An editor finds it among the content gaps and makes a golden case of it.
    _log_in(page, live_server, "/admin/kb/goldencase/", "editor", "pw-2")
    page.get_by_role("link", name="Content gaps").click()
    row = page.locator("#gaps tr.kb-gap", has_text=QUESTION)
    expect(row).to_contain_text("It leaves out who approves a roll-forward.")
    row.locator("a.kb-make-case").click()
    expect(page.locator("#id_question")).to_have_value(QUESTION)
    page.select_option("#kb-span-file", "deployment-runbook.md")
    wanted = "on-call engineering manager has approved it"
    _select_in_source(page, wanted)
    page.click("#kb-span-add")
    page.click("input[name=_save]")
    page.wait_for_url(f"{live_server.url}/admin/kb/goldencase/")

    case = GoldenCase.objects.get(question=QUESTION, is_real_question=True)
    assert case.required_spans[0]["text"] == wanted
    assert case.from_question.is_helpful is False
    # Made from an answer marked not helpful, the case is scored on the answer
    # (issue #28): the gap stays open until a run shows the answer quoting it.
    assert case.on_answer
    expect(page.locator("ul.messagelist")).to_contain_text(
        "The case is scored on the answer"
    )
    assert case.from_question.handled is None
    page.goto(f"{live_server.url}/admin/kb/question/gaps/")
    expect(page.locator("#gaps tr.kb-gap", has_text=QUESTION)).to_be_visible()


@pytest.mark.slow
def test_a_french_browser_gets_the_french_ask_page_and_switches_to_english(
    transactional_db, live_server, page: Page
):
    _superuser()
    load_demo(sync=True)
    french = page.context.browser.new_page(locale="fr-FR")  # Accept-Language: fr-FR
    try:
        _log_in(french, live_server, "/")
        french.wait_for_url(f"{live_server.url}/")
        expect(french.locator("html")).to_have_attribute("lang", "fr")
        expect(french.locator("h1")).to_have_text("Interroger la base de connaissances")
        expect(french.locator("label[for=id_q]")).to_have_text("Question")
        expect(french.locator("form[role=search] button")).to_have_text("Demander")

        french.select_option("#language-choice", "en")
        french.click("#language-switcher button[type=submit]")
        expect(french.locator("h1")).to_have_text("Ask the knowledge base")
        # The choice holds on the next page, whatever the browser asks for.
        french.goto(f"{live_server.url}/admin/")
        expect(french.locator("#language-choice")).to_have_value("en")
        expect(french.locator("#site-name")).to_contain_text("Django administration")
    finally:
        french.close()


@pytest.mark.slow
def test_an_english_question_over_french_sources_cites_the_french_text(
    transactional_db, live_server, page: Page
):
    """Issue #27: the multilingual model finds the French passage for an English
    question; the answer quotes the source's own French words, and the citation
    opens them in the French document."""
    _superuser()
    french = load_french_demo(sync=True)
    rule = "Le télétravail depuis l'étranger est limité à 20 jours ouvrés"

    _log_in(page, live_server, "/")
    page.wait_for_url(f"{live_server.url}/")
    _ask(
        page,
        "How many days a year may I work remotely from another country, "
        "and who has to approve it?",
        french,
    )
    expect(page.locator("#answer")).to_contain_text(rule)
    cite = page.locator("#answer a.cite").first
    sentence = cite.evaluate("a => a.previousSibling.textContent")
    assert rule in _squash(sentence)
    cite.click()
    page.wait_for_url(re.compile(r"/kb/sections/\d+/\?.*#cited$"))
    mark = page.locator("mark#cited")
    expect(mark).to_contain_text(rule)
    source = Source.objects.get(collection=french, file_name="teletravail.md")
    assert f"source={source.pk}" in page.url


@pytest.mark.slow
def test_a_code_question_s_citation_opens_the_method_in_the_original(
    transactional_db, live_server, page: Page
):
    """Issue #29: asked about a method, staff follow the citation to that
    method's section, and from there to the method's entry in the web page
    the Javadoc was taken from (here an address on the test server)."""
    from kb import ingestion, uploads

    _superuser()
    api = Collection.objects.create(name="API")
    original = f"{live_server.url}/apidocs/StopWatch.html"
    page_file = Path(__file__).parent / "fixtures/real/javadoc17-StopWatch.html"
    data = page_file.read_bytes()
    source, _ = uploads.store_source(
        api, "StopWatch.html", data, metadata={"url": original}
    )
    ingestion.ingest(source.pk)

    _log_in(page, live_server, "/")
    page.wait_for_url(f"{live_server.url}/")
    _ask(page, "What does suspend() do on a StopWatch?", api)
    citation = page.locator("ol.citations li", has_text="suspend()").first
    expect(citation.locator("a.original-link")).to_have_attribute(
        "href", f"{original}#suspend()"
    )
    citation.locator("a").first.click()
    page.wait_for_url(re.compile(r"/kb/sections/\d+/\?.*#cited$"))
    expect(page.locator("h1, h2").first).to_contain_text("suspend()")
    expect(page.locator("mark#cited")).to_contain_text("suspend")
    page.click("a.original-link")
    page.wait_for_url(re.compile(r"/apidocs/StopWatch\.html#suspend\(\)$"))


@pytest.mark.slow
def test_a_git_sync_added_in_the_admin_keeps_answers_in_step(
    transactional_db, live_server, page: Page, settings, tmp_path
):
    """Issue #30: an admin adds a Git sync source, syncs it, staff ask; the
    repository changes, it is synced again, and the answer and its citation
    follow the new text."""
    from kb.benchmarks.sync import GitOrigin
    from tests.base import forget_jobs, run_burst_worker

    forget_jobs()
    _superuser()
    handbook = Collection.objects.create(name="Handbook")
    settings.KB_SYNC_ROOTS = [str(tmp_path)]
    settings.KB_SYNC_DIR = tmp_path / "mirrors"
    worker_env = {"KB_SYNC_ROOTS": str(tmp_path), "KB_SYNC_DIR": str(tmp_path / "m")}
    origin = GitOrigin(tmp_path)
    origin.commit(
        {
            "ops/backups.md": "# Backups\n\nBackups run every night at "
            "02:00 and are kept for 35 days.\n"
        }
    )

    _log_in(page, live_server, "/admin/kb/syncsource/add/")
    page.fill("#id_name", "handbook-repo")
    page.select_option("#id_collection", str(handbook.pk))
    page.select_option("#id_kind", "git")
    page.fill("#id_location", str(origin.bare))
    page.fill("#id_branch", "main")
    page.click("input[name=_save]")
    expect(page.locator("ul.messagelist")).to_contain_text("handbook-repo")

    def sync_now():
        page.goto(f"{live_server.url}/admin/kb/syncsource/")
        page.locator("input[name=_selected_action]").first.check()
        page.select_option("select[name=action]", "sync_now")
        page.click("button[name=index]")
        expect(page.locator("ul.messagelist")).to_contain_text("1 sync queued")
        run_burst_worker("large", env=worker_env)

    def ask(question: str) -> str:
        page.goto(f"{live_server.url}/")
        _ask(page, question, handbook)
        expect(page.locator("#answer")).to_be_visible()
        return _squash(page.locator("#answer").inner_text())

    sync_now()
    assert "02:00" in ask("When do backups run?")
    expect(page.locator("ol.citations li").first).to_contain_text("ops/backups.md")

    origin.commit(
        {
            "ops/backups.md": "# Backups\n\nBackups run every night at "
            "03:30 and are kept for 90 days.\n"
        }
    )
    sync_now()
    page.goto(f"{live_server.url}/admin/kb/syncsource/")
    expect(page.locator("#result_list")).to_contain_text("Done")
    answer = ask("When do backups run?")
    assert "03:30" in answer and "02:00" not in answer
    page.locator("#answer a.cite").first.click()
    page.wait_for_url(re.compile(r"/kb/sections/\d+/\?.*#cited$"))
    expect(page.locator("mark#cited")).to_contain_text("03:30")
