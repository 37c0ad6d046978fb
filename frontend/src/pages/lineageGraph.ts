/** The lineage graph: instructions placed as a family tree, coloured by origin, styled by state (alive, pruned,
 * best), with optional nodes for the rejected candidates of each round. */

import { createChart, ORIGIN_COLORS, type Chart } from "../charts";
import { escapeHtml } from "../dom";
import { layoutLineage } from "../transforms/lineageLayout";
import { graphNodes } from "../transforms/lineageNodes";
import type { Lineage } from "../types";

/** Margins of the graph inside its box, in pixels (the legend sits in the top one). */
const MARGIN = { top: 48, bottom: 28, left: 32, right: 32 };
/** Largest gaps between neighbours and generations: a small tree stays compact instead of filling the box. */
const MAX_GAP = { x: 140, y: 110 };

export class LineageGraph {
  private readonly chart: Chart;

  constructor(
    private readonly element: HTMLElement,
    onSelect: (id: string) => void,
  ) {
    this.chart = createChart(element, "Lineage of the run's instructions");
    this.chart.on("click", (params) => {
      const data = params.data as { id?: string; rejected?: boolean } | undefined;
      if (params.dataType === "node" && data?.id && !data.rejected) onSelect(data.id);
    });
  }

  draw(lineage: Lineage, bestId: string | null, selected: string | null, withRejected: boolean): void {
    const nodes = graphNodes(lineage, bestId, withRejected);
    const layout = layoutLineage(nodes);
    const origins = [...new Set(nodes.map((n) => n.origin))];
    // Gaps that give a large layout the box's proportions, so fitting it to the box (aspect kept) fills the box.
    const boxWidth = Math.max(1, this.element.clientWidth - MARGIN.left - MARGIN.right);
    const boxHeight = Math.max(1, this.element.clientHeight - MARGIN.top - MARGIN.bottom);
    const xGap = Math.min(MAX_GAP.x, boxWidth / Math.max(1, layout.width - 1));
    const yGap = Math.min(MAX_GAP.y, boxHeight / Math.max(1, layout.depth));
    const data = nodes.map((node) => {
      const placed = layout.byId.get(node.id);
      const isSelected = node.id === selected;
      return {
        id: node.id,
        name: node.label,
        x: (placed?.x ?? 0) * xGap,
        y: (placed?.depth ?? 0) * yGap,
        category: origins.indexOf(node.origin),
        rejected: node.state === "rejected",
        tooltipText: node.tooltip,
        symbol: node.state === "rejected" ? "emptyCircle" : "circle",
        symbolSize: node.state === "rejected" ? 9 : node.state === "best" ? 26 : 18,
        itemStyle: {
          opacity: node.state === "pruned" ? 0.4 : 1,
          borderColor: isSelected ? "#000" : node.state === "best" ? "#d4a000" : "#fff",
          borderWidth: isSelected ? 3 : node.state === "best" ? 4 : 1,
          borderType: node.state === "pruned" ? "dashed" : "solid",
        },
        // Every node is labelled (short labels; zooming in spreads them); the chosen and the best ones in bold.
        label: { show: true, fontWeight: isSelected || node.state === "best" ? "bold" : "normal" },
      };
    });
    const links = nodes
      .filter((node) => layout.byId.get(node.id)?.parent)
      .map((node) => ({
        source: layout.byId.get(node.id)?.parent as string,
        target: node.id,
        lineStyle: node.state === "rejected" ? { type: "dotted", opacity: 0.5 } : {},
      }));
    this.chart.setOption(
      {
        animation: false,
        aria: { enabled: true },
        tooltip: {
          trigger: "item",
          formatter: (p: { dataType: string; data: { tooltipText?: string } }) =>
            p.dataType === "node" ? escapeHtml(p.data.tooltipText ?? "").replace(/\n/g, "<br>") : "",
          extraCssText: "max-width: 22rem; white-space: normal;",
        },
        legend: { data: origins, top: 0, selectedMode: false },
        series: [
          {
            type: "graph",
            layout: "none",
            roam: true,
            // Uniform scaling keeps the symbols round; they keep their size when zoomed.
            preserveAspect: "contain",
            nodeScaleRatio: 0,
            ...MARGIN,
            categories: origins.map((origin) => ({
              name: origin,
              itemStyle: { color: ORIGIN_COLORS[origin] ?? "#888" },
            })),
            label: { position: "bottom", fontSize: 10, color: "#333" },
            lineStyle: { color: "#999", width: 1.5, curveness: 0 },
            edgeSymbol: ["none", "arrow"],
            edgeSymbolSize: 6,
            emphasis: { focus: "adjacency" },
            data,
            links,
          },
        ],
      },
      { notMerge: true },
    );
  }
}
