import { describe, expect, it } from "vitest";
import { ema, points } from "../src/transforms/smoothing";

describe("ema", () => {
  it("returns the raw values when the weight is 0", () => {
    expect(ema([1, 5, 2], 0)).toEqual([1, 5, 2]);
  });

  it("keeps one value per step so the smoothed curve lines up with the raw one", () => {
    const raw = [0.1, null, 0.3, 0.2, null];
    const smooth = ema(raw, 0.6);
    expect(smooth).toHaveLength(raw.length);
    expect(smooth[1]).toBeNull();
    expect(smooth[4]).toBeNull();
  });

  it("starts at the first raw value instead of being pulled towards zero", () => {
    expect(ema([0.8, 0.8, 0.8], 0.9)).toEqual([0.8, 0.8, 0.8].map((v) => expect.closeTo(v, 10)));
  });

  it("lags behind a jump and approaches it", () => {
    const smooth = ema([0, 0, 0, 1, 1, 1, 1, 1], 0.5) as number[];
    expect(smooth[3]).toBeGreaterThan(0);
    expect(smooth[3]).toBeLessThan(1);
    expect(smooth[7]).toBeGreaterThan(smooth[4]);
    expect(smooth[7]).toBeLessThan(1);
  });

  it("skips missing values without resetting the average", () => {
    const [a, , c] = ema([1, null, 3], 0.5) as number[];
    expect(a).toBeCloseTo(1);
    // (0.5*0.5*1 + 0.5*3) / (1 - 0.25) = 2.333…: the 1 still counts after the gap.
    expect(c).toBeCloseTo(7 / 3);
  });

  it("treats non-finite values as missing", () => {
    expect(ema([Number.NaN, 2], 0.5)).toEqual([null, 2]);
  });
});

describe("points", () => {
  it("pairs steps with values and drops missing ones", () => {
    expect(points([1, 2, 3], [0.5, null, 0.7])).toEqual([
      [1, 0.5],
      [3, 0.7],
    ]);
  });
});
