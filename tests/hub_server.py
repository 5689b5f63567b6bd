"""A local HTTP server speaking the parts of the Hugging Face Hub's protocol that
`huggingface_hub` downloads through (repo info, the recursive tree listing with sizes, HEAD and
GET of `resolve/` URLs with the commit and ETag headers), serving local folders as repositories.
Point `HF_ENDPOINT` at `Hub.url` and the real client downloads from it: no network, and nothing
inside mmspec is replaced.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

REVISION = "main"


def _git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    """A folder served as one repository at one commit (`main`)."""

    def __init__(self, folder: Path):
        self.files = {
            p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }
        digest = hashlib.sha1()
        for path, data in self.files.items():
            digest.update(path.encode() + b"\0" + _git_blob_oid(data).encode())
        self.sha = digest.hexdigest()

    def tree(self) -> list[dict]:
        return [
            {"type": "file", "oid": _git_blob_oid(data), "size": len(data), "path": path}
            for path, data in self.files.items()
        ]


class Hub:
    """`with Hub({("model", "owner/name"): folder, ("dataset", ...): folder}) as hub:` serves
    them at `hub.url`; `hub.requests` counts the file downloads (GET of resolve URLs)."""

    def __init__(self, repos: dict[tuple[str, str], Path]):
        self.repos = {key: Repo(Path(folder)) for key, folder in repos.items()}
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Hub:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _route(self, path: str):
        """(repo, what, file) for a request path; None for an unknown path."""
        parts = [unquote(p) for p in urlsplit(path).path.strip("/").split("/")]
        if parts[:1] == ["api"] and len(parts) >= 4 and parts[1] in ("models", "datasets"):
            kind = parts[1][:-1]
            repo = self.repos.get((kind, f"{parts[2]}/{parts[3]}"))
            rest = parts[4:]
            if rest[:1] in ([], ["revision"]):
                return repo, "info", None
            if rest[:1] == ["tree"]:
                return repo, "tree", "/".join(rest[2:])
            return None
        kind = "model"
        if parts[:1] == ["datasets"]:
            kind, parts = "dataset", parts[1:]
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = self.repos.get((kind, f"{parts[0]}/{parts[1]}"))
            return repo, "file", "/".join(parts[4:])
        return None

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, body: bytes, headers: dict, head: bool = False) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _not_found(self, code: str, head: bool) -> None:
                body = json.dumps({"error": code}).encode()
                self._send(404, body, {"X-Error-Code": code}, head)

            def _serve(self, head: bool) -> None:
                route = hub._route(self.path)
                if route is None or route[0] is None:
                    return self._not_found("RepoNotFound", head)
                repo, what, name = route
                if what == "info":
                    body = json.dumps(
                        {
                            "id": "",
                            "sha": repo.sha,
                            "private": False,
                            "siblings": [{"rfilename": p} for p in repo.files],
                        }
                    ).encode()
                    return self._send(200, body, {"Content-Type": "application/json"}, head)
                if what == "tree":
                    prefix = f"{name}/" if name else ""
                    entries = [e for e in repo.tree() if e["path"].startswith(prefix)]
                    body = json.dumps(entries).encode()
                    return self._send(200, body, {"Content-Type": "application/json"}, head)
                if name not in repo.files:
                    return self._not_found("EntryNotFound", head)
                data = repo.files[name]
                if not head:
                    hub.requests.append(name)
                headers = {"X-Repo-Commit": repo.sha, "ETag": f'"{_git_blob_oid(data)}"'}
                self._send(200, data, headers, head)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._serve(head=False)

            def do_HEAD(self) -> None:  # noqa: N802
                self._serve(head=True)

        return Handler
