/** A tiny element builder. Text always goes in as text nodes: model output and instruction texts are never HTML. */

type Child = Node | string | number | null | undefined | false;

export interface Props {
  class?: string;
  text?: string;
  on?: Partial<Record<keyof HTMLElementEventMap, (event: Event) => void>>;
  [attribute: string]: unknown;
}

/** `h("button", {type: "button", "data-testid": "x", on: {click}}, "Label")`. Attributes set to false/null/undefined
 * are left out; `true` sets an empty attribute. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "on") {
      for (const [event, handler] of Object.entries(value as NonNullable<Props["on"]>)) {
        element.addEventListener(event, handler as EventListener);
      }
    } else if (name === "text") {
      element.textContent = String(value);
    } else if (value === true) {
      element.setAttribute(name, "");
    } else if (value !== false && value !== null && value !== undefined) {
      element.setAttribute(name === "class" ? "class" : name, String(value));
    }
  }
  append(element, children);
  return element;
}

export function append(parent: Element, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces an element's content. */
export function fill(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, children);
}

/** The element with this `data-testid` inside `root`, or an error naming it (a template and a module disagree). */
export function byTestId<T extends HTMLElement = HTMLElement>(root: ParentNode, id: string): T {
  const element = root.querySelector<T>(`[data-testid="${id}"]`);
  if (!element) throw new Error(`missing element [data-testid="${id}"]`);
  return element;
}

export function formatNumber(value: number | null | undefined, digits = 3): string {
  return value === null || value === undefined || !Number.isFinite(value) ? "—" : value.toFixed(digits);
}

/** For the few places that take HTML (ECharts tooltips): text from the database goes through this first. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
