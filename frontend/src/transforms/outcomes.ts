/** What a run's steps earned their reward for: the share of exact-match answers (training EM), the share of
 * well-formed replies, and the mean reward split into its format and correctness parts, as the engine records them
 * per step (docs/events.md). Runs recorded before the engine kept them have none; knows nothing about charts. */

import type { MetricSeries } from "../types";

export type OutcomeKey = "em" | "well_formed" | "reward_format" | "reward_correct";

/** The series of `key`, one value per step, null where a step has none (old runs, and caches sent before the field). */
export function outcome(metrics: MetricSeries, key: OutcomeKey): (number | null)[] {
  const values = metrics[key] as (number | null)[] | undefined;
  return metrics.step.map((_, i) => values?.[i] ?? null);
}

/** Whether any step recorded the reward's parts and training EM. */
export function hasOutcomes(metrics: MetricSeries): boolean {
  return outcome(metrics, "reward_format").some((v) => v !== null) || outcome(metrics, "em").some((v) => v !== null);
}

function meanOf(values: readonly (number | null)[]): number | null {
  const kept = values.filter((v): v is number => v !== null && Number.isFinite(v));
  return kept.length ? kept.reduce((a, b) => a + b, 0) / kept.length : null;
}

/**
 * One sentence on the last `window` steps: their mean reward and how much of it was format credit and how much
 * correctness, and the share of exact-match answers; when no rollout answered correctly it says that the reward is
 * format credit only. Null for a run whose steps recorded no parts.
 */
export function rewardCaption(metrics: MetricSeries, window = 3): string | null {
  if (!hasOutcomes(metrics)) return null;
  const n = Math.min(window, metrics.step.length);
  const last = <T>(values: readonly T[]) => values.slice(values.length - n);
  const reward = meanOf(last(metrics.reward_mean));
  const form = meanOf(last(outcome(metrics, "reward_format")));
  const correct = meanOf(last(outcome(metrics, "reward_correct")));
  const em = meanOf(last(outcome(metrics, "em")));
  const f = (v: number | null) => (v === null ? "—" : v.toFixed(3));
  const steps = n === 1 ? "the last step" : `the last ${n} steps`;
  let text = `Over ${steps} the mean training reward was ${f(reward)}`;
  if (form !== null && correct !== null) text += `: ${f(form)} for the form and ${f(correct)} for correct answers`;
  if (em !== null) text += `; ${(100 * em).toFixed(1)} % of the rollouts answered exactly right`;
  text += ".";
  if (em === 0) text += " No rollout answered correctly: the reward is format credit only.";
  return text;
}
