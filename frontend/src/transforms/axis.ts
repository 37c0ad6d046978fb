/** Axis tick labels as people write numbers: ECharts computes ticks in floating point, so a tick can come out as
 * 48.00000000000001 or 0.30000000000000004; these labels keep six significant digits and drop the noise, shorten
 * thousands and millions (12k, 1.5M) and write tiny values in exponent form (1.2e-5). */

const SIGNIFICANT = 6;

export function axisNumber(value: number): string {
  if (!Number.isFinite(value)) return "";
  const rounded = Number(value.toPrecision(SIGNIFICANT));
  const size = Math.abs(rounded);
  if (size === 0) return "0";
  if (size >= 1e6) return `${Number((rounded / 1e6).toPrecision(4))}M`;
  if (size >= 1e4) return `${Number((rounded / 1e3).toPrecision(4))}k`;
  if (size < 1e-3) return Number(rounded.toPrecision(3)).toExponential();
  return String(rounded);
}

/** The `axisLabel` of a numeric ECharts axis. */
export const numberLabels = { formatter: (value: number): string => axisNumber(value) };
