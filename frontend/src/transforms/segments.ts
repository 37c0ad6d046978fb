/** Splits a Search-R1 response into its tagged parts for the trajectory viewer; knows nothing about the DOM. */

export type SegmentKind = "think" | "search" | "information" | "answer" | "text";

export interface Segment {
  kind: SegmentKind;
  text: string;
  /** True when the closing tag never came (the response was cut at the token limit). */
  unclosed?: boolean;
  /** True when the whole part lies in the text the run's preset opens every reply with (`env.response_prefix`): the
   * environment wrote it, not the model. */
  given?: boolean;
}

/** How many leading characters of `response` the environment wrote: the preset's `env.response_prefix` when the
 * response opens with it, else 0. */
export function givenLength(response: string, prefix: string): number {
  return prefix && response.startsWith(prefix) ? prefix.length : 0;
}

const OPEN = /<(think|search|information|answer)>/gi;

/**
 * Text outside the four tags becomes `text` segments (white-space-only ones are dropped); a tag's content is
 * trimmed. Tags do not nest in the protocol, so an opening tag inside another's content is kept as literal text, as
 * is a stray closing tag. Parts that end within the first `given` characters (`givenLength`) are marked given.
 * Nothing here is HTML: the caller must insert the texts as text.
 */
export function segmentResponse(response: string, given = 0): Segment[] {
  const segments: Segment[] = [];
  // A part is given when it ends within the first `given` characters (its closing tag included).
  const push = (segment: Segment, end: number) =>
    segments.push(given > 0 && end <= given ? { ...segment, given: true } : segment);
  const pushText = (text: string, end: number) => {
    if (text.trim()) push({ kind: "text", text: text.trim() }, end);
  };
  let cursor = 0;
  OPEN.lastIndex = 0;
  for (let match = OPEN.exec(response); match !== null; match = OPEN.exec(response)) {
    const kind = match[1].toLowerCase() as SegmentKind;
    pushText(response.slice(cursor, match.index), match.index);
    const bodyStart = match.index + match[0].length;
    const closing = new RegExp(`</${kind}>`, "gi");
    closing.lastIndex = bodyStart;
    const close = closing.exec(response)?.index ?? -1;
    if (close === -1) {
      push({ kind, text: response.slice(bodyStart).trim(), unclosed: true }, response.length);
      cursor = response.length;
      break;
    }
    cursor = close + kind.length + 3;
    push({ kind, text: response.slice(bodyStart, close).trim() }, cursor);
    OPEN.lastIndex = cursor;
  }
  pushText(response.slice(cursor), response.length);
  return segments;
}
