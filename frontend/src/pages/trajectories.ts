/** The trajectory viewer: a step picker and instruction and outcome filters over the rollouts sampled at a step,
 * each shown with its parts told apart, its reward and the gold answers. */

import { Api, describeError } from "../api";
import { byTestId, fill, h } from "../dom";
import type { Trajectory, TrajectoryPage } from "../types";
import { renderResponse } from "./response";

export async function trajectoriesPage(root: HTMLElement, api: Api): Promise<void> {
  const runId = root.dataset.runId as string;
  const prefix = root.dataset.responsePrefix ?? "";
  const stepPicker = byTestId<HTMLSelectElement>(root, "step-picker");
  const instructionFilter = byTestId<HTMLSelectElement>(root, "instruction-filter");
  const outcomeFilter = byTestId<HTMLSelectElement>(root, "outcome-filter");
  const list = byTestId(root, "trajectory-list");
  let page: TrajectoryPage = { step: null, trajectories: [] };

  const draw = () => {
    const shown = page.trajectories.filter(
      (t) =>
        (instructionFilter.value === "" || (t.instruction_id ?? "") === instructionFilter.value) &&
        (outcomeFilter.value === "" || (outcomeFilter.value === "solved" ? t.reward > 0 : t.reward <= 0)),
    );
    byTestId(root, "trajectory-count").textContent =
      page.step === null
        ? "No trajectories stored yet."
        : `${shown.length} of ${page.trajectories.length} rollouts sampled at step ${page.step}.`;
    fill(list, ...shown.map((t) => card(t, prefix)));
  };
  const load = async (step: string) => {
    const params = new URLSearchParams(step ? { step } : {});
    list.setAttribute("aria-busy", "true");
    try {
      page = await api.get<TrajectoryPage>(`runs/${runId}/trajectories/`, params);
    } catch (error) {
      fill(list, h("p", { class: "error", text: describeError(error) }));
      return;
    } finally {
      list.removeAttribute("aria-busy");
    }
    if (page.step !== null) stepPicker.value = String(page.step);
    const ids = [...new Set(page.trajectories.map((t) => t.instruction_id ?? ""))].sort();
    const keep = ids.includes(instructionFilter.value) ? instructionFilter.value : "";
    fill(
      instructionFilter,
      h("option", { value: "", text: "all instructions" }),
      ...ids.map((id) => h("option", { value: id, text: id || "(none)" })),
    );
    instructionFilter.value = keep;
    draw();
  };

  stepPicker.addEventListener("change", () => {
    const url = new URL(window.location.href);
    url.searchParams.set("step", stepPicker.value);
    window.history.replaceState(null, "", url);
    void load(stepPicker.value);
  });
  instructionFilter.addEventListener("change", draw);
  outcomeFilter.addEventListener("change", draw);
  await load(stepPicker.value);
}

function card(t: Trajectory, prefix: string): HTMLElement {
  // Green only for a right answer: a reward above 0 with a wrong answer is the format's credit (amber).
  const outcome = t.correct ? "solved" : t.reward > 0 ? "partial" : "failed";
  const rewardClass = { solved: "reward-good", partial: "reward-partial", failed: "reward-bad" }[outcome];
  return h(
    "article",
    { class: `trajectory ${outcome}`, "data-testid": "trajectory-card" },
    h("h3", { text: t.question }),
    h(
      "p",
      { class: "facts-line" },
      h("span", {
        class: `reward ${rewardClass}`,
        "data-testid": "trajectory-reward",
        text: `reward ${t.reward}${outcome === "partial" ? " (format credit: the answer is not right)" : ""}`,
      }),
      " · gold ",
      h("span", { class: "gold", "data-testid": "trajectory-gold", text: t.golden_answers.join(" / ") || "—" }),
      " · answered ",
      h("span", { class: "answer", text: t.answer ?? "—" }),
      ` · ${t.tool_calls} ${t.tool_calls === 1 ? "search" : "searches"} · ${t.response_tokens} tokens · instruction `,
      h("code", { text: t.instruction_id ?? "—" }),
    ),
    renderResponse(t.response, prefix),
    t.error ? h("p", { class: "error", text: t.error }) : null,
  );
}
