import { describe, expect, it } from "vitest";
import { estimateEta, formatDuration, stepDurations } from "../src/transforms/eta";

describe("estimateEta", () => {
  it("multiplies the steps left by the mean of the recent step durations", () => {
    expect(
      estimateEta({ step: 10, totalSteps: 30, stepSeconds: [100, 100, 2, 4], elapsedSeconds: 999, window: 2 }),
    ).toBe(60);
  });

  it("falls back to the elapsed time per step without timings", () => {
    expect(estimateEta({ step: 5, totalSteps: 20, stepSeconds: [], elapsedSeconds: 50 })).toBe(150);
  });

  it("ignores zero and non-finite durations", () => {
    expect(estimateEta({ step: 1, totalSteps: 3, stepSeconds: [0, Number.NaN, 5], elapsedSeconds: null })).toBe(10);
  });

  it("has no estimate before the first step or when nothing is left", () => {
    expect(estimateEta({ step: 0, totalSteps: 10, stepSeconds: [], elapsedSeconds: 30 })).toBeNull();
    expect(estimateEta({ step: 10, totalSteps: 10, stepSeconds: [3], elapsedSeconds: 30 })).toBeNull();
    expect(estimateEta({ step: 2, totalSteps: 10, stepSeconds: [], elapsedSeconds: null })).toBeNull();
  });
});

describe("formatDuration", () => {
  it.each([
    [42.4, "42 s"],
    [720, "12 min"],
    [3 * 3600 + 5 * 60, "3 h 05 min"],
    [52 * 3600, "2 d 4 h"],
    [-5, "0 s"],
  ])("formats %s seconds as %s", (seconds, text) => {
    expect(formatDuration(seconds)).toBe(text);
  });
});

describe("stepDurations", () => {
  it("adds up the timed parts of each step, skipping gaps", () => {
    expect(stepDurations({ rollout: [1, 2, null], update: [0.5, 0.5, 1] }, 3)).toEqual([1.5, 2.5, 1]);
    expect(stepDurations(undefined, 2)).toEqual([0, 0]);
  });
});
