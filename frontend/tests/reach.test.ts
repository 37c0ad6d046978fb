import { describe, expect, it } from "vitest";
import { parseReachStates, reachLine, reachTarget } from "../src/transforms/reach";

const states = {
  presets: {
    quick: { dataset: "builtin", corpus: "builtin", retriever: "dense", top_k: 3 },
    mine: { dataset: "data:mine", corpus: "data:wiki", retriever: "bm25", top_k: 5 },
  },
  teams: { "7": "alices-team" },
  low: 0.3,
};
const empty = { preset: "quick", team: "7", dataset: "", corpus: "", retriever: "", overrides: "" };

describe("reachTarget", () => {
  it("names no check for the built-in data", () => {
    expect(reachTarget(states, empty)).toBeNull();
  });

  it("takes each field's value, else the overrides', else the preset's", () => {
    expect(reachTarget(states, { ...empty, dataset: "data:mine", corpus: "data:wiki", retriever: "bm25" })).toEqual({
      questions: "data:mine",
      corpus: "data:wiki",
      method: "bm25",
      k: 3,
      team: "alices-team",
    });
    const overrides = '{"env.top_k": 4, "env.retriever": "dense", "env.corpus": "data:other"}';
    expect(reachTarget(states, { ...empty, dataset: "data:mine", overrides })).toMatchObject({
      corpus: "data:other",
      method: "dense",
      k: 4,
    });
    expect(reachTarget(states, { ...empty, preset: "mine", team: "9" })).toMatchObject({ k: 5, team: "" });
  });

  it("names none for a remote retriever, a bad k or overrides that are no JSON object", () => {
    const mine = { ...empty, preset: "mine" };
    expect(reachTarget(states, { ...mine, retriever: "remote" })).toBeNull();
    expect(reachTarget(states, { ...mine, overrides: '{"env.top_k": 0}' })).toBeNull();
    expect(reachTarget(states, { ...mine, overrides: "{not json" })).toMatchObject({ k: 5 });
  });
});

describe("reachLine", () => {
  const target = { questions: "data:mine", corpus: "data:wiki", method: "bm25", k: 3, team: "" };

  it("warns below the low share, and says the run may still be submitted", () => {
    const line = reachLine(target, { status: "done", topk_share: 0.125, anywhere_share: 0.625 }, 0.3);
    expect(line.level).toBe("warning");
    expect(line.text).toContain("Only 12.5 % of the training questions");
    expect(line.text).toContain("62.5 % anywhere");
    expect(line.text).toContain("You can still submit");
  });

  it("states the shares without a warning at or above it", () => {
    const line = reachLine(target, { status: "done", topk_share: 0.375, anywhere_share: 0.625 }, 0.3);
    expect(line).toEqual({
      text:
        "37.5 % of the training questions have a gold answer in the top 3 passages retrieved for the question " +
        "itself; 62.5 % anywhere in the corpus.",
      level: "info",
    });
  });

  it("offers the check when none was started, and follows one under way", () => {
    expect(reachLine(target, null, 0.3).level).toBe("offer");
    const busy = reachLine(
      target,
      { status: "running", stage: "scan", done: 5, total: 10, topk_share: null, anywhere_share: null },
      0.3,
    );
    expect(busy).toEqual({
      text: "Checking data:mine (train) against data:wiki, bm25, top 3: running (scan: 5 of 10)…",
      level: "busy",
    });
    expect(reachLine(target, { status: "waiting", topk_share: null, anywhere_share: null }, 0.3).text).toContain(
      "after the corpus's index",
    );
  });
});

describe("parseReachStates", () => {
  it("reads the page's attribute and refuses anything else", () => {
    expect(parseReachStates(JSON.stringify(states))?.low).toBe(0.3);
    expect(parseReachStates("[1")).toBeNull();
    expect(parseReachStates(undefined)).toBeNull();
  });
});
