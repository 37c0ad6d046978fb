"""`make web-serve` (the foreground part of `make run`) for real: gunicorn and both Celery workers on the embedded
SQLite database and filesystem broker, stopped by a SIGTERM to `make` (kill, systemd, a container stop) or by a ^C
typed on its terminal (a pseudo-terminal here, whose line discipline signals the foreground process group as a user's
terminal does; the log is what that terminal showed). Every process of the tree exits, once, and the log stays short
and holds no WARNING or ERROR line, ending in "INSPO stopped (INT)" after a Ctrl-C; the address and the demo login
come last, in a box; gunicorn's control socket is the instance's own, in its state folder. `make install` keeps pip's
output unless a step fails."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from inspo_engine.env.service import default_workers

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 40
"""Nothing runs when the stop comes, so each process has its whole grace to spare: the workers' warm shutdown and
gunicorn's graceful stop take a few seconds."""
PROCESSES = 10
"""make, its shell, gunicorn (a master and 2 workers), the cpu worker (main and its pool child) and the ops worker
(main, its pool child and the scheduler)."""

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def embedded_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a `make run` with no DATABASE_URL and no CELERY_BROKER_URL, migrated once, in a temporary
    state folder."""
    state = tmp_path_factory.mktemp("make-run-state")
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "MAKEFLAGS"}}
    env.update(INSPO_STATE_DIR=str(state), INSPO_RUNS_DIR=str(state / "runs"), PYTHONUNBUFFERED="1")
    migrate = [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"]
    subprocess.run(migrate, cwd=REPO, env=env, check=True, timeout=300)
    demo_user = [sys.executable, "manage.py", "create_team_user", "--team", "Demo team", "--username", "demo"]
    demo_user += ["--password-file", str(state / "demo-password")]
    subprocess.run(demo_user, cwd=REPO, env=env, check=True, timeout=300, capture_output=True)
    return env


@dataclass
class Served:
    """`make web-serve` in a session of its own whose controlling terminal is a pseudo-terminal (`terminal`: its
    master side), and the log of everything the terminal showed."""

    make: subprocess.Popen[bytes]
    log: Path
    port: int
    retrieval_port: int
    terminal: int
    seen: tuple[psutil.Process, ...] = ()

    def type_ctrl_c(self) -> None:
        """What a user's Ctrl-C is: the ^C character typed on the terminal, which its line discipline turns into a
        SIGINT to the foreground process group."""
        os.write(self.terminal, b"\x03")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tree(self) -> list[psutil.Process]:
        root = psutil.Process(self.make.pid)
        return [root, *root.children(recursive=True)]

    def wait_up(self) -> list[psutil.Process]:
        """Until the login box is printed (gunicorn answers and both workers have started their pools: what a user
        sees as "up"), the cpu worker said ready and every process has started; then every process of the tree.
        A signal sent before the box reaches a Celery worker still starting, which logs its warm shutdown twice."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.make.poll() is None, f"make exited with {self.make.returncode}:\n{self.text()[-4000:]}"
            text = self.text()
            if "INSPO is running at" in text and "cpu@" in text and " ready." in text and answers(self.port):
                tree = self.tree()
                if len(tree) >= PROCESSES:
                    self.seen = tuple(tree)
                    return tree
            time.sleep(0.5)
        pytest.fail(f"make web-serve was not up after {START_TIMEOUT_S} s:\n{self.text()[-4000:]}")


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def copy_terminal(master: int, log: Path) -> None:
    """Appends what the terminal shows to `log` until every process holding the terminal has closed it."""
    with log.open("ab", buffering=0) as out:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: no process holds the terminal any more
                return
            if not data:
                return
            out.write(data.replace(b"\r\n", b"\n"))


@pytest.fixture(params=["default"])
def served(request: pytest.FixtureRequest, embedded_env: dict[str, str], tmp_path: Path) -> Iterator[Served]:
    """`make web-serve` started as a terminal's shell starts a job (SIGINT handled by default), or, parametrized
    `ignored`, as a script's `make run &` or nohup starts it: with SIGINT ignored."""
    sigint = signal.SIG_IGN if request.param == "ignored" else signal.SIG_DFL
    port, retrieval_port = free_port(), free_port()
    log = tmp_path / "make-run.log"
    log.touch()
    command = ["make", "--no-print-directory", "-o", "install", "-o", "web-migrate", "-o", "web-static"]
    command += ["web-serve", f"WEB_PORT={port}", f"RETRIEVAL_PORT={retrieval_port}"]
    master, slave = pty.openpty()

    def own_terminal() -> None:  # a session of its own, with the pseudo-terminal as its controlling terminal
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        signal.signal(signal.SIGINT, sigint)

    make = subprocess.Popen(
        command, cwd=REPO, env=embedded_env, stdin=slave, stdout=slave, stderr=slave, preexec_fn=own_terminal
    )
    os.close(slave)
    reader = threading.Thread(target=copy_terminal, args=(master, log), daemon=True)
    reader.start()
    server = Served(make, log, port, retrieval_port, master)
    try:
        yield server
    finally:  # whatever a failed test left behind, by pid
        for process in [*server.seen, *(server.tree() if make.poll() is None else [])]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        make.wait(timeout=10)
        reader.join(timeout=10)
        os.close(master)


def assert_all_gone(tree: list[psutil.Process], served: Served) -> None:
    _gone, alive = psutil.wait_procs(tree, timeout=STOP_TIMEOUT_S)
    left = [f"{p.pid} {' '.join(p.cmdline()[:6])}" for p in alive if p.is_running()]
    for process in alive:
        process.kill()
    assert not left, f"still running {STOP_TIMEOUT_S} s after the stop: {left}\n{served.text()[-3000:]}"


