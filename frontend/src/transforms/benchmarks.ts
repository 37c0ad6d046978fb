/** The compare page's Table-1 model: one row per run, a cell per benchmark and the average, each with its delta
 * against the baseline and whether it is the column's best. The server picks the bests and computes averages and
 * deltas (one source for the API and the page); this only lines them up. Knows nothing about the DOM. */

import type { BenchmarkRow, Comparison, QuestionSets } from "../types";

export const AVERAGE = "average";

/** A column's heading: a benchmark's name, or "Avg." (the paper's Table 1) for the average. */
export function columnLabel(column: string): string {
  return column === AVERAGE ? "Avg." : column;
}

export interface Cell {
  column: string;
  value: number | null;
  /** This run minus the baseline; null for the baseline itself, without a baseline, or where either lacks a value. */
  delta: number | null;
  /** Tied for the column's highest value while some other run has less (a tie across the board marks none). */
  best: boolean;
  /** Where a benchmark's value comes from ("step 4, 125 questions"); null for the average and empty cells. */
  source: string | null;
  /** The questions behind a benchmark's value; null for the average and empty cells. */
  questions: number | null;
  /** The questions the delta is over, when fewer than the cell's own (the ones both it and the baseline scored). */
  deltaQuestions: number | null;
}

export interface Column {
  name: string;
  /** same, different or unrecorded (see QuestionSets); the average's is its columns' worst. */
  questions: QuestionSets;
}

export interface TableRow {
  runId: string;
  name: string;
  baseline: boolean;
  cells: Cell[];
}

export interface BenchmarkTable {
  metric: string;
  columns: Column[];
  rows: TableRow[];
}

export function benchmarkTable(comparison: Comparison): BenchmarkTable {
  const { benchmarks, deltas, baseline } = comparison;
  const names = new Map(comparison.runs.map((run) => [run.id, run.name]));
  const columns = [...benchmarks.columns, AVERAGE];
  const marks = benchmarks.questions ?? {};
  const kinds = Object.values(marks);
  const averageMark: QuestionSets = kinds.includes("different")
    ? "different"
    : kinds.includes("unrecorded")
      ? "unrecorded"
      : "same";
  const rows = benchmarks.rows.map((row) => ({
    runId: row.run_id,
    name: names.get(row.run_id) ?? row.run_id,
    baseline: row.run_id === baseline,
    cells: columns.map((column) => {
      const value = column === AVERAGE ? row.average : (row.values[column] ?? null);
      const questions = column === AVERAGE ? null : (row.n?.[column] ?? null);
      const over = comparison.delta_questions?.[row.run_id]?.[column] ?? null;
      return {
        column,
        value,
        delta: deltas[row.run_id]?.[column] ?? null,
        best: value !== null && (benchmarks.best[column] ?? []).includes(row.run_id),
        source: cellSource(row, column),
        questions,
        deltaQuestions: over !== null && questions !== null && over < questions ? over : null,
      };
    }),
  }));
  return {
    metric: benchmarks.metric,
    columns: columns.map((name) => ({
      name,
      questions: name === AVERAGE ? averageMark : (marks[name] ?? "same"),
    })),
    rows,
  };
}

function cellSource(row: BenchmarkRow, column: string): string | null {
  const step = row.steps?.[column];
  const n = row.n?.[column];
  if (step === undefined || n === undefined) return null;
  return `step ${step}, ${n} question${n === 1 ? "" : "s"}`;
}

/** A score (0–1) in points (0–100), the unit the verdicts and the experiment page use: 0.6 → "60.0". */
export function formatPoints(value: number | null | undefined): string {
  return value === null || value === undefined || !Number.isFinite(value) ? "—" : (100 * value).toFixed(1);
}

/** A difference of scores (0–1) in signed points: "+2.1" / "−0.4" / "±0.0", always signed so a column of deltas
 * reads at a glance. */
export function formatDelta(delta: number): string {
  const text = Math.abs(100 * delta).toFixed(1);
  if (text === "0.0") return "±0.0";
  return delta > 0 ? `+${text}` : `−${text}`;
}
