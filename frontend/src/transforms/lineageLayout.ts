/** Family-tree layout of instructions from their parent links; knows nothing about ECharts or the DOM. */

export interface TreeInput {
  id: string;
  parent_id: string | null;
}

export interface Placed {
  id: string;
  /** The parent used for drawing: null for roots, and for nodes whose parent is missing or closes a cycle. */
  parent: string | null;
  depth: number;
  /** Horizontal slot: leaves take 0, 1, 2, …; a parent sits midway over its first and last child. */
  x: number;
}

export interface Layout {
  nodes: Placed[];
  byId: Map<string, Placed>;
  /** Number of leaf slots (the tree's width) and the deepest level, for scaling to pixels. */
  width: number;
  depth: number;
}

/**
 * Lays out a forest: roots are nodes without a known parent, children keep input order (birth order). Bad data
 * must not crash the page: a duplicate id keeps its first occurrence, a self-parent or unknown parent makes a root,
 * and a cycle is cut at the first of its nodes in input order.
 */
export function layoutLineage(input: readonly TreeInput[]): Layout {
  const order: TreeInput[] = [];
  const known = new Map<string, TreeInput>();
  for (const node of input) {
    if (!known.has(node.id)) {
      known.set(node.id, node);
      order.push(node);
    }
  }
  const children = new Map<string, string[]>();
  for (const node of order) {
    const parent = node.parent_id;
    if (parent !== null && parent !== node.id && known.has(parent)) {
      const list = children.get(parent) ?? [];
      list.push(node.id);
      children.set(parent, list);
    }
  }

  const byId = new Map<string, Placed>();
  let nextLeaf = 0;
  let maxDepth = 0;
  const place = (id: string, parent: string | null, depth: number): Placed => {
    const placed: Placed = { id, parent, depth, x: 0 };
    byId.set(id, placed);
    maxDepth = Math.max(maxDepth, depth);
    const kids = (children.get(id) ?? []).filter((kid) => !byId.has(kid)).map((kid) => place(kid, id, depth + 1));
    if (kids.length === 0) {
      placed.x = nextLeaf++;
    } else {
      placed.x = (kids[0].x + kids[kids.length - 1].x) / 2;
    }
    return placed;
  };

  const isRoot = (node: TreeInput) =>
    node.parent_id === null || node.parent_id === node.id || !known.has(node.parent_id);
  for (const node of order) if (isRoot(node)) place(node.id, null, 0);
  // Whatever is still unplaced hangs off a cycle: cut the cycle at its first node and place it as a root.
  for (const node of order) if (!byId.has(node.id)) place(node.id, null, 0);

  const nodes = order.map((node) => byId.get(node.id) as Placed);
  return { nodes, byId, width: nextLeaf, depth: maxDepth };
}
