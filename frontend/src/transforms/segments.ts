/** Splits a Search-R1 response into its tagged parts for the trajectory viewer; knows nothing about the DOM. */

export type SegmentKind = "think" | "search" | "information" | "answer" | "text";

export interface Segment {
  kind: SegmentKind;
  text: string;
  /** True when the closing tag never came (the response was cut at the token limit). */
  unclosed?: boolean;
}

const OPEN = /<(think|search|information|answer)>/gi;

/**
 * Text outside the four tags becomes `text` segments (white-space-only ones are dropped); a tag's content is
 * trimmed. Tags do not nest in the protocol, so an opening tag inside another's content is kept as literal text, as
 * is a stray closing tag. Nothing here is HTML: the caller must insert the texts as text.
 */
export function segmentResponse(response: string): Segment[] {
  const segments: Segment[] = [];
  const pushText = (text: string) => {
    if (text.trim()) segments.push({ kind: "text", text: text.trim() });
  };
  let cursor = 0;
  OPEN.lastIndex = 0;
  for (let match = OPEN.exec(response); match !== null; match = OPEN.exec(response)) {
    const kind = match[1].toLowerCase() as SegmentKind;
    pushText(response.slice(cursor, match.index));
    const bodyStart = match.index + match[0].length;
    const closing = new RegExp(`</${kind}>`, "gi");
    closing.lastIndex = bodyStart;
    const close = closing.exec(response)?.index ?? -1;
    if (close === -1) {
      segments.push({ kind, text: response.slice(bodyStart).trim(), unclosed: true });
      cursor = response.length;
      break;
    }
    segments.push({ kind, text: response.slice(bodyStart, close).trim() });
    cursor = close + kind.length + 3;
    OPEN.lastIndex = cursor;
  }
  pushText(response.slice(cursor));
  return segments;
}
