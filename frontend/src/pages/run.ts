/** The run page: live status, progress, ETA and population while the run is active, the Fig. 2 panels, the
 * population's shares and the evolution markers, the best instruction, and the config's changes from its preset. */

import { Api, describeError } from "../api";
import { byTestId, fill, formatNumber, h } from "../dom";
import { formatValue } from "../transforms/configDiff";
import { estimateEta, formatDuration, stepDurations } from "../transforms/eta";
import { rewardCaption } from "../transforms/outcomes";
import {
  evolutionMarkers,
  formatInterval,
  lastPerStep,
  membersAt,
  populationShares,
  recentRewardsAt,
  resolution,
  sameMembers,
} from "../transforms/population";
import {
  ACTIVE_STATUSES,
  type BestInstruction,
  type Lineage,
  type MetricSeries,
  type PopulationHistory,
  type RunDetail,
} from "../types";
import { heatmapSection } from "./heatmap";
import { DiversitySection } from "./diversity";
import { RunCharts, type ShareMode } from "./runCharts";

/** Often enough to feel live, rare enough that a dozen open tabs do not load the server. */
const POLL_MS = 4000;

interface RunData {
  run: RunDetail;
  metrics: MetricSeries;
  population: PopulationHistory;
  lineage: Lineage;
}

export async function runPage(root: HTMLElement, api: Api): Promise<void> {
  const runId = root.dataset.runId as string;
  void heatmapSection(root, api);
  const charts = new RunCharts(root);
  const diversity = new DiversitySection(root, api, runId);
  const smoothing = byTestId<HTMLInputElement>(root, "smoothing");
  const shareMode = byTestId<HTMLSelectElement>(root, "share-mode");
  const load = async (run?: RunDetail): Promise<RunData> => {
    void diversity.load();
    const [current, metrics, population, lineage] = await Promise.all([
      run ?? api.get<RunDetail>(`runs/${runId}/`),
      api.get<MetricSeries>(`runs/${runId}/metrics/`),
      api.get<PopulationHistory>(`runs/${runId}/population/`),
      api.get<Lineage>(`runs/${runId}/lineage/`),
    ]);
    return { run: current, metrics, population, lineage };
  };

  let data: RunData;
  try {
    data = await load();
  } catch (error) {
    showError(root, error);
    return;
  }
  const draw = () => {
    const markers = evolutionMarkers(data.lineage.rounds, data.population);
    const maxStep = Math.max(data.run.total_steps, data.metrics.step.at(-1) ?? 0);
    charts.drawPanels(data.metrics, Number(smoothing.value), markers, maxStep);
    charts.drawPopulation(populationShares(data.population), shareMode.value as ShareMode, maxStep);
    charts.drawEvolution(markers, maxStep);
    byTestId(root, "charts-empty").hidden = data.metrics.step.length > 0;
    const caption = rewardCaption(data.metrics);
    const captionElement = byTestId(root, "reward-caption");
    captionElement.textContent = caption ?? "";
    captionElement.hidden = caption === null;
  };
  const refresh = () => {
    renderStatus(root, data);
    renderPopulation(root, data);
    void syncSteering(data);
    renderBest(root, api, data.run);
    draw();
  };
  smoothing.addEventListener("input", () => {
    byTestId(root, "smoothing-value").textContent = Number(smoothing.value).toFixed(2);
    draw();
  });
  shareMode.addEventListener("change", draw);
  refresh();
  renderPresetChanges(root, data.run);

  if (!isActive(data.run)) return;
  const poll = async () => {
    if (!document.hidden) {
      try {
        const run = await api.get<RunDetail>(`runs/${runId}/`);
        if (!isActive(run)) {
          // The server-rendered parts (checkpoints, evaluations, the action buttons) change at the end: reload.
          window.location.reload();
          return;
        }
        data = run.step !== data.run.step ? await load(run) : { ...data, run };
        refresh();
        byTestId(root, "live-error").hidden = true;
      } catch (error) {
        showError(root, error);
      }
    }
    window.setTimeout(poll, POLL_MS);
  };
  window.setTimeout(poll, POLL_MS);
}

function isActive(run: RunDetail): boolean {
  return ACTIVE_STATUSES.includes(run.status);
}

function showError(root: HTMLElement, error: unknown): void {
  const element = byTestId(root, "live-error");
  element.textContent = `Could not update the page: ${describeError(error)}`;
  element.hidden = false;
}

function renderStatus(root: HTMLElement, { run, metrics }: RunData): void {
  const status = byTestId(root, "run-status");
  status.textContent = run.status;
  status.className = `status status-${run.status}`;
  // The server's account of where the run stands counts its evaluations beside its steps (`activity`).
  const activity = run.activity;
  const fraction = activity ? activity.fraction : run.progress;
  const parts = [activity ? activity.text : `step ${run.step} / ${run.total_steps}`, `${Math.round(100 * fraction)} %`];
  if (isActive(run)) {
    let eta = activity ? activity.eta_seconds : null;
    if (!activity) {
      const started = run.started_at ? Date.parse(run.started_at) : Number.NaN;
      eta = estimateEta({
        step: run.step,
        totalSteps: run.total_steps,
        stepSeconds: stepDurations(metrics.timings, metrics.step.length),
        elapsedSeconds: Number.isFinite(started) ? (Date.now() - started) / 1000 : null,
      });
    }
    parts.push(eta === null ? "ETA —" : `ETA ${formatDuration(eta)}`);
  }
  byTestId(root, "run-progress").textContent = parts.join(" · ");
  const bar = byTestId<HTMLProgressElement>(root, "run-progress-bar");
  bar.value = fraction;
}

