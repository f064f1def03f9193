// Bundle the extension into dist/extension.js (vscode is provided by the editor at run time).
// `node esbuild.mjs --production` minifies; without it the bundle keeps names and a source map.
import * as esbuild from "esbuild";

const production = process.argv.includes("--production");

await esbuild.build({
  entryPoints: ["src/extension.ts"],
  bundle: true,
  outfile: "dist/extension.js",
  external: ["vscode"],
  format: "cjs",
  platform: "node",
  target: "node20",
  minify: production,
  sourcemap: !production,
  sourcesContent: false,
  logLevel: "warning",
});
