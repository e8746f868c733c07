// Tokenizes .attn files with the TextMate grammar as VS Code does (vscode-textmate on the
// Oniguruma regex engine) and prints, per file, each token's line, column, text and scopes
// as JSON lines: {"file", "line", "col", "text", "scopes"}. The Python test checks them.
// Usage: node test/tokenize.js FILE...
"use strict";

const fs = require("fs");
const path = require("path");
const vsctm = require("vscode-textmate");
const oniguruma = require("vscode-oniguruma");

const root = path.join(__dirname, "..");
const wasm = fs.readFileSync(path.join(root, "node_modules/vscode-oniguruma/release/onig.wasm"));

async function main(files) {
  await oniguruma.loadWASM(wasm.buffer);
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (sources) => new oniguruma.OnigScanner(sources),
      createOnigString: (s) => new oniguruma.OnigString(s),
    }),
    loadGrammar: async (scopeName) => {
      if (scopeName !== "source.attn") return null;
      const file = path.join(root, "syntaxes/attn.tmLanguage.json");
      return vsctm.parseRawGrammar(fs.readFileSync(file, "utf8"), file);
    },
  });
  const grammar = await registry.loadGrammar("source.attn");
  const out = [];
  for (const file of files) {
    let state = vsctm.INITIAL;
    fs.readFileSync(file, "utf8").split("\n").forEach((line, i) => {
      const result = grammar.tokenizeLine(line, state);
      for (const t of result.tokens) {
        out.push(JSON.stringify({ file, line: i + 1, col: t.startIndex + 1,
          text: line.slice(t.startIndex, t.endIndex), scopes: t.scopes }));
      }
      state = result.ruleStack;
    });
  }
  process.stdout.write(out.join("\n") + "\n");
}

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write(String(err && err.stack || err) + "\n");
  process.exit(1);
});
