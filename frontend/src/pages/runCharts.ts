/** The run page's charts: the four Fig. 2 panels with smoothing, the population's shares over steps, and the
 * evolution markers on the step axis. They are redrawn from data on every update; they hold no state of their own. */

import {
  colorAt,
  createChart,
  linePanel,
  linkCharts,
  numberLabels,
  PANELS,
  type Chart,
  type PanelKey,
} from "../charts";
import { byTestId, escapeHtml } from "../dom";
import { hasOutcomes, outcome } from "../transforms/outcomes";
import { MARKER_KINDS, type Marker, type Shares } from "../transforms/population";
import { ema, points } from "../transforms/smoothing";
import type { MetricSeries } from "../types";

export type ShareMode = "weight" | "probability";

const MARKER_SYMBOLS: Record<Marker["kind"], string> = {
  proposed: "circle",
  verified: "diamond",
  merged: "triangle",
  pruned: "rect",
};
const MARKER_COLORS: Record<Marker["kind"], string> = {
  proposed: "#0072B2",
  verified: "#009E73",
  merged: "#E69F00",
  pruned: "#D55E00",
};

export class RunCharts {
  private readonly panels: Map<PanelKey, Chart>;
  private readonly population: Chart;
  private readonly evolution: Chart;
  private readonly outcomes: Chart;

  constructor(root: HTMLElement) {
    this.panels = new Map(
      PANELS.map(({ key, title }) => [key, createChart(byTestId(root, `chart-${key}`), `${title} per step`)]),
    );
    this.population = createChart(byTestId(root, "chart-population"), "Share of each instruction per step");
    this.evolution = createChart(byTestId(root, "chart-evolution"), "Evolution events per step");
    this.outcomes = createChart(
      byTestId(root, "chart-outcomes"),
      "Share of exact-match answers and of well-formed replies per step",
    );
    linkCharts([...this.panels.values(), this.outcomes, this.evolution], "run-steps");
  }

  /** Draws the panels: the smoothed curve on top, the raw one faint behind it, merges as dashed step lines. */
  drawPanels(metrics: MetricSeries, smoothing: number, markers: Marker[], maxStep: number): void {
    const merged = markers.filter((m) => m.kind === "merged").map((m) => ({ xAxis: m.step }));
    for (const { key, title } of PANELS) {
      const raw = metrics[key];
      const color = colorAt(0);
      const single = metrics.step.length === 1;
      const series = [
        {
          name: "raw",
          type: "line",
          data: points(metrics.step, raw),
          showSymbol: single,
          lineStyle: { width: 1, opacity: 0.25 },
          itemStyle: { color, opacity: 0.25 },
          silent: true,
        },
        {
          name: smoothing > 0 ? "smoothed" : "value",
          type: "line",
          data: points(metrics.step, ema(raw, smoothing)),
          showSymbol: single,
          lineStyle: { width: 2 },
          itemStyle: { color },
          markLine: merged.length
            ? {
                silent: true,
                symbol: "none",
                label: { show: false },
                lineStyle: { type: "dashed", color: "#aaa" },
                data: merged,
              }
            : undefined,
        },
      ];
      // The reward's two parts (what the rollouts earned for their form, and for right answers), smoothed alike.
      const parts = key === "reward_mean" && hasOutcomes(metrics) ? rewardParts(metrics, smoothing) : [];
      (this.panels.get(key) as Chart).setOption(
        linePanel(title, [...series, ...parts], {
          xAxis: stepAxis(maxStep),
          ...(parts.length ? { legend: { bottom: 0, data: ["format part", "correctness part"] } } : {}),
          ...(parts.length ? { grid: { left: 48, right: 12, top: 32, bottom: 48 } } : {}),
        }),
        { notMerge: true },
      );
    }
    this.drawOutcomes(metrics, smoothing, maxStep);
  }

