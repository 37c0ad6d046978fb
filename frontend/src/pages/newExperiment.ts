/** The New experiment form: keeps the number of runs (checked arms × seeds) and the rough cost in view as the form
 * changes. The server renders the first estimate, so the form reads the same without this script. */

import { costText } from "../transforms/experiment";

export function newExperimentPage(root: HTMLElement): void {
  const minutes = JSON.parse(root.dataset.minutes ?? "{}") as Record<string, number | null>;
  const form = root.querySelector<HTMLFormElement>('[data-testid="experiment-form"]');
  const estimate = root.querySelector<HTMLElement>('[data-testid="experiment-estimate"]');
  if (!form || !estimate) return;
  const show = () => {
    const preset = form.querySelector<HTMLSelectElement>('select[name="preset"]')?.value ?? "";
    const arms = form.querySelectorAll('input[name="arms"]:checked').length;
    const seeds = Number(form.querySelector<HTMLInputElement>('input[name="seeds"]')?.value ?? 0);
    const runs = Number.isInteger(seeds) && seeds > 0 ? arms * seeds : 0;
    estimate.textContent = costText(preset, runs, minutes[preset]);
  };
  form.addEventListener("input", show);
  form.addEventListener("change", show);
  show();
}
