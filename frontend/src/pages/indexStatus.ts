/** Keeps a form's index line (`[data-testid="index-status"]`) in step with its preset, corpus and retriever choices,
 * from the states in the root's `data-index-states`. The server renders the first line, so the form reads the same
 * without this script. */

import { indexStatus, parseIndexStates } from "../transforms/indexStatus";

export function followIndexStatus(root: HTMLElement): void {
  const line = root.querySelector<HTMLElement>('[data-testid="index-status"]');
  if (!line || root.dataset.indexStates === undefined) return;
  const states = parseIndexStates(root.dataset.indexStates);
  const value = (name: string) => root.querySelector<HTMLSelectElement>(`select[name="${name}"]`)?.value ?? "";
  const show = () => {
    line.textContent = indexStatus(states, value("preset"), value("corpus"), value("retriever"));
  };
  for (const name of ["preset", "corpus", "retriever"]) {
    root.querySelector(`select[name="${name}"]`)?.addEventListener("change", show);
  }
}
