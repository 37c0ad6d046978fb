/** The lineage page: the family tree of a run's instructions, a keyboard-reachable list of them, and a detail
 * panel with the chosen one's text, its word diff against its parent, the critique and failures that produced it,
 * its verification score, its weight history and the candidates proposed from it. */

import { Api, describeError } from "../api";
import { createChart, linePanel, ORIGIN_COLORS, type Chart } from "../charts";
import { byTestId, fill, formatNumber, h } from "../dom";
import { nodeState } from "../transforms/lineageNodes";
import { weightHistory } from "../transforms/population";
import { wordDiff, wordsThatDiffer } from "../transforms/wordDiff";
import type { Lineage, LineageNode, PopulationHistory, Round, Run } from "../types";
import { LineageGraph } from "./lineageGraph";
import { renderResponse } from "./response";

/** Shows an instruction in the detail panel; `focusList` moves keyboard focus to its entry in the list. */
type Select = (id: string, focusList?: boolean) => void;

interface LineageData {
  run: Run;
  lineage: Lineage;
  population: PopulationHistory;
}

export async function lineagePage(root: HTMLElement, api: Api): Promise<void> {
  const runId = root.dataset.runId as string;
  let data: LineageData;
  try {
    const [run, lineage, population] = await Promise.all([
      api.get<Run>(`runs/${runId}/`),
      api.get<Lineage>(`runs/${runId}/lineage/`),
      api.get<PopulationHistory>(`runs/${runId}/population/`),
    ]);
    data = { run, lineage, population };
  } catch (error) {
    fill(byTestId(root, "lineage-detail"), h("p", { class: "error", text: describeError(error) }));
    return;
  }
  const { lineage } = data;
  const bestId = data.run.best_instruction_id ?? data.population.snapshots.best_id.at(-1) ?? null;
  const byId = new Map(lineage.nodes.map((node) => [node.id, node]));
  const showRejected = byTestId<HTMLInputElement>(root, "show-rejected");
  const weightChart = createChart(byTestId(root, "chart-weight-history"), "Weight of the chosen instruction per step");
  let selected: string | null = null;

  const select = (id: string, focusList = false) => {
    const node = byId.get(id);
    if (!node) return;
    selected = id;
    for (const item of byTestId(root, "lineage-list").querySelectorAll("li > button")) {
      item.setAttribute("aria-pressed", String(item.parentElement?.dataset.testid === `lineage-node-${id}`));
    }
    renderDetail(root, data, node, bestId, weightChart, select);
    graph.draw(lineage, bestId, id, showRejected.checked);
    const url = new URL(window.location.href);
    url.searchParams.set("node", id);
    window.history.replaceState(null, "", url);
    if (focusList) byTestId(root, `lineage-node-${id}`).querySelector("button")?.focus();
  };
  const graph = new LineageGraph(byTestId(root, "chart-lineage"), (id) => select(id));
  showRejected.addEventListener("change", () => graph.draw(lineage, bestId, selected, showRejected.checked));
  renderRounds(root, lineage.rounds, (id) => select(id, true));
  renderList(root, lineage.nodes, bestId, select);

  if (lineage.nodes.length === 0) {
    fill(byTestId(root, "lineage-list"), h("li", { class: "muted", text: "No instructions yet." }));
    graph.draw(lineage, bestId, null, showRejected.checked);
    return;
  }
  const wanted = new URL(window.location.href).searchParams.get("node");
  select(wanted && byId.has(wanted) ? wanted : bestId && byId.has(bestId) ? bestId : lineage.nodes[0].id);
}

