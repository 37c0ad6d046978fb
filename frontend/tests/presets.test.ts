import { describe, expect, it } from "vitest";
import { parsePresets, presetView, renamedDefault } from "../src/transforms/presets";

const presets = {
  smoke: { total_steps: "4", lr: "1e-05", optimizer_endpoint: null },
  paper: { total_steps: "300", lr: "1e-06", optimizer_endpoint: null },
};

describe("presetView", () => {
  it("gives each field the preset's text, placeholder and keep-choice label", () => {
    expect(presetView(presets, "smoke")).toEqual([
      { field: "total_steps", text: "4", placeholder: "4", choice: "(preset: 4)" },
      { field: "lr", text: "1e-05", placeholder: "1e-05", choice: "(preset: 1e-05)" },
      { field: "optimizer_endpoint", text: "—", placeholder: "", choice: "(preset)" },
    ]);
  });

  it("follows the chosen preset", () => {
    expect(presetView(presets, "paper").map((view) => view.text)).toEqual(["300", "1e-06", "—"]);
  });

  it("has nothing for a preset it does not know, including inherited names", () => {
    expect(presetView(presets, "nope")).toEqual([]);
    expect(presetView(presets, "constructor")).toEqual([]);
  });
});

describe("parsePresets", () => {
  it("reads the data attribute and refuses anything but an object", () => {
    expect(parsePresets(JSON.stringify(presets))).toEqual(presets);
    for (const bad of [undefined, "", "not json", "[1]", "null", "3"]) expect(parsePresets(bad)).toEqual({});
  });
});

describe("renamedDefault", () => {
  it("follows the preset while the name is the form's default", () => {
    expect(renamedDefault("quick-20250301-1412", "quick", "paper")).toBe("paper-20250301-1412");
    expect(renamedDefault("cpu-demo-20250301-1412", "cpu-demo", "smoke")).toBe("smoke-20250301-1412");
  });

  it("keeps a name the user wrote", () => {
    expect(renamedDefault("my first run", "quick", "paper")).toBe("my first run");
    expect(renamedDefault("quick-run", "quick", "paper")).toBe("quick-run");
    expect(renamedDefault("smoke-20250301-1412", "quick", "paper")).toBe("smoke-20250301-1412");
    expect(renamedDefault("", "quick", "paper")).toBe("");
  });
});
