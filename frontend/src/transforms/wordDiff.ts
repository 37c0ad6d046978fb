/** Word-level diff of two instruction texts (longest common subsequence); knows nothing about the DOM. */

export type DiffOp = "same" | "added" | "removed";

export interface DiffPart {
  op: DiffOp;
  text: string;
}

/** Above this many LCS cells the middle is shown as one removal and one addition rather than freezing the tab. */
const MAX_CELLS = 4_000_000;

/** Splits into words and the white space after them, so joining the parts gives back the text exactly. */
export function tokenize(text: string): string[] {
  return text.match(/\S+\s*|\s+/g) ?? [];
}

/**
 * The parts that turn `before` into `after`, word by word. Words are compared without their trailing white space,
 * so a re-wrapped line does not count as a change; each part's text is taken from the side it belongs to.
 * Adjacent parts with the same op are merged.
 */
export function wordDiff(before: string, after: string): DiffPart[] {
  const a = tokenize(before);
  const b = tokenize(after);
  const key = (token: string) => token.trimEnd();
  let start = 0;
  while (start < a.length && start < b.length && key(a[start]) === key(b[start])) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && key(a[endA - 1]) === key(b[endB - 1])) {
    endA--;
    endB--;
  }
  const parts: DiffPart[] = [];
  const push = (op: DiffOp, text: string) => {
    if (!text) return;
    const last = parts[parts.length - 1];
    if (last && last.op === op) last.text += text;
    else parts.push({ op, text });
  };
  for (const token of b.slice(0, start)) push("same", token);
  for (const part of middle(a.slice(start, endA), b.slice(start, endB), key)) push(part.op, part.text);
  for (const token of b.slice(endB)) push("same", token);
  return parts;
}

function middle(a: string[], b: string[], key: (t: string) => string): DiffPart[] {
  const n = a.length;
  const m = b.length;
  if (n * m > MAX_CELLS) {
    return [
      { op: "removed", text: a.join("") },
      { op: "added", text: b.join("") },
    ];
  }
  // lcs[i][j] = length of the LCS of a[i:] and b[j:], in one flat array.
  const width = m + 1;
  const lcs = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i * width + j] =
        key(a[i]) === key(b[j])
          ? lcs[(i + 1) * width + j + 1] + 1
          : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1]);
    }
  }
  const out: DiffPart[] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (key(a[i]) === key(b[j])) {
      out.push({ op: "same", text: b[j] });
      i++;
      j++;
    } else if (lcs[(i + 1) * width + j] >= lcs[i * width + j + 1]) {
      out.push({ op: "removed", text: a[i++] });
    } else {
      out.push({ op: "added", text: b[j++] });
    }
  }
  while (i < n) out.push({ op: "removed", text: a[i++] });
  while (j < m) out.push({ op: "added", text: b[j++] });
  return out;
}

/**
 * What sets `text` apart from `reference` (its parent, or nothing for a root), in at most `words` words: the words
 * from where it stops repeating the reference, with "…" for the shared opening left out and for a cut end. The same
 * rule as the steering table's (webapp/core/text.py `words_that_differ`).
 */
export function wordsThatDiffer(text: string, reference: string | null, words = 10): string {
  const mine = text.split(/\s+/).filter(Boolean);
  const theirs = (reference ?? "").split(/\s+/).filter(Boolean);
  let shared = 0;
  while (shared < Math.min(mine.length, theirs.length) && mine[shared] === theirs[shared]) shared++;
  if (shared === mine.length && mine.length === theirs.length) return "(same text)";
  const start = shared > 0 ? shared - 1 : 0;
  const shown = mine.slice(start, start + words);
  return [...(start > 0 ? ["…"] : []), ...shown, ...(start + words < mine.length ? ["…"] : [])].join(" ");
}

/** The words every one of `texts` opens with (empty for fewer than two texts): rows of instructions that share a
 * long opening are told apart by what follows it. */
export function sharedOpening(texts: readonly string[]): string {
  if (texts.length < 2) return "";
  const split = texts.map((text) => text.split(/\s+/).filter(Boolean));
  let shared = 0;
  while (split.every((words) => shared < words.length && words[shared] === split[0][shared])) shared++;
  return split[0].slice(0, shared).join(" ");
}
