import { describe, expect, it } from "vitest";
import { indexStatus, parseIndexStates } from "../src/transforms/indexStatus";

const states = {
  presets: { quick: ["builtin", "dense"] as [string, string] },
  texts: {
    builtin: { bm25: "built-in: seconds", dense: "built-in: seconds" },
    "data:wiki": { bm25: "data:wiki@1 has a bm25 index", dense: "data:wiki@1 has no dense index yet" },
  },
};

describe("indexStatus", () => {
  it("names the chosen corpus's index for the chosen retriever", () => {
    expect(indexStatus(states, "quick", "data:wiki", "bm25")).toBe("data:wiki@1 has a bm25 index");
    expect(indexStatus(states, "quick", "data:wiki", "dense")).toBe("data:wiki@1 has no dense index yet");
  });
  it("reads an empty choice as the preset's", () => {
    expect(indexStatus(states, "quick", "data:wiki", "")).toBe("data:wiki@1 has no dense index yet");
    expect(indexStatus(states, "quick", "", "bm25")).toBe("built-in: seconds");
  });
  it("says nothing of what it does not know", () => {
    expect(indexStatus(states, "quick", "data:gone", "bm25")).toBe("");
    expect(indexStatus(parseIndexStates("not json"), "quick", "", "")).toBe("");
    expect(parseIndexStates(JSON.stringify(states))).toEqual(states);
  });
});
