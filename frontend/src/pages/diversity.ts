/** The run page's diversity section: how alike the living instructions are over steps (pairwise cosine, word
 * overlap, sampling entropy, distinct strategies), the collapse alarms, and the warning banner while the population
 * is collapsed — which a member of the team may acknowledge. */

import { Api, describeError } from "../api";
import { colorAt, createChart, linePanel, numberLabels, type Chart } from "../charts";
import { byTestId, fill, formatNumber, h } from "../dom";
import { alarmText, bannerAlarm, lastRecordPerStep } from "../transforms/diversity";
import { points } from "../transforms/smoothing";
import type { Alarm, Diversity } from "../types";

export class DiversitySection {
  private readonly chart: Chart;
  private readonly banner: HTMLElement;
  private readonly list: HTMLElement;
  private readonly canAct: boolean;
  private readonly totalSteps: number;

  constructor(
    root: HTMLElement,
    private readonly api: Api,
    private readonly runId: string,
  ) {
    const element = byTestId(root, "chart-diversity");
    this.chart = createChart(element, "Diversity of the population per step");
    this.chart.group = "run-steps";
    this.totalSteps = Number(element.dataset.totalSteps ?? 0);
    this.banner = byTestId(root, "collapse-banner");
    this.list = byTestId(root, "diversity-alarms");
    this.canAct = this.banner.dataset.canAct === "1";
  }

  /** Reads the run's diversity and draws it; an error is said in the section, the rest of the page goes on. */
  async load(): Promise<void> {
    try {
      this.draw(await this.api.get<Diversity>(`runs/${this.runId}/diversity/`));
    } catch (error) {
      fill(this.list, h("p", { class: "error", text: `Could not read the diversity: ${describeError(error)}` }));
    }
  }

  private draw(diversity: Diversity): void {
    this.drawChart(diversity);
    this.drawBanner(diversity);
    this.drawAlarms(diversity);
  }

  private drawChart({ series, settings, alarms }: Diversity): void {
    const p = lastRecordPerStep(series);
    const line = (name: string, values: (number | null)[], color: string, extra: object = {}) => ({
      name,
      type: "line",
      data: points(p.steps, values),
      showSymbol: p.steps.length === 1,
      itemStyle: { color },
      lineStyle: { width: 2 },
      ...extra,
    });
    const threshold = (value: number, label: string) => ({ yAxis: value, label: { formatter: label } });
    const marks = {
      silent: true,
      symbol: "none",
      lineStyle: { type: "dotted", color: "#b00020" },
      label: { position: "insideEndTop", color: "#b00020", fontSize: 11 },
    };
    const maxStep = Math.max(1, this.totalSteps, p.steps.at(-1) ?? 0);
    this.chart.setOption(
      linePanel(
        "Population diversity",
        [
          line("cosine, mean of pairs", p.cosineMean, colorAt(0), {
            markLine: {
              ...marks,
              data: [
                threshold(settings.collapse_cosine, `collapse: cosine ≥ ${settings.collapse_cosine}`),
                ...alarms.map((a) => ({ xAxis: a.step, label: { formatter: "collapsed" } })),
              ],
            },
          }),
          line("cosine, least alike pair", p.cosineMin, colorAt(0), { lineStyle: { width: 1, type: "dashed" } }),
          line("word overlap (Jaccard)", p.jaccard, colorAt(1)),
          line("sampling entropy ÷ ln N", p.entropy, colorAt(2), {
            markLine: {
              ...marks,
              data: [threshold(settings.collapse_entropy, `collapse: entropy ≤ ${settings.collapse_entropy}`)],
            },
          }),
          line("distinct strategies", p.strategies, colorAt(3), { yAxisIndex: 1, step: "end" }),
        ],
        {
          grid: { left: 40, right: 40, top: 32, bottom: 56 },
          legend: { type: "scroll", bottom: 0 },
          xAxis: {
            type: "value",
            name: "step",
            nameGap: 4,
            min: 0,
            max: maxStep,
            minInterval: 1,
            axisLabel: numberLabels,
          },
          yAxis: [
            { type: "value", min: 0, max: 1, splitNumber: 4, axisLabel: numberLabels },
            {
              type: "value",
              min: 0,
              minInterval: 1,
              splitLine: { show: false },
              name: "strategies",
              axisLabel: numberLabels,
            },
          ],
        },
      ),
      { notMerge: true },
    );
  }

  private drawBanner(diversity: Diversity): void {
    const alarm = bannerAlarm(diversity);
    this.banner.hidden = alarm === null;
    if (alarm === null) {
      this.banner.replaceChildren();
      return;
    }
    const button = this.canAct
      ? h(
          "button",
          {
            type: "button",
            "data-testid": "acknowledge-alarm",
            on: { click: () => void this.acknowledge(alarm, button as HTMLButtonElement) },
          },
          "Acknowledge",
        )
      : null;
    fill(
      this.banner,
      h("strong", { text: "Warning: " }),
      h("span", { "data-testid": "collapse-text", text: alarmText(alarm) }),
      " Evolution now mostly recombines one idea: more candidates per round, another proposer or an instruction of a different kind brings variety back. ",
      button,
    );
  }

  private async acknowledge(alarm: Alarm, button: HTMLButtonElement): Promise<void> {
    button.disabled = true;
    try {
      await this.api.post<Alarm>(`runs/${this.runId}/alarms/${alarm.id}/acknowledge/`);
      await this.load();
    } catch (error) {
      button.disabled = false;
      this.banner.append(h("span", { class: "error", text: ` ${describeError(error)}` }));
    }
  }

  private drawAlarms({ alarms, settings }: Diversity): void {
    if (!settings.diversity) {
      fill(this.list, h("p", { class: "muted", text: "This run does not measure diversity (population.diversity)." }));
      return;
    }
    const rule =
      `Collapse: every pair at least ${settings.collapse_cosine} alike, or sampling entropy at most ` +
      `${settings.collapse_entropy} of its maximum, for ${settings.collapse_steps} steps in a row.`;
    if (alarms.length === 0) {
      fill(this.list, h("p", { class: "muted", text: `No collapse so far. ${rule}` }));
      return;
    }
    const rows = alarms.map((a) =>
      h(
        "tr",
        { "data-alarm": String(a.id) },
        h("td", { class: "num", text: String(a.step) }),
        h("td", { text: a.reasons.join(", ") }),
        h("td", { class: "num", text: formatNumber(a.cosine_min) }),
        h("td", { class: "num", text: formatNumber(a.entropy_normalised) }),
        h("td", { text: a.cleared_step === null ? "collapsed" : `recovered at step ${a.cleared_step}` }),
        h("td", { text: a.acknowledged_by ?? "—" }),
      ),
    );
    const headings = ["Step", "Why", "Least alike pair", "Entropy ÷ ln N", "Now", "Acknowledged by"];
    fill(
      this.list,
      h("p", { class: "muted", text: rule }),
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { "data-testid": "alarms-table" },
          h("thead", {}, h("tr", {}, ...headings.map((t) => h("th", { scope: "col", text: t })))),
          h("tbody", {}, ...rows),
        ),
      ),
    );
  }
}
