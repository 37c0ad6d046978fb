/** What the experiment pages draw, as pure functions: each arm's reward band over seeds, each arm's EM with the
 * interval of its difference from the baseline arm, and the New experiment form's run count and cost estimate. */

import type { ExperimentResults, RewardCurve } from "../types";

/** One arm's EM: the mean over its finished seeds, each seed's EM, and the interval of the arm's difference from the
 * baseline placed around the arm's mean (the baseline has none). */
export interface ArmEm {
  arm: string;
  mean: number;
  low: number | null;
  high: number | null;
  perSeed: number[];
}

export function armEms(results: ExperimentResults): ArmEm[] {
  return results.arms.flatMap((row) => {
    if (row.mean_em === null) return [];
    const c = row.comparison;
    return [
      {
        arm: row.arm,
        mean: row.mean_em,
        low: c ? row.mean_em + (c.low - c.mean) : null,
        high: c ? row.mean_em + (c.high - c.mean) : null,
        perSeed: Object.values(row.per_seed_em),
      },
    ];
  });
}

/** The band as two stacked series: the lowest seed, then the width up to the highest (ECharts fills between). */
export function bandPoints(curve: RewardCurve): { low: [number, number][]; width: [number, number][] } {
  return {
    low: curve.steps.map((step, i) => [step, curve.low[i]]),
    width: curve.steps.map((step, i) => [step, curve.high[i] - curve.low[i]]),
  };
}

/** The form's estimate: `runs` runs of a preset that takes `minutes` per run (null: a GPU preset, no estimate;
 * undefined: a preset not measured yet). */
export function costText(preset: string, runs: number, minutes: number | null | undefined): string {
  if (minutes === undefined) return `${runs} runs of the ${preset} preset: no estimate yet`;
  if (minutes === null) {
    return `${runs} runs of the ${preset} preset: GPU hours each, no estimate`;
  }
  const total = runs * minutes;
  const spent = total >= 120 ? `${(total / 60).toFixed(1)} h` : `${total.toFixed(0)} min`;
  return `${runs} runs × ~${minutes.toFixed(0)} min ≈ ${spent} of worker time`;
}
