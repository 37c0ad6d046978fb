/** Population history shaped for charts and tables: the snapshot that ends each step, a snapshot's members, shares
 * per instruction over steps, weight histories, and the evolution markers on the step axis. Reads the column-wise
 * history as the API sends it; knows nothing about ECharts. */

import type { InstructionColumns, Member, PopulationHistory, Round } from "../types";

export interface Shares {
  steps: number[];
  /** Instruction ids in the history's order (first membership first). */
  ids: string[];
  /** Per id, one value per step: the share of the population's weight (or sampling probability); 0 when absent. */
  weight: Record<string, number[]>;
  probability: Record<string, number[]>;
}

type Statistic = "weight" | "probability" | "samples" | "mean_reward";

/** An instruction's statistic at snapshot `index`; null where it was not a member. */
function valueAt(instruction: InstructionColumns, statistic: Statistic, index: number): number | null {
  return instruction[statistic][index - instruction.start] ?? null;
}

/** Indexes of the snapshots that end each step: of several at one step (step, pruned, evolved) the last, in step
 * order. */
export function lastPerStep(history: PopulationHistory): number[] {
  const byStep = new Map<number, number>();
  history.snapshots.step.forEach((step, index) => byStep.set(step, index));
  return [...byStep.entries()].sort((a, b) => a[0] - b[0]).map(([, index]) => index);
}

/** The members of snapshot `index`, heaviest first (ties by id). */
export function membersAt(history: PopulationHistory, index: number): Member[] {
  const members: Member[] = [];
  for (const instruction of history.instructions) {
    const weight = valueAt(instruction, "weight", index);
    if (weight === null) continue;
    members.push({
      id: instruction.id,
      weight,
      probability: valueAt(instruction, "probability", index) ?? 0,
      samples: valueAt(instruction, "samples", index) ?? 0,
      mean_reward: valueAt(instruction, "mean_reward", index),
    });
  }
  return members.sort((a, b) => b.weight - a.weight || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** How many instructions were members of each snapshot. */
export function memberCounts(history: PopulationHistory): number[] {
  const counts = new Array<number>(history.snapshots.step.length).fill(0);
  for (const instruction of history.instructions) {
    instruction.weight.forEach((weight, i) => {
      if (weight !== null) counts[instruction.start + i] += 1;
    });
  }
  return counts;
}

/**
 * Stacked-area data, one value per step. Weight share is w / Σw over the members; when every weight is 0 (just after
 * a reset) each member gets an equal share, which is what sampling does then too. Probabilities are used as stored.
 */
export function populationShares(history: PopulationHistory): Shares {
  const ends = lastPerStep(history);
  const rows = history.instructions.map((instruction) => ends.map((index) => valueAt(instruction, "weight", index)));
  const totals = ends.map(() => 0);
  const counts = ends.map(() => 0);
  for (const weights of rows) {
    weights.forEach((weight, i) => {
      if (weight === null) return;
      totals[i] += Math.max(0, weight);
      counts[i] += 1;
    });
  }
  const shares: Shares = {
    steps: ends.map((index) => history.snapshots.step[index]),
    ids: [],
    weight: {},
    probability: {},
  };
  history.instructions.forEach((instruction, k) => {
    if (rows[k].every((weight) => weight === null)) return;
    shares.ids.push(instruction.id);
    shares.weight[instruction.id] = rows[k].map((weight, i) =>
      weight === null ? 0 : totals[i] > 0 ? Math.max(0, weight) / totals[i] : 1 / counts[i],
    );
    shares.probability[instruction.id] = ends.map((index) => valueAt(instruction, "probability", index) ?? 0);
  });
  return shares;
}

/** One instruction's weight at the end of each step it was a member. */
export function weightHistory(history: PopulationHistory, id: string): [number, number][] {
  const instruction = history.instructions.find((entry) => entry.id === id);
  if (!instruction) return [];
  const out: [number, number][] = [];
  for (const index of lastPerStep(history)) {
    const weight = valueAt(instruction, "weight", index);
    if (weight !== null) out.push([history.snapshots.step[index], weight]);
  }
  return out;
}

export type MarkerKind = "proposed" | "verified" | "merged" | "pruned";

export const MARKER_KINDS: readonly MarkerKind[] = ["proposed", "verified", "merged", "pruned"];

export interface Marker {
  step: number;
  kind: MarkerKind;
  /** How many optimizer rounds (proposed, verified) or snapshots (merged, pruned) fell on this step. */
  count: number;
  detail: string;
}

/**
 * Evolution events by step: an optimizer round is "proposed"; it is also "verified" once its candidates were
 * scored; a snapshot taken because of evolution is "merged", one taken after pruning is "pruned".
 */
export function evolutionMarkers(rounds: readonly Round[], history: PopulationHistory): Marker[] {
  const markers = new Map<string, Marker>();
  const add = (step: number, kind: MarkerKind, detail: string) => {
    const key = `${step}:${kind}`;
    const marker = markers.get(key);
    if (marker) {
      marker.count += 1;
      if (detail && !marker.detail.includes(detail)) marker.detail += `; ${detail}`;
    } else {
      markers.set(key, { step, kind, count: 1, detail });
    }
  };
  for (const round of rounds) {
    const accepted = round.candidates.filter((c) => c.accepted).length;
    add(round.step, "proposed", `${round.candidates.length} candidates from ${round.parent_id ?? "no parent"}`);
    if (round.n_questions !== null || round.candidates.some((c) => c.score !== null)) {
      add(round.step, "verified", `${accepted} of ${round.candidates.length} accepted`);
    }
  }
  const counts = memberCounts(history);
  history.snapshots.reason.forEach((reason, index) => {
    const step = history.snapshots.step[index];
    if (reason === "evolved") add(step, "merged", `${counts[index]} members`);
    if (reason === "pruned") add(step, "pruned", `${counts[index]} left`);
  });
  return [...markers.values()].sort(
    (a, b) => a.step - b.step || MARKER_KINDS.indexOf(a.kind) - MARKER_KINDS.indexOf(b.kind),
  );
}

/** Whether two lists name the same instructions, in any order (the steering table against the population). */
export function sameMembers(listed: readonly string[], current: readonly string[]): boolean {
  const a = new Set(listed);
  const b = new Set(current);
  return a.size === b.size && [...a].every((id) => b.has(id));
}
