"""Django settings: the one place that reads the environment; a bad value stops startup and names the variable.

With no DATABASE_URL and no CELERY_BROKER_URL the platform runs on a fresh machine: SQLite and Celery's
filesystem transport, both under INSPO_STATE_DIR. With them set it uses PostgreSQL and Redis.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parents[2]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected an integer") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r}: must be ≥ {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_path(name: str, default: Path) -> Path:
    raw = os.environ.get(name)
    path = Path(raw) if raw else default
    return path if path.is_absolute() else BASE_DIR / path


def env_json(name: str, default: Any) -> Any:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise ImproperlyConfigured(f"{name}: not valid JSON ({error})") from None


# -- where things live ------------------------------------------------------------------------------------------

STATE_DIR = env_path("INSPO_STATE_DIR", BASE_DIR / "var")
"""SQLite database, the embedded broker's folders, the generated secret key."""
INSPO_CACHE_DIR = env_path("INSPO_CACHE_DIR", BASE_DIR / "cache")
"""Models and retrieval indexes shared by every run (the engine's cache_dir)."""
INSPO_RUNS_DIR = env_path("INSPO_RUNS_DIR", BASE_DIR / "runs")
"""Each run writes under INSPO_RUNS_DIR/<run uuid>: checkpoints and the engine's own files."""
INSPO_DATA_DIR = env_path("INSPO_DATA_DIR", BASE_DIR / "data")
"""Datasets, corpora and models that configs may name: each team's under teams/<team id>/ (relative paths resolve
there), shared ones under INSPO_SHARED_DATA_DIR; paths anywhere else are refused."""
INSPO_ARCHIVE_DIR = env_path("INSPO_ARCHIVE_DIR", STATE_DIR / "archives")
"""Checkpoint archives, each built once on its first download and then sent as a file (see INSPO_ARCHIVE_SERVE)."""
INSPO_DOCS_DIR = env_path("INSPO_DOCS_DIR", BASE_DIR / "site")
"""The built documentation site (`make docs`, which `make run` runs), served to everyone at /docs/: only files inside
this folder, never one a link leads out of it. Not built: /docs/ answers 404 with a page that says how to build it."""
STATE_DIR.mkdir(parents=True, exist_ok=True)


# -- retrieval --------------------------------------------------------------------------------------------------

INSPO_RETRIEVAL_URL = env_str("INSPO_RETRIEVAL_URL", "").rstrip("/")
"""The retrieval service runs search through (`manage.py retrieval_service`; `make run` and docker-compose start one
and set this). Empty: each run searches its corpus's on-disk index in its own process. An operator's address: runs
reach it without the retriever host allow-list, which confines only URLs that users choose."""
INSPO_RETRIEVAL_HOST = env_str("INSPO_RETRIEVAL_HOST", "127.0.0.1")
"""The address `manage.py retrieval_service` binds (compose: 0.0.0.0, on its own network only)."""
INSPO_RETRIEVAL_PORT = env_int("INSPO_RETRIEVAL_PORT", 8100, minimum=1)
"""Where `manage.py retrieval_service` listens."""
INSPO_RETRIEVAL_WORKERS = env_int("INSPO_RETRIEVAL_WORKERS", 0)
"""Processes of `manage.py retrieval_service` sharing its port (0: one per core, at most 4). The Python part of a
search (HTTP, re-scoring) holds the interpreter's lock, one search at a time per process; each worker holds its own
copy of a dense index's codes (96 bytes a passage), while the index files' pages are shared."""
INSPO_RETRIEVAL_ENGINE = env_str("INSPO_RETRIEVAL_ENGINE", "embedded")
"""`embedded` (tantivy and faiss indexes under INSPO_CACHE_DIR/indexes) or `milvus` (a Milvus deployment at
INSPO_MILVUS_URI: index jobs write its collections and the service searches them)."""
if INSPO_RETRIEVAL_ENGINE not in ("embedded", "milvus"):
    raise ImproperlyConfigured("INSPO_RETRIEVAL_ENGINE: must be 'embedded' or 'milvus'")
INSPO_DENSE_INDEX_QUEUE = env_str("INSPO_DENSE_INDEX_QUEUE", "cpu")
"""Where dense index jobs encode their passages: `gpu` once the deployment has a GPU worker (it encodes on CUDA, in
batches), else `cpu`, where the Data page says how long it will take."""
if INSPO_DENSE_INDEX_QUEUE not in ("cpu", "gpu"):
    raise ImproperlyConfigured("INSPO_DENSE_INDEX_QUEUE: must be 'cpu' or 'gpu'")
