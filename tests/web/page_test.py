#!/usr/bin/env python3
"""Drives skyconf's admin web page in a real headless Chromium, through chromedriver's W3C
WebDriver HTTP API (no pip package: the protocol is plain JSON over HTTP).

    page_test.py --url http://127.0.0.1:PORT/ --service NAME --key KEY --value V --rollback-to ID --expect V0
                 [--read-token R --write-token W]
    page_test.py --url http://127.0.0.1:PORT/ --held confirm|discard

Loads the page, waits for the held-change notice, clicks its confirm (or discard) button and then
the confirmation; waits for the page to report the change installed (or discarded) and the notice
to go away. Prints {"ok": true, ...} as below.

Loads the page, waits for the service, opens it and checks that KEY is V; opens release ID,
clicks "Roll back" and confirms; waits for the page to report the new release as served, and
for the service's KEY to read V0 on the page. Prints one JSON line {"ok": true, ...} on success
and exits 1 with the reason otherwise. The caller checks the result over gRPC as an agent would.

With tokens (a server with admin tokens), the page must ask for a token exactly once at load
(answered with R, a read token), and once more when the rollback is refused for want of the
write role (answered with W); any other prompt fails the run, since WebDriver commands fail
while a prompt is open.

Chromium runs as root here, so it needs --no-sandbox; the machine has no outside network, so
everything that would call out is off. CHROMIUM and CHROMEDRIVER override the binaries.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class Failure(Exception):
    pass


class Driver:
    def __init__(self, chromium, chromedriver, profile):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.log = open(os.path.join(profile, "chromedriver.log"), "w")
        self.proc = subprocess.Popen([chromedriver, f"--port={port}"], stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_for(lambda: self.ready(), 20, "chromedriver did not start")
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            # A prompt stays open until the test answers it; other commands fail meanwhile.
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {"binary": chromium, "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--user-data-dir=" + os.path.join(profile, "chromium"),
                "--window-size=1400,1000"]},
        }}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def ready(self):
        try:
            return self.call("GET", "/status").get("ready", False)
        except (OSError, Failure):
            return False

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read() or b"{}").get("value")
        except urllib.error.HTTPError as e:
            raise Failure(f"{method} {path}: {e.code} {e.read()[:500]!r}")

    def s(self, path):
        return f"/session/{self.session}{path}"

    def go(self, url):
        self.call("POST", self.s("/url"), {"url": url})

    def find(self, css):
        found = self.call("POST", self.s("/elements"), {"using": "css selector", "value": css})
        return [f[ELEMENT] for f in found]

    def text(self, element):
        return self.call("GET", self.s(f"/element/{element}/text"))

    def click(self, css):
        # The page re-renders its tables when data arrives, so an element found a moment ago
        # may be gone by the click: find it again.
        for attempt in range(20):
            elements = self.find(css)
            if not elements:
                raise Failure(f"nothing to click at {css}")
            try:
                self.call("POST", self.s(f"/element/{elements[0]}/click"), {})
                return
            except Failure as e:
                if "stale element" not in str(e) or attempt == 19:
                    raise
            time.sleep(0.05)

    def answer_prompt(self, text, seconds=20):
        """Waits for the page's prompt, types TEXT into it and accepts it; returns its message."""
        def open_prompt():
            try:
                return self.call("GET", self.s("/alert/text"))
            except Failure:
                return None
        message = self.wait_for(open_prompt, seconds, "the page never asked for a token")
        self.call("POST", self.s("/alert/text"), {"text": text})
        self.call("POST", self.s("/alert/accept"), {})
        return message

    def script(self, source, *args):
        return self.call("POST", self.s("/execute/sync"), {"script": source, "args": list(args)})

    @staticmethod
    def wait_for(condition, seconds, what):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            result = condition()
            if result:
                return result
            time.sleep(0.1)
        raise Failure(what)

    def quit(self):
        try:
            self.call("DELETE", self.s(""))
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def cell_value(driver, key):
    """The value the config table shows for KEY, or None."""
    return driver.script(
        "for (const tr of document.querySelectorAll('#config tr')) {"
        "  if (tr.dataset.key === arguments[0]) return tr.children[1].textContent; }"
        "return null;", key)


