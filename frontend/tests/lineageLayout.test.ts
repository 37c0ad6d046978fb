import { describe, expect, it } from "vitest";
import { layoutLineage } from "../src/transforms/lineageLayout";

const node = (id: string, parent_id: string | null = null) => ({ id, parent_id });

describe("layoutLineage", () => {
  it("gives depth from the parent links and centres a parent over its children", () => {
    const layout = layoutLineage([node("seed"), node("a", "seed"), node("b", "seed"), node("c", "a")]);
    const at = (id: string) => layout.byId.get(id)!;
    expect([at("seed").depth, at("a").depth, at("b").depth, at("c").depth]).toEqual([0, 1, 1, 2]);
    expect(at("c").x).toBe(0);
    expect(at("a").x).toBe(0);
    expect(at("b").x).toBe(1);
    expect(at("seed").x).toBe(0.5);
    expect(layout.width).toBe(2);
    expect(layout.depth).toBe(2);
  });

  it("lays several roots side by side without overlapping", () => {
    const layout = layoutLineage([node("s1"), node("s2"), node("k", "s1"), node("l", "s1")]);
    const xs = layout.nodes.filter((n) => n.depth === 1).map((n) => n.x);
    expect(new Set(xs).size).toBe(xs.length);
    expect(layout.byId.get("s2")!.x).toBeGreaterThan(Math.max(...xs));
  });

  it("makes a node whose parent is missing a root", () => {
    const layout = layoutLineage([node("orphan", "gone"), node("kid", "orphan")]);
    expect(layout.byId.get("orphan")).toMatchObject({ parent: null, depth: 0 });
    expect(layout.byId.get("kid")).toMatchObject({ parent: "orphan", depth: 1 });
  });

  it("cuts a cycle instead of looping forever, and places every node once", () => {
    const layout = layoutLineage([node("a", "c"), node("b", "a"), node("c", "b"), node("self", "self")]);
    expect(layout.nodes.map((n) => n.id)).toEqual(["a", "b", "c", "self"]);
    expect(layout.byId.get("a")).toMatchObject({ parent: null, depth: 0 });
    expect(layout.byId.get("c")).toMatchObject({ parent: "b", depth: 2 });
    expect(layout.byId.get("self")).toMatchObject({ parent: null, depth: 0 });
  });

  it("keeps the first of duplicate ids and handles an empty lineage", () => {
    expect(layoutLineage([node("a"), node("a", "b")]).nodes).toHaveLength(1);
    expect(layoutLineage([])).toMatchObject({ nodes: [], width: 0, depth: 0 });
  });
});