INSPO_DENSE_CPU_PASSAGES_PER_S = env_int("INSPO_DENSE_CPU_PASSAGES_PER_S", 13, minimum=1)
"""The encoding rate a dense job on the cpu queue is estimated at before this deployment has finished one (13: the
shipped MiniLM on two busy cores, docs/benchmarks.md); afterwards, the rate its last finished cpu job measured."""
INSPO_MILVUS_URI = env_str("INSPO_MILVUS_URI", "")
INSPO_MILVUS_TOKEN = env_str("INSPO_MILVUS_TOKEN", "")
"""Milvus's address and token (user:password or an API key); the token is never shown or sent elsewhere."""
if INSPO_RETRIEVAL_ENGINE == "milvus" and not INSPO_MILVUS_URI:
    raise ImproperlyConfigured("INSPO_RETRIEVAL_ENGINE=milvus needs INSPO_MILVUS_URI")


def _secret_key() -> str:
    key = os.environ.get("DJANGO_SECRET_KEY")
    if key is not None:
        if len(key) < 32:
            raise ImproperlyConfigured("DJANGO_SECRET_KEY: must be at least 32 characters")
        return key
    path = STATE_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
X_FRAME_OPTIONS = "DENY"
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DJANGO_DATA_UPLOAD_MAX_MEMORY_SIZE", 2_621_440, minimum=1024)
FILE_UPLOAD_HANDLERS = ["webapp.data.uploads.BoundedUploadHandler"]
"""Every uploaded file goes to a temporary file (never held in memory), and one over INSPO_DATA_MAX_UPLOAD_BYTES is
dropped as it streams (a 413)."""
INSPO_DATA_MAX_UPLOAD_BYTES = env_int("INSPO_DATA_MAX_UPLOAD_BYTES", 1 << 30, minimum=1024)
"""The largest file a team may upload (compressed, for a .gz); past it a 413."""
INSPO_DATA_TEAM_MAX_BYTES = env_int("INSPO_DATA_TEAM_MAX_BYTES", 20 << 30, minimum=0)
"""What a team's datasets may hold in all (stored sizes); an upload past it is a 400. 0: no limit."""
INSPO_DATA_MAX_GZIP_RATIO = env_int("INSPO_DATA_MAX_GZIP_RATIO", 100, minimum=2)
"""How many times its compressed size a .gz upload may expand to (text compresses 3–10×; a bomb 1000×)."""
INSPO_DATA_MAX_LINE_BYTES = env_int("INSPO_DATA_MAX_LINE_BYTES", 1 << 20, minimum=1024)
"""The longest JSONL line an upload may have."""
"""The largest request body (bytes) read into memory; a larger one is refused, with 413 and a JSON message on the
API."""

# -- HTTPS, headers and rate limits -----------------------------------------------------------------------------

HTTPS = env_bool("DJANGO_HTTPS", False)
"""The site is served over HTTPS only, by a TLS proxy in front that sets X-Forwarded-Proto (docker-compose's
`proxy`): plain HTTP is redirected, HSTS is sent, cookies are secure. `manage.py check --deploy` passes with it."""
SECURE_SSL_REDIRECT = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", HTTPS)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", HTTPS)
SECURE_REFERRER_POLICY = "same-origin"

DEFAULT_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'"
)
CONTENT_SECURITY_POLICY = env_str("DJANGO_CONTENT_SECURITY_POLICY", DEFAULT_CONTENT_SECURITY_POLICY).strip()
"""Sent on every response (empty: none). Scripts only from the site's own files: the pages, the dashboards'
bundle and the API docs have no inline script; inline styles stay allowed (the charts' tooltips set them)."""

_RATE = re.compile(r"\d+/(s|sec|second|m|min|minute|h|hour|d|day)")


def env_rate(name: str, default: str) -> str | None:
    """A DRF throttle rate, 'N/s|m|h|d' (also /min, /hour, /day); 'off' turns that limit off."""
    raw = os.environ.get(name, default).strip()
    if raw.lower() == "off":
        return None
    if not _RATE.fullmatch(raw):
        raise ImproperlyConfigured(f"{name}={raw!r}: expected a rate such as 1200/min, or off")
    return raw


