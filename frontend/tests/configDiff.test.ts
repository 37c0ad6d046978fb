import { describe, expect, it } from "vitest";
import { formatValue } from "../src/transforms/configDiff";

describe("formatValue", () => {
  it("shows strings bare, other values as JSON and a missing value as a dash", () => {
    expect([formatValue("torch"), formatValue(5e-7), formatValue([1]), formatValue(undefined)]).toEqual([
      "torch",
      "5e-7",
      "[1]",
      "—",
    ]);
  });
});
