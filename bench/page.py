"""How soon the run page of a long run is usable: headless chromium against the app under gunicorn, over the
benchmark data set (bench/dataset.py: runs of 300 steps, 7 instructions, 10 evolution rounds).

For several runs, each on a fresh page of a signed-in browser, it measures from the start of navigation: DOM
content loaded, the first chart drawn, and *interactive* — all six charts (the four Fig. 2 panels, the evolution
strip, the population area) drawn and the main thread free again (a task queued after the next frame runs).
Prints a markdown table of medians and the worst run.

    .venv/bin/python bench/page.py [--runs 10]

Needs PostgreSQL, Debian's chromium (`make browser`) and the built dashboards (`make frontend`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from dataset import DEFAULT_URL, POPULATION, ROUNDS, STEPS, TEAM, USERNAME, free_port, prepare, start_server

CHARTS = (
    "chart-reward_mean",
    "chart-tool_calls_mean",
    "chart-instruction_length_mean",
    "chart-response_length_mean",
    "chart-evolution",
    "chart-population",
)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Resolves once every chart holds a canvas and the main thread has come back after a frame.
READY = """(charts) => new Promise((resolve) => {
  const first = {value: null};
  const check = () => {
    const drawn = charts.filter((id) => document.querySelector(`[data-testid="${id}"] canvas`));
    if (drawn.length && first.value === null) first.value = performance.now();
    if (drawn.length === charts.length) {
      requestAnimationFrame(() => setTimeout(() => resolve({first: first.value, ready: performance.now()}), 0));
    } else {
      setTimeout(check, 5);
    }
  };
  check();
})"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--runs", type=int, default=10, help="run pages to load, one fresh page each")
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("Debian's chromium is missing: make browser")

    prepare(args.database_url)
    from django.contrib.auth.hashers import make_password
    from django.db import connection

    from webapp.accounts.models import User
    from webapp.runs.models import Run

    password = "bench-page-password"
    User.objects.filter(username=USERNAME).update(password=make_password(password))
    run_ids = [str(pk) for pk in Run.objects.filter(team__slug=TEAM).order_by("name").values_list("pk", flat=True)]
    connection.close()

    static_root = tempfile.mkdtemp(prefix="inspo-bench-static-")
    os.environ["DJANGO_STATIC_ROOT"] = static_root
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"], check=True)
    port = free_port()
    server = start_server(args.database_url, port, workers=4, threads=2)
    base = f"http://127.0.0.1:{port}"
    from playwright.sync_api import sync_playwright

    rows = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.goto(f"{base}/accounts/login/")
            page.fill("input[name=username]", USERNAME)
            page.fill("input[name=password]", password)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/")
            page.goto(f"{base}/runs/{run_ids[-1]}/")  # warm the server and the browser's cache of the bundle
            page.close()
            for run_id in run_ids[: args.runs]:
                page = context.new_page()
                page.goto(f"{base}/runs/{run_id}/", wait_until="commit")
                marks = page.evaluate(READY, list(CHARTS))
                loaded = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
                rows.append((loaded, marks["first"], marks["ready"]))
                page.close()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(static_root, ignore_errors=True)

    print(
        f"\nRun page of a {STEPS}-step run with {POPULATION} instructions and {ROUNDS} evolution rounds, "
        f"{len(rows)} runs, headless chromium, a fresh page each (bundle cached), gunicorn on the same "
        f"{os.cpu_count()} cores:\n"
    )
    print("| from navigation start | median ms | worst ms |")
    print("|---|---:|---:|")
    for name, column in (("DOM content loaded", 0), ("first chart drawn", 1), ("interactive (all 6 charts, idle)", 2)):
        values = [row[column] for row in rows]
        print(f"| {name} | {statistics.median(values):.0f} | {max(values):.0f} |")


if __name__ == "__main__":
    main()