INSPO_API_RATE_USER = env_rate("INSPO_API_RATE_USER", "1200/min")
"""API requests one user (session or token) may make; beyond it a 429 with Retry-After and a JSON message."""
INSPO_API_RATE_ANON = env_rate("INSPO_API_RATE_ANON", "60/min")
"""Unauthenticated API requests one client address may make."""
NUM_PROXIES = env_int("DJANGO_NUM_PROXIES", 0)
"""Proxies in front of the app that append to X-Forwarded-For (docker-compose: 1). Rate limits count the address
that many hops back; with 0 the connection's own address, so a client cannot choose its address by a header."""
INSPO_SIGNIN_MAX_FAILURES = env_int("INSPO_SIGNIN_MAX_FAILURES", 5, minimum=1)
"""Failed sign-ins for one username from one address before that pair is refused for INSPO_SIGNIN_WINDOW_S."""
INSPO_SIGNIN_MAX_FAILURES_PER_ADDRESS = env_int("INSPO_SIGNIN_MAX_FAILURES_PER_ADDRESS", 50, minimum=1)
"""Failed sign-ins from one address, over all usernames, before the address is refused for the window."""
INSPO_SIGNIN_WINDOW_S = env_int("INSPO_SIGNIN_WINDOW_S", 900, minimum=1)

CACHE_URL = os.environ.get("DJANGO_CACHE_URL", "")
"""redis://… for a cache the web processes share (rate limits count across them); empty: each process its own."""
if CACHE_URL and not CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"DJANGO_CACHE_URL={CACHE_URL!r}: expected a redis:// URL or nothing")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
    if CACHE_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "inspo"}
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "webapp.accounts",
    "webapp.runs",
    "webapp.experiments",
    "webapp.data",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "webapp.core.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "webapp.config.urls"
WSGI_APPLICATION = "webapp.config.wsgi.application"
AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "runs:list"
LOGOUT_REDIRECT_URL = "accounts:login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "webapp" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "libraries": {"sizes": "webapp.core.templatetags.sizes"},  # binary_size: MiB where filesizeformat says MB
        },
    },
]

# -- database ---------------------------------------------------------------------------------------------------

DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    try:
        _database = dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60))
    except ValueError as error:
        raise ImproperlyConfigured(f"DATABASE_URL: {error}") from None
else:
    _database = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(STATE_DIR / "db.sqlite3"),
        # A web server and a worker write at once: wait for the lock, take it up front, let readers read.
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "webapp" / "static"]
STATIC_ROOT = env_path("DJANGO_STATIC_ROOT", BASE_DIR / "staticfiles")
INSPO_DATA_STORAGE_BACKEND = env_str("INSPO_DATA_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage")
"""Where uploaded datasets are stored (Django's storage API): the filesystem under INSPO_DATA_DIR/store by default, or
an S3-compatible object store (`storages.backends.s3.S3Storage`, django-storages; install boto3 beside it) so
workers on other machines read the same bytes."""
INSPO_DATA_STORAGE_OPTIONS: dict[str, Any] = env_json(
    "INSPO_DATA_STORAGE_OPTIONS", {"location": str(INSPO_DATA_DIR / "store")}
)
"""The storage's options: for S3 e.g. {"bucket_name": …, "endpoint_url": …, "access_key": …, "secret_key": …}."""
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "data": {"BACKEND": INSPO_DATA_STORAGE_BACKEND, "OPTIONS": INSPO_DATA_STORAGE_OPTIONS},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if env_bool("DJANGO_MANIFEST_STATIC", not DEBUG)
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("DJANGO_LOG_LEVEL", "INFO")},
}

# -- REST API ---------------------------------------------------------------------------------------------------

