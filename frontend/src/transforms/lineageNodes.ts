/** The lineage graph's nodes as data: each instruction with its state (alive, pruned, best), label and tooltip, and
 * optionally one node per rejected candidate hanging off its round's parent. Knows nothing about ECharts. */

import type { Lineage, LineageNode } from "../types";

export type NodeState = "best" | "alive" | "pruned";

export interface GraphNode {
  id: string;
  parent_id: string | null;
  origin: string;
  /** Short enough that neighbours' labels rarely overlap; the tooltip and the list give the full id. */
  label: string;
  tooltip: string;
  state: NodeState | "rejected";
}

export const REJECTED_LABEL = "✕";

export function nodeState(node: LineageNode, bestId: string | null): NodeState {
  if (node.id === bestId) return "best";
  return node.retired_step === null ? "alive" : "pruned";
}

/** An instruction's label in the graph: the number of an engine id ("ins-0007" → "#7"), other ids as they are. */
export function nodeLabel(id: string): string {
  const numbered = /^ins-0*(\d+)$/.exec(id);
  return numbered ? `#${numbered[1]}` : id;
}

/** Graph nodes: the instructions, then (if asked) one per rejected candidate, hanging off its round's parent. */
export function graphNodes(lineage: Lineage, bestId: string | null, withRejected: boolean): GraphNode[] {
  const nodes: GraphNode[] = lineage.nodes.map((node) => ({
    id: node.id,
    parent_id: node.parent_id,
    origin: node.origin,
    label: nodeLabel(node.id),
    tooltip: `${node.id} · ${node.origin} · born at step ${node.birth_step}\n${node.text.slice(0, 240)}`,
    state: nodeState(node, bestId),
  }));
  if (withRejected) {
    for (const round of lineage.rounds) {
      round.candidates.forEach((candidate, i) => {
        if (candidate.accepted) return;
        nodes.push({
          id: `${round.id}#${i + 1}`,
          parent_id: round.parent_id,
          origin: "candidate",
          label: REJECTED_LABEL,
          tooltip: `Rejected at step ${round.step}: ${candidate.reason ?? "not selected"}\n${candidate.text.slice(0, 240)}`,
          state: "rejected",
        });
      });
    }
  }
  return nodes;
}
