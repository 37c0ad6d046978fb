/** The instruction × checkpoint heatmap as the page draws it: cells placed on their grid, a colour for an EM, and
 * the cost line of the form. Pure functions, tested in tests/heatmap.test.ts. */

import type { Heatmap, HeatmapCell } from "../types";

/** The cells as rows × columns (`grid[row][column]`), null where a cell is missing. */
export function cellGrid(heatmap: Heatmap): (HeatmapCell | null)[][] {
  const grid: (HeatmapCell | null)[][] = heatmap.rows.map(() => heatmap.columns.map(() => null));
  for (const cell of heatmap.cells) {
    const row = grid[cell.row];
    if (row !== undefined && cell.column >= 0 && cell.column < row.length) row[cell.column] = cell;
  }
  return grid;
}

const LOW = [244, 246, 248]; // EM 0: near white
const HIGH = [27, 94, 32]; // EM 1: dark green

/** The background of a cell with this EM (0–1): from near white to dark green; null (not scored) is grey. */
export function emColour(em: number | null): string {
  if (em === null || !Number.isFinite(em)) return "rgb(224, 224, 224)";
  const t = Math.min(1, Math.max(0, em));
  const channel = (i: number) => Math.round((LOW[i] as number) + t * ((HIGH[i] as number) - (LOW[i] as number)));
  return `rgb(${channel(0)}, ${channel(1)}, ${channel(2)})`;
}

/** Whether text on `emColour(em)` should be light to stay readable. */
export function lightText(em: number | null): boolean {
  return em !== null && em >= 0.5;
}

/** The form's cost line: instructions × checkpoints = cells, × questions = answers, and whether that is allowed. */
export function costLine(
  instructions: number,
  checkpoints: number,
  questions: number,
  maxAnswers: number,
): { text: string; allowed: boolean } {
  const cells = instructions * checkpoints;
  const answers = cells * questions;
  const base =
    `${instructions} instruction${instructions === 1 ? "" : "s"} × ${checkpoints} checkpoint` +
    `${checkpoints === 1 ? "" : "s"} = ${cells} cell${cells === 1 ? "" : "s"} × ${questions} question` +
    `${questions === 1 ? "" : "s"} = ${answers} greedy answer${answers === 1 ? "" : "s"}`;
  if (cells === 0 || questions <= 0) return { text: `${base}: choose at least one of each.`, allowed: false };
  if (answers > maxAnswers) return { text: `${base}: more than the ${maxAnswers} a heatmap may cost.`, allowed: false };
  return { text: `${base} (at most ${maxAnswers}).`, allowed: true };
}

/** What `wordsThatDiffer` answers for a text that repeats its reference word for word. */
export const SAME_TEXT = "(same text)";

/** What a row's label shows when the rows share an opening: the words after it, and "(same text)" for an
 * instruction that is that opening with nothing after it. The line under the grid says so; "" when they share none. */
export function openingNote(opening: string, words = 6): string {
  if (!opening) return "";
  const split = opening.split(/\s+/).filter(Boolean);
  const shown = split.slice(0, words).join(" ") + (split.length > words ? " …" : "");
  return `Every instruction here opens with “${shown}”: each row shows the words after that opening, and “(same text)” marks an instruction that is the opening and nothing more. Hover a row for its whole text.`;
}

/** The title of a row's label: what "(same text)" means where it stands for the shared opening. */
export function rowTextTitle(label: string): string | null {
  return label === SAME_TEXT ? "This instruction is the opening every row shares, with nothing after it" : null;
}