def wait_stopped(served: Served) -> None:
    """Until make has exited and the terminal has shown its last line (read after make exited)."""
    served.make.wait(timeout=10)
    deadline = time.monotonic() + 10
    while "INSPO stopped" not in served.text() and time.monotonic() < deadline:
        time.sleep(0.2)


def assert_short_log(served: Served, *, warm_shutdowns: int = 2) -> None:
    text = served.text()
    lines = text.splitlines()
    assert "RecursionError" not in text, text[-3000:]
    assert len(lines) < 200, f"{len(lines)} lines:\n" + "\n".join(lines[-60:])
    assert text.count("Warm shutdown") <= warm_shutdowns, text[-3000:]
    noise = re.compile(r" (ERROR|WARNING|CRITICAL)/|\[(ERROR|WARNING|CRITICAL)\]|\w+Warning: |Traceback")
    assert not [line for line in lines if noise.search(line)], text[-3000:]  # a clean start and stop: no noise


def test_a_sigterm_to_make_stops_gunicorn_and_both_workers_once(served: Served, embedded_env: dict[str, str]) -> None:
    tree = served.wait_up()
    control = Path(embedded_env["INSPO_STATE_DIR"]) / "gunicorn.ctl"  # the instance's own, not ~/.gunicorn's
    assert control.is_socket() and f"Control socket listening at {control}\n" in served.text(), served.text()[-3000:]
    served.make.send_signal(signal.SIGTERM)
    assert_all_gone(tree, served)
    wait_stopped(served)
    assert_short_log(served)
    assert "INSPO stopping (TERM): " in served.text() and served.text().rstrip().endswith("INSPO stopped (TERM)")


@pytest.mark.parametrize("served", ["default", "ignored"], indirect=True)
def test_ctrl_c_stops_gunicorn_and_both_workers_once(served: Served) -> None:
    tree = served.wait_up()
    served.type_ctrl_c()
    assert_all_gone(tree, served)
    wait_stopped(served)
    assert_short_log(served, warm_shutdowns=4)  # Celery may log a Ctrl-C's warm shutdown twice per worker
    shown = (line.removeprefix("^C") for line in served.text().splitlines())  # the terminal echoes ^C, no newline
    lines = [line for line in shown if line.strip()]
    assert lines[-1] == "INSPO stopped (INT)", served.text()[-3000:]  # after the rest, on the user's terminal
    # Announced at once: the workers finish seconds after the web server's last line, which read as the end
    stopping = "INSPO stopping (INT): the web server, the retrieval service and both workers finish first"
    assert lines.count(stopping) == 1, served.text()[-3000:]
    master = next(n for n, line in enumerate(lines) if "Shutting down: Master" in line)
    assert lines.index(stopping) < master, served.text()[-3000:]


def test_the_address_and_the_demo_login_come_last_in_a_box(served: Served, embedded_env: dict[str, str]) -> None:
    served.wait_up()
    password = (Path(embedded_env["INSPO_STATE_DIR"]) / "demo-password").read_text().strip()
    deadline = time.monotonic() + 10
    while "| user: demo" not in served.text() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # what the workers log after it
    lines = served.text().splitlines()
    served.make.send_signal(signal.SIGTERM)
    box = [n for n, line in enumerate(lines) if line.startswith("| ")]
    assert len(box) == 4 and lines[box[0] - 1] == lines[box[-1] + 1] == "+" + "-" * (len(lines[box[0]]) - 2) + "+"
    assert f"http://127.0.0.1:{served.port}/" in lines[box[0]]
    assert lines[box[1]].split() == ["|", "user:", "demo", "password:", password, "|"]
    booted = max(n for n, line in enumerate(lines) if "Booting worker" in line or "Listening at" in line)
    assert booted < box[0]
    assert not any("[queues]" in line or "[tasks]" in line for line in lines), "a Celery banner"
    later = [line for line in lines[box[-1] + 2 :] if line.strip()]
    assert all(line.startswith("[") for line in later), later  # only log lines of the workers starting


def test_the_retrieval_service_starts_beside_the_workers_and_stops_with_them(served: Served) -> None:
    tree = served.wait_up()
    health = httpx.get(f"http://127.0.0.1:{served.retrieval_port}/health", timeout=5)
    assert health.json() == {"status": "ok"}
    services = [p for p in tree if p.name().startswith("python") and "retrieval_service" in " ".join(p.cmdline())]
    supervisor = [p for p in services if p.ppid() not in {s.pid for s in services}]
    assert len(supervisor) == 1 and all(p.ppid() == supervisor[0].pid for p in services if p not in supervisor)
    assert len(services) == 1 + default_workers()  # the supervisor and its workers, one per core
    assert f"INSPO_RETRIEVAL_URL=http://127.0.0.1:{served.retrieval_port}" in " ".join(
        f"{k}={v}"
        for k, v in psutil.Process(next(p.pid for p in tree if "celery" in " ".join(p.cmdline()))).environ().items()
    )
    served.make.send_signal(signal.SIGTERM)
    assert_all_gone(tree, served)
    assert_short_log(served)


def test_install_shows_pips_output_only_when_a_step_fails() -> None:
    dry_run = subprocess.run(
        ["make", "--no-print-directory", "-n", "-W", "requirements/dev.txt", "install"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pip_lines = [line for line in dry_run.splitlines() if "-m pip install" in line]
    assert len(pip_lines) >= 5
    for line in pip_lines:
        assert "--quiet" in line and ">.venv/pip.log 2>&1 || { cat .venv/pip.log;" in line, line
