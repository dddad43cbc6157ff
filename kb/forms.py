"""Forms: raw admin input -> domain values, with the reason when refused."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput
from django.template.defaultfilters import filesizeformat
from django.utils.text import format_lazy
from django.utils.translation import gettext, gettext_lazy

from kb import (
    chunking,
    decoding,
    golden,
    index_config,
    ingestion,
    jsontext,
    metadata,
    parsing,
    ratelimit,
    retrieval,
    uploads,
)
from kb.models import Collection, GoldenCase, Source, SyncSource

# An id read from a query string or JSON: ASCII digits, within PostgreSQL's bigint
# (int() takes "²" and "١" and refuses over 4,300 digits).
MAX_ID_DIGITS = 18
# Retrieval settings of a collection (CollectionForm) or a run (EvalRunForm).
MAX_TOP_K = 50  # sections
MIN_CONTEXT = 50  # tokens: a smaller context holds no answer
MAX_CONTEXT = 20_000  # tokens
# Fixed-size chunks an experiment run may try: the fixed-size baseline exceeds the
# model's window on purpose (evaluation only: ingestion.prepare lets it through).
MAX_RUN_CHUNK_TOKENS = 2000


def parse_id(value: object) -> int | None:
    """The id `value` spells, or None when it is not one."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        if len(value) <= MAX_ID_DIGITS:
            return int(value)
    return None


