/** The population's diversity shaped for the run page: the record that ends each step, the alarm a banner shows,
 * and the sentence that says why the population collapsed. Reads the API's column-wise records; knows nothing about
 * ECharts. */

import type { Alarm, Diversity, DiversitySeries } from "../types";

export interface DiversityPoints {
  steps: number[];
  cosineMean: (number | null)[];
  cosineMin: (number | null)[];
  jaccard: (number | null)[];
  entropy: (number | null)[];
  strategies: number[];
}

/** One value per step: of several records at a step (its end, then pruned, evolved) the last, in step order. */
export function lastRecordPerStep(series: DiversitySeries): DiversityPoints {
  const last = new Map<number, number>();
  series.step.forEach((step, index) => last.set(step, index));
  const order = [...last.entries()].sort((a, b) => a[0] - b[0]).map(([, index]) => index);
  return {
    steps: order.map((i) => series.step[i]),
    cosineMean: order.map((i) => series.cosine_mean[i]),
    cosineMin: order.map((i) => series.cosine_min[i]),
    jaccard: order.map((i) => series.jaccard_mean[i]),
    entropy: order.map((i) => series.entropy_normalised[i]),
    strategies: order.map((i) => series.strategies[i]),
  };
}

/** The alarm the page warns about: the active one, unless a member acknowledged it. */
export function bannerAlarm(diversity: Diversity): Alarm | null {
  const alarm = diversity.collapsed;
  return alarm !== null && alarm.acknowledged_at === null ? alarm : null;
}

function percent(value: number): string {
  return `${(100 * value).toFixed(value < 0.1 ? 1 : 0)} %`;
}

/** Why the alarm tripped, and when, in one sentence. */
export function alarmText(alarm: Alarm): string {
  const why: string[] = [];
  if (alarm.reasons.includes("cosine")) {
    const least = alarm.cosine_min === null ? "" : ` (the least alike pair: ${alarm.cosine_min.toFixed(3)})`;
    why.push(`every pair of living instructions is at least ${alarm.collapse_cosine} alike${least}`);
  }
  if (alarm.reasons.includes("entropy")) {
    const entropy = alarm.entropy_normalised === null ? "near 0" : percent(alarm.entropy_normalised);
    why.push(
      `sampling has settled on few instructions: its entropy is ${entropy} of the maximum (the alarm is at ≤ ${percent(alarm.collapse_entropy)})`,
    );
  }
  const since = alarm.since_step === alarm.step ? "" : ` (collapsed since step ${alarm.since_step})`;
  const cleared = alarm.cleared_step === null ? "" : ` It recovered at step ${alarm.cleared_step}.`;
  return `The population collapsed at step ${alarm.step}${since}: ${why.join("; and ")}.${cleared}`;
}
