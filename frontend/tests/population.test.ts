import { describe, expect, it } from "vitest";
import {
  evolutionMarkers,
  formatInterval,
  lastPerStep,
  memberCounts,
  sameMembers,
  membersAt,
  populationShares,
  recentRewardsAt,
  resolution,
  weightHistory,
  type RecentReward,
} from "../src/transforms/population";
import type { Candidate, PopulationHistory, Round } from "../src/types";

type Row = [id: string, weight: number, probability?: number];

/** The column-wise history the API sends for these snapshots (rows: [step, reason, members]); instructions in order
 * of first membership, as the server orders them. */
function history(snapshots: [number, string, Row[]][]): PopulationHistory {
  const columns = new Map<string, { start: number; weight: (number | null)[]; probability: (number | null)[] }>();
  snapshots.forEach(([, , members], index) => {
    for (const [id, weight, probability = 0.5] of members) {
      const entry = columns.get(id) ?? { start: index, weight: [], probability: [] };
      while (entry.start + entry.weight.length < index) {
        entry.weight.push(null);
        entry.probability.push(null);
      }
      entry.weight.push(weight);
      entry.probability.push(probability);
      columns.set(id, entry);
    }
  });
  return {
    snapshots: {
      step: snapshots.map(([step]) => step),
      reason: snapshots.map(([, reason]) => reason),
      best_id: snapshots.map(([, , members]) => members[0]?.[0] ?? null),
      time: snapshots.map(() => "2026-01-01T00:00:00Z"),
    },
    instructions: [...columns].map(([id, { start, weight, probability }]) => ({
      id,
      start,
      weight,
      probability,
      samples: weight.map((w) => (w === null ? null : 1)),
      mean_reward: weight.map(() => null),
      recent_reward: weight.map(() => null),
      recent_low: weight.map(() => null),
      recent_high: weight.map(() => null),
      recent_samples: weight.map(() => null),
    })),
  };
}

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
  it("picks the last snapshot of each step, in step order", () => {
    const h = history([
      [1, "step", []],
      [2, "step", []],
      [2, "pruned", []],
      [3, "step", []],
    ]);
    expect(lastPerStep(h)).toEqual([0, 2, 3]);
  });
});

describe("membersAt", () => {
  it("lists a snapshot's members heaviest first, skipping the gaps of the others", () => {
    const h = history([
      [
        1,
        "step",
        [
          ["a", 0.2, 0.4],
          ["b", 0.3, 0.6],
        ],
      ],
      [2, "pruned", [["a", 0.2, 1]]],
      [
        3,
        "step",
        [
          ["a", 0.1, 0.2],
          ["b", 0.4, 0.8],
        ],
      ],
    ]);
    expect(membersAt(h, 0).map((m) => [m.id, m.weight, m.probability])).toEqual([
      ["b", 0.3, 0.6],
      ["a", 0.2, 0.4],
    ]);
    expect(membersAt(h, 1).map((m) => m.id)).toEqual(["a"]);
    expect(membersAt(h, 2)[0]).toEqual({ id: "b", weight: 0.4, probability: 0.8, samples: 1, mean_reward: null });
    expect(memberCounts(h)).toEqual([2, 1, 2]);
  });
});

describe("populationShares", () => {
  it("divides each weight by the total and fills absent members with 0", () => {
    const shares = populationShares(
      history([
        [
          1,
          "step",
          [
            ["a", 0.3, 0.7],
            ["b", 0.1, 0.3],
          ],
        ],
        [
          2,
          "evolved",
          [
            ["a", 0.2, 0.6],
            ["c", 0.2, 0.4],
          ],
        ],
      ]),
    );
    expect(shares.steps).toEqual([1, 2]);
    expect(shares.ids).toEqual(["a", "b", "c"]);
    expect(shares.weight.a).toEqual([expect.closeTo(0.75), 0.5]);
    expect(shares.weight.b).toEqual([expect.closeTo(0.25), 0]);
    expect(shares.weight.c).toEqual([0, 0.5]);
    expect(shares.probability.c).toEqual([0, 0.4]);
  });

  it("uses the snapshot that ends each step and leaves out who was only in an earlier one", () => {
    const shares = populationShares(
      history([
        [
          1,
          "step",
          [
            ["a", 0.5],
            ["b", 0.5],
          ],
        ],
        [
          2,
          "pruned",
          [
            ["a", 0.5],
            ["b", 0.5],
          ],
        ],
        [
          2,
          "evolved",
          [
            ["a", 0.5],
            ["c", 1.5],
          ],
        ],
      ]),
    );
    expect(shares.steps).toEqual([1, 2]);
    expect(shares.ids).toEqual(["a", "b", "c"]);
    expect(shares.weight.c).toEqual([0, 0.75]);
    const only = populationShares(
      history([
        [1, "pruned", [["x", 1]]],
        [1, "step", [["a", 1]]],
      ]),
    );
    expect(only.ids).toEqual(["a"]);
  });

  it("splits evenly when all weights are zero, and ignores negative weights", () => {
    const shares = populationShares(
      history([
        [
          0,
          "initialised",
          [
            ["a", 0],
            ["b", 0],
            ["c", 0],
          ],
        ],
      ]),
    );
    expect(shares.weight.a[0]).toBeCloseTo(1 / 3);
    const negative = populationShares(
      history([
        [
          1,
          "step",
          [
            ["a", -0.2],
            ["b", 0.4],
          ],
        ],
      ]),
    );
    expect(negative.weight.a).toEqual([0]);
    expect(negative.weight.b).toEqual([1]);
  });

  it("is empty for a run with no snapshots", () => {
    expect(populationShares(history([]))).toEqual({ steps: [], ids: [], weight: {}, probability: {} });
  });
});