def is_utf8(text: str) -> bool:
    """False for a lone surrogate ("\\ud800" in JSON): PostgreSQL cannot store it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable_note(text: str) -> str:
    """A note as typed, or ValidationError with the reason PostgreSQL could not
    store it (a lone surrogate: a form posted as UTF-7 can carry one), as a
    question is refused (retrieval.unstorable)."""
    if problem := retrieval.unstorable(text):
        raise ValidationError(
            gettext("The note contains %(problem)s; remove it.") % {"problem": problem}
        )
    return text


class NoteInput(forms.Textarea):
    """A note shown back as valid UTF-8 (a lone surrogate as U+FFFD) when it is
    refused: the page could not be encoded with the note as posted."""

    def format_value(self, value: Any) -> str | None:
        value = super().format_value(value)
        return value and retrieval.SURROGATE_RE.sub("\ufffd", value)


def readable_errors(form: forms.Form) -> str:
    """A form's errors as sentences for a message, each after its field's label:
    "Chunk tokens: Ensure this value is less than or equal to 2000."."""
    said = []
    for name, errors in form.errors.items():
        label = f"{form[name].label}: " if name in form.fields else ""
        said.extend(f"{label}{error}" for error in errors)
    return " ".join(said)


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    widget = MultipleFileInput
    default_error_messages = {"required": gettext_lazy("Choose at least one file.")}

    def clean(self, data: Any, initial: Any = None) -> list:
        single = super().clean
        files = list(data) if isinstance(data, (list, tuple)) else [data]
        files = [f for f in files if f]
        if not files and self.required:  # an empty list is no file either
            raise ValidationError(self.error_messages["required"], code="required")
        return [single(f, initial) for f in files]


class MetadataFieldsMixin(forms.Form):
    """The editable metadata of a source; `metadata_value()` builds the JSON."""

    author = forms.CharField(
        required=False, max_length=200, label=gettext_lazy("Author")
    )
    tags = forms.CharField(
        required=False,
        label=gettext_lazy("Tags"),
        help_text=gettext_lazy("Comma-separated."),
    )
    url = forms.URLField(required=False, label="URL", assume_scheme="https")
    # Not "version": the source form is a ModelForm of Source, whose own `version`
    # is the index's edit counter.
    doc_version = forms.CharField(
        required=False,
        max_length=50,
        label=gettext_lazy("Version"),
        help_text=gettext_lazy("E.g. 2.0-beta."),
    )
    deprecated = forms.BooleanField(required=False, label=gettext_lazy("Deprecated"))
    extra = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        label=gettext_lazy("Other fields"),
        help_text=gettext_lazy("One key=value per line, e.g. team=payments."),
    )

    def clean_extra(self) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for lineno, line in enumerate(self.cleaned_data["extra"].splitlines(), 1):
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            key = key.strip().lower().replace(" ", "_")
            if not sep or not key.isidentifier():
                raise ValidationError(
                    gettext("Line %(line)d: write key=value (got %(text)r)")
                    % {"line": lineno, "text": line}
                )
            if key in metadata.BUILTIN_FIELDS and key not in metadata.FOUND_FIELDS:
                raise ValidationError(
                    gettext("Line %(line)d: %(key)s has its own field above")
                    % {"line": lineno, "key": key}
                )
            pairs[key] = value.strip()
        return pairs

    def metadata_value(self) -> dict[str, Any]:
        data = self.cleaned_data
        tags = [t.strip() for t in data.get("tags", "").split(",") if t.strip()]
        values = {
            "author": data.get("author", ""),
            "tags": tags,
            "url": data.get("url", ""),
            "version": data.get("doc_version", ""),
            "deprecated": bool(data.get("deprecated")),
            **data.get("extra", {}),
        }
        return {k: v for k, v in values.items() if v not in ("", [], False)}

    @staticmethod
    def initial_from(meta: dict[str, Any]) -> dict[str, Any]:
        extra = {k: v for k, v in meta.items() if k not in metadata.SOURCE_FIELDS}
        return {
            "author": meta.get("author", ""),
            "tags": ", ".join(meta.get("tags", [])),
            "url": meta.get("url", ""),
            "doc_version": meta.get("version", ""),
            "deprecated": bool(meta.get("deprecated")),
            "extra": "\n".join(f"{k}={v}" for k, v in extra.items()),
        }


class SourceUploadForm(MetadataFieldsMixin):
    collection = forms.ModelChoiceField(
        queryset=Collection.objects.filter(is_scratch=False),
        label=gettext_lazy("Collection"),
    )
    files = MultipleFileField(
        label=gettext_lazy("Files"),
        help_text=gettext_lazy(
            "One or several .md, .markdown, .txt, .html, .htm, .docx or .pdf files."
        ),
        allow_empty_file=True,  # refused in clean_files, which names the file
    )
    title = forms.CharField(
        required=False,
        max_length=300,
        label=gettext_lazy("Title"),
        help_text=gettext_lazy(
            "Only for a single file; otherwise taken from each document. "
            "Left empty, a new version of a file keeps a title an editor gave it."
        ),
    )
    replace = forms.BooleanField(
        required=False,
        label=gettext_lazy("Clear fields left empty"),
        help_text=gettext_lazy(
            "A file of the same name as one in the collection is its new "
            "version, and the fields above left empty keep what the source has "
            "(a filled one replaces its value; key= with nothing after it removes an "
            "other field). Tick this to clear them instead: the metadata becomes what "
            "is filled in above, and without a title the document's own is taken."
        ),
    )

    field_order = ["collection", "files", "title"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["deprecated"].help_text = (
            "Left unticked, a new version keeps what its source has; to clear it, "
            "tick Clear fields left empty (or edit the source)."
        )
        self.fields["extra"].help_text += " On a new version, key= removes it."
        # Each file refused, with its reason: the others are stored (issue #26).
        self.refused: list[str] = []

    def refuse_names(self, names: list[str]) -> None:
        """Refuse the files the request's parser dropped, their names not being
        UTF-8 (kb/multipart.py), each with its reason: then the upload is not
        one without files, even if no other file came."""
        for name in names:
            try:
                uploads.clean_file_name(name)
            except ingestion.IngestionError as exc:
                self.refused.append(str(exc))
        self.fields["files"].required = not self.refused

    def refuse_files(self, message: str) -> None:
        """Show `message` under the files of an upload refused before its fields
        were read (kb/middleware.py): the form stays unbound, its fields empty."""
        self.cleaned_data = {}  # what add_error removes the field from
        self.add_error("files", message)

    def metadata_changes(self) -> dict[str, Any]:
        """What the upload sets over a source's stored metadata (ingestion
        store_checked): the fields filled in, and None for each other field
        written as key= (removed)."""
        extra = self.cleaned_data.get("extra", {})
        return {**{k: None for k, v in extra.items() if not v}, **self.metadata_value()}

    def clean_files(self) -> list[uploads.Upload]:
        """Read and check every file: those refused go to `refused` with their
        reasons and the others are stored; refused only when none is left."""
        uploads = self.cleaned_data["files"]
        _refuse_same_names(uploads)
        cleaned = []
        for upload in uploads:
            try:
                cleaned.append(_checked_upload(upload))
            except (ingestion.IngestionError, parsing.ParseError) as exc:
                self.refused.append(str(exc))
        if not cleaned:
            raise ValidationError(self.refused)
        return cleaned

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("collection") and data.get("files"):
            data["files"] = self._not_synced(data["collection"], data["files"])
        if data.get("title") and len(data.get("files") or []) > 1:
            self.add_error("title", gettext("A title applies to a single file only."))
        return data

    def _not_synced(
        self, collection: Collection, files: list[uploads.Upload]
    ) -> list[uploads.Upload]:
        """The files that are no source a sync keeps in step; the others go to
        `refused` with the reason, and the field fails when none is left."""
        synced = uploads.synced_names(collection, [f.file_name for f in files])
        kept = [f for f in files if f.file_name not in synced]
        self.refused += [
            uploads.synced_refusal(name, sync) for name, sync in synced.items()
        ]
        if not kept:
            self.add_error("files", self.refused)
        return kept


class CollectionForm(forms.ModelForm):
    """A collection's settings, refused when no index or answer could be built."""

    class Meta:
        model = Collection
        fields = "__all__"
        # The same words whether or not the editor may see the collection that
        # holds the name: the refusal names no collection and says nothing of it.
        error_messages = {
            "name": {
                "unique": gettext_lazy("This name cannot be used; choose another.")
            }
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The fixed-size strategy is the evaluation's baseline, not a way to index
        # a live collection (issue #26): offered only where it is already set.
        if floor_on := self.fields.get("floor_on"):
            floor_on.required = False
        field = self.fields.get("chunk_strategy")
        if field and self.instance.chunk_strategy != Collection.Strategy.FIXED:
            field.choices = [
                c for c in field.choices if c[0] != Collection.Strategy.FIXED
            ]

    def clean_floor_on(self) -> str:
        """Left out (a form or script that predates it): as it was."""
        return self.cleaned_data.get("floor_on") or self.instance.floor_on

    def clean_top_k(self) -> int:
        value = self.cleaned_data["top_k"]
        if not 1 <= value <= MAX_TOP_K:
            raise ValidationError(
                gettext("Take 1 to %(max)d sections.") % {"max": MAX_TOP_K}
            )
        return value

    def clean_context_budget(self) -> int:
        value = self.cleaned_data["context_budget"]
        if value < MIN_CONTEXT:
            raise ValidationError(
                gettext("A context of under %(min)d tokens holds no answer.")
                % {"min": MIN_CONTEXT}
            )
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        tokens, overlap = data.get("chunk_tokens"), data.get("chunk_overlap")
        model = data.get("embedding_model") or self.instance.embedding_model
        if tokens is not None:
            for field, message in chunking_errors(tokens, overlap, model).items():
                self.add_error(field, message)
        return data


def chunking_errors(
    tokens: int, overlap: int | None, model: str, *, fixed_size: bool = False
) -> dict[str, str]:
    """Why chunks of `tokens` with `overlap` are refused, by field ({}: they are
    not), for a collection and for an experiment run alike: chunks of MIN_BUDGET
    to the usable window of `model` (its special tokens and passage prompt
    left out), an overlap of at most half a chunk (chunking
    caps it there, so more would label the index or run with an overlap it was
    not built with). `fixed_size`: an experiment's fixed-size chunks, which may
    exceed the window (up to MAX_RUN_CHUNK_TOKENS)."""
    from kb import embedding

    embedder = embedding.get_embedder(model)
    usable = embedder.usable_window
    if fixed_size and not chunking.MIN_BUDGET <= tokens <= MAX_RUN_CHUNK_TOKENS:
        return {
            "chunk_tokens": gettext("Fixed-size chunks need %(min)d to %(max)d tokens.")
            % {"min": chunking.MIN_BUDGET, "max": MAX_RUN_CHUNK_TOKENS}
        }
    if not fixed_size and not chunking.MIN_BUDGET <= tokens <= usable:
        if embedder.passage_prefix:
            text = gettext(
                "Chunks need %(min)d to %(max)d tokens: the model reads %(max)d "
                "besides [CLS] and [SEP] and its passage prompt, and nothing past "
                "that reaches the vector."
            )
        else:
            text = gettext(
                "Chunks need %(min)d to %(max)d tokens: the model reads %(max)d "
                "besides [CLS] and [SEP], and nothing past that reaches the vector."
            )
        return {"chunk_tokens": text % {"min": chunking.MIN_BUDGET, "max": usable}}
    if overlap is not None and overlap * 2 > tokens:
        return {
            "chunk_overlap": gettext(
                "An overlap of %(overlap)d tokens is over half of a %(tokens)d-token "
                "chunk: most of the index would be repeats."
            )
            % {"overlap": overlap, "tokens": tokens}
        }
    return {}


def _checked_upload(upload) -> uploads.Upload:
    name = uploads.clean_file_name(upload.name)
    limit = settings.KB_MAX_UPLOAD_BYTES
    if upload.size > limit:
        raise ingestion.IngestionError(
            gettext("%(file)s is %(size)s; the limit is %(limit)s")
            % {
                "file": name,
                "size": filesizeformat(upload.size),
                "limit": filesizeformat(limit),
            }
        )
    return uploads.check_upload(name, upload.read())


def _refuse_same_names(uploads: list) -> None:
    """Uploads arrive by base name (Django drops folders): two index.md, one source."""
    counts = Counter(upload.name for upload in uploads)
    same = [
        gettext("%(file)s (%(count)d files)") % {"file": name, "count": n}
        for name, n in sorted(counts.items())
        if n > 1
    ]
    if same:
        raise ValidationError(
            gettext(
                "%(files)s: files of the same name would replace each other; "
                "rename them or upload them into separate collections"
            )
            % {"files": ", ".join(same)}
        )


class SourceChangeForm(MetadataFieldsMixin, forms.ModelForm):
    class Meta:
        model = Source
        fields = ["title", "language", "text"]
        widgets = {"text": forms.Textarea(attrs={"rows": 20, "cols": 100})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "text" in self.fields:  # as shown: stripped, it would be a new text
            self.fields["text"].strip = False
        if self.instance.pk:
            for key, value in self.initial_from(self.instance.metadata).items():
                self.initial.setdefault(key, value)

    def clean_text(self) -> str:
        text = decoding.normalise_newlines(self.cleaned_data["text"])
        if not text.strip():
            raise ValidationError(gettext("The text is empty."))
        return text


class PolicyForm(forms.Form):
    """One row per metadata field: embed, retrieve or ignore."""

    def __init__(self, *args: Any, policy: metadata.Policy, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, decision in policy.decisions.items():
            self.fields[name] = forms.ChoiceField(
                choices=metadata.CHOICES,
                initial=decision,
                widget=forms.RadioSelect,
                label=metadata.label(name),
            )

    def rows(self) -> list[tuple[str, forms.BoundField]]:
        return [(name, self[name]) for name in self.fields]


class LoginForm(AdminAuthenticationForm):
    """The admin's login, refused while its user name or address is locked out
    (kb/ratelimit.py), before the password is hashed: locked attempts cost no CPU
    and the right password is refused too."""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        if username is not None:
            if wait := ratelimit.login_locked_for(username, self.request):
                raise ValidationError(ratelimit.login_message(wait), code="locked")
        return super().clean()


class AskForm(forms.Form):
    q = forms.CharField(
        label=gettext_lazy("Question"),
        max_length=retrieval.MAX_QUESTION_CHARS,
        widget=forms.TextInput(
            attrs={
                "autofocus": True,
                "size": 60,
                "placeholder": gettext_lazy("Ask a question"),
            }
        ),
    )
    collection = forms.ModelChoiceField(
        queryset=Collection.objects.none(), label=gettext_lazy("Collection")
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # clean_q checks length and NUL characters with the API's messages; the
        # field's own validators would say it otherwise, first.
        self.fields["q"].validators = []
        visible = Collection.objects.visible_to(user).order_by("name")
        self.fields["collection"].queryset = visible
        if visible.count() == 1:
            only = visible.first()
            self.fields["collection"].initial = only
            # A question linked or typed without one asks the only collection.
            if self.is_bound and not self.data.get("collection"):
                self.data = self.data.copy()
                self.data["collection"] = str(only.pk)

    def clean_q(self) -> str:
        try:
            return retrieval.clean_question(self.cleaned_data["q"])
        except retrieval.QuestionError as exc:
            raise ValidationError(str(exc)) from None


class FeedbackForm(forms.Form):
    """Helpful or not, and a note, under an answer on the ask page."""

    helpful = forms.TypedChoiceField(
        choices=[("yes", gettext_lazy("Helpful")), ("no", gettext_lazy("Not helpful"))],
        coerce=lambda value: value == "yes",
        widget=forms.RadioSelect,
        label=gettext_lazy("Was this answer helpful?"),
    )
    note = forms.CharField(
        required=False,
        max_length=2000,
        widget=NoteInput(attrs={"rows": 2, "cols": 60}),
        label=gettext_lazy("Note (optional)"),
        help_text=gettext_lazy("What was missing or wrong? Editors read these."),
    )

    def clean_note(self) -> str:
        return storable_note(self.cleaned_data["note"])


class GapHandledForm(forms.Form):
    """ "Mark handled" on the content gaps page: the group's entries and a note."""

    ids = forms.CharField(widget=forms.HiddenInput, label=gettext_lazy("Questions"))
    note = forms.CharField(
        required=False,
        max_length=2000,
        label=gettext_lazy("Note"),
        widget=forms.TextInput(attrs={"size": 40}),
    )

    def clean_note(self) -> str:
        return storable_note(self.cleaned_data["note"])

    def clean_ids(self) -> list[int]:
        ids = [parse_id(part) for part in self.cleaned_data["ids"].split(",")]
        if not ids or None in ids or len(ids) > 1000:
            raise ValidationError(gettext("Not logged question ids, comma-separated."))
        return ids


class EvalRunForm(forms.Form):
    """The dashboard's button: evaluate now, optionally under other settings."""

    collection = forms.ModelChoiceField(
        queryset=Collection.objects.filter(is_scratch=False), widget=forms.HiddenInput
    )
    strategy = forms.ChoiceField(
        required=False,
        choices=[
            ("", gettext_lazy("(as configured)")),
            (retrieval.DEFAULT, gettext_lazy("Default pipeline")),
            (
                retrieval.SECTIONS,
                format_lazy(
                    gettext_lazy(
                        "Simple baseline: {tokens}-token chunks, "
                        "{k} best whole sections"
                    ),
                    tokens=retrieval.SECTIONS_CHUNK_TOKENS,
                    k=retrieval.SECTIONS_K,
                ),
            ),
            (
                retrieval.FIXED,
                format_lazy(
                    gettext_lazy("Fixed-size baseline: {tokens}-token chunks, top k"),
                    tokens=retrieval.FIXED_CHUNK_TOKENS,
                ),
            ),
        ],
        label=gettext_lazy("Pipeline"),
        help_text=gettext_lazy("A baseline is indexed on a scratch copy for the run."),
    )
    chunk_strategy = forms.ChoiceField(
        required=False,
        choices=[("", gettext_lazy("(as configured)")), *Collection.Strategy.choices],
        label=gettext_lazy("Strategy"),
    )
    chunk_tokens = forms.IntegerField(
        required=False, label=gettext_lazy("Chunk tokens")
    )
    chunk_overlap = forms.IntegerField(
        required=False, min_value=0, label=gettext_lazy("Overlap")
    )
    top_k = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_TOP_K, label="k"
    )
    context_budget = forms.IntegerField(
        required=False,
        min_value=MIN_CONTEXT,
        max_value=MAX_CONTEXT,
        label=gettext_lazy("Context budget"),
    )
    retrieval_mode = forms.ChoiceField(
        required=False,
        choices=[("", gettext_lazy("(as configured)")), *Collection.Retrieval.choices],
        label=gettext_lazy("Retrieval"),
    )
    late_interaction = forms.BooleanField(
        required=False,
        label=gettext_lazy("Late interaction"),
        help_text=gettext_lazy(
            "Reorder the top sections by the model's token states "
            "(KB_LATE_INTERACTION): slower, about a second a question."
        ),
    )

    def clean(self) -> dict[str, Any]:
        """Chunking tried on a scratch copy obeys the collection form's rules
        (chunking_errors), applied to what the copy would be built with: the
        fields given, the pipeline's chunking, the collection's settings."""
        data = super().clean()
        collection = data.get("collection")
        asked = [f for f in ("strategy", *index_config.INDEX_FIELDS) if data.get(f)]
        if collection is None or not asked or self.errors:
            return data
        built = {**data, **self._strategy_settings()}
        value = {
            field: getattr(collection, field)
            if built.get(field) in (None, "")
            else built[field]
            for field in index_config.INDEX_FIELDS
        }
        fixed = value["chunk_strategy"] == Collection.Strategy.FIXED
        errors = chunking_errors(
            value["chunk_tokens"],
            value["chunk_overlap"],
            value["embedding_model"],
            fixed_size=fixed,
        )
        for field, message in errors.items():
            # The value may be the collection's: then on what made it wrong.
            self.add_error(field if field in asked else asked[-1], message)
        return data

    def overrides(self) -> dict[str, Any]:
        """Settings that differ from the collection's own (they need a scratch copy)."""
        collection = self.cleaned_data["collection"]
        data = {**self.cleaned_data, **self._strategy_settings()}
        found = {
            name: value
            for name, value in data.items()
            if name not in ("collection", "strategy", "late_interaction")
            and value not in (None, "")
            and value != getattr(collection, name)
        }
        if data.get("strategy") == retrieval.SECTIONS:  # a packing, not a field
            found["strategy"] = retrieval.SECTIONS
        if data.get("late_interaction") and not settings.KB_LATE_INTERACTION:
            found["late_interaction"] = True  # a stage, not a field
        return found

    def _strategy_settings(self) -> dict[str, Any]:
        """The chunking a named pipeline is built on, unless given explicitly."""
        from kb import evaluation

        data = self.cleaned_data
        return evaluation.strategy_chunking(
            data.get("strategy"), data.get("chunk_tokens")
        )


class JSONInputField(forms.JSONField):
    """Django's JSONField, refusing JSON nested too deeply or holding a number
    too long to read with the reason (kb.jsontext) instead of a 500."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and value not in self.empty_values:
            try:
                jsontext.loads(value)
            except jsontext.JsonError as exc:
                raise ValidationError(
                    gettext("The JSON %(problem)s.") % {"problem": exc}, code="invalid"
                ) from None
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except (RecursionError, ValueError):  # shown again as typed
            return InvalidJSONInput(data)


class GoldenCaseForm(forms.ModelForm):
    """Spans as JSON, checked against the sources' text on save."""

    class Meta:
        model = GoldenCase
        fields = [
            "collection",
            "external_id",
            "question",
            "kind",
            "required_spans",
            "on_answer",
            "from_question",
        ]
        widgets = {
            "required_spans": forms.Textarea(attrs={"rows": 8, "cols": 90}),
            # Set by "make a golden case" on the content gaps page.
            "from_question": forms.HiddenInput,
        }
        field_classes = {"required_spans": JSONInputField}
        help_texts = {
            "required_spans": "Fill it with the span picker below (choose the "
            "collection, a source, select the evidence, add it), or write the JSON. "
            "When a source's text changes, each span whose text still occurs "
            "exactly once in it moves to its new offsets as the new text is "
            "indexed; any other is flagged as no longer matching its source."
        }

    def clean_question(self) -> str:
        from kb.retrieval import QuestionError, check_question

        try:  # a run would fail on a question the ask path refuses
            check_question(
                self.cleaned_data["question"], self.cleaned_data.get("collection")
            )
        except QuestionError as exc:
            raise ValidationError(str(exc)) from None
        return self.cleaned_data["question"].strip()

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        collection = data.get("collection")
        asked = data.get("from_question")
        if (
            asked is not None
            and collection is not None
            and asked.collection_id != (collection.pk)
        ):
            self.add_error(
                "collection", gettext("The question was asked in another one.")
            )
        if collection is None or "required_spans" not in data:
            return data
        raw = {
            "id": data.get("external_id") or "new case",
            "question": data.get("question") or "?",
            "kind": data.get("kind"),
            "required_spans": data["required_spans"],
        }
        try:
            case = golden.parse_case(raw)
            golden.check_spans(collection, [case])
        except golden.GoldenImportError as exc:
            self.add_error("required_spans", str(exc))
            return data
        data["required_spans"] = case["required_spans"]
        return data


class GoldenImportForm(forms.Form):
    collection = forms.ModelChoiceField(
        queryset=Collection.objects.filter(is_scratch=False)
    )
    file = forms.FileField(
        label=gettext_lazy("File"),
        help_text=gettext_lazy("JSON Lines: one case per line."),
    )

    def clean_file(self) -> str:
        upload, limit = self.cleaned_data["file"], settings.KB_MAX_GOLDEN_BYTES
        if upload.size > limit:  # refused before reading it
            raise ValidationError(
                gettext(
                    "The file is %(size)s; golden cases are limited to %(limit)s "
                    "(KB_MAX_GOLDEN_BYTES)."
                )
                % {"size": filesizeformat(upload.size), "limit": filesizeformat(limit)}
            )
        data = upload.read()
        try:  # utf-8-sig: Windows editors start UTF-8 files with a byte order mark
            return data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ValidationError(gettext("The file is not UTF-8 text.")) from None


class SyncSourceForm(forms.ModelForm):
    """A sync source as the admin edits it: the location checked where it can
    be without reading it (a folder under KB_SYNC_ROOTS, a Git URL's scheme),
    and a token or deploy key that is only ever written: stored encrypted,
    never shown (a deploy key's public line is)."""

    token = forms.CharField(
        label=gettext_lazy("token"),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=gettext_lazy(
            "Git over https: an access token with read rights. Stored encrypted "
            "and never shown again; leave blank to keep the one stored."
        ),
    )
    forget_token = forms.BooleanField(
        label=gettext_lazy("forget the stored token"), required=False
    )
    deploy_key = forms.CharField(
        label=gettext_lazy("deploy key"),
        required=False,
        strip=True,
        widget=forms.Textarea(
            attrs={"rows": 4, "autocomplete": "off", "spellcheck": "false"}
        ),
        help_text=gettext_lazy(
            "Git over SSH: the private key of a deploy key with read rights, "
            "without a passphrase. Stored encrypted and never shown again (its "
            "public line is, to register with the repository); leave blank to "
            "keep the one stored."
        ),
    )
    forget_deploy_key = forms.BooleanField(
        label=gettext_lazy("forget the stored deploy key"), required=False
    )

    class Meta:
        model = SyncSource
        fields = [
            "name",
            "collection",
            "kind",
            "location",
            "branch",
            "subfolder",
            "username",
            "link_template",
            "url_prefix",
            "page_limit",
            "include",
            "exclude",
            "every_minutes",
            "keep_deleted",
        ]

    def clean(self):
        from kb.sync import secrets
        from kb.sync.origins import OriginError, check_location

        data = super().clean()
        try:
            check_location(data.get("kind") or "", data.get("location") or "")
        except OriginError as exc:
            self.add_error("location", str(exc))
        if key := data.get("deploy_key"):
            try:
                self.deploy_key_public = secrets.deploy_key_public(key)
            except secrets.SecretError as exc:
                self.add_error("deploy_key", str(exc))
        return data

    def save(self, commit: bool = True):
        from kb.sync import secrets

        sync = super().save(commit=False)
        if self.cleaned_data.get("forget_token"):
            sync.token_sealed = ""
        elif token := self.cleaned_data.get("token"):
            sync.token_sealed = secrets.seal(token)
        if self.cleaned_data.get("forget_deploy_key"):
            sync.deploy_key_sealed = sync.deploy_key_public = ""
        elif key := self.cleaned_data.get("deploy_key"):
            sync.deploy_key_sealed = secrets.seal(key)
            sync.deploy_key_public = self.deploy_key_public
        if commit:
            sync.save()
        return sync