/** The steering table is the server's (its forms carry the CSRF token and the member's permissions): when the
 * population lists other instructions than its rows, its rows are read again from the run page. */
async function syncSteering({ population }: RunData): Promise<void> {
  const selector = '[data-testid="steer-instructions"]';
  const table = document.querySelector(selector);
  const last = lastPerStep(population).at(-1);
  if (table === null || last === undefined) return;
  const listed = [...table.querySelectorAll("tr[data-instruction]")].map(
    (row) => row.getAttribute("data-instruction") ?? "",
  );
  if (
    sameMembers(
      listed,
      membersAt(population, last).map((m) => m.id),
    )
  )
    return;
  const response = await fetch(window.location.pathname, { credentials: "same-origin" });
  if (!response.ok) return;
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html").querySelector(selector);
  if (fresh !== null && document.contains(table)) table.replaceWith(document.importNode(fresh, true));
}

function renderPopulation(root: HTMLElement, { population, run }: RunData): void {
  const container = byTestId(root, "current-population");
  const last = lastPerStep(population).at(-1);
  if (last === undefined) {
    fill(container, h("p", { class: "muted", text: "No population yet." }));
    return;
  }
  const { step, reason, best_id: bestIds } = population.snapshots;
  const lineageUrl = (id: string) => `/runs/${run.id}/lineage/?node=${encodeURIComponent(id)}`;
  const recent = recentRewardsAt(population, last);
  const rows = membersAt(population, last).map((m, i) =>
    h(
      "tr",
      { "data-member": m.id },
      h(
        "td",
        {},
        h("a", { href: lineageUrl(m.id) }, h("code", { text: m.id })),
        m.id === bestIds[last] ? h("span", { class: "best-mark", title: "best", text: " ★" }) : null,
      ),
      h("td", { class: "num", text: formatNumber(m.weight) }),
      h("td", { class: "num", text: formatNumber(m.probability) }),
      h("td", { class: "num", "data-testid": "member-recent", text: formatInterval(recent[i]) }),
      h("td", { class: "num", "data-testid": "member-recent-n", text: String(recent[i].n) }),
      h("td", { class: "num", text: `${formatNumber(m.mean_reward)} (${m.samples})` }),
    ),
  );
  const verdict = resolution(recent, bestIds[last]);
  fill(
    container,
    h("p", { class: "muted", text: `After step ${step[last]} (${reason[last]}); ★ is the best.` }),
    h("p", { "data-testid": "population-resolution", "data-kind": verdict.kind, text: verdict.text }),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        {},
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ...[
              "Instruction",
              "Weight",
              "Sampling p",
              "Recent reward [95 % interval]",
              "Questions behind it",
              "Last step: mean reward (questions)",
            ].map((t) => h("th", { scope: "col", text: t })),
          ),
        ),
        h("tbody", {}, ...rows),
      ),
    ),
    h(
      "p",
      { class: "muted" },
      "Recent reward: the mean of the instruction's per-step mean rewards over the steps its weight counts (its " +
        "weight, when the population is weighted), with a 95 % t interval over the questions behind it. Where the " +
        "intervals overlap, the weights differ by noise; ",
      h("a", {
        href: "/docs/statistics.html#the-population-can-its-instructions-be-told-apart",
        text: "the statistics page of the documentation",
      }),
      " says how many questions per instruction resolve a given difference.",
    ),
  );
}

/** Fills the best-instruction section when the run's best changes while the page is open. */
function renderBest(root: HTMLElement, api: Api, run: RunDetail): void {
  const section = byTestId(root, "best-instruction");
  if (!run.best_instruction_id || section.dataset.bestId === run.best_instruction_id) return;
  section.dataset.bestId = run.best_instruction_id;
  api
    .get<BestInstruction>(`runs/${run.id}/best-instruction/`)
    .then(({ instruction }) => {
      byTestId(section, "best-instruction-summary").textContent =
        `${instruction.id} (${instruction.origin}, born at step ${instruction.birth_step}, weight ${formatNumber(instruction.weight)})`;
      byTestId(section, "best-instruction-text").textContent = instruction.text;
      byTestId(section, "best-instruction-body").hidden = false;
      byTestId(section, "best-instruction-none").hidden = true;
    })
    .catch((error: unknown) => showError(root, error));
}

/** What the run's config changed from its preset's (the API's `preset_diff`), when it came from a known one. */
function renderPresetChanges(root: HTMLElement, run: RunDetail): void {
  const container = byTestId(root, "config-vs-preset");
  const diff = run.preset_diff;
  if (diff === null) return;
  if (diff.length === 0) {
    fill(container, h("p", { class: "muted", text: `The config is the “${run.preset}” preset unchanged.` }));
    return;
  }
  fill(
    container,
    h("p", { text: `Changed from the “${run.preset}” preset:` }),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        {},
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            h("th", { scope: "col", text: "Field" }),
            h("th", { scope: "col", text: "Preset" }),
            h("th", { scope: "col", text: "This run" }),
          ),
        ),
        h(
          "tbody",
          {},
          ...diff.map(({ field, values }) =>
            h(
              "tr",
              {},
              h("td", {}, h("code", { text: field })),
              h("td", { text: formatValue(values.preset) }),
              h("td", { text: formatValue(values.run) }),
            ),
          ),
        ),
      ),
    ),
  );
}
