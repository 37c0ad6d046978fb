/** The run page's instruction × checkpoint heatmaps: the form's cost, counted as instructions, checkpoints and
 * questions are chosen; each heatmap as a grid (rows: instructions, columns: checkpoints, colour and number: EM),
 * filling in while the worker scores it; and a clicked cell's answers. */

import { Api, describeError } from "../api";
import { byTestId, fill, formatNumber, h } from "../dom";
import { cellGrid, costLine, emColour, lightText, openingNote, rowTextTitle } from "../transforms/heatmap";
import { sharedOpening, wordsThatDiffer } from "../transforms/wordDiff";
import type { Heatmap, HeatmapAnswer, HeatmapCell, HeatmapCellDetail } from "../types";
import { renderResponse } from "./response";

const POLL_MS = 3000;

export async function heatmapSection(root: HTMLElement, api: Api): Promise<void> {
  const section = root.querySelector<HTMLElement>('[data-testid="heatmaps"]');
  if (!section) return;
  const runId = root.dataset.runId as string;
  wireCost(section);
  const list = byTestId(section, "heatmap-list");
  const detail = byTestId(section, "heatmap-cell-detail");
  const openCell = (heatmap: Heatmap, cell: HeatmapCell) => void showCell(api, runId, heatmap, cell, detail);

  const load = async (): Promise<boolean> => {
    try {
      const heatmaps = await api.get<Heatmap[]>(`runs/${runId}/heatmaps/`);
      if (heatmaps.length === 0) {
        fill(list, h("p", { class: "muted", text: "No heatmap yet." }));
      } else {
        fill(list, ...heatmaps.map((heatmap) => renderHeatmap(heatmap, openCell)));
      }
      return heatmaps.some((heatmap) => heatmap.status === "queued" || heatmap.status === "running");
    } catch (error) {
      fill(
        list,
        h("p", { class: "error", role: "alert", text: `Could not load the heatmaps: ${describeError(error)}` }),
      );
      return true;
    }
  };
  const poll = async () => {
    if (document.hidden || (await load())) window.setTimeout(poll, POLL_MS);
  };
  if (await load()) window.setTimeout(poll, POLL_MS);
}

/** Keeps the form's cost line (cells × questions) in step with what is chosen, and holds back a submission that
 * would cost more than the server allows (the server checks again). */
function wireCost(section: HTMLElement): void {
  const form = section.querySelector<HTMLFormElement>('[data-testid="heatmap-form"]');
  if (!form) return;
  const maxAnswers = Number(section.dataset.maxAnswers);
  const output = byTestId(section, "heatmap-cost");
  const submit = byTestId<HTMLButtonElement>(section, "heatmap-submit");
  const update = () => {
    const instructions = form.querySelectorAll('input[name="instructions"]:checked').length;
    const checkpoints = form.querySelectorAll('input[name="steps"]:checked').length;
    const questions = Number(form.querySelector<HTMLInputElement>('input[name="sample_size"]')?.value ?? 0);
    const { text, allowed } = costLine(instructions, checkpoints, Math.floor(questions) || 0, maxAnswers);
    output.textContent = `Cost: ${text}`;
    output.classList.toggle("error", !allowed);
    submit.disabled = !allowed;
  };
  form.addEventListener("input", update);
  form.addEventListener("change", update);
  update();
}

function renderHeatmap(heatmap: Heatmap, open: (heatmap: Heatmap, cell: HeatmapCell) => void): HTMLElement {
  const grid = cellGrid(heatmap);
  const questions = heatmap.questions ?? heatmap.sample_size;
  const facts = [
    `#${heatmap.id}`,
    heatmap.status,
    `${heatmap.cells_done} of ${heatmap.cells_total} cells`,
    `${heatmap.benchmark}, ${questions} question${questions === 1 ? "" : "s"} (seed ${heatmap.sample_seed})`,
    `${heatmap.answers} answers`,
    heatmap.requested_by ? `by ${heatmap.requested_by}` : null,
  ].filter((part): part is string => part !== null);
  const header = h(
    "tr",
    {},
    h("th", { scope: "col", text: "Instruction \\ checkpoint" }),
    ...heatmap.columns.map((column) => h("th", { scope: "col", class: "num", text: `step ${column.step}` })),
  );
  const opening = sharedOpening(heatmap.rows.map((row) => row.text));
  const rows = heatmap.rows.map((row, r) => {
    const label = opening ? wordsThatDiffer(row.text, opening, 8) : snippet(row.text);
    const labelTitle = rowTextTitle(label);
    return h(
      "tr",
      {},
      h(
        "th",
        { scope: "row", title: row.text },
        h("code", { text: row.id }),
        row.retired_step !== null ? h("span", { class: "muted", text: ` pruned at step ${row.retired_step}` }) : null,
        h("span", {
          class: "heatmap-text muted",
          "data-testid": `heatmap-row-text-${row.id}`,
          text: label,
          ...(labelTitle ? { title: labelTitle } : {}),
        }),
      ),
      ...(grid[r] ?? []).map((cell) => cellTd(heatmap, cell, open)),
    );
  });
  const note = openingNote(opening);
  return h(
    "article",
    { class: "heatmap", "data-testid": "heatmap", "data-heatmap-id": heatmap.id, "data-status": heatmap.status },
    h("p", { class: "facts-line", "data-testid": "heatmap-facts", text: facts.join(" · ") }),
    heatmap.error ? h("p", { class: "error", "data-testid": "heatmap-error", text: heatmap.error }) : null,
    h(
      "div",
      { class: "table-wrap" },
      h("table", { class: "heatmap-grid" }, h("thead", {}, header), h("tbody", {}, ...rows)),
    ),
    note ? h("p", { class: "muted", "data-testid": "heatmap-opening-note", text: note }) : null,
    h("p", {
      class: "muted",
      text: "Colour and number: exact match (EM) of the instruction's greedy answers with that checkpoint's policy; ★ the best of its column. Click a cell for its answers.",
    }),
  );
}

