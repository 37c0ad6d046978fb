"""A worker's start-up keeps its log quiet (webapp/config/celery.py `quiet_worker_start`): no progress bars, faiss's
loader at WARNING, no root-user SecurityWarning. In a process of its own, whose environment and logging it changes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import logging, os, warnings
logging.basicConfig(level=logging.INFO)
os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
from celery.exceptions import SecurityWarning
from webapp.config.celery import quiet_worker_start
quiet_worker_start()
print("bars off:", os.environ["HF_HUB_DISABLE_PROGRESS_BARS"])
warnings.warn(SecurityWarning("You're running the worker with superuser privileges: this is"), stacklevel=1)
import faiss  # tries the AVX512 and AVX2 builds first
from transformers.utils import logging as hf_logging
print("transformers bars:", hf_logging.is_progress_bar_enabled())
"""


def test_a_workers_start_turns_off_progress_bars_and_quiets_faiss_and_the_root_warning():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bars off: 1" in done.stdout and "transformers bars: False" in done.stdout
    assert "faiss.loader" not in done.stderr and "ModuleNotFoundError" not in done.stderr, done.stderr[-3000:]
    assert "SecurityWarning" not in done.stderr, done.stderr[-3000:]