REST_FRAMEWORK = {
    # Token first: an anonymous API request gets 401 with a WWW-Authenticate header.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "webapp.accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["webapp.core.responses.FastJSONRenderer"],  # DRF's JSON, encoded by orjson
    "DEFAULT_PARSER_CLASSES": ["webapp.core.api.BoundedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "webapp.core.api.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {"anon": INSPO_API_RATE_ANON, "user": INSPO_API_RATE_USER},
    "NUM_PROXIES": NUM_PROXIES,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "INSPO platform API",
    "DESCRIPTION": "Submit INSPO training runs, follow their metrics and instruction lineage, download results.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "webapp.runs.models.Run.Status",
        "EvaluationRequestStatusEnum": "webapp.runs.models.EvaluationRequest.Status",
        "DatasetKindEnum": "webapp.data.models.Dataset.Kind",
        "IndexJobStatusEnum": "webapp.data.models.IndexJob.Status",
        "ReachCheckStatusEnum": "webapp.data.models.ReachCheck.Status",
        "ControlRequestKindEnum": "webapp.runs.models.ControlRequest.Kind",
        "LeakageKindEnum": ["exact", "near"],
        "LeakageStatusEnum": ["done", "checking", "failed"],
    },
    # Swagger UI's files come from the drf-spectacular-sidecar package, served as the site's static files.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# -- Celery -----------------------------------------------------------------------------------------------------

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
if CELERY_BROKER_URL:
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {}
else:
    # The embedded broker: kombu's filesystem transport. Producer and worker share one folder of messages.
    _broker = STATE_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        (_broker / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT = "webapp.config.broker:Transport"  # kombu's, taking messages in the order sent
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker / "queue"),
        "data_folder_out": str(_broker / "queue"),
        "processed_folder": str(_broker / "processed"),
        "control_folder": str(_broker / "control"),
        "store_processed": False,
    }

INSPO_RUN_TIME_LIMIT_S = env_int("INSPO_RUN_TIME_LIMIT_S", 24 * 3600, minimum=60)
"""A run stops itself at a step boundary after this long, saves a checkpoint and fails as resumable."""
INSPO_EVAL_TIME_LIMIT_S = env_int("INSPO_EVAL_TIME_LIMIT_S", 6 * 3600, minimum=60)
"""An evaluation request or a heatmap is stopped (and failed) after this long; a heatmap keeps its scored cells."""
INSPO_HEATMAP_MAX_ANSWERS = env_int("INSPO_HEATMAP_MAX_ANSWERS", 5000, minimum=1)
"""The most greedy answers one instruction × checkpoint heatmap may cost: instructions × checkpoints × questions."""
INSPO_HEARTBEAT_S = env_int("INSPO_HEARTBEAT_S", 30, minimum=1)
"""How often a worker running a run stamps its heartbeat."""
INSPO_LOST_AFTER_S = env_int("INSPO_LOST_AFTER_S", 300, minimum=2)
"""A running run whose heartbeat is older than this is failed as lost (its worker crashed or vanished)."""
INSPO_STALL_AFTER_S = env_int("INSPO_STALL_AFTER_S", 3600, minimum=2)
"""A running run whose step has not moved on (no stage began, no step ended) for this long is failed as stalled,
with the stage it hung in. Keep it above the longest stage: a verl step, an optimizer call, one benchmark's eval."""
INSPO_SHUTDOWN_GRACE_S = env_int("INSPO_SHUTDOWN_GRACE_S", 120, minimum=1)
"""A worker asked to stop lets the step in progress end (and checkpoint) for this long, then fails the run as
resumable and exits. Give the process manager more than this before it kills (e.g. compose's stop_grace_period)."""
INSPO_SWEEP_EVERY_S = env_int("INSPO_SWEEP_EVERY_S", 60, minimum=1)
"""How often the ops worker's scheduler runs the sweep: lost and stalled runs, lost evaluations, unsent tasks."""
INSPO_SINK_MAX_BATCH = env_int("INSPO_SINK_MAX_BATCH", 500, minimum=1)
INSPO_SINK_MAX_DELAY_S = env_int("INSPO_SINK_MAX_DELAY_S", 5, minimum=0)

# verl runs (gpu queue): the job is a subprocess of the worker.
INSPO_VERL_COMMAND = env_str("INSPO_VERL_COMMAND", "")
"""Replaces the program that runs a verl job (tests use a fake one); the overrides stay the same."""
INSPO_VERL_GPUS_PER_NODE = env_int("INSPO_VERL_GPUS_PER_NODE", 8, minimum=1)
INSPO_VERL_NNODES = env_int("INSPO_VERL_NNODES", 1, minimum=1)
INSPO_VERL_GRACE_S = env_int("INSPO_VERL_GRACE_S", 600, minimum=1)
"""After a stop request, how long the job may take to checkpoint before it is terminated."""
INSPO_VERL_POLL_S = env_int("INSPO_VERL_POLL_S", 1, minimum=0)
INSPO_VERL_ENV_PASSTHROUGH = tuple(env_list("INSPO_VERL_ENV_PASSTHROUGH", []))
"""Extra environment variables the verl job inherits (it starts with a minimal environment; see the launcher)."""