function renderList(root: HTMLElement, nodes: LineageNode[], bestId: string | null, select: Select): void {
  const texts = new Map(nodes.map((node) => [node.id, node.text]));
  const items = nodes.map((node) => {
    const state = nodeState(node, bestId);
    const parentText = node.parent_id === null ? null : (texts.get(node.parent_id) ?? null);
    return h(
      "li",
      { "data-testid": `lineage-node-${node.id}`, class: `state-${state}` },
      h(
        "button",
        {
          type: "button",
          "aria-pressed": "false",
          on: { click: () => select(node.id) },
        },
        h("span", {
          class: "swatch",
          style: `background:${ORIGIN_COLORS[node.origin] ?? "#888"}`,
          "aria-hidden": "true",
        }),
        h("code", { text: node.id }),
        ` ${node.origin} · step ${node.birth_step} · `,
        h("span", { class: `state state-${state}`, text: state }),
        h("span", {
          class: "muted differs",
          "data-testid": `lineage-differs-${node.id}`,
          text: ` · ${wordsThatDiffer(node.text, parentText)}`,
        }),
      ),
    );
  });
  fill(byTestId(root, "lineage-list"), ...items);
}

function renderDetail(
  root: HTMLElement,
  { lineage, population }: LineageData,
  node: LineageNode,
  bestId: string | null,
  weightChart: Chart,
  select: Select,
): void {
  const parent = lineage.nodes.find((n) => n.id === node.parent_id) ?? null;
  const round = lineage.rounds.find((r) => r.id === node.round_id) ?? null;
  const state = nodeState(node, bestId);
  fill(
    byTestId(root, "lineage-summary"),
    h("h2", {}, h("code", { text: node.id }), " ", h("span", { class: `state state-${state}`, text: state })),
    h(
      "dl",
      { class: "facts" },
      h("dt", { text: "Origin" }),
      h("dd", {
        "data-testid": "lineage-origin",
        text: node.author ? `${node.origin}, by ${node.author}` : node.origin,
      }),
      node.pinned ? h("dt", { text: "Pinned" }) : null,
      node.pinned ? h("dd", { text: "yes: pruning never drops it" }) : null,
      h("dt", { text: "Born" }),
      h("dd", { text: `step ${node.birth_step}${round ? ` (round ${round.id}, ${round.proposer})` : ""}` }),
      h("dt", { text: "Parent" }),
      h(
        "dd",
        {},
        parent
          ? h("button", { type: "button", class: "link", on: { click: () => select(parent.id, true) } }, parent.id)
          : node.parent_id
            ? `${node.parent_id} (not in this run)`
            : "none",
      ),
      h("dt", { text: "Verification score" }),
      h("dd", {
        "data-testid": "lineage-verify-score",
        text: node.verify_score === null ? "not verified" : formatNumber(node.verify_score),
      }),
      node.retired_step !== null ? h("dt", { text: "Pruned" }) : null,
      node.retired_step !== null
        ? h("dd", { text: `at step ${node.retired_step}${node.retired_reason ? `: ${node.retired_reason}` : ""}` })
        : null,
    ),
  );
  byTestId(root, "lineage-text").textContent = node.text;
  fill(byTestId(root, "lineage-diff"), ...diffAgainst(parent, node));
  byTestId(root, "lineage-critique").textContent =
    node.critique || (node.parent_id ? "The optimizer wrote no critique for this round." : "A seed has no critique.");
  fill(byTestId(root, "lineage-failures"), ...failures(round));
  fill(byTestId(root, "lineage-candidates"), ...candidatesFrom(lineage.rounds, node.id, select));
  const history = weightHistory(population, node.id);
  weightChart.setOption(
    linePanel("Weight", [{ type: "line", name: "weight", data: history, showSymbol: history.length < 40 }], {
      grid: { left: 44, right: 12, top: 28, bottom: 24 },
    }),
    { notMerge: true },
  );
}

function diffAgainst(parent: LineageNode | null, node: LineageNode): (HTMLElement | string)[] {
  if (!parent) return [h("span", { class: "muted", text: "No parent: nothing to compare with." })];
  const parts = wordDiff(parent.text, node.text);
  return [
    h(
      "p",
      { class: "muted" },
      "Against ",
      h("code", { text: parent.id }),
      ": ",
      h("ins", { text: "added" }),
      " ",
      h("del", { text: "removed" }),
    ),
    h(
      "div",
      { class: "diff" },
      ...parts.map((part) =>
        part.op === "same" ? part.text : h(part.op === "added" ? "ins" : "del", { text: part.text }),
      ),
    ),
  ];
}

