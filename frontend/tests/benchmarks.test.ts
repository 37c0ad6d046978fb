import { describe, expect, it } from "vitest";
import { benchmarkTable, columnLabel, formatDelta, formatPoints } from "../src/transforms/benchmarks";
import type { Comparison } from "../src/types";

const run = (id: string, name: string) => ({
  id,
  name,
  status: "finished" as const,
  preset: "smoke",
  backend: "torch",
  step: 4,
  total_steps: 4,
  tags: [],
});

const comparison: Comparison = {
  runs: [run("r1", "Search-R1"), run("r2", "INSPO")],
  series: {},
  benchmarks: {
    metric: "em",
    columns: ["hotpotqa", "nq"],
    rows: [
      {
        run_id: "r1",
        values: { hotpotqa: 0.309, nq: 0.438 },
        average: 0.3735,
        steps: { hotpotqa: 40, nq: 40 },
        n: { hotpotqa: 500, nq: 125 },
      },
      { run_id: "r2", values: { hotpotqa: 0.377 }, average: 0.377, steps: { hotpotqa: 20 }, n: { hotpotqa: 1 } },
    ],
    best: { hotpotqa: ["r2"], nq: ["r1"], average: ["r2"] },
    questions: { hotpotqa: "different", nq: "same" },
  },
  config_diff: [],
  baseline: "r1",
  deltas: { r2: { hotpotqa: 0.068, average: 0.0035 } },
  delta_questions: { r2: { hotpotqa: 1 } },
};

describe("benchmarkTable", () => {
  const table = benchmarkTable(comparison);

  it("adds the average column after the benchmarks and names the rows", () => {
    expect(table.columns.map((c) => c.name)).toEqual(["hotpotqa", "nq", "average"]);
    expect(table.rows.map((r) => [r.name, r.baseline])).toEqual([
      ["Search-R1", true],
      ["INSPO", false],
    ]);
  });

  it("marks the best run of each column, and only that one", () => {
    const best = table.rows.map((r) => r.cells.filter((c) => c.best).map((c) => c.column));
    expect(best).toEqual([["nq"], ["hotpotqa", "average"]]);
  });

  it("marks every run tied for the best, and none in a column the server leaves out", () => {
    const tied = benchmarkTable({
      ...comparison,
      benchmarks: {
        ...comparison.benchmarks,
        rows: [
          { run_id: "r1", values: { hotpotqa: 0.3, nq: 0 }, average: 0.15, steps: {}, n: {} },
          { run_id: "r2", values: { hotpotqa: 0.3, nq: 0 }, average: 0.15, steps: {}, n: {} },
        ],
        best: {},
        questions: {},
      },
    });
    expect(tied.rows.flatMap((r) => r.cells.filter((c) => c.best))).toEqual([]);
    const shared = benchmarkTable({
      ...comparison,
      benchmarks: { ...comparison.benchmarks, best: { nq: ["r1", "r2"] } },
    });
    expect(shared.rows.map((r) => r.cells.find((c) => c.column === "nq")?.best)).toEqual([true, false]);
  });

  it("carries deltas against the baseline and leaves missing values empty", () => {
    const inspo = table.rows[1].cells;
    expect(inspo.map((c) => c.value)).toEqual([0.377, null, 0.377]);
    expect(inspo.map((c) => c.delta)).toEqual([0.068, null, 0.0035]);
    expect(table.rows[0].cells.every((c) => c.delta === null)).toBe(true);
  });

  it("says where each benchmark's value comes from, and nothing for the average or an empty cell", () => {
    expect(table.rows[0].cells.map((c) => c.source)).toEqual([
      "step 40, 500 questions",
      "step 40, 125 questions",
      null,
    ]);
    expect(table.rows[1].cells.map((c) => c.source)).toEqual(["step 20, 1 question", null, null]);
  });

  it("heads the average column Avg., as the paper's Table 1 does", () => {
    expect(table.columns.map((c) => columnLabel(c.name))).toEqual(["hotpotqa", "nq", "Avg."]);
  });

  it("marks a column scored on different questions, and the average with it", () => {
    expect(table.columns.map((c) => c.questions)).toEqual(["different", "same", "different"]);
    const unrecorded = benchmarkTable({
      ...comparison,
      benchmarks: { ...comparison.benchmarks, questions: { hotpotqa: "unrecorded", nq: "same" } },
    });
    expect(unrecorded.columns.map((c) => c.questions)).toEqual(["unrecorded", "same", "unrecorded"]);
  });

  it("gives each cell its questions, and a delta's shared questions only where fewer than the cell's", () => {
    expect(table.rows[0].cells.map((c) => c.questions)).toEqual([500, 125, null]);
    expect(table.rows[1].cells.map((c) => [c.questions, c.deltaQuestions])).toEqual([
      [1, null], // the delta is over all of this cell's 1 question
      [null, null],
      [null, null],
    ]);
    const fewer = benchmarkTable({ ...comparison, delta_questions: { r2: { hotpotqa: 0 } } });
    expect(fewer.rows[1].cells[0].deltaQuestions).toBe(0);
  });

  it("has no rows or benchmark columns when nothing was evaluated", () => {
    const empty = benchmarkTable({
      ...comparison,
      benchmarks: { metric: "em", columns: [], rows: [], best: {}, questions: {} },
      deltas: {},
      delta_questions: {},
    });
    expect(empty).toEqual({ metric: "em", columns: [{ name: "average", questions: "same" }], rows: [] });
  });
});

describe("formatDelta", () => {
  it("always shows a sign, in points", () => {
    expect([formatDelta(0.0213), formatDelta(-0.004), formatDelta(0.0001)]).toEqual(["+2.1", "−0.4", "±0.0"]);
  });
});

describe("formatPoints", () => {
  it("writes a score of 0–1 in points of 0–100, as the verdicts do", () => {
    expect([formatPoints(0.6), formatPoints(0), formatPoints(1), formatPoints(0.12345)]).toEqual([
      "60.0",
      "0.0",
      "100.0",
      "12.3",
    ]);
    expect([formatPoints(null), formatPoints(undefined), formatPoints(Number.NaN)]).toEqual(["—", "—", "—"]);
  });
});