/** The start of an instruction, on one line, when the rows share no opening (the whole text is its title); rows
 * that share one show the words after it (`wordsThatDiffer`). */
function snippet(text: string): string {
  const line = text.split(/\s+/).join(" ").trim();
  return line.length > 60 ? `${line.slice(0, 60)}…` : line;
}

/** A cell's table cell, in its colour to the edges however tall its row is, holding the cell's button. */
function cellTd(heatmap: Heatmap, cell: HeatmapCell | null, open: (heatmap: Heatmap, cell: HeatmapCell) => void) {
  const td = h("td", { class: "heatmap-td" }, cell ? cellButton(heatmap, cell, open) : "—");
  if (cell) td.style.backgroundColor = emColour(cell.done ? cell.em : null);
  return td;
}

function cellButton(heatmap: Heatmap, cell: HeatmapCell, open: (heatmap: Heatmap, cell: HeatmapCell) => void) {
  const best = (heatmap.best[String(cell.step)] ?? []).includes(cell.instruction_id);
  const label = cell.done ? formatNumber(cell.em) : "…";
  const button = h(
    "button",
    {
      type: "button",
      class: `heatmap-cell${lightText(cell.em) ? " light" : ""}`,
      "data-testid": "heatmap-cell",
      "data-cell": `${cell.instruction_id}@${cell.step}`,
      "data-done": cell.done,
      "aria-label": `${cell.instruction_id} at step ${cell.step}: ${cell.done ? `EM ${label}, F1 ${formatNumber(cell.f1)}` : "not scored yet"}`,
      title: cell.done ? `EM ${label} · F1 ${formatNumber(cell.f1)} · ${cell.n} questions` : "not scored yet",
      on: { click: () => open(heatmap, cell) },
    },
    label,
    best ? h("span", { class: "best-mark", text: " ★" }) : null,
  );
  button.style.backgroundColor = emColour(cell.done ? cell.em : null);
  return button;
}

async function showCell(
  api: Api,
  runId: string,
  heatmap: Heatmap,
  cell: HeatmapCell,
  container: HTMLElement,
): Promise<void> {
  container.hidden = false;
  container.setAttribute("aria-busy", "true");
  try {
    const detail = await api.get<HeatmapCellDetail>(`runs/${runId}/heatmaps/${heatmap.id}/cells/${cell.id}/`);
    const summary = detail.done
      ? `EM ${formatNumber(detail.em)} · F1 ${formatNumber(detail.f1)} · answered ${formatNumber(detail.answered)} · ${detail.n} questions`
      : "Not scored yet: its answers appear once the worker reaches it.";
    fill(
      container,
      h("h3", { text: `${detail.instruction_id} with the checkpoint of step ${detail.step} (heatmap #${heatmap.id})` }),
      h("p", { "data-testid": "heatmap-cell-summary", text: summary }),
      h("details", {}, h("summary", { text: "The instruction" }), h("pre", { text: detail.instruction_text })),
      ...detail.trajectories.map(answerCard),
    );
    container.scrollIntoView({ block: "nearest" });
  } catch (error) {
    fill(container, h("p", { class: "error", role: "alert", text: describeError(error) }));
  } finally {
    container.removeAttribute("aria-busy");
  }
}

function answerCard(answer: HeatmapAnswer): HTMLElement {
  const solved = answer.em > 0;
  return h(
    "article",
    { class: `trajectory ${solved ? "solved" : "failed"}`, "data-testid": "heatmap-answer" },
    h("h4", { text: answer.question }),
    h(
      "p",
      { class: "facts-line" },
      h("span", {
        class: `reward ${solved ? "reward-good" : "reward-bad"}`,
        text: `EM ${answer.em} · F1 ${formatNumber(answer.f1)}`,
      }),
      " · gold ",
      h("span", { class: "gold", text: answer.golden_answers.join(" / ") || "—" }),
      " · answered ",
      h("span", { class: "answer", text: answer.answer ?? "—" }),
      ` · ${answer.tool_calls} ${answer.tool_calls === 1 ? "search" : "searches"}`,
    ),
    renderResponse(answer.response),
    answer.error ? h("p", { class: "error", text: answer.error }) : null,
  );
}
