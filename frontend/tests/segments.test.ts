import { describe, expect, it } from "vitest";
import { givenLength, segmentResponse } from "../src/transforms/segments";

describe("segmentResponse", () => {
  it("splits a full multi-turn trajectory into its tagged parts in order", () => {
    const response =
      "<think> need the capital </think>\n<search> capital of France </search>\n" +
      "<information>Doc 1: Paris is the capital.</information>\n<answer> Paris </answer>";
    expect(segmentResponse(response)).toEqual([
      { kind: "think", text: "need the capital" },
      { kind: "search", text: "capital of France" },
      { kind: "information", text: "Doc 1: Paris is the capital." },
      { kind: "answer", text: "Paris" },
    ]);
  });

  it("keeps untagged text between the parts and drops white space only gaps", () => {
    expect(segmentResponse("Let me look. <search>q</search> \n ok")).toEqual([
      { kind: "text", text: "Let me look." },
      { kind: "search", text: "q" },
      { kind: "text", text: "ok" },
    ]);
  });

  it("marks a part whose closing tag never came", () => {
    expect(segmentResponse("<think>still thinking")).toEqual([
      { kind: "think", text: "still thinking", unclosed: true },
    ]);
  });

  it("leaves markup inside a part as literal text, including a nested opening tag", () => {
    const segments = segmentResponse("<think>use <search> next <b>bold</b></think>");
    expect(segments).toEqual([{ kind: "think", text: "use <search> next <b>bold</b>" }]);
  });

  it("treats stray closing tags and unknown tags as text", () => {
    expect(segmentResponse("</answer> <tool>x</tool>")).toEqual([{ kind: "text", text: "</answer> <tool>x</tool>" }]);
  });

  it("accepts upper-case tags", () => {
    expect(segmentResponse("<ANSWER>42</ANSWER>")).toEqual([{ kind: "answer", text: "42" }]);
  });

  it("returns nothing for an empty response", () => {
    expect(segmentResponse("")).toEqual([]);
  });
});

describe("segmentResponse with text that changes length when lower-cased", () => {
  it("still cuts at the closing tag", () => {
    expect(segmentResponse("<answer>İstanbul</answer> done")).toEqual([
      { kind: "answer", text: "İstanbul" },
      { kind: "text", text: "done" },
    ]);
  });
});

describe("the text the preset opens every reply with (#45 item 1)", () => {
  const prefix = "<think> I will search for what the question asks about. </think>\n<search>";
  const response = `${prefix} capital of Peru </search>\n<information>Lima is the capital.</information>\n<answer> Lima </answer>`;

  it("is as long as env.response_prefix when the reply opens with it, else nothing", () => {
    expect(givenLength(response, prefix)).toBe(prefix.length);
    expect(givenLength("<think> mine </think>", prefix)).toBe(0);
    expect(givenLength(response, "")).toBe(0);
  });

  it("marks the parts that lie wholly in it as given, not the model's words that complete it", () => {
    expect(segmentResponse(response, givenLength(response, prefix))).toEqual([
      { kind: "think", text: "I will search for what the question asks about.", given: true },
      { kind: "search", text: "capital of Peru" },
      { kind: "information", text: "Lima is the capital." },
      { kind: "answer", text: "Lima" },
    ]);
  });

  it("marks nothing without a prefix", () => {
    expect(segmentResponse(response).some((s) => s.given)).toBe(false);
  });
});
