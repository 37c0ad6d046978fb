/** Time-left estimate for a running run and its wording; knows nothing about the DOM. */

export interface EtaInput {
  step: number;
  totalSteps: number;
  /** Wall-clock seconds of the most recent steps, oldest first (from the metric timings). */
  stepSeconds: readonly number[];
  /** Seconds since the run started, used when no step timings are stored yet. */
  elapsedSeconds: number | null;
  /** How many recent steps to average: recent speed predicts better than the whole run (evolution ends early). */
  window?: number;
}

/** Seconds left, or null when there is nothing to go on (no steps done, or nothing left to do). */
export function estimateEta({ step, totalSteps, stepSeconds, elapsedSeconds, window = 10 }: EtaInput): number | null {
  const left = totalSteps - step;
  if (left <= 0 || step <= 0) return null;
  const recent = stepSeconds.filter((s) => Number.isFinite(s) && s > 0).slice(-window);
  if (recent.length > 0) {
    return (left * recent.reduce((a, b) => a + b, 0)) / recent.length;
  }
  if (elapsedSeconds !== null && elapsedSeconds > 0) return (left * elapsedSeconds) / step;
  return null;
}

/** "45 s", "12 min", "3 h 05 min", "2 d 4 h". */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const minutes = Math.round(s / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours} h ${String(minutes % 60).padStart(2, "0")} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

/** Per-step wall-clock seconds from the column-wise timings: the sum of the parts of each step. */
export function stepDurations(
  timings: Record<string, readonly (number | null)[]> | undefined,
  steps: number,
): number[] {
  const out = new Array<number>(steps).fill(0);
  for (const column of Object.values(timings ?? {})) {
    column.forEach((value, i) => {
      if (i < steps && value !== null && Number.isFinite(value)) out[i] += value;
    });
  }
  return out;
}
