import { describe, expect, it } from "vitest";
import { axisNumber, numberLabels } from "../src/transforms/axis";

describe("axisNumber", () => {
  it("drops floating-point noise from a tick", () => {
    expect(axisNumber(48.00000000000001)).toBe("48");
    expect(axisNumber(0.30000000000000004)).toBe("0.3");
    expect(axisNumber(-2.4999999999999996)).toBe("-2.5");
    expect(axisNumber(0)).toBe("0");
  });

  it("shortens thousands and millions and writes tiny values with an exponent", () => {
    expect(axisNumber(12000)).toBe("12k");
    expect(axisNumber(1500000.0000000002)).toBe("1.5M");
    expect(axisNumber(0.0000123456)).toBe("1.23e-5");
    expect(axisNumber(1234)).toBe("1234");
  });

  it("labels nothing that is not a finite number", () => {
    expect(axisNumber(Number.NaN)).toBe("");
    expect(axisNumber(Number.POSITIVE_INFINITY)).toBe("");
  });

  it("is the formatter of a numeric axis's labels", () => {
    expect(numberLabels.formatter(48.00000000000001)).toBe("48");
  });
});
