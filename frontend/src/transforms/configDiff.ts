/** Flattens nested configs to dotted fields and lists the fields that differ; knows nothing about the DOM. */

export type Flat = Record<string, unknown>;

/** `{grpo: {lr: 1e-6}}` → `{"grpo.lr": 1e-6}`. Arrays and null are values, not branches; an empty object is a value. */
export function flattenConfig(config: unknown, prefix = "", out: Flat = {}): Flat {
  if (isBranch(config)) {
    for (const [key, value] of Object.entries(config)) {
      flattenConfig(value, prefix ? `${prefix}.${key}` : key, out);
    }
  } else if (prefix) {
    out[prefix] = config;
  }
  return out;
}

function isBranch(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && Object.keys(value).length > 0;
}

export interface FieldDiff {
  field: string;
  /** One value per input config, undefined where that config lacks the field. */
  values: unknown[];
}

/** The fields whose values are not all equal across the configs, sorted by field name. */
export function configDiff(configs: readonly unknown[]): FieldDiff[] {
  const flats = configs.map((config) => flattenConfig(config));
  const fields = [...new Set(flats.flatMap((flat) => Object.keys(flat)))].sort();
  return fields
    .map((field) => ({ field, values: flats.map((flat) => (field in flat ? flat[field] : undefined)) }))
    .filter(({ values }) => new Set(values.map(canonical)).size > 1);
}

/** A stable text form for comparing values: object keys in order, so {a,b} equals {b,a}. */
function canonical(value: unknown): string {
  if (value === undefined) return "undefined";
  return JSON.stringify(value, (_key, v: unknown) =>
    typeof v === "object" && v !== null && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/** How a config value reads in a table cell. */
export function formatValue(value: unknown): string {
  if (value === undefined) return "—";
  if (typeof value === "string") return value;
  return JSON.stringify(value);
}