def run(a, driver):
    prompts = []
    driver.go(a.url)
    if a.read_token:
        prompts.append(driver.answer_prompt(a.read_token))
    driver.wait_for(lambda: driver.script("return document.body.dataset.loaded === 'true'"), 20, "the page never loaded its data")
    row = f'#services tr[data-service="{a.service}"]'
    driver.wait_for(lambda: driver.find(row), 10, f"service {a.service} is not listed")
    driver.click(row)
    driver.wait_for(lambda: cell_value(driver, a.key) == a.value, 10,
                    f"{a.key} of {a.service} does not show {a.value} (shows {cell_value(driver, a.key)!r})")
    title = driver.text(driver.find("#service-title")[0])

    release_row = f'#releases tr[data-release="{a.rollback_to}"]'
    driver.wait_for(lambda: driver.find(release_row), 10, f"release {a.rollback_to} is not listed")
    releases_listed = len(driver.find("#releases tr[data-release]"))
    driver.click(release_row)
    driver.wait_for(lambda: driver.script("return !document.getElementById('release-body').hidden"), 10,
                    "the release does not open")
    driver.wait_for(lambda: driver.find(f'#release-changes [data-change="{a.service}"]'), 10,
                    "the release's diff does not show the service")
    driver.click("#rollback")
    driver.wait_for(lambda: driver.script("return !document.getElementById('rollback-confirm').hidden"), 5,
                    "no confirmation button")
    driver.click("#rollback-confirm")
    if a.write_token:
        message = driver.answer_prompt(a.write_token)
        if "write" not in message:
            raise Failure(f"the rollback's prompt does not ask for a write token: {message!r}")
        prompts.append(message)
    note = driver.wait_for(
        lambda: driver.script("const n = document.querySelector('#notice .note'); return n ? n.dataset.kind + ':' + n.textContent : null;"),
        30, "the rollback never answered")
    if not note.startswith("ok:") or "is served" not in note:
        raise Failure(f"the rollback failed: {note}")
    driver.click(row)
    driver.wait_for(lambda: cell_value(driver, a.key) == a.expect, 10,
                    f"after the rollback {a.key} shows {cell_value(driver, a.key)!r}, not {a.expect}")
    driver.wait_for(lambda: len(driver.find("#releases tr[data-release]")) == releases_listed + 1, 10,
                    "the rollback is not listed as a release")
    return {"ok": True, "service_title": title, "notice": note[3:], "releases": releases_listed + 1, "prompts": prompts}


def run_held(a, driver):
    driver.go(a.url)
    driver.wait_for(lambda: driver.script("return document.body.dataset.loaded === 'true'"), 20, "the page never loaded its data")
    driver.wait_for(lambda: driver.script("return !document.getElementById('held').hidden"), 10, "the held change is not shown")
    button = "#held-confirm" if a.held == "confirm" else "#held-discard"
    driver.click(button)
    driver.wait_for(lambda: driver.script(f"return !document.querySelector('{button}-sure').hidden"), 5, "no confirmation button")
    driver.click(button + "-sure")
    note = driver.wait_for(
        lambda: driver.script("const n = document.querySelector('#notice .note'); return n ? n.dataset.kind + ':' + n.textContent : null;"),
        30, "the decision never answered")
    expected = "is installed" if a.held == "confirm" else "is discarded"
    if not note.startswith("ok:") or expected not in note:
        raise Failure(f"the {a.held} failed: {note}")
    driver.wait_for(lambda: driver.script("return document.getElementById('held').hidden"), 10, "the held change is still shown")
    return {"ok": True, "notice": note[3:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--service")
    ap.add_argument("--key")
    ap.add_argument("--value")
    ap.add_argument("--rollback-to")
    ap.add_argument("--expect")
    ap.add_argument("--read-token")
    ap.add_argument("--write-token")
    ap.add_argument("--held", choices=["confirm", "discard"])
    a = ap.parse_args()
    if not a.held and None in (a.service, a.key, a.value, a.rollback_to, a.expect):
        ap.error("without --held: --service, --key, --value, --rollback-to and --expect are required")
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    chromedriver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
    profile = tempfile.mkdtemp(prefix="skyconf-web-")
    driver = None
    try:
        driver = Driver(chromium, chromedriver, profile)
        print(json.dumps(run_held(a, driver) if a.held else run(a, driver)), flush=True)
    except Failure as e:
        print(json.dumps({"ok": False, "error": str(e)}), flush=True)
        if driver is not None:
            try:
                print(driver.script("return document.body.innerText")[:4000], file=sys.stderr)
            except Exception:  # noqa: BLE001
                pass
            with open(os.path.join(profile, "chromedriver.log")) as f:
                sys.stderr.write(f.read()[-4000:])
        sys.exit(1)
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
