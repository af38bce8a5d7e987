"""A headless Chromium driven over the DevTools protocol, for looking at the docs site as a reader's browser shows it.

The protocol runs over the two pipes Chromium opens with `--remote-debugging-pipe` (it reads commands from file
descriptor 3 and writes replies and events to 4, each a JSON message ending in a NUL byte), so nothing beyond the
standard library and the browser itself is needed. One page (tab) at a time; its console errors, uncaught
exceptions and failed loads are collected as they arrive."""
from __future__ import annotations

import base64
import functools
import http.server
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
         "--remote-debugging-pipe"]
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
NO_CHROMIUM = ("The docs site was not checked in a browser: no Chromium found. Install one (Debian or Ubuntu: "
               "`sudo apt-get install chromium`) or set CHROMIUM to a Chromium or Chrome executable, then run "
               "`make test` again.")


def find_chromium() -> str | None:
    "The browser to use: $CHROMIUM if set, else the first of Debian's `chromium` and its usual other names on PATH."
    if os.environ.get("CHROMIUM"):
        return shutil.which(os.environ["CHROMIUM"])
    return next((path for path in map(shutil.which, NAMES) if path), None)


class Browser:
    "A headless Chromium; `open(url)` loads a page in a fresh tab and collects what its console reports."

    def __init__(self, executable: str, width: int = 1280, height: int = 900, timeout: float = 60):
        self.width, self.height, self.timeout = width, height, timeout
        self._profile = tempfile.TemporaryDirectory()
        cmd_read, self._cmd = os.pipe()  # we write commands, the browser reads them on fd 3
        self._events, event_write = os.pipe()  # the browser writes replies and events on fd 4, we read them
        # moved to fd 10 or more (bash redirects multi-digit fds; dash does not): a pipe end that is itself fd 3 or 4
        # would be clobbered by the other redirection
        cmd_read, event_write = (self._above_10(fd) for fd in (cmd_read, event_write))
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{cmd_read} 4>&{event_write}', executable, *FLAGS,
             f"--user-data-dir={self._profile.name}", "about:blank"],
            pass_fds=(cmd_read, event_write), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_read)
        os.close(event_write)
        self._buffer, self._next_id, self.session, self.errors = b"", 0, None, []

    @staticmethod
    def _above_10(fd: int) -> int:
        "A duplicate of `fd` numbered 10 or more (the original is closed)."
        high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
        os.close(fd)
        return high

    def _message(self) -> dict:
        "The next message from the browser (blocking)."
        while b"\0" not in self._buffer:
            chunk = os.read(self._events, 1 << 16)
            if not chunk:
                raise RuntimeError(f"the browser closed its pipe (exit status {self.proc.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _note(self, msg: dict) -> None:
        "Keep the console errors, uncaught exceptions and failed loads among the events."
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            self.errors.append(f"uncaught: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            self.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                             for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            e = params["entry"]
            self.errors.append(f"{e['source']}: {e['text']} {e.get('url', '')}".strip())

    def send(self, method: str, session: bool = True, **params) -> dict:
        "Send one command (to the open page's session unless `session` is False); return its result."
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._cmd, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self._note(reply)

    def wait_for(self, method: str) -> dict:
        "Read messages until the event `method` arrives; return its parameters."
        while True:
            msg = self._message()
            if msg.get("method") == method:
                return msg["params"]
            self._note(msg)

    def open(self, url: str) -> None:
        "Load `url` in a fresh tab at the browser's viewport size and wait for its load event and for MathJax."
        if self.session:
            self.send("Target.closeTarget", session=False, targetId=self._target)
        self._target = self.send("Target.createTarget", session=False, url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", session=False, targetId=self._target, flatten=True)["sessionId"]
        self.errors = []
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height, deviceScaleFactor=1,
                  mobile=False)
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        self.evaluate("window.MathJax && MathJax.startup && MathJax.startup.promise ? "
                      "MathJax.startup.promise.then(() => true) : true")
        # then the fonts, and two frames for the layout to settle (a screenshot taken earlier can catch it half done)
        self.evaluate("document.fonts.ready.then(() => new Promise(done => "
                      "requestAnimationFrame(() => requestAnimationFrame(() => done(true)))))")

    def evaluate(self, expression: str):
        "The value of a JavaScript expression in the page (promises awaited)."
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True,
                        timeout=self.timeout * 1000)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression[:80]}...: {res['exceptionDetails']}")
        return res["result"].get("value")

    def screenshot(self, path: Path, max_height: int = 4000) -> Path:
        "Save the page (from the top, at most `max_height` pixels tall) as a PNG."
        height = min(max_height, self.evaluate("document.documentElement.scrollHeight"))
        # the window made as tall as the picture, then laid out again: capturing beyond a 900 px window drew tall pages
        # shifted left, their sidebar cut off
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=height, deviceScaleFactor=1,
                  mobile=False)
        self.evaluate("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))")
        shot = self.send("Page.captureScreenshot", format="png",
                         clip=dict(x=0, y=0, width=self.width, height=height, scale=1))
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height, deviceScaleFactor=1,
                  mobile=False)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(base64.b64decode(shot["data"]))
        return Path(path)

    def close(self) -> None:
        "Close the browser and remove its profile."
        try:
            self.send("Browser.close", session=False)
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for fd in (self._cmd, self._events):
            os.close(fd)
        self._profile.cleanup()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(directory: Path) -> http.server.ThreadingHTTPServer:
    "Serve `directory` over HTTP on a free local port, from a daemon thread (the site as a web host would)."
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":  # `make test`'s last command: one line where no browser checked the site, else nothing
    if find_chromium() is None:
        print(NO_CHROMIUM)
