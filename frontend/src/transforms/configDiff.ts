/** How a config value from the API's config diffs (a comparison's `config_diff`, a run's `preset_diff`) reads in a
 * table cell; the diffs themselves are made by the server (webapp/runs/selectors.py `config_diff`). */

/** Strings bare, other values as JSON, a missing value as a dash. */
export function formatValue(value: unknown): string {
  if (value === undefined) return "—";
  if (typeof value === "string") return value;
  return JSON.stringify(value);
}
