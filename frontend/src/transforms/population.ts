/** Population history shaped for charts: shares per instruction over steps, weight histories, and the evolution
 * markers on the step axis. Knows nothing about ECharts. */

import type { Round, Snapshot } from "../types";

export interface Shares {
  steps: number[];
  /** Instruction ids in order of first appearance. */
  ids: string[];
  /** Per id, one value per step: the share of the population's weight (or sampling probability); 0 when absent. */
  weight: Record<string, number[]>;
  probability: Record<string, number[]>;
}

/** The population at the end of each step: of several snapshots at one step (step, pruned, evolved) the last. */
export function lastPerStep(snapshots: readonly Snapshot[]): Snapshot[] {
  const byStep = new Map<number, Snapshot>();
  for (const snapshot of snapshots) byStep.set(snapshot.step, snapshot);
  return [...byStep.values()].sort((a, b) => a.step - b.step);
}

/**
 * Stacked-area data. Weight share is w / Σw over the members; when every weight is 0 (just after a reset) each member
 * gets an equal share, which is what sampling does then too. Probabilities are used as stored.
 */
export function populationShares(snapshots: readonly Snapshot[]): Shares {
  const ordered = lastPerStep(snapshots);
  const ids: string[] = [];
  const seen = new Set<string>();
  for (const snapshot of ordered) {
    for (const member of snapshot.members) {
      if (member.id !== null && !seen.has(member.id)) {
        seen.add(member.id);
        ids.push(member.id);
      }
    }
  }
  const empty = () => Object.fromEntries(ids.map((id) => [id, new Array<number>(ordered.length).fill(0)]));
  const weight: Record<string, number[]> = empty();
  const probability: Record<string, number[]> = empty();
  ordered.forEach((snapshot, i) => {
    const members = snapshot.members.filter((m) => m.id !== null);
    const positive = members.map((m) => Math.max(0, m.weight));
    const total = positive.reduce((a, b) => a + b, 0);
    members.forEach((member, j) => {
      const id = member.id as string;
      weight[id][i] = total > 0 ? positive[j] / total : 1 / members.length;
      probability[id][i] = member.probability;
    });
  });
  return { steps: ordered.map((s) => s.step), ids, weight, probability };
}

/** One instruction's weight at the end of each step it was a member. */
export function weightHistory(snapshots: readonly Snapshot[], id: string): [number, number][] {
  const out: [number, number][] = [];
  for (const snapshot of lastPerStep(snapshots)) {
    const member = snapshot.members.find((m) => m.id === id);
    if (member) out.push([snapshot.step, member.weight]);
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
export function evolutionMarkers(rounds: readonly Round[], snapshots: readonly Snapshot[]): Marker[] {
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
  for (const snapshot of snapshots) {
    if (snapshot.reason === "evolved") add(snapshot.step, "merged", `${snapshot.members.length} members`);
    if (snapshot.reason === "pruned") add(snapshot.step, "pruned", `${snapshot.members.length} left`);
  }
  return [...markers.values()].sort(
    (a, b) => a.step - b.step || MARKER_KINDS.indexOf(a.kind) - MARKER_KINDS.indexOf(b.kind),
  );
}
