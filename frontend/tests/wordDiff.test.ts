import { describe, expect, it } from "vitest";
import { sharedOpening, tokenize, wordDiff, wordsThatDiffer } from "../src/transforms/wordDiff";

const side = (parts: ReturnType<typeof wordDiff>, keep: "added" | "removed") =>
  parts
    .filter((p) => p.op === "same" || p.op === keep)
    .map((p) => p.text)
    .join("");

describe("tokenize", () => {
  it("keeps the white space so the tokens join back to the text", () => {
    const text = "  Think first,\nthen  search. ";
    expect(tokenize(text).join("")).toBe(text);
    expect(tokenize("")).toEqual([]);
  });
});

describe("wordDiff", () => {
  it("reports no change for equal texts", () => {
    expect(wordDiff("search then answer", "search then answer")).toEqual([{ op: "same", text: "search then answer" }]);
  });

  it("marks an inserted and a removed word and keeps the rest", () => {
    const parts = wordDiff("Always search before you answer.", "Always search twice before answer.");
    expect(parts).toEqual([
      { op: "same", text: "Always search " },
      { op: "added", text: "twice " },
      { op: "same", text: "before " },
      { op: "removed", text: "you " },
      { op: "same", text: "answer." },
    ]);
  });

  it("finds the longest common subsequence, not just a common prefix", () => {
    const parts = wordDiff("a b c d e", "x b c y e");
    expect(parts.filter((p) => p.op === "same").map((p) => p.text.trim())).toEqual(["b c", "e"]);
  });

  it("rebuilds both texts from its parts (the new side exactly)", () => {
    const before = "Use <search> query </search> when unsure, then <answer> x </answer>.";
    const after = "When unsure, use <search> a short query </search>; finish with <answer> x </answer>.";
    const parts = wordDiff(before, after);
    expect(side(parts, "added")).toBe(after);
    expect(side(parts, "removed").split(/\s+/)).toEqual(before.split(/\s+/));
  });

  it("handles empty texts on either side", () => {
    expect(wordDiff("", "new words")).toEqual([{ op: "added", text: "new words" }]);
    expect(wordDiff("old words", "")).toEqual([{ op: "removed", text: "old words" }]);
    expect(wordDiff("", "")).toEqual([]);
  });

  it("does not count re-wrapped white space as a change", () => {
    expect(wordDiff("one two\nthree", "one two three").every((p) => p.op === "same")).toBe(true);
  });
});

describe("wordsThatDiffer", () => {
  it("starts where the text stops repeating its parent, keeping one shared word", () => {
    expect(
      wordsThatDiffer("Search first. Then answer with the exact name.", "Search first. Then answer briefly."),
    ).toBe("… answer with the exact name.");
  });

  it("shows a root's opening words and cuts long ends", () => {
    expect(wordsThatDiffer("a b c d", null, 2)).toBe("a b …");
    expect(wordsThatDiffer("a  b", "a b")).toBe("(same text)");
  });
});

describe("sharedOpening", () => {
  it("is the words every text opens with", () => {
    expect(sharedOpening(["Search first. Then answer.", "Search first. Check the dates.", "Search first."])).toBe(
      "Search first.",
    );
    expect(sharedOpening(["a b", "c d"])).toBe("");
    expect(sharedOpening(["only one"])).toBe("");
  });
});
