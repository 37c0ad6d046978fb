import { describe, expect, it } from "vitest";
import { configDiff, flattenConfig, formatValue } from "../src/transforms/configDiff";

describe("flattenConfig", () => {
  it("joins nested keys with dots and keeps arrays, null and empty objects as values", () => {
    expect(flattenConfig({ seed: 1, grpo: { lr: 1e-6, clip: { eps: 0.2 } }, tags: ["a"], x: null, e: {} })).toEqual({
      seed: 1,
      "grpo.lr": 1e-6,
      "grpo.clip.eps": 0.2,
      tags: ["a"],
      x: null,
      e: {},
    });
  });

  it("returns nothing for a non-object config", () => {
    expect(flattenConfig(null)).toEqual({});
    expect(flattenConfig(3)).toEqual({});
  });
});

describe("configDiff", () => {
  it("lists only the fields that differ, with each config's value", () => {
    const diff = configDiff([
      { seed: 1, grpo: { lr: 1e-6, g: 5 } },
      { seed: 1, grpo: { lr: 3e-7, g: 5 } },
    ]);
    expect(diff).toEqual([{ field: "grpo.lr", values: [1e-6, 3e-7] }]);
  });

  it("reports a field one config lacks", () => {
    expect(configDiff([{ a: 1 }, { a: 1, b: { c: 2 } }])).toEqual([{ field: "b.c", values: [undefined, 2] }]);
  });

  it("compares array and object values by content, not identity or key order", () => {
    expect(
      configDiff([
        { l: [1, 2], o: [{ x: 1, y: 2 }] },
        { l: [1, 2], o: [{ y: 2, x: 1 }] },
      ]),
    ).toEqual([]);
    expect(configDiff([{ l: [1, 2] }, { l: [2, 1] }])).toHaveLength(1);
  });

  it("is empty for a single config", () => {
    expect(configDiff([{ a: 1 }])).toEqual([]);
  });
});

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
