#!/usr/bin/env python3
"""ctest status_page: the master's and a worker's status pages (GET / on
their admin endpoints, docs/ADMIN.md "The status page") in headless
Chromium, driven over the Chrome DevTools protocol on a pipe
(--remote-debugging-pipe: no websocket library needed).

It runs a master, one worker and a trainer (`sluice read`, read slowly
through a pipe so the job stays running), opens the master's page and
checks that it loads without a console error, a failed request or a
Content-Security-Policy violation, shows the running job, and that the
job's progress moves between two looks; then the worker's page. The
screenshots are kept under the build directory (paths printed).

Chromium starts once per run; every wait is bounded (scaled by
SLUICE_TIMEOUT_SCALE). Exit 77 (skipped) only when chromium is not
installed, and then a failure when SLUICE_REQUIRE_CHROMIUM=1 (ops/test).

Environment: SLUICE_BINARY (the sluice program), SLUICE_BUILD_DIR (where
the screenshots go), SLUICE_TIMEOUT_SCALE, SLUICE_CHROMIUM (default:
chromium on PATH)."""
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from fleet import BUILD, SCALE, Fleet, fail, http, wait_for  # noqa: E402

JOB = "status-page-job"


class Chromium:
    """Headless Chromium and its DevTools protocol over fds 3 and 4:
    NUL-terminated JSON messages."""

    def __init__(self, exe, profile):
        self.log_path = profile + ".log"
        self.log = open(self.log_path, "w")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update",
                "--remote-debugging-pipe", "--user-data-dir=" + profile,
                "--window-size=1280,1400", "about:blank"]
        # bash puts our pipe ends on fds 3 and 4, where Chromium expects them (dash
        # cannot: it takes single-digit descriptors only)
        shell = f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-'
        self.p = subprocess.Popen(["bash", "-c", shell, "bash"] + args,
                                  pass_fds=(to_chrome_r, from_chrome_w),
                                  stdout=subprocess.DEVNULL, stderr=self.log)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id = 0
        self.replies = {}
        self.events = queue.Queue()
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = b""
        while True:
            chunk = os.read(self.from_chrome, 65536)
            if not chunk:
                with self.cv:
                    self.replies["closed"] = True
                    self.cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self.cv:
                        self.replies[msg["id"]] = msg
                        self.cv.notify_all()
                else:
                    self.events.put(msg)

    def call(self, method, session=None, timeout_s=15, **params):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s * SCALE
        with self.cv:
            while mid not in self.replies:
                if "closed" in self.replies:
                    fail(f"chromium closed its pipe during {method}; its log:\n" + self.tail())
                left = deadline - time.monotonic()
                if left <= 0:
                    fail(f"chromium did not answer {method} within {timeout_s * SCALE:.0f} s")
                self.cv.wait(left)
            reply = self.replies.pop(mid)
        if "error" in reply:
            fail(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def tail(self):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-15:])

    def drain(self):
        out = []
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out

    def close(self):
        try:
            os.close(self.to_chrome)  # Chromium exits when its pipe closes
            self.p.wait(timeout=10 * SCALE)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()


