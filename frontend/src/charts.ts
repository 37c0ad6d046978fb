/** ECharts set-up shared by the pages: only the chart types and components they use are bundled, charts follow their
 * container's size, and colours are fixed per origin and stable per series. */

import { GraphChart, LineChart, ScatterChart } from "echarts/charts";
import {
  AriaComponent,
  GridComponent,
  LegendComponent,
  MarkLineComponent,
  TitleComponent,
  TooltipComponent,
} from "echarts/components";
import * as echarts from "echarts/core";
import { CanvasRenderer } from "echarts/renderers";
import { numberLabels } from "./transforms/axis";

echarts.use([
  LineChart,
  GraphChart,
  ScatterChart,
  AriaComponent,
  GridComponent,
  LegendComponent,
  MarkLineComponent,
  TitleComponent,
  TooltipComponent,
  CanvasRenderer,
]);

export type Chart = echarts.ECharts;
export type Option = echarts.EChartsCoreOption;

export { numberLabels };

/** The four panels of the paper's Fig. 2, in its order. */
export const PANELS = [
  { key: "reward_mean", title: "Training reward" },
  { key: "tool_calls_mean", title: "Tool calls per rollout" },
  { key: "instruction_length_mean", title: "Instruction length (words)" },
  { key: "response_length_mean", title: "Response length (tokens)" },
] as const;

export type PanelKey = (typeof PANELS)[number]["key"];

/** Colour-blind-safe palette (Okabe–Ito, then Tol's muted) for runs and instructions. */
export const PALETTE = [
  "#0072B2",
  "#E69F00",
  "#009E73",
  "#CC79A7",
  "#56B4E9",
  "#D55E00",
  "#332288",
  "#117733",
  "#882255",
  "#999933",
  "#44AA99",
  "#AA4499",
];

export const ORIGIN_COLORS: Record<string, string> = {
  seed: "#1f3a5f",
  manual: "#6b6b6b",
  paraphrase: "#E69F00",
  reflection: "#0072B2",
  history: "#009E73",
  candidate: "#bbbbbb",
};

export function colorAt(index: number): string {
  return PALETTE[index % PALETTE.length];
}

/** A chart in `element` that resizes with it; `label` is what screen readers hear for the canvas. */
export function createChart(element: HTMLElement, label: string): Chart {
  element.setAttribute("role", "img");
  element.setAttribute("aria-label", label);
  const chart = echarts.init(element, null, { renderer: "canvas" });
  new ResizeObserver(() => chart.resize()).observe(element);
  return chart;
}

/** Charts in one group share the tooltip's step, so hovering a step in one panel shows it in all. */
export function linkCharts(charts: Chart[], group: string): void {
  for (const chart of charts) chart.group = group;
  echarts.connect(group);
}

/** A line panel over steps: grid, numeric step axis and a shared tooltip; animation off so live updates are cheap.
 * Both axes label their ticks with `axisNumber` (no 48.00000000000001). */
export function linePanel(title: string, series: object[], extra: Option = {}): Option {
  return {
    animation: false,
    aria: { enabled: true },
    title: { text: title, left: 0, top: 0, textStyle: { fontSize: 13, fontWeight: 600 } },
    grid: { left: 48, right: 12, top: 32, bottom: 28 },
    tooltip: { trigger: "axis", valueFormatter: (v: unknown) => (typeof v === "number" ? v.toFixed(3) : "—") },
    xAxis: {
      type: "value",
      name: "step",
      nameGap: 4,
      minInterval: 1,
      nameTextStyle: { align: "right" },
      axisLabel: numberLabels,
    },
    yAxis: { type: "value", scale: true, splitNumber: 4, axisLabel: numberLabels },
    series,
    ...extra,
  };
}