function failures(round: Round | null): HTMLElement[] {
  if (!round || round.failures.length === 0) {
    return [h("p", { class: "muted", text: "The optimizer was shown no failures for this instruction." })];
  }
  return round.failures.map((failure, i) =>
    h(
      "details",
      { class: "failure" },
      h(
        "summary",
        {},
        `${i + 1}. ${failure.question ?? "(no question)"} `,
        h("span", {
          class: "muted",
          text: `reward ${formatNumber(failure.reward ?? null)} · gold ${(failure.golden_answers ?? []).join(" / ") || "—"}`,
        }),
      ),
      renderResponse(failure.response ?? ""),
    ),
  );
}

function candidatesFrom(rounds: Round[], parentId: string, select: Select): HTMLElement[] {
  const own = rounds.filter((r) => r.parent_id === parentId);
  if (own.length === 0) return [h("p", { class: "muted", text: "No optimizer round started from this instruction." })];
  // The newest round open, older ones folded: a long-lived parent can have a dozen.
  return own.map((round, i) =>
    h(
      "details",
      { class: "round", open: i === own.length - 1 },
      h("summary", { text: roundTitle(round) }),
      candidateTable(round, select),
    ),
  );
}

function roundTitle(round: Round): string {
  const cost = round.cost_usd === null ? "" : ` · $${round.cost_usd.toFixed(4)}`;
  return (
    `Step ${round.step} · round ${round.round} (${round.id}) · ${round.proposer} of ${round.parent_id ?? "—"} · ` +
    `${round.optimizer_model || "optimizer"} · ${round.input_tokens}+${round.output_tokens} tokens${cost}`
  );
}

function candidateTable(round: Round, select: Select): HTMLElement {
  const header = ["#", "Candidate", "Score", "Verdict"].map((t) => h("th", { scope: "col", text: t }));
  const rows = round.candidates.map((c, i) =>
    h(
      "tr",
      { class: c.accepted ? "accepted" : "rejected" },
      h("td", { class: "num", text: String(i + 1) }),
      h("td", {}, h("div", { class: "clamp", text: c.text })),
      h("td", { class: "num", text: formatNumber(c.score) }),
      h(
        "td",
        {},
        c.accepted
          ? c.instruction_id
            ? h(
                "button",
                { type: "button", class: "link", on: { click: () => select(c.instruction_id as string, true) } },
                `joined as ${c.instruction_id}`,
              )
            : "accepted"
          : `rejected${c.valid ? "" : " (invalid)"}: ${c.reason ?? "not among the best"}`,
      ),
    ),
  );
  const parentScore = round.parent_score === null ? "" : ` Parent's score: ${formatNumber(round.parent_score)}.`;
  const questions = round.n_questions === null ? "" : ` Verified on ${round.n_questions} questions.`;
  return h(
    "div",
    {},
    parentScore || questions ? h("p", { class: "muted", text: `${questions}${parentScore}`.trim() }) : null,
    h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, h("tr", {}, ...header)), h("tbody", {}, ...rows))),
  );
}

function renderRounds(root: HTMLElement, rounds: Round[], select: Select): void {
  const container = byTestId(root, "lineage-rounds");
  if (rounds.length === 0) {
    fill(container, h("p", { class: "muted", text: "No optimizer calls yet." }));
    return;
  }
  fill(
    container,
    ...rounds.map((round) =>
      h(
        "details",
        { class: "round" },
        h("summary", { text: roundTitle(round) }),
        h("p", {}, h("strong", { text: "Critique: " }), round.critique || "—"),
        h("p", { text: `Failures shown: ${round.failures.length}` }),
        candidateTable(round, select),
      ),
    ),
  );
}
