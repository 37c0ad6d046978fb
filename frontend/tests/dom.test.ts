import { describe, expect, it } from "vitest";
import { escapeHtml, formatNumber } from "../src/dom";

describe("escapeHtml", () => {
  it("turns markup from model output into inert text", () => {
    expect(escapeHtml(`<img src=x onerror="alert('1')">&`)).toBe(
      "&#60;img src=x onerror=&#34;alert(&#39;1&#39;)&#34;&#62;&#38;",
    );
  });
});

describe("formatNumber", () => {
  it("shows missing and non-finite values as a dash", () => {
    expect([formatNumber(0.12345), formatNumber(null), formatNumber(Number.NaN), formatNumber(2, 1)]).toEqual([
      "0.123",
      "—",
      "—",
      "2.0",
    ]);
  });
});
