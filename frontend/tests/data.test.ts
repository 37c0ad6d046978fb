import { describe, expect, it } from "vitest";
import { needsMapping, type Staged, stagedSummary, uploadOutcome } from "../src/pages/data";

describe("uploadOutcome", () => {
  it("names the version and its records", () => {
    const body = JSON.stringify({ number: 2, records: 8, dataset: { reference: "data:mine" } });
    expect(uploadOutcome(201, body)).toBe("data:mine version 2: 8 records.");
    expect(uploadOutcome(200, body)).toContain("already there");
  });
  it("shows the first bad record the server named", () => {
    const body = JSON.stringify({ file: ["q.jsonl: line 3: field 'golden_answers' must be a non-empty list"] });
    expect(uploadOutcome(400, body)).toBe(
      "Refused (400): file: q.jsonl: line 3: field 'golden_answers' must be a non-empty list. Nothing was kept.",
    );
    expect(uploadOutcome(413, JSON.stringify({ detail: "too large" }))).toBe(
      "Refused (413): too large. Nothing was kept.",
    );
    expect(uploadOutcome(400, JSON.stringify({ detail: "Not a file." }))).toBe(
      "Refused (400): Not a file. Nothing was kept.",
    );
    expect(uploadOutcome(502, "<html>")).toBe("The server answered 502; nothing was kept.");
  });
});

describe("stagedSummary", () => {
  const staged: Staged = {
    id: "x",
    name: "mine",
    kind: "questions",
    split: "train",
    source_name: "q.jsonl",
    detected_shape: "mapping",
    ids_from: "line number",
    mapping: { question_field: "q", answers_field: "a", id_field: "" },
    records: 2,
    size_bytes: 100,
    rows: [],
    existing: null,
  };
  it("names the shape, the mapping used and where the ids come from", () => {
    expect(stagedSummary(staged)).toEqual([
      "q.jsonl: 2 records, read as mapping (question_field q, answers_field a); ids from line number; " +
        "for data:mine (train).",
    ]);
    expect(stagedSummary({ ...staged, detected_shape: "verl", mapping: {} })[0]).toContain("read as verl;");
  });
  it("opens the mapping for a refusal that names its fields only", () => {
    expect(needsMapping(JSON.stringify({ file: ["q.jsonl: … Name your own fields with question_field, …"] }))).toBe(
      true,
    );
    expect(needsMapping(JSON.stringify({ file: ["q.jsonl: line 3: field 'id' is missing"] }))).toBe(false);
  });
});
