import { describe, expect, it } from "vitest";
import { hasOutcomes, outcome, rewardCaption } from "../src/transforms/outcomes";
import type { MetricSeries } from "../src/types";

function series(
  rows: [reward: number, form: number | null, correct: number | null, em: number | null][],
): MetricSeries {
  const nulls = rows.map(() => null);
  return {
    step: rows.map((_, i) => i + 1),
    phase: rows.map(() => "train"),
    reward_mean: rows.map(([r]) => r),
    reward_std: nulls,
    tool_calls_mean: nulls,
    instruction_length_mean: nulls,
    response_length_mean: nulls,
    kl: nulls,
    entropy: nulls,
    clip_fraction: nulls,
    lr: nulls,
    grad_norm: nulls,
    pg_loss: nulls,
    em: rows.map(([, , , em]) => em),
    well_formed: nulls,
    reward_format: rows.map(([, f]) => f),
    reward_correct: rows.map(([, , c]) => c),
    timings: {},
  };
}

describe("the reward's parts and training EM per step (#45 item 1)", () => {
  it("reads each part per step, null where a step has none", () => {
    const metrics = series([
      [0.03, 0.03, 0, 0],
      [0.2, 0.2, 0, 0],
    ]);
    expect(outcome(metrics, "reward_format")).toEqual([0.03, 0.2]);
    expect(hasOutcomes(metrics)).toBe(true);
  });

  it("says plainly when a rising reward is format credit only", () => {
    const caption = rewardCaption(
      series([
        [0.03, 0.03, 0, 0],
        [0.1, 0.1, 0, 0],
        [0.2, 0.2, 0, 0],
        [0.2, 0.2, 0, 0],
      ]),
    );
    expect(caption).toBe(
      "Over the last 3 steps the mean training reward was 0.167: 0.167 for the form and 0.000 for correct answers; " +
        "0.0 % of the rollouts answered exactly right. No rollout answered correctly: the reward is format credit only.",
    );
  });

  it("gives the correctness part when answers are right", () => {
    const caption = rewardCaption(series([[0.5, 0.2, 0.3, 0.375]]), 3);
    expect(caption).toBe(
      "Over the last step the mean training reward was 0.500: 0.200 for the form and 0.300 for correct answers; " +
        "37.5 % of the rollouts answered exactly right.",
    );
  });

  it("has nothing to say for a run recorded before the parts were kept, even from a response without the fields", () => {
    const old = series([[0.2, null, null, null]]);
    expect(hasOutcomes(old)).toBe(false);
    expect(rewardCaption(old)).toBeNull();
    const sentBefore: Partial<MetricSeries> = { ...old };
    delete sentBefore.em;
    delete sentBefore.reward_format;
    expect(outcome(sentBefore as MetricSeries, "em")).toEqual([null]);
  });
});
