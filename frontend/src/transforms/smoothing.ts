/** Exponential moving average for the metric panels; knows nothing about charts. */

export type Series = readonly (number | null)[];

/**
 * TensorBoard-style debiased EMA. The output has one value per input, at the same index, so the smoothed curve is
 * drawn at the same steps as the raw one (no lag shift from padding); a missing raw value stays missing and does not
 * reset the average. `weight` 0 returns the raw values, values near 1 smooth harder.
 */
export function ema(values: Series, weight: number): (number | null)[] {
  const w = Math.min(Math.max(weight, 0), 0.999);
  let last = 0;
  let count = 0;
  return values.map((value) => {
    if (value === null || !Number.isFinite(value)) return null;
    last = last * w + (1 - w) * value;
    count += 1;
    // Dividing by (1 - w^count) removes the bias towards the zero the average starts from.
    return last / (1 - w ** count);
  });
}

/** Pairs steps with values for a numeric x axis, dropping the pairs whose value is missing. */
export function points(steps: readonly number[], values: Series): [number, number][] {
  const out: [number, number][] = [];
  steps.forEach((step, i) => {
    const value = values[i];
    if (value !== null && value !== undefined && Number.isFinite(value)) out.push([step, value]);
  });
  return out;
}
