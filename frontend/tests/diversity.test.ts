import { describe, expect, it } from "vitest";
import { alarmText, bannerAlarm, lastRecordPerStep } from "../src/transforms/diversity";
import type { Alarm, Diversity, DiversitySeries } from "../src/types";

function series(rows: [step: number, reason: string, cosine: number | null, strategies: number][]): DiversitySeries {
  return {
    step: rows.map(([step]) => step),
    reason: rows.map(([, reason]) => reason),
    size: rows.map(() => 3),
    cosine_mean: rows.map(([, , cosine]) => cosine),
    cosine_min: rows.map(([, , cosine]) => (cosine === null ? null : cosine - 0.1)),
    cosine_max: rows.map(([, , cosine]) => cosine),
    jaccard_mean: rows.map(() => 0.5),
    strategies: rows.map(([, , , strategies]) => strategies),
    entropy: rows.map(() => 1),
    entropy_normalised: rows.map(() => 0.9),
  };
}

const ALARM: Alarm = {
  id: 1,
  step: 12,
  since_step: 10,
  reasons: ["cosine"],
  cosine_min: 0.9871,
  entropy_normalised: 0.6,
  collapse_cosine: 0.95,
  collapse_entropy: 0.05,
  cleared_step: null,
  active: true,
  acknowledged_by: null,
  acknowledged_at: null,
  time: "2026-01-01T00:00:00Z",
};

describe("lastRecordPerStep", () => {
  it("keeps the record that ends each step, in step order", () => {
    const points = lastRecordPerStep(
      series([
        [0, "initialised", 0.4, 3],
        [1, "step", 0.4, 3],
        [2, "step", 0.4, 3],
        [2, "pruned", null, 1],
        [2, "evolved", 0.97, 1],
      ]),
    );
    expect(points.steps).toEqual([0, 1, 2]);
    expect(points.cosineMean).toEqual([0.4, 0.4, 0.97]);
    expect(points.strategies).toEqual([3, 3, 1]);
  });

  it("keeps a population of one's missing pairwise measures missing", () => {
    expect(lastRecordPerStep(series([[5, "step", null, 1]])).cosineMin).toEqual([null]);
  });
});

describe("bannerAlarm", () => {
  const diversity = (collapsed: Alarm | null): Diversity => ({
    series: series([]),
    settings: {
      diversity: true,
      strategy_cosine: 0.9,
      collapse_cosine: 0.95,
      collapse_entropy: 0.05,
      collapse_steps: 3,
    },
    alarms: collapsed ? [collapsed] : [],
    collapsed,
  });

  it("shows the active alarm until someone acknowledges it", () => {
    expect(bannerAlarm(diversity(ALARM))).toBe(ALARM);
    expect(bannerAlarm(diversity({ ...ALARM, acknowledged_by: "mia", acknowledged_at: "2026-01-01T01:00:00Z" }))).toBe(
      null,
    );
    expect(bannerAlarm(diversity(null))).toBe(null);
  });
});

describe("alarmText", () => {
  it("says when and why, with the numbers", () => {
    expect(alarmText(ALARM)).toBe(
      "The population collapsed at step 12 (collapsed since step 10): every pair of living instructions is at least " +
        "0.95 alike (the least alike pair: 0.987).",
    );
  });

  it("joins both reasons and says when it recovered", () => {
    const text = alarmText({
      ...ALARM,
      since_step: 12,
      reasons: ["cosine", "entropy"],
      entropy_normalised: 0.012,
      cleared_step: 15,
    });
    expect(text).toContain("at step 12: every pair");
    expect(text).toContain("its entropy is 1.2 % of the maximum (the alarm is at ≤ 5.0 %)");
    expect(text).toMatch(/It recovered at step 15\.$/);
  });
});
