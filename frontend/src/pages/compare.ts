/** The compare page: a run picker, the Fig. 2 curves of the chosen runs overlaid, a Table-1-like benchmark table
 * (best per column marked, deltas against a baseline run) and the config fields that differ. */

import { Api, describeError } from "../api";
import { colorAt, createChart, linePanel, linkCharts, PANELS, type Chart, type PanelKey } from "../charts";
import { byTestId, fill, h } from "../dom";
import {
  AVERAGE,
  benchmarkTable,
  columnLabel,
  formatDelta,
  formatPoints,
  type BenchmarkTable,
} from "../transforms/benchmarks";
import { formatValue } from "../transforms/configDiff";
import { ema, points } from "../transforms/smoothing";
import type { Comparison, CompareRun, CompareSeries, Page, QuestionSets, Run } from "../types";

const AVERAGE_TITLE =
  "The unweighted mean over the benchmarks, each counting the same whatever its number of questions; " +
  "only for a run with a value in every column.";

const QUESTION_MARKS: Record<QuestionSets, { text: string; title: string } | null> = {
  same: null,
  different: {
    text: " ≠",
    title:
      "These runs were scored on different questions: their values are not alike. " +
      "Deltas use only the questions both the run and the baseline scored.",
  },
  unrecorded: {
    text: " ?",
    title:
      "As many questions each, but not every evaluation kept which: they may differ. " +
      "Deltas compare the whole evaluations.",
  },
};

export async function comparePage(root: HTMLElement, api: Api): Promise<void> {
  const chosen = JSON.parse(document.getElementById("compare-selection")?.textContent ?? "[]") as string[];
  const picker = renderPicker(root, api, chosen);
  if (chosen.length === 0) {
    await picker;
    return;
  }
  const baseline = byTestId<HTMLSelectElement>(root, "baseline-select");
  const metric = byTestId<HTMLSelectElement>(root, "metric-select");
  const smoothing = byTestId<HTMLInputElement>(root, "smoothing");
  const url = new URL(window.location.href);
  metric.value = url.searchParams.get("metric") ?? "em";
  const charts = new Map<PanelKey, Chart>(
    PANELS.map(({ key, title }) => [
      key,
      createChart(byTestId(root, `chart-compare-${key}`), `${title} of the compared runs`),
    ]),
  );
  linkCharts([...charts.values()], "compare-steps");
  let comparison: Comparison | null = null;

  const drawCurves = () => {
    if (comparison) drawPanels(charts, comparison, Number(smoothing.value));
  };
  const load = async () => {
    const params = new URLSearchParams(chosen.map((id) => ["runs", id]));
    if (baseline.value) params.set("baseline", baseline.value);
    params.set("metric", metric.value);
    try {
      comparison = await api.get<Comparison>("compare/", params);
    } catch (error) {
      fill(byTestId(root, "compare-error"), describeError(error));
      return;
    }
    byTestId(root, "compare-error").replaceChildren();
    const page = new URL(window.location.href);
    page.search = params.toString();
    window.history.replaceState(null, "", page);
    fillBaselineChoices(baseline, comparison.runs, comparison.baseline);
    renderBenchmarks(root, benchmarkTable(comparison));
    renderConfigDiff(root, comparison);
    drawCurves();
  };

  fillBaselineChoices(
    baseline,
    chosen.map((id) => ({ id, name: id })),
    url.searchParams.get("baseline"),
  );
  baseline.addEventListener("change", () => void load());
  metric.addEventListener("change", () => void load());
  smoothing.addEventListener("input", () => {
    byTestId(root, "smoothing-value").textContent = Number(smoothing.value).toFixed(2);
    drawCurves();
  });
  await Promise.all([picker, load()]);
}

/** A run's name cut with an ellipsis where it is long (site.css `.name-cut`), whole in its title. */
function runName(name: string): HTMLElement {
  return h("span", { class: "name-cut", title: name, text: name });
}

/** Check boxes for the user's newest runs (plus the chosen ones) in the page's GET form, and a text filter. */
async function renderPicker(root: HTMLElement, api: Api, chosen: string[]): Promise<void> {
  const list = byTestId(root, "run-choices");
  const filter = byTestId<HTMLInputElement>(root, "run-filter");
  let runs: Run[];
  try {
    runs = (await api.get<Page<Run>>("runs/", new URLSearchParams({ page_size: "100" }))).results;
  } catch (error) {
    fill(list, h("li", { class: "error", text: describeError(error) }));
    return;
  }
  const items = runs.map((run) =>
    h(
      "li",
      { "data-name": `${run.name} ${run.preset} ${run.tags.join(" ")} ${run.status}`.toLowerCase() },
      h(
        "label",
        {},
        h("input", { type: "checkbox", name: "runs", value: run.id, checked: chosen.includes(run.id) }),
        " ",
        runName(run.name),
        " ",
        h("span", {
          class: "muted",
          text: `${run.status} · ${run.preset || "custom"} · step ${run.step}/${run.total_steps}`,
        }),
      ),
    ),
  );
  // Chosen runs older than the newest 100 still need their box, or submitting the form would drop them.
  const missing = chosen.filter((id) => !runs.some((run) => run.id === id));
  const hidden = missing.map((id) => h("input", { type: "hidden", name: "runs", value: id }));
  fill(list, ...(items.length ? items : [h("li", { class: "muted", text: "No runs yet." })]), ...hidden);
  filter.addEventListener("input", () => {
    const needle = filter.value.trim().toLowerCase();
    for (const item of items) item.hidden = needle !== "" && !(item.dataset.name ?? "").includes(needle);
  });
}