# Celery's own time limits sit above the run's own deadline: the soft one interrupts a step that hangs,
# the hard one kills the process; the heartbeat check then fails the run.
_SOFT_GRACE_S, _HARD_GRACE_S = 900, 300
CELERY_TASK_ANNOTATIONS = {
    "workers.tasks.run_training": {
        "soft_time_limit": INSPO_RUN_TIME_LIMIT_S + _SOFT_GRACE_S,
        "time_limit": INSPO_RUN_TIME_LIMIT_S + _SOFT_GRACE_S + _HARD_GRACE_S,
    },
    "workers.tasks.evaluate": {
        "soft_time_limit": INSPO_EVAL_TIME_LIMIT_S,
        "time_limit": INSPO_EVAL_TIME_LIMIT_S + _HARD_GRACE_S,
    },
    "workers.tasks.evaluate_heatmap": {
        "soft_time_limit": INSPO_EVAL_TIME_LIMIT_S,
        "time_limit": INSPO_EVAL_TIME_LIMIT_S + _HARD_GRACE_S,
    },
}
if os.environ.get("CELERY_BROKER_URL", "").startswith(("redis://", "rediss://")):
    # A message not acknowledged within this time is handed to another worker; keep it above the hard limit.
    CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] = INSPO_RUN_TIME_LIMIT_S + 2 * _SOFT_GRACE_S
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("CELERY_SEND_EVENTS", True)
CELERY_TASK_SEND_SENT_EVENT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Housekeeping runs on its own small `ops` queue, so a worker busy training never delays it.
CELERY_TASK_ROUTES = {"workers.tasks.sweep": {"queue": "ops"}}
CELERY_BEAT_SCHEDULE = {
    "sweep": {"task": "workers.tasks.sweep", "schedule": float(INSPO_SWEEP_EVERY_S), "options": {"queue": "ops"}},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(STATE_DIR / "celerybeat-schedule")

# -- what runs may reach: optimizer endpoints and their keys, outbound hosts, data roots -----------------------

_PROVIDERS = ("gemini", "openai")


def optimizer_endpoint(name: str, raw: Any) -> dict[str, Any]:
    """One operator-declared optimizer endpoint, checked, with its key read from the variable it names."""
    where = f"INSPO_OPTIMIZER_ENDPOINTS[{name!r}]"
    if not isinstance(raw, dict) or raw.get("provider") not in _PROVIDERS:
        raise ImproperlyConfigured(f"{where}: an object with provider one of {', '.join(_PROVIDERS)}")
    unknown = set(raw) - {"provider", "base_url", "key_env", "models", "team_calls_per_day"}
    base_url, key_env, models = raw.get("base_url"), raw.get("key_env"), raw.get("models", [])
    budget = raw.get("team_calls_per_day")
    if unknown:
        raise ImproperlyConfigured(f"{where}: unknown fields {', '.join(sorted(unknown))}")
    if not (base_url is None or isinstance(base_url, str)) or (raw["provider"] == "openai" and not base_url):
        raise ImproperlyConfigured(f"{where}: base_url must be a URL (required for openai) or null")
    if not (key_env is None or isinstance(key_env, str)):
        raise ImproperlyConfigured(f"{where}: key_env must name an environment variable or be null")
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise ImproperlyConfigured(f"{where}: models must be a list of model names (empty: any)")
    if not (budget is None or (isinstance(budget, int) and budget >= 0)):
        raise ImproperlyConfigured(f"{where}: team_calls_per_day must be an integer ≥ 0 or null")
    api_key = os.environ.get(key_env) if key_env else None
    checked = {"base_url": base_url, "key_env": key_env, "models": models, "team_calls_per_day": budget}
    return {**raw, **checked, "api_key": api_key or None}


_ENDPOINTS = env_json(
    "INSPO_OPTIMIZER_ENDPOINTS", {"gemini": {"provider": "gemini", "base_url": None, "key_env": "GEMINI_API_KEY"}}
)
if not isinstance(_ENDPOINTS, dict) or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", n) for n in _ENDPOINTS):
    raise ImproperlyConfigured("INSPO_OPTIMIZER_ENDPOINTS: a JSON object of endpoints named by letters, digits, _.-")
INSPO_OPTIMIZER_ENDPOINTS: dict[str, dict[str, Any]] = {
    name: optimizer_endpoint(name, raw) for name, raw in _ENDPOINTS.items()
}
"""Named optimizer endpoints a run may use (`optimizer.endpoint`): provider, base URL (null: the provider's
own), the environment variable holding the key, a model allow-list (empty: any) and optimizer calls per team
per day (null: no limit). The keys never leave the server except to their endpoint."""
INSPO_OPTIMIZER_DEFAULT_ENDPOINT = env_str("INSPO_OPTIMIZER_DEFAULT_ENDPOINT", "gemini")
"""The endpoint of a gemini/openai run that names none and brings no base_url (when its provider matches)."""
INSPO_SECRETS_KEY = env_str("INSPO_SECRETS_KEY", "")
"""Key material for the teams' stored API keys (encrypted at rest); empty: derived from DJANGO_SECRET_KEY."""
INSPO_ALLOWED_URL_HOSTS = env_list("INSPO_ALLOWED_URL_HOSTS", [])
"""Hosts a user-chosen URL (env.retriever_url, optimizer.base_url) may name: 'host', 'host:port', '*.domain'.
Their addresses must be public."""
INSPO_ALLOW_PRIVATE_HOSTS = env_list("INSPO_ALLOW_PRIVATE_HOSTS", [])
"""Hosts allowed although they resolve to loopback, private, link-local or reserved addresses (a self-hosted
retriever or vLLM): 'host' or 'host:port'. Default: none."""
INSPO_SHARED_DATA_DIR = env_path("INSPO_SHARED_DATA_DIR", INSPO_DATA_DIR / "shared")
"""Read-only data every team may name (corpora, models); each team's own files live in INSPO_DATA_DIR/teams/<id>."""

_ARCHIVE_SERVERS = ("django", "x-accel-redirect", "x-sendfile")
INSPO_ARCHIVE_SERVE = env_str("INSPO_ARCHIVE_SERVE", "django")
"""Who sends a checkpoint archive's bytes: `django` (a file response with Range support; holds a web thread while
it sends), `x-accel-redirect` (nginx in front sends INSPO_ARCHIVE_ACCEL_PREFIX + the file's path under
INSPO_ARCHIVE_DIR; docker-compose's proxy) or `x-sendfile` (Apache's mod_xsendfile, lighttpd: the absolute path)."""
if INSPO_ARCHIVE_SERVE not in _ARCHIVE_SERVERS:
    raise ImproperlyConfigured(f"INSPO_ARCHIVE_SERVE={INSPO_ARCHIVE_SERVE!r}: one of {', '.join(_ARCHIVE_SERVERS)}")
INSPO_ARCHIVE_ACCEL_PREFIX = env_str("INSPO_ARCHIVE_ACCEL_PREFIX", "/_archives/")
"""The proxy's internal location that maps to INSPO_ARCHIVE_DIR (docker-compose's nginx config)."""
INSPO_ARCHIVE_MAX_BYTES = env_int("INSPO_ARCHIVE_MAX_BYTES", 200 * 2**30)
"""Room for built archives; building one more deletes the oldest until it fits (0: no limit)."""

INSPO_TEAM_MAX_ACTIVE_RUNS = env_int("INSPO_TEAM_MAX_ACTIVE_RUNS", 4, minimum=0)
"""Runs a team may have queued, running or cancelling at once; one more submission, clone or resume is refused
(429) until one ends. 0: no limit."""
INSPO_TEAM_MAX_PENDING_RUNS = env_int("INSPO_TEAM_MAX_PENDING_RUNS", 64, minimum=0)
"""Runs of experiments a team may have waiting (pending) for a slot under INSPO_TEAM_MAX_ACTIVE_RUNS; an experiment
whose runs would go past it is refused (400) whole, naming how many slots are left. 0: no limit."""

INSPO_OPTIMIZER_PRICES: dict[str, list[float]] = env_json(
    "INSPO_OPTIMIZER_PRICES",
    {"gemini-2.5-pro": [1.25, 10.0], "gemini-2.5-flash": [0.30, 2.50], "gemini-2.5-flash-lite": [0.10, 0.40]},
)
"""USD per million input and output tokens, by optimizer model name; unknown models get no cost."""
