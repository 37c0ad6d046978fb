import { describe, expect, it } from "vitest";
import { armEms, bandPoints, costText } from "../src/transforms/experiment";
import type { ArmResult, ExperimentResults } from "../src/types";

function arm(name: string, mean: number | null, comparison: ArmResult["comparison"] = null): ArmResult {
  return {
    arm: name,
    overrides: {},
    seeds: [0, 1],
    mean_em: mean,
    mean_f1: null,
    per_seed_em: { "0": 0.2, "1": 0.4 },
    questions: 8,
    reward_last: null,
    reward_curve: { steps: [1, 2], mean: [0.2, 0.3], low: [0.1, 0.2], high: [0.3, 0.5], seeds: [2, 2] },
    comparison,
    verdict: null,
    benchmarks: [],
  };
}

describe("experiment transforms", () => {
  it("places the difference's interval around the arm's own mean, and leaves out arms with no result", () => {
    const comparison = {
      mean: 0.1,
      low: -0.05,
      high: 0.2,
      level: 0.95,
      seeds: 2,
      questions: 8,
      benchmark_questions: {},
      per_seed: {},
      method: "t",
      excludes_zero: false,
      seeds_needed: { difference: 0.05, seeds: 9 },
    };
    const results: ExperimentResults = {
      baseline: "static",
      level: 0.95,
      benchmarks: ["builtin"],
      arms: [arm("static", 0.3), arm("inspo", 0.4, comparison), arm("random-pool", null)],
      missing: [],
      complete: true,
    };
    const ems = armEms(results);
    expect(ems.map((e) => e.arm)).toEqual(["static", "inspo"]);
    expect(ems[0].low).toBeNull();
    expect(ems[1].low).toBeCloseTo(0.25);
    expect(ems[1].high).toBeCloseTo(0.5);
    expect(ems[1].perSeed).toEqual([0.2, 0.4]);
  });

  it("stacks the band as the lowest seed plus the width to the highest", () => {
    const band = bandPoints(arm("static", 0.3).reward_curve);
    expect(band.low).toEqual([
      [1, 0.1],
      [2, 0.2],
    ]);
    expect(band.width[1][1]).toBeCloseTo(0.3);
  });

  it("says the cost as the server does", () => {
    expect(costText("smoke", 4, 2)).toBe("4 runs × ~2 min ≈ 8 min of worker time");
    expect(costText("cpu-demo", 12, 25)).toBe("12 runs × ~25 min ≈ 5.0 h of worker time");
    expect(costText("paper", 2, null)).toBe("2 runs of the paper preset: GPU hours each, no estimate");
    expect(costText("quick", 2, undefined)).toBe("2 runs of the quick preset: no estimate yet");
  });
});
