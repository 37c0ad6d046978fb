import { describe, expect, it } from "vitest";
import { graphNodes, nodeLabel, nodeState, REJECTED_LABEL } from "../src/transforms/lineageNodes";
import type { Candidate, Lineage, LineageNode } from "../src/types";

const node = (id: string, parent_id: string | null, retired_step: number | null = null): LineageNode => ({
  id,
  text: `text of ${id}`,
  origin: parent_id ? "reflection" : "seed",
  author: null,
  pinned: false,
  parent_id,
  birth_step: parent_id ? 2 : 0,
  verify_score: null,
  round_id: null,
  critique: null,
  retired_step,
  retired_reason: null,
});
const candidate = (accepted: boolean): Candidate => ({
  text: "candidate",
  valid: true,
  score: 0.1,
  accepted,
  reason: accepted ? null : "score below the parent's",
  instruction_id: accepted ? "ins-0002" : null,
});
const lineage: Lineage = {
  nodes: [node("ins-0000", null), node("ins-0001", "ins-0000", 4), node("ins-0002", "ins-0000"), node("custom", null)],
  edges: [],
  rounds: [
    {
      id: "r00002-001",
      step: 2,
      round: 1,
      proposer: "reflection",
      parent_id: "ins-0000",
      critique: "",
      failures: [],
      optimizer_model: "m",
      input_tokens: 0,
      output_tokens: 0,
      cost_usd: null,
      parent_score: null,
      n_questions: 4,
      candidates: [candidate(true), candidate(false)],
    },
  ],
};

describe("nodeLabel", () => {
  it("shortens engine ids to their number and keeps other ids", () => {
    expect([nodeLabel("ins-0007"), nodeLabel("ins-0000"), nodeLabel("ins-12345"), nodeLabel("custom")]).toEqual([
      "#7",
      "#0",
      "#12345",
      "custom",
    ]);
  });
});

describe("graphNodes", () => {
  it("labels every node, not only the seed", () => {
    const nodes = graphNodes(lineage, "ins-0002", true);
    expect(nodes.map((n) => [n.id, n.label, n.state])).toEqual([
      ["ins-0000", "#0", "alive"],
      ["ins-0001", "#1", "pruned"],
      ["ins-0002", "#2", "best"],
      ["custom", "custom", "alive"],
      ["r00002-001#2", REJECTED_LABEL, "rejected"],
    ]);
    expect(nodes.every((n) => n.label.length > 0)).toBe(true);
  });

  it("leaves the rejected candidates out unless asked", () => {
    expect(graphNodes(lineage, null, false).map((n) => n.id)).toEqual(["ins-0000", "ins-0001", "ins-0002", "custom"]);
    expect(nodeState(lineage.nodes[1], null)).toBe("pruned");
  });
});
