/** The experiment page: the training reward per arm over steps (mean and band over seeds) and each arm's EM with its
 * interval, drawn from the experiment's JSON that the page carries (the API's own answer). While the experiment
 * runs, the page is fetched again every few seconds: its server-rendered summary, table, verdicts, machines and runs
 * replace the shown ones in place, and the charts are drawn again from the JSON it carries, so the statistics are
 * computed once per refresh. */

import { describeError } from "../api";
import { colorAt, createChart, linePanel, numberLabels, type Chart } from "../charts";
import { byTestId, escapeHtml, fill } from "../dom";
import { armEms, armStyle, bandPoints, parseDetail } from "../transforms/experiment";
import type { ExperimentDetail } from "../types";

const REFRESH_MS = 3000;
const DETAIL_ID = "experiment-detail";

export function experimentPage(root: HTMLElement): void {
  const reward = createChart(
    byTestId(root, "chart-experiment-reward"),
    "Training reward per arm over steps: the mean over seeds and the band from the lowest to the highest seed",
  );
  const em = createChart(byTestId(root, "chart-experiment-em"), "Exact match per arm, each seed and the interval");
  const error = byTestId(root, "experiment-error");
  const draw = (detail: ExperimentDetail) => {
    drawReward(reward, detail);
    drawEm(em, detail);
  };

  const first = parseDetail(document.getElementById(DETAIL_ID)?.textContent);
  if (first) draw(first);
  if (first?.state !== "running") return;
  // One request per refresh: the page itself, whose sections and JSON come from one computation of the statistics.
  const refresh = async () => {
    let next: ExperimentDetail | null = null;
    try {
      next = await refreshPage(root);
      error.replaceChildren();
      if (next) draw(next);
    } catch (problem) {
      fill(error, describeError(problem));
    }
    if (next === null || next.state === "running") window.setTimeout(() => void refresh(), REFRESH_MS);
  };
  window.setTimeout(() => void refresh(), REFRESH_MS);
}

/** Fetch the page again, replace each `[data-live]` section with the server's current rendering of it, and return
 * the experiment's JSON it carries. */
async function refreshPage(root: HTMLElement): Promise<ExperimentDetail | null> {
  const response = await fetch(window.location.href, { credentials: "same-origin" });
  if (!response.ok) throw new Error(`The page answered ${response.status}`);
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
  for (const section of root.querySelectorAll<HTMLElement>("[data-live]")) {
    const next = fresh.querySelector(`[data-live="${section.dataset.live}"]`);
    if (next) section.replaceChildren(...[...next.childNodes].map((node) => document.importNode(node, true)));
  }
  return parseDetail(fresh.getElementById(DETAIL_ID)?.textContent);
}

function drawReward(chart: Chart, detail: ExperimentDetail): void {
  const series = detail.results.arms.flatMap((row, i) => {
    const color = colorAt(i);
    const style = armStyle(i);
    const band = bandPoints(row.reward_curve);
    const stack = `band-${row.arm}`;
    return [
      {
        // Each arm's own dash and symbol: where two arms' means coincide, both stay visible.
        name: row.arm,
        type: "line",
        data: row.reward_curve.steps.map((step, j) => [step, row.reward_curve.mean[j]]),
        itemStyle: { color },
        lineStyle: { width: 2, type: style.dash },
        symbol: style.symbol,
        symbolSize: style.symbolSize,
        showSymbol: true,
        z: 3 + i,
      },
      { name: row.arm, type: "line", data: band.low, stack, symbol: "none", lineStyle: { opacity: 0 }, silent: true },
      {
        name: row.arm,
        type: "line",
        data: band.width,
        stack,
        symbol: "none",
        lineStyle: { opacity: 0 },
        areaStyle: { color, opacity: 0.18 },
        silent: true,
      },
    ];
  });
  chart.setOption(
    linePanel("Training reward per arm (band: lowest to highest seed)", series, {
      legend: { top: 0, right: 0, data: detail.results.arms.map((row) => row.arm) },
      tooltip: { trigger: "item" },
    }),
    { notMerge: true },
  );
}

function drawEm(chart: Chart, detail: ExperimentDetail): void {
  const ems = armEms(detail.results);
  const arms = detail.results.arms.map((row) => row.arm);
  const level = Math.round(detail.results.level * 100);
  const series = ems.flatMap((item) => {
    const color = colorAt(arms.indexOf(item.arm));
    const symbol = armStyle(arms.indexOf(item.arm)).symbol;
    const whisker =
      item.low !== null && item.high !== null
        ? [
            {
              name: `${item.arm} interval`,
              type: "line",
              data: [
                [item.arm, item.low],
                [item.arm, item.high],
              ],
              symbol: "rect",
              symbolSize: [14, 2],
              lineStyle: { color, width: 2 },
              itemStyle: { color },
            },
          ]
        : [];
    return [
      ...whisker,
      {
        name: item.arm,
        type: "scatter",
        data: [[item.arm, item.mean]],
        symbol,
        symbolSize: 14,
        itemStyle: { color },
        tooltip: { formatter: () => `${escapeHtml(item.arm)}: mean EM ${item.mean.toFixed(3)}` },
      },
      {
        name: `${item.arm} seeds`,
        type: "scatter",
        data: item.perSeed.map((value) => [item.arm, value]),
        symbol,
        symbolSize: 6,
        itemStyle: { color, opacity: 0.5 },
      },
    ];
  });
  chart.setOption(
    {
      animation: false,
      aria: { enabled: true },
      title: {
        text: `EM per arm (dots: seeds; bar: ${level} % interval of the difference from ${detail.results.baseline})`,
        left: 0,
        top: 0,
        textStyle: { fontSize: 13, fontWeight: 600 },
      },
      grid: { left: 48, right: 12, top: 32, bottom: 28 },
      tooltip: { trigger: "item" },
      xAxis: { type: "category", data: arms },
      yAxis: { type: "value", scale: true, splitNumber: 4, axisLabel: numberLabels },
      series,
    },
    { notMerge: true },
  );
}
