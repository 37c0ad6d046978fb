/** Renders a Search-R1 response with its think / search / information / answer parts told apart. Every piece of
 * model output is inserted as text. */

import { h } from "../dom";
import { segmentResponse, type Segment } from "../transforms/segments";

const LABELS: Record<Segment["kind"], string> = {
  think: "think",
  search: "search",
  information: "information",
  answer: "answer",
  text: "text",
};

export function renderResponse(response: string): HTMLElement {
  const segments = segmentResponse(response);
  if (segments.length === 0) return h("p", { class: "muted", text: "(empty response)" });
  return h("div", { class: "response" }, ...segments.map(renderSegment));
}

function renderSegment(segment: Segment): HTMLElement {
  const label = `${LABELS[segment.kind]}${segment.unclosed ? " (cut off)" : ""}`;
  const body = h("div", { class: "seg-body", text: segment.text });
  // Retrieved passages are long and not the model's words: folded by default.
  if (segment.kind === "information") {
    return h(
      "details",
      { class: "seg seg-information" },
      h("summary", {}, h("span", { class: "seg-label", text: label }), ` ${segment.text.slice(0, 80)}…`),
      body,
    );
  }
  return h("div", { class: `seg seg-${segment.kind}` }, h("span", { class: "seg-label", text: label }), body);
}