function fillBaselineChoices(
  select: HTMLSelectElement,
  runs: Pick<CompareRun, "id" | "name">[],
  value: string | null,
): void {
  fill(
    select,
    h("option", { value: "", text: "no baseline" }),
    ...runs.map((run) => h("option", { value: run.id, text: run.name })),
  );
  select.value = value ?? "";
}

function drawPanels(charts: Map<PanelKey, Chart>, comparison: Comparison, smoothing: number): void {
  for (const { key, title } of PANELS) {
    const series = comparison.runs.flatMap((run, i) => {
      const data: CompareSeries | undefined = comparison.series[run.id];
      if (!data) return [];
      const color = colorAt(i);
      const single = data.step.length === 1;
      // The smoothed series first, so the legend shows its solid style; the raw one is drawn below it (z).
      return [
        {
          name: run.name,
          type: "line",
          data: points(data.step, ema(data[key], smoothing)),
          showSymbol: single,
          lineStyle: { width: 2 },
          itemStyle: { color },
          z: 3,
        },
        {
          name: run.name,
          type: "line",
          data: points(data.step, data[key]),
          showSymbol: single,
          lineStyle: { width: 1, opacity: 0.2 },
          itemStyle: { color, opacity: 0.2 },
          silent: true,
          tooltip: { show: false },
          z: 2,
        },
      ];
    });
    (charts.get(key) as Chart).setOption(
      linePanel(title, series, {
        legend: {
          type: "scroll",
          bottom: 0,
          data: comparison.runs.map((run) => run.name),
          textStyle: { width: 240, overflow: "truncate" },
          tooltip: { show: true },
        },
        grid: { left: 48, right: 12, top: 32, bottom: 52 },
      }),
      { notMerge: true },
    );
  }
}

function renderBenchmarks(root: HTMLElement, table: BenchmarkTable): void {
  const head = h(
    "tr",
    {},
    h("th", { scope: "col", text: `Run (${table.metric.toUpperCase()} points, 0–100)` }),
    ...table.columns.map((column) => {
      const mark = QUESTION_MARKS[column.questions];
      return h(
        "th",
        {
          scope: "col",
          class: "num",
          title: column.name === AVERAGE ? AVERAGE_TITLE : null,
          "data-column": column.name,
          "data-questions": column.questions,
        },
        columnLabel(column.name),
        mark ? h("span", { class: "questions-mark", title: mark.title, text: mark.text }) : null,
      );
    }),
  );
  const rows = table.rows.map((row) =>
    h(
      "tr",
      { class: row.baseline ? "baseline" : "" },
      h(
        "th",
        { scope: "row" },
        runName(row.name),
        row.baseline ? h("span", { class: "muted", text: " (baseline)" }) : null,
      ),
      ...row.cells.map((cell) =>
        h(
          "td",
          { class: `num${cell.best ? " best" : ""}`, "data-column": cell.column, title: cell.source },
          cell.best ? h("strong", { text: formatPoints(cell.value) }) : formatPoints(cell.value),
          cell.best ? h("span", { class: "best-mark", title: "best in this column", text: " ★" }) : null,
          cell.questions !== null
            ? h("span", { class: "questions muted", title: "questions scored", text: ` n=${cell.questions}` })
            : null,
          cell.delta !== null
            ? h("span", {
                class: `delta ${cell.delta > 0 ? "up" : cell.delta < 0 ? "down" : ""}`,
                text: ` ${formatDelta(cell.delta)}`,
              })
            : null,
          cell.deltaQuestions !== null
            ? h("span", {
                class: "delta-questions muted",
                title: "the delta is over the questions both this run and the baseline scored",
                text: ` on ${cell.deltaQuestions} shared`,
              })
            : null,
        ),
      ),
    ),
  );
  const empty =
    table.columns.length === 1
      ? h("p", { class: "muted", text: `No ${table.metric} evaluations for these runs yet.` })
      : null;
  fill(
    byTestId(root, "benchmarks"),
    empty,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { "data-testid": "benchmark-table" },
        h("caption", {
          text:
            `${table.metric.toUpperCase()} per benchmark in points (0–100) and the questions it was scored on (n); ` +
            "★ best in the column " +
            "(every run tied for it; none when all are equal); ≠ marks a column whose runs were scored on different " +
            "questions; signed numbers are deltas against the baseline in points, on the questions both scored.",
        }),
        h("thead", {}, head),
        h("tbody", {}, ...rows),
      ),
    ),
  );
}

function renderConfigDiff(root: HTMLElement, comparison: Comparison): void {
  const runs = comparison.runs;
  const head = h(
    "tr",
    {},
    h("th", { scope: "col", text: "Field" }),
    ...runs.map((run) => h("th", { scope: "col" }, runName(run.name))),
  );
  const rows = comparison.config_diff.length
    ? comparison.config_diff.map(({ field, values }) =>
        h(
          "tr",
          {},
          h("th", { scope: "row" }, h("code", { text: field })),
          ...runs.map((run) => h("td", { text: formatValue(values[run.id] ?? undefined) })),
        ),
      )
    : [h("tr", {}, h("td", { colspan: String(runs.length + 1), class: "muted", text: "The configs do not differ." }))];
  fill(
    byTestId(root, "config-diff"),
    h(
      "div",
      { class: "table-wrap" },
      h("table", { "data-testid": "config-diff-table" }, h("thead", {}, head), h("tbody", {}, ...rows)),
    ),
  );
}
