import { describe, expect, it } from "vitest";
import { evolutionMarkers, lastPerStep, populationShares, weightHistory } from "../src/transforms/population";
import type { Candidate, Round, Snapshot } from "../src/types";

const member = (id: string, weight: number, probability = 0.5) => ({
  id,
  weight,
  probability,
  samples: 1,
  mean_reward: null,
});
const snap = (step: number, reason: string, members: ReturnType<typeof member>[]): Snapshot => ({
  step,
  reason,
  best_id: members[0]?.id ?? null,
  members,
});
const candidate = (accepted: boolean, score: number | null): Candidate => ({
  text: "x",
  valid: true,
  score,
  accepted,
  reason: accepted ? null : "low score",
  instruction_id: null,
});
const round = (step: number, candidates: Candidate[], n_questions: number | null): Round => ({
  id: `r${step}`,
  step,
  round: 1,
  proposer: "reflection",
  parent_id: "ins-0",
  critique: "",
  failures: [],
  optimizer_model: "m",
  input_tokens: 0,
  output_tokens: 0,
  cost_usd: null,
  parent_score: null,
  n_questions,
  candidates,
});

describe("lastPerStep", () => {
  it("keeps the last snapshot of each step, in step order", () => {
    const snapshots = [snap(2, "step", []), snap(1, "step", []), snap(2, "pruned", [])];
    expect(lastPerStep(snapshots).map((s) => `${s.step}:${s.reason}`)).toEqual(["1:step", "2:pruned"]);
  });
});

describe("populationShares", () => {
  it("divides each weight by the total and fills absent members with 0", () => {
    const shares = populationShares([
      snap(1, "step", [member("a", 0.3, 0.7), member("b", 0.1, 0.3)]),
      snap(2, "evolved", [member("a", 0.2, 0.6), member("c", 0.2, 0.4)]),
    ]);
    expect(shares.steps).toEqual([1, 2]);
    expect(shares.ids).toEqual(["a", "b", "c"]);
    expect(shares.weight.a).toEqual([expect.closeTo(0.75), 0.5]);
    expect(shares.weight.b).toEqual([expect.closeTo(0.25), 0]);
    expect(shares.weight.c).toEqual([0, 0.5]);
    expect(shares.probability.c).toEqual([0, 0.4]);
  });

  it("splits evenly when all weights are zero, and ignores negative weights", () => {
    const shares = populationShares([snap(0, "initialised", [member("a", 0), member("b", 0), member("c", 0)])]);
    expect(shares.weight.a[0]).toBeCloseTo(1 / 3);
    const negative = populationShares([snap(1, "step", [member("a", -0.2), member("b", 0.4)])]);
    expect(negative.weight.a).toEqual([0]);
    expect(negative.weight.b).toEqual([1]);
  });

  it("is empty for a run with no snapshots", () => {
    expect(populationShares([])).toEqual({ steps: [], ids: [], weight: {}, probability: {} });
  });
});

describe("weightHistory", () => {
  it("lists the instruction's weight at each step it was a member", () => {
    const snapshots = [
      snap(1, "step", [member("a", 0.1)]),
      snap(1, "pruned", [member("a", 0.2)]),
      snap(2, "step", [member("b", 0.4)]),
    ];
    expect(weightHistory(snapshots, "a")).toEqual([[1, 0.2]]);
    expect(weightHistory(snapshots, "zzz")).toEqual([]);
  });
});

describe("evolutionMarkers", () => {
  it("marks proposed and verified rounds and merged and pruned snapshots, by step", () => {
    const markers = evolutionMarkers(
      [round(15, [candidate(true, 0.4), candidate(false, 0.1)], 200), round(15, [candidate(false, null)], null)],
      [snap(5, "pruned", [member("a", 0)]), snap(15, "evolved", [member("a", 0)]), snap(16, "step", [])],
    );
    expect(markers.map((m) => [m.step, m.kind, m.count])).toEqual([
      [5, "pruned", 1],
      [15, "proposed", 2],
      [15, "verified", 1],
      [15, "merged", 1],
    ]);
    expect(markers[2].detail).toBe("1 of 2 accepted");
  });

  it("has no markers without rounds or evolution snapshots", () => {
    expect(evolutionMarkers([], [snap(1, "step", [])])).toEqual([]);
  });
});
