// The VS Code client: starts `taxcompile lsp` (taxcompile.server.command/args) over stdio
// for .attn files. Plain JavaScript, so the extension needs no build step.
"use strict";

const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const config = vscode.workspace.getConfiguration("taxcompile");
  const command = config.get("server.command", "taxcompile");
  const args = config.get("server.args", ["lsp"]);
  const server = { command, args, transport: TransportKind.stdio };
  client = new LanguageClient(
    "taxcompile",
    "taxcompile",
    { run: server, debug: server },
    { documentSelector: [{ scheme: "file", language: "attn" }, { scheme: "untitled", language: "attn" }] }
  );
  client.start().catch((err) => {
    vscode.window.showErrorMessage(
      `taxcompile: could not start \`${command} ${args.join(" ")}\` (${err.message}). ` +
        "Install it with `pip install 'taxcompile[lsp]'` or set taxcompile.server.command."
    );
  });
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("taxcompile.server")) {
        vscode.window.showInformationMessage("taxcompile: reload the window to restart the server with the new settings.");
      }
    })
  );
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