  /** Training exact match and the well-formed share per step, on [0, 1]; empty for runs recorded before them. */
  private drawOutcomes(metrics: MetricSeries, smoothing: number, maxStep: number): void {
    const lines = [
      { key: "em" as const, name: "exact match", color: "#009E73" },
      { key: "well_formed" as const, name: "well-formed", color: "#999999" },
    ].map(({ key, name, color }) => ({
      name,
      type: "line",
      data: points(metrics.step, ema(outcome(metrics, key), smoothing)),
      showSymbol: metrics.step.length === 1,
      lineStyle: { width: 2 },
      itemStyle: { color },
    }));
    this.outcomes.setOption(
      linePanel("Training exact match and well-formed share", hasOutcomes(metrics) ? lines : [], {
        grid: { left: 48, right: 12, top: 32, bottom: 48 },
        legend: { bottom: 0 },
        xAxis: stepAxis(maxStep),
        yAxis: { type: "value", min: 0, max: 1, splitNumber: 4, axisLabel: numberLabels },
      }),
      { notMerge: true },
    );
  }

  drawPopulation(shares: Shares, mode: ShareMode, maxStep: number): void {
    const values = mode === "weight" ? shares.weight : shares.probability;
    const series = shares.ids.map((id, i) => ({
      name: id,
      type: "line",
      stack: "share",
      areaStyle: { opacity: 0.75 },
      lineStyle: { width: 0.5 },
      showSymbol: shares.steps.length === 1,
      itemStyle: { color: colorAt(i) },
      emphasis: { focus: "series" },
      data: points(shares.steps, values[id]),
    }));
    const title = mode === "weight" ? "Share of the population's weight" : "Sampling probability";
    this.population.setOption(
      linePanel(title, series, {
        grid: { left: 48, right: 12, top: 32, bottom: 56 },
        legend: { type: "scroll", bottom: 0 },
        xAxis: stepAxis(maxStep),
        yAxis: { type: "value", min: 0, max: 1, splitNumber: 4, axisLabel: numberLabels },
        tooltip: {
          trigger: "axis",
          valueFormatter: (v: unknown) => (typeof v === "number" ? `${(100 * v).toFixed(1)} %` : "—"),
        },
      }),
      { notMerge: true },
    );
  }

  drawEvolution(markers: Marker[], maxStep: number): void {
    const series = MARKER_KINDS.map((kind) => ({
      name: kind,
      type: "scatter",
      symbol: MARKER_SYMBOLS[kind],
      symbolSize: (value: [number, string, number]) => 8 + 2 * Math.min(value[2], 5),
      itemStyle: { color: MARKER_COLORS[kind] },
      data: markers.filter((m) => m.kind === kind).map((m) => ({ value: [m.step, kind, m.count], detail: m.detail })),
    }));
    this.evolution.setOption(
      {
        animation: false,
        aria: { enabled: true },
        grid: { left: 72, right: 12, top: 8, bottom: 28 },
        tooltip: {
          trigger: "item",
          formatter: (p: { value: [number, string, number]; data: { detail: string } }) =>
            `step ${p.value[0]}: ${p.value[1]} ×${p.value[2]}<br>${escapeHtml(p.data.detail)}`,
        },
        xAxis: stepAxis(maxStep),
        yAxis: { type: "category", data: [...MARKER_KINDS], inverse: true, axisTick: { show: false } },
        series,
      },
      { notMerge: true },
    );
  }
}

/** The reward panel's format and correctness parts: dashed, smoothed as the reward is. */
function rewardParts(metrics: MetricSeries, smoothing: number): object[] {
  return [
    { key: "reward_format" as const, name: "format part", color: "#999999" },
    { key: "reward_correct" as const, name: "correctness part", color: "#009E73" },
  ].map(({ key, name, color }) => ({
    name,
    type: "line",
    data: points(metrics.step, ema(outcome(metrics, key), smoothing)),
    showSymbol: metrics.step.length === 1,
    lineStyle: { width: 1.5, type: "dashed" },
    itemStyle: { color },
  }));
}

/** The same step range on every chart, from 0 to the run's planned length, so a live run grows to the right. */
function stepAxis(maxStep: number): object {
  return {
    type: "value",
    name: "step",
    nameGap: 4,
    min: 0,
    max: Math.max(1, maxStep),
    minInterval: 1,
    axisLabel: numberLabels,
  };
}
