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

type Statistic =
  | "weight"
  | "probability"
  | "samples"
  | "mean_reward"
  | "recent_reward"
  | "recent_low"
  | "recent_high"
  | "recent_samples";

/** An instruction's statistic at snapshot `index`; null where it was not a member. */
function valueAt(instruction: InstructionColumns, statistic: Statistic, index: number): number | null {
  // Optional chaining: a population cached before a statistic was sent has no array for it.
  return instruction[statistic]?.[index - instruction.start] ?? null;
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

/** What the engine says of a member's recent reward (the mean of its per-step mean rewards over the steps its weight
 * counts): its 95 % interval (null with fewer than two questions behind it, and in runs recorded before intervals were
 * kept) and the questions behind it. */
export interface RecentReward {
  id: string;
  mean: number | null;
  low: number | null;
  high: number | null;
  n: number;
}

/** Each member's recent reward at snapshot `index`, in `membersAt`'s order. */
export function recentRewardsAt(history: PopulationHistory, index: number): RecentReward[] {
  const byId = new Map(history.instructions.map((instruction) => [instruction.id, instruction]));
  return membersAt(history, index).map(({ id }) => {
    const instruction = byId.get(id) as InstructionColumns;
    return {
      id,
      mean: valueAt(instruction, "recent_reward", index),
      low: valueAt(instruction, "recent_low", index),
      high: valueAt(instruction, "recent_high", index),
      n: valueAt(instruction, "recent_samples", index) ?? 0,
    };
  });
}

/** "0.200 [0.050, 0.350]", or the mean alone where there is no interval. */
export function formatInterval(reward: RecentReward, digits = 3): string {
  if (reward.mean === null) return "—";
  const mean = reward.mean.toFixed(digits);
  if (reward.low === null || reward.high === null) return mean;
  return `${mean} [${reward.low.toFixed(digits)}, ${reward.high.toFixed(digits)}]`;
}

export interface Resolution {
  /** "single": one member; "unknown": the best has no interval; "none": every other member's interval overlaps the
   * best's; "some": some lie wholly below it; "all": every other one does. */
  kind: "single" | "unknown" | "none" | "some" | "all";
  /** Members the population cannot tell from the best (their intervals overlap its, or they have none). */
  tied: string[];
  /** Members whose intervals lie wholly below the best's. */
  below: string[];
  text: string;
}

/** Whether the population can tell its best member from the others: a member is told apart when its 95 % interval
 * lies wholly below the best's (no overlap), a stricter rule than a test of their difference at 95 %
 * (docs/statistics.md says how many questions it takes). */
export function resolution(rewards: readonly RecentReward[], bestId: string | null): Resolution {
  const best = rewards.find((r) => r.id === bestId);
  const others = rewards.filter((r) => r.id !== bestId);
  if (best === undefined || others.length === 0) {
    return { kind: "single", tied: [], below: [], text: "One instruction: there is nothing to tell apart." };
  }
  if (best.low === null || best.high === null) {
    return {
      kind: "unknown",
      tied: others.map((r) => r.id),
      below: [],
      text:
        `Too few questions behind the best instruction's reward (${best.n}) to say how sure it is: the ` +
        "population cannot yet tell its instructions apart.",
    };
  }
  const below = others.filter((r) => r.high !== null && r.high < (best.low as number)).map((r) => r.id);
  const tied = others.map((r) => r.id).filter((id) => !below.includes(id));
  const named = (ids: string[]) => ids.join(", ");
  if (below.length === 0) {
    return {
      kind: "none",
      tied,
      below,
      text:
        `The population cannot yet tell its instructions apart: every other member's 95 % interval overlaps the ` +
        `best's (${best.id}, over ${best.n} questions), so their weights differ within the noise of that many ` +
        "samples.",
    };
  }
  if (tied.length === 0) {
    return {
      kind: "all",
      tied,
      below,
      text: `The population can tell its instructions apart: every other member's 95 % interval lies below the best's (${best.id}).`,
    };
  }
  return {
    kind: "some",
    tied,
    below,
    text:
      `The population can tell the best (${best.id}) from ${named(below)}, whose 95 % intervals lie below its; ` +
      `not yet from ${named(tied)}, whose intervals overlap its.`,
  };
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