class Page:
    """One tab: console errors, exceptions, failed loads and log errors
    are gathered from its events."""

    def __init__(self, chrome):
        self.c = chrome
        target = chrome.call("Target.createTarget", url="about:blank")["targetId"]
        self.s = chrome.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            chrome.call(domain + ".enable", session=self.s)
        self.problems = []
        self.loaded = False

    def pump(self):
        for ev in self.c.drain():
            if ev.get("sessionId") != self.s:
                continue
            m, p = ev["method"], ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                self.problems.append("exception: " + d.get("exception", {}).get(
                    "description", d.get("text", "")))
            elif m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert", "warning"):
                self.problems.append(f"console.{p['type']}: " + " ".join(
                    str(a.get("value", a.get("description", ""))) for a in p["args"]))
            elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                self.problems.append(f"log {p['entry']['level']} ({p['entry']['source']}): "
                                     + p["entry"]["text"])
            elif m == "Network.loadingFailed":
                self.problems.append(f"request failed: {p.get('errorText')} "
                                     f"{p.get('blockedReason', '')}")
            elif m == "Network.responseReceived" and p["response"]["status"] >= 400:
                self.problems.append(f"HTTP {p['response']['status']} for {p['response']['url']}")
            elif m == "Page.loadEventFired":
                self.loaded = True

    def goto(self, url):
        self.loaded = False
        self.c.call("Page.navigate", session=self.s, url=url)

        def done():
            self.pump()
            return self.loaded
        wait_for(f"{url} to load", done, 15)

    def eval(self, expr):
        r = self.c.call("Runtime.evaluate", session=self.s, expression=expr, returnByValue=True)
        if "exceptionDetails" in r:
            fail(f"evaluating {expr}: {r['exceptionDetails']}")
        self.pump()
        return r["result"].get("value")

    def screenshot(self, path):
        import base64
        data = self.c.call("Page.captureScreenshot", session=self.s, format="png",
                           captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        print(f"status_page: screenshot {os.path.abspath(path)}")


# The job card's position, (epoch, committed rows), read from the page.
JOB_STATE_JS = """(() => {
  const c = document.querySelector('.job[data-job="%s"]');
  if (!c) return null;
  const bar = c.querySelector('progress');
  const rate = c.querySelectorAll('[data-chart="rate"] polyline')[0];
  return {state: c.dataset.state, epoch: Number(c.dataset.epoch), rows: Number(bar.value),
          total: Number(bar.max), points: rate ? rate.getAttribute('points').split(' ').length : 0,
          dedup: [...c.querySelectorAll('.figures dt')].find((d) => d.textContent === 'dedup factor')
                 .nextElementSibling.textContent,
          workers: document.querySelectorAll('#workers tbody tr').length,
          decisions: document.querySelectorAll('#decisions tbody tr').length,
          banner: document.getElementById('banner').hidden ? '' :
                  document.getElementById('banner').textContent};
})()""" % JOB


def main():
    exe = os.environ.get("SLUICE_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if not exe:
        if os.environ.get("SLUICE_REQUIRE_CHROMIUM") == "1":
            fail("chromium is not installed (ops/install-deps installs it) and "
                 "SLUICE_REQUIRE_CHROMIUM=1")
        print("status_page: SKIPPED: chromium is not installed (Debian's chromium package)")
        return 77
    art = os.path.join(BUILD, "test-artifacts")
    os.makedirs(art, exist_ok=True)
    work = tempfile.mkdtemp(prefix="sluice-status-page-")
    fleet, chrome = None, None
    try:
        fleet = Fleet(work)
        # a history point every 0.3 s (each autoscaler look, about a second)
        fleet.master("--history-every-ms", "300")
        admin, token = fleet.admin, fleet.token
        fleet.submit(JOB)
        _, wadmin = fleet.worker(JOB, "page-w1")
        fleet.trainer(JOB, throttle_s=0.025)  # at most 40 batches a second: the job stays running

        # the page: no token in it, and the CSP on every answer
        status, headers, html = http("GET", f"http://{admin}/")
        if status != 200 or not headers.get("Content-Type", "").startswith("text/html"):
            fail(f"GET / answered {status} {headers.get('Content-Type')}")
        if token in html:
            fail("the page embeds the admin token")
        for path in ("/", "/ui/status.js", "/jobs"):
            csp = http("GET", f"http://{admin}{path}")[1].get("Content-Security-Policy", "")
            if "default-src 'none'" not in csp or "connect-src 'self'" not in csp:
                fail(f"GET {path}: Content-Security-Policy is '{csp}'")

        # the master keeps the job's past whether or not a page is open: once it
        # has two points, a page opened now draws them at once
        def history_points():
            j = json.loads(http("GET", f"http://{admin}/jobs/{JOB}")[2])
            return len(j["history"]["points"]) >= 2 and j
        before = wait_for("two points of the job's history on the master", history_points, 30)
        chrome = Chromium(exe, os.path.join(work, "chromium"))
        page = Page(chrome)
        page.goto(f"http://{admin}/?interval=0.3")
        drawn = wait_for("the page's first drawing of the job", lambda: page.eval(JOB_STATE_JS), 30)
        if drawn["points"] < len(before["history"]["points"]) + 1:
            fail(f"the page's first drawing has {drawn['points']} points of samples/s; the "
                 f"master had {len(before['history']['points'])} before it was opened")

        def running_with_rows():
            s = page.eval(JOB_STATE_JS)
            return s if s and s["state"] == "running" and s["rows"] > 0 and s["points"] >= 2 \
                and s["workers"] >= 1 and s["decisions"] >= 1 else None
        first = wait_for("the page to show the running job with committed rows",
                         running_with_rows, 30)
        print(f"status_page: first look: {first}")

        def moved():
            s = page.eval(JOB_STATE_JS)
            return s if s and (s["epoch"], s["rows"]) > (first["epoch"], first["rows"]) else None
        second = wait_for("the job's progress to move on the page", moved, 30)
        print(f"status_page: second look: {second}")
        # the job dedups nothing: its bytes without dedup are its bytes (once
        # the worker's heartbeat, every 2.5 s, told the master)
        wait_for("the page to show the dedup factor 1.00x", lambda: re.fullmatch(
            r"1\.00× \(0 B saved\)", page.eval(JOB_STATE_JS)["dedup"]), 15)
        if second["banner"]:
            fail(f"the page shows an error: {second['banner']}")
        page.screenshot(os.path.join(art, "status_page_master.png"))
        if page.problems:
            fail("the master's page logged:\n  " + "\n  ".join(page.problems))

        # the worker's own page
        page.goto(f"http://{wadmin}/?interval=0.3")
        wstate = wait_for("the worker's page to show it serving", lambda: page.eval(
            "(() => { const s = document.querySelector('#summary .state');"
            " return s && s.textContent === 'serving' && "
            "document.body.dataset.page === 'worker' && document.getElementById('name').textContent; })()"), 20)
        if wstate != "page-w1":
            fail(f"the worker's page names worker '{wstate}', not page-w1")
        wait_for("the worker's samples/s chart to have two points", lambda: page.eval(
            "(() => { const l = document.querySelector('[data-chart=\"rate\"] polyline');"
            " return l && l.getAttribute('points').split(' ').length >= 2; })()"), 20)
        # the Pipeline card stands clear of the header, its title inside it
        box = page.eval("""(() => {
          const r = (e) => e.getBoundingClientRect();
          const head = r(document.querySelector('header'));
          const card = document.querySelector('#worker > section.job');
          const title = r(card.querySelector('h2'));
          return {gap: r(card).top - head.bottom, inside: title.top >= r(card).top &&
                  title.bottom <= r(card).bottom};
        })()""")
        if box["gap"] < 8 or not box["inside"]:
            fail(f"the worker's Pipeline card is not laid out below the header: {box}")
        page.screenshot(os.path.join(art, "status_page_worker.png"))
        if page.problems:
            fail("the worker's page logged:\n  " + "\n  ".join(page.problems))
        print("status_page: ok")
        return 0
    finally:
        if chrome:
            chrome.close()
        if fleet:
            fleet.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
