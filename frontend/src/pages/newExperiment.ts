/** The New experiment form: keeps the cost estimate in view as the form changes, asking the API for it (the API
 * writes the text, from the team's finished runs of the preset or the preset's figure). The server renders the
 * first estimate, so the form reads the same without this script. */

import { Api, describeError } from "../api";
import { estimateQuery } from "../transforms/experiment";
import type { ExperimentEstimate } from "../types";
import { followIndexStatus } from "./indexStatus";

const DEBOUNCE_MS = 250;

export function newExperimentPage(root: HTMLElement, api: Api): void {
  const teams = JSON.parse(root.dataset.teams ?? "{}") as Record<string, string>;
  const form = root.querySelector<HTMLFormElement>('[data-testid="experiment-form"]');
  const estimate = root.querySelector<HTMLElement>('[data-testid="experiment-estimate"]');
  if (!form || !estimate) return;
  let asked = 0;
  let timer: number | undefined;
  const ask = async () => {
    const value = (name: string) => form.querySelector<HTMLInputElement | HTMLSelectElement>(`[name="${name}"]`)?.value;
    const query = estimateQuery(
      value("preset") ?? "",
      form.querySelectorAll('input[name="arms"]:checked').length,
      value("seeds") ?? "",
      teams[value("team") ?? ""],
    );
    if (query === null) return;
    // What the runs will do: their steps (the shared overrides) and the questions each evaluation answers.
    const chosen = [...form.querySelectorAll<HTMLInputElement>('input[name="data_benchmarks"]:checked')].map(
      (box) => box.value,
    );
    const benchmarks = [value("benchmarks") ?? "", ...chosen].filter((name) => name.trim() !== "").join(",");
    query.set("benchmarks", benchmarks);
    if (/^\d+$/.test(value("questions") ?? "")) query.set("questions", value("questions") ?? "0");
    const overrides = (value("overrides") ?? "").trim();
    if (overrides !== "") query.set("overrides", overrides);
    if (value("dataset")) query.set("dataset", value("dataset") ?? "");
    const mine = ++asked;
    try {
      const answer = await api.get<ExperimentEstimate>("experiments/estimate/", query);
      if (mine !== asked) return; // a newer question is on its way
      estimate.textContent = answer.text;
      estimate.dataset.basis = answer.basis;
    } catch (problem) {
      if (mine === asked) estimate.textContent = `No estimate: ${describeError(problem)}`;
    }
  };
  const later = () => {
    window.clearTimeout(timer);
    timer = window.setTimeout(() => void ask(), DEBOUNCE_MS);
  };
  form.addEventListener("input", later);
  form.addEventListener("change", later);
  followIndexStatus(root);
}
