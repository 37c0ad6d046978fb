/** The experiment page: the training reward per arm over steps (mean and band over seeds) and each arm's EM with its
 * interval, drawn from the API. While the experiment runs, the server-rendered summary, table, verdicts and runs are
 * refreshed in place every few seconds, and the charts with them. */

import { Api, describeError } from "../api";
import { colorAt, createChart, linePanel, numberLabels, type Chart } from "../charts";
import { byTestId, escapeHtml, fill } from "../dom";
import { armEms, bandPoints } from "../transforms/experiment";
import type { ExperimentDetail } from "../types";

const REFRESH_MS = 3000;

export async function experimentPage(root: HTMLElement, api: Api): Promise<void> {
  const id = root.dataset.experimentId ?? "";
  const reward = createChart(
    byTestId(root, "chart-experiment-reward"),
    "Training reward per arm over steps: the mean over seeds and the band from the lowest to the highest seed",
  );
  const em = createChart(byTestId(root, "chart-experiment-em"), "Exact match per arm, each seed and the interval");
  const error = byTestId(root, "experiment-error");

  const load = async (): Promise<ExperimentDetail | null> => {
    try {
      const detail = await api.get<ExperimentDetail>(`experiments/${id}/`);
      error.replaceChildren();
      drawReward(reward, detail);
      drawEm(em, detail);
      return detail;
    } catch (problem) {
      fill(error, describeError(problem));
      return null;
    }
  };

  const detail = await load();
  if (detail?.state === "running") {
    // The API first, then the sections: once it says the experiment ended, the sections fetched after show that too.
    const refresh = async () => {
      const next = await load();
      await refreshSections(root);
      if (next?.state === "running" || next === null) window.setTimeout(() => void refresh(), REFRESH_MS);
    };
    window.setTimeout(() => void refresh(), REFRESH_MS);
  }
}

/** Replace each `[data-live]` section with the server's current rendering of it (the page's own HTML, fetched). */
async function refreshSections(root: HTMLElement): Promise<void> {
  const response = await fetch(window.location.href, { credentials: "same-origin" });
  if (!response.ok) return;
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
  for (const section of root.querySelectorAll<HTMLElement>("[data-live]")) {
    const next = fresh.querySelector(`[data-live="${section.dataset.live}"]`);
    if (next) section.replaceChildren(...[...next.childNodes].map((node) => document.importNode(node, true)));
  }
}

function drawReward(chart: Chart, detail: ExperimentDetail): void {
  const series = detail.results.arms.flatMap((row, i) => {
    const color = colorAt(i);
    const band = bandPoints(row.reward_curve);
    const stack = `band-${row.arm}`;
    return [
      {
        name: row.arm,
        type: "line",
        data: row.reward_curve.steps.map((step, j) => [step, row.reward_curve.mean[j]]),
        itemStyle: { color },
        lineStyle: { width: 2 },
        showSymbol: row.reward_curve.steps.length === 1,
        z: 3,
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
        symbolSize: 14,
        itemStyle: { color },
        tooltip: { formatter: () => `${escapeHtml(item.arm)}: mean EM ${item.mean.toFixed(3)}` },
      },
      {
        name: `${item.arm} seeds`,
        type: "scatter",
        data: item.perSeed.map((value) => [item.arm, value]),
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
