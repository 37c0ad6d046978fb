/** The New run form's reachability line (`[data-testid="reach-line"]`): for the training data, corpus, retriever and
 * k the form names, the check's shares from the API, a warning below 30 % in the top k (the run may still be
 * submitted), a button that starts the check when none was started, and its progress while it runs. */

import { Api, describeError } from "../api";
import { type ReachCheck, type ReachTarget, parseReachStates, reachLine, reachTarget } from "../transforms/reach";

const POLL_MS = 3000;

export function followReach(root: HTMLElement, api: Api): void {
  const line = root.querySelector<HTMLElement>('[data-testid="reach-line"]');
  const states = parseReachStates(root.dataset.reach);
  if (!line || !states) return;
  const text = line.querySelector<HTMLElement>("span") ?? line;
  const button = line.querySelector<HTMLButtonElement>("button");
  const value = (name: string) =>
    root.querySelector<HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>(`[name="${name}"]`)?.value ?? "";
  const chosen = () =>
    reachTarget(states, {
      preset: value("preset"),
      team: value("team"),
      dataset: value("dataset"),
      corpus: value("corpus"),
      retriever: value("retriever"),
      overrides: value("overrides"),
    });
  let shown = "";
  let timer: number | undefined;

  const query = (target: ReachTarget) => {
    const params = new URLSearchParams({ ...target, k: String(target.k), split: "train" });
    if (!target.team) params.delete("team");
    return params;
  };
  const render = (target: ReachTarget, check: ReachCheck | null) => {
    const view = reachLine(target, check, states.low);
    text.textContent = view.text;
    line.dataset.level = view.level;
    line.classList.toggle("warning", view.level === "warning");
    if (button) button.hidden = view.level !== "offer";
    line.hidden = false;
    if (view.level === "busy") timer = window.setTimeout(() => void refresh(), POLL_MS);
  };
  const refresh = async () => {
    window.clearTimeout(timer);
    const target = chosen();
    const key = JSON.stringify(target);
    shown = key;
    if (target === null) {
      line.hidden = true;
      return;
    }
    try {
      const found = await api.get<ReachCheck[]>("reach-checks/", query(target));
      if (shown === key) render(target, found[0] ?? null);
    } catch {
      if (shown === key) line.hidden = true; // e.g. data without a train split: the form's own check says so
    }
  };
  button?.addEventListener("click", () => {
    const target = chosen();
    if (target === null) return;
    const { team, ...rest } = target;
    api.post<ReachCheck>("reach-checks/", { ...rest, split: "train", ...(team ? { team } : {}) }).then(
      (check) => render(target, check),
      (error: unknown) => {
        text.textContent = describeError(error);
      },
    );
  });
  for (const name of ["preset", "team", "dataset", "corpus", "retriever", "overrides"]) {
    root.querySelector(`[name="${name}"]`)?.addEventListener("change", () => void refresh());
  }
  void refresh();
}
