/** The New run and New experiment forms' index line: whether the chosen corpus has an index for the chosen retriever,
 * as the server wrote it per corpus and retriever (`webapp.runs.forms.retriever_states`). An empty choice is the
 * preset's. Knows nothing about the DOM. */

export interface IndexStates {
  /** Per preset, its corpus and retriever. */
  presets: Record<string, [string, string]>;
  /** Per corpus, per retriever, the line to show. */
  texts: Record<string, Record<string, string>>;
}

/** The line for these choices; "" for a corpus or retriever the page knows nothing of (a path the preset names). */
export function indexStatus(states: IndexStates, preset: string, corpus: string, retriever: string): string {
  const [presetCorpus, presetRetriever] = Object.hasOwn(states.presets, preset)
    ? states.presets[preset]
    : ["builtin", "dense"];
  const chosen = corpus || presetCorpus;
  const texts = Object.hasOwn(states.texts, chosen) ? states.texts[chosen] : {};
  const method = retriever || presetRetriever;
  return Object.hasOwn(texts, method) ? texts[method] : "";
}

/** The states in a page's data attribute; none when it is missing or not the expected shape. */
export function parseIndexStates(json: string | undefined): IndexStates {
  try {
    const data = JSON.parse(json ?? "{}") as Partial<IndexStates> | null;
    const ok = (value: unknown) => value !== null && typeof value === "object" && !Array.isArray(value);
    if (data && ok(data.presets) && ok(data.texts)) return data as IndexStates;
  } catch {
    // not JSON: the server's line stays
  }
  return { presets: {}, texts: {} };
}
