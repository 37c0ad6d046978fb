/** What the New run form says of its training data's reachability: which check the form's choices name (training
 * questions, corpus, retriever, k: each the field's value, else the overrides', else the preset's), and the line to
 * show for that check's state. Knows nothing about the DOM or the API. */

/** Per preset, the values a check needs when the form leaves them empty. */
export interface ReachPreset {
  dataset: string;
  corpus: string;
  retriever: string;
  top_k: number;
}

export interface ReachStates {
  presets: Record<string, ReachPreset>;
  /** Team option value (its id) → the team's slug, as the API names teams. */
  teams: Record<string, string>;
  /** Below this top-k share the form warns. */
  low: number;
}

export interface ReachTarget {
  questions: string;
  corpus: string;
  method: string;
  k: number;
  team: string;
}

/** The subset of a reachability check the form reads. */
export interface ReachCheck {
  status: string;
  stage?: string;
  done?: number;
  total?: number;
  topk_share: number | null;
  anywhere_share: number | null;
  error?: string;
}

export interface FormChoices {
  preset: string;
  team: string;
  dataset: string;
  corpus: string;
  retriever: string;
  overrides: string;
}

/** The states in a page's data attribute; none when it is missing or not the expected shape. */
export function parseReachStates(json: string | undefined): ReachStates | null {
  try {
    const data = JSON.parse(json ?? "null") as ReachStates | null;
    if (data === null || typeof data !== "object" || typeof data.presets !== "object") return null;
    return data;
  } catch {
    return null;
  }
}

function overridden(text: string): Record<string, unknown> {
  try {
    const data: unknown = JSON.parse(text.trim() || "{}");
    return data !== null && typeof data === "object" && !Array.isArray(data) ? (data as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** The check the choices name; null when it names no uploaded data or a retriever without an index. */
export function reachTarget(states: ReachStates, choices: FormChoices): ReachTarget | null {
  const preset = states.presets[choices.preset];
  if (!preset) return null;
  const overrides = overridden(choices.overrides);
  const pick = (field: string, path: string, fallback: unknown): unknown =>
    field || (Object.hasOwn(overrides, path) ? overrides[path] : fallback);
  const questions = pick(choices.dataset, "env.dataset", preset.dataset);
  const corpus = pick(choices.corpus, "env.corpus", preset.corpus);
  const method = pick(choices.retriever, "env.retriever", preset.retriever);
  const k = pick("", "env.top_k", preset.top_k);
  const team = states.teams[choices.team] ?? "";
  if (typeof questions !== "string" || typeof corpus !== "string" || typeof method !== "string") return null;
  if (!questions.startsWith("data:") || !corpus.startsWith("data:")) return null;
  if (!["bm25", "dense"].includes(method) || typeof k !== "number" || !Number.isInteger(k) || k < 1) return null;
  return { questions, corpus, method, k, team };
}

function percent(share: number): string {
  return `${(100 * share).toFixed(1)} %`;
}

export interface ReachLine {
  text: string;
  /** warning: below the low share; offer: not checked yet (a button starts it); busy: under way; info: otherwise. */
  level: "warning" | "offer" | "busy" | "info";
}

/** What the form says of the target's check (null: not started yet). */
export function reachLine(target: ReachTarget, check: ReachCheck | null, low: number): ReachLine {
  const what = `${target.questions} (train) against ${target.corpus}, ${target.method}, top ${target.k}`;
  if (check === null || check.status === "cancelled") {
    return { text: `Not checked yet whether ${what} can answer its questions.`, level: "offer" };
  }
  if (check.status === "failed") {
    return { text: `The reachability check of ${what} failed: ${check.error ?? ""}`, level: "offer" };
  }
  if (check.status !== "done" || check.topk_share === null) {
    const far = check.stage && check.total ? ` (${check.stage}: ${check.done ?? 0} of ${check.total})` : "";
    const waiting = check.status === "waiting" ? " after the corpus's index" : "";
    return { text: `Checking ${what}${waiting}: ${check.status}${far}…`, level: "busy" };
  }
  const anywhere = check.anywhere_share === null ? "" : `; ${percent(check.anywhere_share)} anywhere in the corpus`;
  const shares = `${percent(check.topk_share)} of the training questions have a gold answer in the top ${target.k} passages retrieved for the question itself${anywhere}`;
  if (check.topk_share < low) {
    return {
      text: `Only ${shares}: exact match has little to learn from. You can still submit.`,
      level: "warning",
    };
  }
  return { text: `${shares[0].toUpperCase()}${shares.slice(1)}.`, level: "info" };
}
