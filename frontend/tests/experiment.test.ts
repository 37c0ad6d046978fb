import { describe, expect, it } from "vitest";
import { armEms, armStyle, bandPoints, estimateQuery, parseDetail } from "../src/transforms/experiment";
import type { ArmResult, ExperimentDetail, ExperimentResults } from "../src/types";

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
      without_variance: false,
      seeds_needed: { difference: 0.05, seeds: 9, reason: null },
    };
    const results: ExperimentResults = {
      baseline: "static",
      level: 0.95,
      benchmarks: ["builtin"],
      arms: [arm("static", 0.3), arm("inspo", 0.4, comparison), arm("random-pool", null)],
      missing: [],
      complete: true,
      machines: [],
      machines_warning: null,
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

  it("gives each arm its own dash and symbol, so an arm whose line lies under another's still shows", () => {
    const styles = [0, 1, 2, 3].map(armStyle);
    expect(new Set(styles.map((s) => JSON.stringify(s.dash))).size).toBe(4);
    expect(new Set(styles.map((s) => s.symbol)).size).toBe(4);
    expect(styles[0].symbolSize).toBeGreaterThan(styles[1].symbolSize);
    expect(armStyle(4).dash).toEqual(styles[0].dash);
  });

  it("reads the experiment's JSON the page carries", () => {
    const detail = { state: "running", runs: [], counts: {} } as unknown as ExperimentDetail;
    expect(parseDetail(JSON.stringify(detail))?.state).toBe("running");
    expect(parseDetail(null)).toBeNull();
    expect(parseDetail("")).toBeNull();
  });

  it("asks the API for the estimate with the form's values, and not while the seed count is not a whole number", () => {
    expect(estimateQuery("smoke", 2, "3", "alice")?.toString()).toBe("preset=smoke&arms=2&seeds=3&team=alice");
    expect(estimateQuery("smoke", 2, "3", undefined)?.has("team")).toBe(false);
    expect(estimateQuery("smoke", 2, "1000000", undefined)?.get("seeds")).toBe("1000000");
    expect(estimateQuery("smoke", 2, "1e30", undefined)?.get("seeds")).toBe("1000000000");
    expect(estimateQuery("smoke", 2, "", undefined)).toBeNull();
    expect(estimateQuery("smoke", 2, "2.5", undefined)).toBeNull();
    expect(estimateQuery("smoke", 2, "-1", undefined)).toBeNull();
  });
});
