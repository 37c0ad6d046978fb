// One bundle with fixed names: Django's manifest storage adds the content hashes at collectstatic time, and a
// single file means no unhashed chunk can be imported by a hashed entry from another deploy.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  base: "./",
  build: {
    outDir: fileURLToPath(new URL("../webapp/static/inspo/app", import.meta.url)),
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    cssCodeSplit: false,
    modulePreload: false,
    // ECharts (line, scatter, graph; canvas) is most of the ~600 kB; gzip/brotli from whitenoise bring it near 200 kB.
    chunkSizeWarningLimit: 700,
    rolldownOptions: {
      input: fileURLToPath(new URL("src/main.ts", import.meta.url)),
      output: {
        entryFileNames: "main.js",
        chunkFileNames: "[name].js",
        assetFileNames: (asset) => (asset.names.some((n) => n.endsWith(".css")) ? "main.css" : "[name][extname]"),
      },
    },
  },
  test: {
    include: ["tests/**/*.test.ts"],
    environment: "node",
  },
});
