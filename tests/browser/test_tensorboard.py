"""A run in TensorBoard's own UI: the smoke preset trains with `tracking.backends=["tensorboard"]`, TensorBoard's
server reads the run's `tensorboard/` folder as docs/tracking.md says, and in Chromium its scalars dashboard draws
the run's reward and an instruction's weight as curves with one point per step. With INSPO_DOCS_SCREENSHOTS=1 the
dashboard is also saved as docs/tracking-tensorboard.png."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from inspo_engine.events import InstructionAdded, PopulationChanged, StepCompleted, read_events
from tests.browser import test_dashboards_e2e as e2e
from tests.celery_worker import REPO
from tests.conftest import skip_or_fail

browser = e2e.browser  # the chromium fixture
pytestmark = pytest.mark.slow

DOCS_SCREENSHOT = REPO / "docs" / "tracking-tensorboard.png"
RUN = Path("runs") / "smoke"
"""The run directory, relative to the folder TensorBoard starts in, so that the dashboard names the logdir as
docs/tracking.md writes it (`runs/…/tensorboard`) rather than a temporary path."""
SHOWN = r"^(reward_mean|response_length_mean|train/entropy|population/size|instruction/{id}/(weight|share))$"
"""The tags the dashboard is filtered to: the reward, two statistics that move in a 4-step run, and the first
instruction's weight and sampling share."""
START_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def workdir(smoke_cli_run: tuple[Path, subprocess.CompletedProcess[str]]) -> Path:
    """A folder holding runs/smoke: the session's smoke run (4 steps, trained by the CLI with the TensorBoard tracker,
    tests/conftest.py)."""
    if importlib.util.find_spec("tensorboard") is None:
        skip_or_fail("tensorboard is not installed (the `tracking` extra, requirements/dev.txt)")
    out, _ = smoke_cli_run
    folder = out.parents[1]
    assert out == folder / RUN
    assert any((folder / RUN / "tensorboard").glob("events.out.tfevents.*"))
    return folder


def runs_listed(url: str) -> list[str]:
    try:
        with urllib.request.urlopen(f"{url}/data/runs", timeout=5) as response:
            return list(json.load(response))
    except (urllib.error.URLError, OSError):
        return []


@pytest.fixture
def tensorboard(workdir: Path) -> Iterator[str]:
    """TensorBoard's server on the run's folder, in a session of its own so that stopping it also stops its data
    server; its URL once it lists the run."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = [sys.executable, "-m", "tensorboard.main", "--logdir", str(RUN / "tensorboard")]
    serve += ["--host", "127.0.0.1", "--port", str(port)]
    log = workdir / f"tensorboard-{port}.log"
    with log.open("wb") as output:
        server = subprocess.Popen(serve, cwd=workdir, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not runs_listed(url):
            assert server.poll() is None, f"tensorboard exited with {server.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"tensorboard listed no run in {START_TIMEOUT_S} s:\n{log.read_text()}"
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def points(path_d: str | None) -> int:
    """How many points an SVG line's `d` attribute joins (`M x,y L x,y L …`)."""
    assert path_d, "the card has no line"
    return path_d.count("L") + 1


def test_tensorboard_draws_a_smoke_runs_reward_and_instruction_weights_per_step(browser, tensorboard, workdir):
    events = read_events(workdir / RUN / "events.jsonl")
    steps = [e.step for e in events if isinstance(e, StepCompleted)]
    first = next(e.instruction.id for e in events if isinstance(e, InstructionAdded))
    # The tracker sends the population at each change, several within a step; TensorBoard keeps one value per step.
    member_steps = {e.step for e in events if isinstance(e, PopulationChanged) and first in {m.id for m in e.members}}

    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.goto(f"{tensorboard}/#scalars")
    page.locator("tf-scalar-card").first.wait_for()

    # Raw values, on axes that hold every point: no smoothing, no outliers left out.
    page.locator("tf-smoothing-input input").fill("0")
    outliers = page.locator("paper-checkbox").filter(has_text="Ignore outliers in chart scaling")
    outliers.click()
    assert outliers.get_attribute("aria-checked") == "false"
    page.locator("tf-tag-filterer input").fill(SHOWN.format(id=first))

    # The filter's own section; tags without a '/' also get a section each further down.
    matching = page.locator("button.heading", has_text="Tags matching")
    shown = page.locator("tf-category-paginated-view").filter(has=matching)
    shown.wait_for()
    for tag, expected in (("reward_mean", len(steps)), (f"instruction/{first}/weight", len(member_steps))):
        card = shown.locator("tf-scalar-card").filter(has_text=f"tag: {tag}")
        card.wait_for()
        assert card.is_visible(), tag
        line = card.locator("path.line").first
        line.wait_for(state="attached")  # a flat line has no height, so Playwright never calls it visible
        assert points(line.get_attribute("d")) == expected, tag
    assert len(steps) == 4 and len(member_steps) >= 2
    assert shown.locator("tf-scalar-card").count() == 6
    for i in range(6):
        shown.locator("tf-scalar-card").nth(i).locator("path.line").first.wait_for(state="attached")
    page.wait_for_timeout(500)  # the last chart's first frame
    e2e.ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(e2e.ARTIFACTS / "tracking-tensorboard.png"))
    if os.environ.get("INSPO_DOCS_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS_SCREENSHOT))
    context.close()
    assert not errors, errors
