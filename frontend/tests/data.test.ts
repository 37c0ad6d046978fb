import { describe, expect, it } from "vitest";
import { uploadOutcome } from "../src/pages/data";

describe("uploadOutcome", () => {
  it("names the version and its records", () => {
    const body = JSON.stringify({ number: 2, records: 8, dataset: { reference: "data:mine" } });
    expect(uploadOutcome(201, body)).toBe("data:mine version 2: 8 records.");
    expect(uploadOutcome(200, body)).toContain("already there");
  });
  it("shows the first bad record the server named", () => {
    const body = JSON.stringify({ file: ["q.jsonl: line 3: field 'golden_answers' must be a non-empty list"] });
    expect(uploadOutcome(400, body)).toBe(
      "Refused (400): file: q.jsonl: line 3: field 'golden_answers' must be a non-empty list Nothing was kept.",
    );
    expect(uploadOutcome(413, JSON.stringify({ detail: "too large" }))).toContain("too large");
    expect(uploadOutcome(502, "<html>")).toBe("The server answered 502; nothing was kept.");
  });
});
