"""A small JSON-RPC client of ``python -m taxcompile lsp`` over its stdio: the tests of
tests/test_lsp*.py speak the Language Server Protocol to the real server process."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 20.0


class Client:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "taxcompile", "lsp"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self.next_id = 0
        self.responses: dict[int, queue.Queue] = {}
        self.diagnostics: queue.Queue = queue.Queue()
        self.logs: list[str] = []
        self.versions: dict[str, int] = {}
        threading.Thread(target=self._read, daemon=True).start()
        self.request("initialize", {"processId": os.getpid(), "rootUri": None,
                                    "capabilities": {}})
        self.notify("initialized", {})

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            header = {}
            while True:
                line = out.readline()
                if not line:
                    return
                line = line.decode().strip()
                if not line:
                    break
                k, v = line.split(":", 1)
                header[k.lower()] = v.strip()
            msg = json.loads(out.read(int(header["content-length"])))
            if "id" in msg and "method" not in msg:
                self.responses.setdefault(msg["id"], queue.Queue()).put(msg)
            elif msg.get("method") == "textDocument/publishDiagnostics":
                self.diagnostics.put(msg["params"])
            elif msg.get("method") in ("window/logMessage", "window/showMessage"):
                self.logs.append(msg["params"]["message"])

    def _send(self, msg: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **msg}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params) -> None:
        self._send({"method": method, "params": params})

    def request(self, method: str, params):
        self.next_id += 1
        rid = self.next_id
        box = self.responses.setdefault(rid, queue.Queue())
        self._send({"id": rid, "method": method, "params": params})
        msg = box.get(timeout=TIMEOUT)
        assert "error" not in msg, msg["error"]
        return msg["result"]

    # --- documents ---------------------------------------------------------------------
    def open(self, uri: str, text: str) -> list[dict]:
        self.versions[uri] = 1
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "attn", "version": 1, "text": text}})
        return self.wait_diagnostics(uri)

    def change(self, uri: str, text: str, wait: bool = True) -> list[dict] | None:
        """Replace the whole document (the line breaks other than "\\n" that a spec may
        hold would split an incremental edit's lines differently from the checker's)."""
        self.versions[uri] += 1
        self.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": self.versions[uri]},
            "contentChanges": [{"text": text}]})
        return self.wait_diagnostics(uri) if wait else None

    def wait_diagnostics(self, uri: str) -> list[dict]:
        while True:
            p = self.diagnostics.get(timeout=TIMEOUT)
            if p["uri"] == uri:
                return p["diagnostics"]

    def at(self, method: str, uri: str, line: int, col: int, **more):
        return self.request(method, {"textDocument": {"uri": uri},
                                     "position": {"line": line, "character": col}, **more})

    def close(self) -> None:
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            self.proc.wait(timeout=5)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                stream.close()

    def alive(self) -> bool:
        return self.proc.poll() is None
