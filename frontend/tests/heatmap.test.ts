import { describe, expect, it } from "vitest";
import { cellGrid, costLine, emColour, lightText, openingNote, rowTextTitle } from "../src/transforms/heatmap";
import { sharedOpening, wordsThatDiffer } from "../src/transforms/wordDiff";
import type { Heatmap, HeatmapCell } from "../src/types";

function cell(row: number, column: number, em: number | null): HeatmapCell {
  return {
    id: row * 10 + column,
    row,
    column,
    instruction_id: `ins-000${row}`,
    step: (column + 1) * 2,
    em,
    f1: em,
    answered: em === null ? null : 1,
    n: em === null ? 0 : 4,
    done: em !== null,
  };
}

function heatmap(cells: HeatmapCell[]): Heatmap {
  return {
    id: 1,
    status: "running",
    benchmark: "builtin",
    sample_size: 4,
    sample_seed: 0,
    questions: 4,
    answers: 16,
    cells_total: 4,
    cells_done: cells.filter((c) => c.done).length,
    requested_by: "alice",
    error: "",
    created_at: "2026-01-01T00:00:00Z",
    started_at: null,
    finished_at: null,
    rows: [
      { id: "ins-0000", text: "a", origin: "seed", retired_step: null },
      { id: "ins-0001", text: "b", origin: "reflection", retired_step: 2 },
    ],
    columns: [
      { step: 2, checkpoint_id: 1 },
      { step: 4, checkpoint_id: 2 },
    ],
    cells,
    best: {},
  };
}

describe("cellGrid", () => {
  it("places each cell at its row and column, whatever order they come in", () => {
    const grid = cellGrid(heatmap([cell(1, 1, 0.5), cell(0, 0, 0.25), cell(1, 0, null)]));
    expect(grid.map((row) => row.map((c) => c?.id ?? null))).toEqual([
      [0, null],
      [10, 11],
    ]);
  });

  it("leaves out a cell outside the grid instead of growing it", () => {
    const grid = cellGrid(heatmap([cell(0, 5, 1), cell(3, 0, 1)]));
    expect(grid).toEqual([
      [null, null],
      [null, null],
    ]);
  });
});

describe("emColour", () => {
  it("runs from near white at 0 to dark green at 1, clamped, and grey when not scored", () => {
    expect(emColour(0)).toBe("rgb(244, 246, 248)");
    expect(emColour(1)).toBe("rgb(27, 94, 32)");
    expect(emColour(2)).toBe(emColour(1));
    expect(emColour(-1)).toBe(emColour(0));
    expect(emColour(null)).toBe("rgb(224, 224, 224)");
    expect(emColour(0.5)).toBe("rgb(136, 170, 140)");
  });

  it("asks for light text on the darker half", () => {
    expect([lightText(0.2), lightText(0.5), lightText(null)]).toEqual([false, true, false]);
  });
});

describe("costLine", () => {
  it("counts cells and answers and allows what is within the bound", () => {
    expect(costLine(3, 2, 50, 5000)).toEqual({
      text: "3 instructions × 2 checkpoints = 6 cells × 50 questions = 300 greedy answers (at most 5000).",
      allowed: true,
    });
  });

  it("refuses more than the bound, and an empty choice", () => {
    expect(costLine(12, 12, 500, 5000).allowed).toBe(false);
    expect(costLine(12, 12, 500, 5000).text).toContain("more than the 5000 a heatmap may cost");
    expect(costLine(0, 2, 50, 5000)).toMatchObject({ allowed: false });
    expect(costLine(1, 1, 1, 5000).text).toBe(
      "1 instruction × 1 checkpoint = 1 cell × 1 question = 1 greedy answer (at most 5000).",
    );
  });
});

describe("openingNote and rowTextTitle", () => {
  const texts = ["Search first, then answer.", "Search first, then answer. Keep it short."];

  it("say what a row shows when the rows share an opening, and what (same text) means", () => {
    const opening = sharedOpening(texts);
    const labels = texts.map((text) => wordsThatDiffer(text, opening, 8));
    expect(labels).toEqual(["(same text)", "… answer. Keep it short."]);
    const note = openingNote(opening);
    expect(note).toContain("“Search first, then answer.”");
    expect(note).toContain("“(same text)” marks an instruction that is the opening and nothing more");
    expect(openingNote("a b c d e f g h", 3)).toContain("“a b c …”");
    expect(rowTextTitle(labels[0] ?? "")).toMatch(/opening every row shares/);
    expect(rowTextTitle(labels[1] ?? "")).toBeNull();
  });

  it("say nothing when the rows share no opening", () => {
    expect(openingNote(sharedOpening(["a b", "c d"]))).toBe("");
  });
});