describe("weightHistory", () => {
  it("lists the instruction's weight at the end of each step it was a member", () => {
    const h = history([
      [1, "step", [["a", 0.1]]],
      [1, "pruned", [["a", 0.2]]],
      [2, "step", [["b", 0.4]]],
      [3, "step", [["a", 0.3]]],
    ]);
    expect(weightHistory(h, "a")).toEqual([
      [1, 0.2],
      [3, 0.3],
    ]);
    expect(weightHistory(h, "zzz")).toEqual([]);
  });
});

describe("evolutionMarkers", () => {
  it("marks proposed and verified rounds and merged and pruned snapshots, by step", () => {
    const markers = evolutionMarkers(
      [round(15, [candidate(true, 0.4), candidate(false, 0.1)], 200), round(15, [candidate(false, null)], null)],
      history([
        [5, "pruned", [["a", 0]]],
        [
          15,
          "evolved",
          [
            ["a", 0],
            ["b", 1],
          ],
        ],
        [16, "step", []],
      ]),
    );
    expect(markers.map((m) => [m.step, m.kind, m.count])).toEqual([
      [5, "pruned", 1],
      [15, "proposed", 2],
      [15, "verified", 1],
      [15, "merged", 1],
    ]);
    expect(markers[2].detail).toBe("1 of 2 accepted");
    expect([markers[0].detail, markers[3].detail]).toEqual(["1 left", "2 members"]);
  });

  it("has no markers without rounds or evolution snapshots", () => {
    expect(evolutionMarkers([], history([[1, "step", []]]))).toEqual([]);
  });
});

describe("sameMembers", () => {
  it("compares the ids as sets", () => {
    expect(sameMembers(["ins-0001", "ins-0000"], ["ins-0000", "ins-0001"])).toBe(true);
    expect(sameMembers([], ["ins-0000"])).toBe(false);
    expect(sameMembers(["ins-0000", "ins-0002"], ["ins-0000", "ins-0001"])).toBe(false);
  });
});

describe("recent rewards and whether the population can tell its members apart (#45 item 2)", () => {
  const reward = (id: string, mean: number, low: number | null, high: number | null, n = 8): RecentReward => ({
    id,
    mean,
    low,
    high,
    n,
  });

  it("reads each member's recent reward, interval and questions at a snapshot, in membersAt's order", () => {
    const h = history([
      [
        1,
        "step",
        [
          ["a", 0.2],
          ["b", 0.3],
        ],
      ],
    ]);
    const [a, b] = h.instructions;
    Object.assign(a, { recent_reward: [0.2], recent_low: [0.1], recent_high: [0.3], recent_samples: [6] });
    Object.assign(b, { recent_reward: [0.3], recent_low: [null], recent_high: [null], recent_samples: [1] });
    expect(recentRewardsAt(h, 0)).toEqual([
      { id: "b", mean: 0.3, low: null, high: null, n: 1 },
      { id: "a", mean: 0.2, low: 0.1, high: 0.3, n: 6 },
    ]);
    expect(formatInterval(recentRewardsAt(h, 0)[1])).toBe("0.200 [0.100, 0.300]");
    expect(formatInterval(recentRewardsAt(h, 0)[0])).toBe("0.300");
  });

  it("reads a population sent before recent rewards were kept as having none", () => {
    const h = history([[1, "step", [["a", 0.2]]]]);
    for (const key of ["recent_reward", "recent_low", "recent_high", "recent_samples"] as const) {
      delete (h.instructions[0] as Partial<(typeof h.instructions)[0]>)[key];
    }
    expect(recentRewardsAt(h, 0)).toEqual([{ id: "a", mean: null, low: null, high: null, n: 0 }]);
    expect(formatInterval(recentRewardsAt(h, 0)[0])).toBe("—");
  });

  it("says the population cannot tell its members apart while their intervals overlap the best's", () => {
    const verdict = resolution([reward("a", 0.2, 0.1, 0.3), reward("b", 0.15, 0.05, 0.25)], "a");
    expect(verdict.kind).toBe("none");
    expect(verdict.tied).toEqual(["b"]);
    expect(verdict.text).toMatch(/cannot yet tell its instructions apart/);
  });

  it("says which members it can tell from the best once their intervals lie below", () => {
    const rewards = [reward("a", 0.5, 0.4, 0.6), reward("b", 0.2, 0.1, 0.3), reward("c", 0.45, 0.3, 0.6)];
    const some = resolution(rewards, "a");
    expect([some.kind, some.below, some.tied]).toEqual(["some", ["b"], ["c"]]);
    expect(some.text).toMatch(/can tell the best \(a\) from b/);
    const all = resolution(rewards.slice(0, 2), "a");
    expect(all.kind).toBe("all");
    expect(all.text).toMatch(/can tell its instructions apart/);
  });

  it("cannot say anything with one member, or without the best's interval", () => {
    expect(resolution([reward("a", 0.2, 0.1, 0.3)], "a").kind).toBe("single");
    const unknown = resolution([reward("a", 0.2, null, null, 1), reward("b", 0.1, 0.0, 0.2)], "a");
    expect([unknown.kind, unknown.tied]).toEqual(["unknown", ["b"]]);
  });
});
