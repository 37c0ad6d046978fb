/** What the experiment pages draw, as pure functions: each arm's reward band over seeds and its line style, each
 * arm's EM with the interval of its difference from the baseline arm, the experiment's JSON its page carries, and
 * the query of the New experiment form's cost estimate (whose text the API writes). */

import type { ExperimentDetail, ExperimentResults, RewardCurve } from "../types";

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

/** The experiment's JSON as its page carries it (the API's own answer, in a `json_script` element); null without
 * one. */
export function parseDetail(text: string | null | undefined): ExperimentDetail | null {
  if (!text) return null;
  return JSON.parse(text) as ExperimentDetail;
}

/** How each arm's line is told apart on a chart where lines may lie on one another: its own dash pattern and symbol
 * (beside its colour), so an arm whose line hides under another's still shows. */
export interface ArmStyle {
  dash: "solid" | "dashed" | "dotted" | number[];
  symbol: "circle" | "triangle" | "rect" | "diamond" | "pin" | "arrow";
  symbolSize: number;
}

const DASHES: ArmStyle["dash"][] = ["solid", "dashed", "dotted", [8, 3, 2, 3]];
const SYMBOLS: ArmStyle["symbol"][] = ["circle", "triangle", "rect", "diamond", "pin", "arrow"];

export function armStyle(index: number): ArmStyle {
  return {
    dash: DASHES[index % DASHES.length],
    symbol: SYMBOLS[index % SYMBOLS.length],
    // Later arms' symbols a little smaller, so one drawn over another leaves a ring of it visible.
    symbolSize: Math.max(5, 10 - 2 * (index % 3)),
  };
}

/** The most seeds the estimate is asked about; any more read the same (past the limit, which the answer names). */
const MAX_ASKED_SEEDS = 1_000_000_000;

/** The query the New experiment form asks `experiments/estimate/` with; null while the seed count is not a whole
 * number (the form says so itself). */
export function estimateQuery(
  preset: string,
  arms: number,
  seeds: string,
  team: string | undefined,
): URLSearchParams | null {
  const count = Number(seeds);
  if (seeds.trim() === "" || !Number.isInteger(count) || count < 0) return null;
  const query = new URLSearchParams({ preset, arms: String(arms), seeds: String(Math.min(count, MAX_ASKED_SEEDS)) });
  if (team) query.set("team", team);
  return query;
}
