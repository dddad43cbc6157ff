from django.apps import AppConfig
from django.conf import settings
from django.core import checks


class KbConfig(AppConfig):
    name = "kb"
    verbose_name = "Knowledge base"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from kb import (
            access,  # noqa: F401  (its signals revoke tokens)
            queueing,  # noqa: F401  (its receiver recounts words after a deletion)
            ratelimit,  # noqa: F401  (its receivers count failed logins)
        )

        checks.register(check_llm_url)
        checks.register(check_reranker)
        checks.register(check_extra_models)
        checks.register(check_model_floors)


def check_llm_url(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """The LLM answerer gets the API key and the questions: TLS unless loopback."""
    from kb.llm import url_problem

    if not settings.KB_LLM_URL:
        return []
    if problem := url_problem(settings.KB_LLM_URL):
        return [checks.Error(problem, id="kb.E001")]
    return []


def check_reranker(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """KB_RERANKER_DIR, when set, holds a cross-encoder's model.onnx and
    tokenizer.json (kb/retrieval/reranking.py)."""
    from kb.retrieval.reranking import missing_files

    if not settings.KB_RERANKER_DIR:
        return []
    return [
        checks.Error(problem, hint="unset it to run without reranking", id="kb.E002")
        for problem in missing_files(settings.KB_RERANKER_DIR)
    ]


def check_extra_models(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Each folder of KB_EXTRA_MODELS is a model kb can build (a BERT encoder,
    mean pooling, 384 dimensions: kb/embedding_models.py)."""
    from django.core.exceptions import ImproperlyConfigured

    from kb import embedding_models

    try:
        folders = embedding_models.extra_folders()
    except ImproperlyConfigured as error:
        return [checks.Error(str(error), id="kb.E003")]
    problems = []
    for directory in folders.values():
        try:
            embedding_models.folder_source(directory)
        except ImproperlyConfigured as error:
            problems.append(
                checks.Error(
                    str(error), hint="remove it from KB_EXTRA_MODELS", id="kb.E003"
                )
            )
    return problems


def check_model_floors(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """KB_MODEL_FLOORS names models kb knows (not the default, whose floor is
    KB_MIN_SIMILARITY); a folder of KB_EXTRA_MODELS without a floor is named,
    as its collections answer every question, however far off."""
    from django.core.exceptions import ImproperlyConfigured

    from kb import embedding_models

    try:
        known = embedding_models.names()
    except ImproperlyConfigured:
        return []  # check_extra_models says why
    problems: list[checks.CheckMessage] = []
    for name in settings.KB_MODEL_FLOORS:
        if name == embedding_models.DEFAULT:
            problems.append(
                checks.Error(
                    f"KB_MODEL_FLOORS names {name!r}, the default model",
                    hint="set its floor with KB_MIN_SIMILARITY",
                    id="kb.E004",
                )
            )
        elif name not in known:
            problems.append(
                checks.Error(
                    f"KB_MODEL_FLOORS names {name!r}, which is no embedding model",
                    hint=f"known: {', '.join(known)}",
                    id="kb.E004",
                )
            )
    for name in embedding_models.extra_folders():
        if not embedding_models.min_similarity(name):
            problems.append(
                checks.Warning(
                    f"the off-topic floor of model {name!r} is off: its "
                    "collections answer every question, however far off",
                    hint=f"measure it (kb_eval --unanswerable) and set "
                    f"KB_MODEL_FLOORS={name}=<floor>",
                    id="kb.W004",
                )
            )
    return problems
