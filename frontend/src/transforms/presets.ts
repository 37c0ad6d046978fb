/** What the New run form shows of a preset: per form field the preset's value as text (the server formats them),
 * the placeholder an empty input gets and the label of a select's "keep the preset's" choice. Knows nothing about
 * the DOM. */

/** Per preset, per form field, the preset's value as the form shows it; null where the preset sets nothing. */
export type PresetTexts = Record<string, Record<string, string | null>>;

export const NOT_SET = "—";

export interface FieldView {
  field: string;
  /** The summary's text. */
  text: string;
  /** An empty input's placeholder: the value it keeps. */
  placeholder: string;
  /** The text of a select's empty choice, which keeps the preset's value. */
  choice: string;
}

/** The views of every field for the preset `name`; none for a preset the page does not know. */
export function presetView(presets: PresetTexts, name: string): FieldView[] {
  const values = Object.hasOwn(presets, name) ? presets[name] : {};
  return Object.entries(values).map(([field, value]) => ({
    field,
    text: value ?? NOT_SET,
    placeholder: value ?? "",
    choice: value === null ? "(preset)" : `(preset: ${value})`,
  }));
}

/** The presets in a page's data attribute; an empty set when it is missing or not the expected shape. */
export function parsePresets(json: string | undefined): PresetTexts {
  try {
    const data: unknown = JSON.parse(json ?? "{}");
    return data !== null && typeof data === "object" && !Array.isArray(data) ? (data as PresetTexts) : {};
  } catch {
    return {};
  }
}

/** The run's name after the preset changes from `from` to `to`: a name that is still the form's default for `from`
 * (`<preset>-<yyyymmdd-hhmm>`) takes `to` in its place; any name the user wrote stays as it is. */
export function renamedDefault(name: string, from: string, to: string): string {
  const stamp = name.startsWith(`${from}-`) ? name.slice(from.length + 1) : "";
  return /^\d{8}-\d{4}$/.test(stamp) ? `${to}-${stamp}` : name;
}
