/** Renders a Search-R1 response with its think / search / information / answer parts told apart. Every piece of
 * model output is inserted as text. */

import { h } from "../dom";
import { givenLength, segmentResponse, type Segment } from "../transforms/segments";

const LABELS: Record<Segment["kind"], string> = {
  think: "think",
  search: "search",
  information: "information",
  answer: "answer",
  text: "text",
};

/** `prefix`: the run's `env.response_prefix`; the parts of it the reply opens with are shown as given, not as the
 * model's. */
export function renderResponse(response: string, prefix = ""): HTMLElement {
  const segments = segmentResponse(response, givenLength(response, prefix));
  if (segments.length === 0) return h("p", { class: "muted", text: "(empty response)" });
  return h("div", { class: "response" }, ...segments.map(renderSegment));
}

function renderSegment(segment: Segment): HTMLElement {
  const label = `${LABELS[segment.kind]}${segment.unclosed ? " (cut off)" : ""}${segment.given ? " · given by the preset, not the model's" : ""}`;
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
  return h(
    "div",
    {
      class: `seg seg-${segment.kind}${segment.given ? " seg-given" : ""}`,
      "data-testid": segment.given ? "segment-given" : null,
      title: segment.given ? "The run's env.response_prefix: every reply opens with it" : null,
    },
    h("span", { class: "seg-label", text: label }),
    body,
  );
}
