#!/usr/bin/env python3
"""Drives skyconf's admin web page in a real headless Chromium, through chromedriver's W3C
WebDriver HTTP API (no pip package: the protocol is plain JSON over HTTP).

    page_test.py --url http://127.0.0.1:PORT/ --service NAME --key KEY --value V --rollback-to ID --expect V0
                 [--read-token R --write-token W]
    page_test.py --url http://127.0.0.1:PORT/ --held confirm|discard
    page_test.py --url URL --scenario editing --service NAME --key KEY --value NEW
    page_test.py --url URL --scenario refused --unconfigured NAME
    page_test.py --url URL --scenario browse --service NAME --key KEY --compare A B --services N --history N
    page_test.py --url URL --scenario instances --service NAME --instance I --host H --ip IP [--ip IP2]
                 --language L --agent-version V --anonymous-state S
    page_test.py --url URL --scenario instances-paged --instance I --total N
    page_test.py --url URL --scenario rollouts --service NAME --key KEY --document TEXT --waves 1,100%
                 --served V --value NEW [--author A]
    page_test.py --url URL --scenario service-view --service NAME --rollout ID --group G --instance I
                 --property K=V --path P --ignored P --traced P --key KEY --value V --others A,B
    (any of them with --screenshot DIR: PNGs of the page, for the documentation, written into DIR)

editing: opens NAME by its URL (#/services/NAME); the whole-document editor shows the served
document unasked. Types a draft into it and a new configuration {KEY: NEW} into the service
editor, moves the focus away and waits for two periodic refreshes, clicks "Dry run" and waits
for two more: both drafts must survive, marked "unsaved changes". "Save" then serves {KEY: NEW}
(the caller checks over gRPC); the document draft is kept and marked as outdated until "Load
current". Then a broken document typed there is refused inline, with its line.

refused: the header says the store's document is refused; the unconfigured NAME polled by one
agent reads "1 agent".

browse: N services, paged 100 at a time; the filter and column sorting; NAME opened by a pasted
URL with its history (at least --history entries), its digest shortened with a copy button and no
horizontal scroll at 1400 px; a history row opens its release (and the URL follows); the pasted
URL #/releases/A/compare/B shows KEY's change, and "compare with" builds that URL.

instances: the pasted URL #/instances opens the Instances view: instance I of service NAME with
its host H, every IP, language L and agent version V, applied on NAME; its properties unfold (both
IPs listed) and stay unfolded through a refresh; the filter finds it by IP and hides it for
another text; the anonymous pollers are listed apart in state S; "close" hides the view and the
header's link opens it again; NAME's row in the services table counts the anonymous poller.

instances-paged: the Instances view shows TOTAL instances 100 at a time: the first page counts
"1–100 of TOTAL" with no previous button, the two connections claiming one name are both listed
and flagged "claimed twice"; next shows the rest (instance I among them) without a next button;
previous shows the first page again.

rollouts (run step by step: at each step it prints {"step": NAME, ...} and waits for a line "go"
on its standard input, while the caller checks the agents): types TEXT into the whole-document
editor and opens "Roll out in waves…" under it; a wave the page cannot read and one the server
refuses (150%) are errors in the notice and keep the form open. Started with WAVES, bake 0 and
manual advance, the Rollouts view opens on wave 1 of 2 waiting for a promote, exactly one agent
reached and applied, the header's badge on (step wave-1). The Instances view names the rollout in
the "served as" cell of that instance only. Promote, confirmed, starts wave 2; the rollout ends
completed in the history, promote and abort gone (step completed). Then NAME's editor shows KEY = V
and {KEY: NEW} typed there is rolled out from the form under the service's editor (step
service-wave-1); Abort, confirmed, ends it aborted, first in the history (step aborted).

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
import re
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

    def at(self, css, action):
        """ACTION on the first element CSS matches, and its answer. The page re-renders its
        tables and cards when data arrives, so an element found a moment ago may be gone by the
        time it is read or clicked: then it is found again."""
        for attempt in range(20):
            elements = self.find(css)
            if not elements:
                raise Failure(f"nothing at {css}")
            try:
                return action(elements[0])
            except Failure as e:
                if "stale element" not in str(e) or attempt == 19:
                    raise
            time.sleep(0.05)

    def text_at(self, css):
        """The text of the first element CSS matches."""
        return self.at(css, self.text)

    def click(self, css):
        self.at(css, lambda element: self.call("POST", self.s(f"/element/{element}/click"), {}))

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

    def send_keys(self, css, text):
        self.at(css, lambda element: self.call("POST", self.s(f"/element/{element}/value"), {"text": text}))

    def screenshot(self, path):
        import base64
        data = self.call("GET", self.s("/screenshot"))
        with open(path, "wb") as f:
            f.write(small_png(base64.b64decode(data)))

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
    title = driver.text_at("#service-title")

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


def refreshes(driver):
    return int(driver.script("return Number(document.body.dataset.refreshes || 0)"))


def wait_refreshes(driver, n, what):
    """Waits until the page has refreshed N more times (every 2 s)."""
    start = refreshes(driver)
    driver.wait_for(lambda: refreshes(driver) >= start + n, 5 + 3 * n, f"the page stopped refreshing ({what})")


def value_of(driver, element_id):
    return driver.script("return document.getElementById(arguments[0]).value", element_id)


def shown(driver, element_id):
    """Whether the element is displayed (not hidden, nor inside a hidden one)."""
    return driver.script("const e = document.getElementById(arguments[0]); return !!e && e.getClientRects().length > 0", element_id)


def note_text(driver):
    return driver.script("const n = document.querySelector('#notice .note'); return n ? n.dataset.kind + ':' + n.textContent : null;")


def small_png(png):
    """`png` (Chromium's 8-bit RGB or RGBA screenshot) as a palette PNG of at most 256 colours, about
    a third of the size: colours are grouped by the top 4 bits of each channel, the most used group
    of each kind keeps its most used colour, and every pixel takes the nearest kept colour. The
    page's flat colours stay exact; only the anti-aliased edges of text move a little."""
    import struct
    import zlib
    from collections import Counter

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    pos, idat, header = 8, b"", None
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos:pos + 4])
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or interlace or colour not in (2, 6):
        return png
    bpp = 4 if colour == 6 else 3
    raw, stride = zlib.decompress(idat), width * bpp
    pixels, prev, i = [], bytearray(stride), 0
    for _ in range(height):  # undo the PNG row filters
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        pixels.extend(bytes(line[x:x + 3]) for x in range(0, stride, bpp))
        prev = line
    counts = Counter(pixels)
    groups = {}
    for rgb, n in counts.items():
        group = groups.setdefault((rgb[0] >> 4, rgb[1] >> 4, rgb[2] >> 4), [0, rgb, 0])
        group[0] += n
        if n > group[2]:
            group[1], group[2] = rgb, n
    palette = [g[1] for g in sorted(groups.values(), key=lambda g: -g[0])[:256]]
    index = {rgb: k for k, rgb in enumerate(palette)}
    nearest = {rgb: index[rgb] if rgb in index else
               min(range(len(palette)), key=lambda k: sum((p - q) ** 2 for p, q in zip(rgb, palette[k])))
               for rgb in counts}
    rows = b"".join(b"\0" + bytes(nearest[p] for p in pixels[y * width:(y + 1) * width]) for y in range(height))
    return (png[:8] + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0))
            + chunk(b"PLTE", b"".join(palette)) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


def shoot(a, driver, name):
    if a.screenshot:
        os.makedirs(a.screenshot, exist_ok=True)
        driver.screenshot(os.path.join(a.screenshot, name))


def no_horizontal_scroll(driver, where):
    widths = driver.script("return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    if widths[0] > widths[1]:
        raise Failure(f"horizontal scroll {where}: the page is {widths[0]} px wide in a {widths[1]} px window")


def clear(driver, element_id):
    driver.script("const e = document.getElementById(arguments[0]); e.value = ''; e.dispatchEvent(new Event('input'));", element_id)


def loaded(driver, url):
    driver.go("about:blank")
    driver.go(url)
    driver.wait_for(lambda: driver.script("return document.body.dataset.loaded === 'true'"), 20, "the page never loaded its data")


def run_editing(a, driver):
    from urllib.parse import quote
    loaded(driver, a.url + "#/services/" + quote(a.service, safe=""))
    driver.wait_for(lambda: driver.script("return document.getElementById('service-title').textContent") == a.service, 10,
                    "the service's URL does not open it")
    driver.wait_for(lambda: cell_value(driver, a.key) is not None, 10, f"{a.key} is not shown")
    driver.wait_for(lambda: a.service in (value_of(driver, "document-edit") or ""), 10,
                    "the whole-document editor does not show the served document")
    served_document = value_of(driver, "document-edit")
    if shown(driver, "config-dirty") or shown(driver, "document-dirty"):
        raise Failure("marked unsaved before any edit")

    # A draft in each editor.
    driver.script("const e = document.getElementById('document-edit'); e.focus(); e.setSelectionRange(e.value.length, e.value.length);")
    driver.send_keys("#document-edit", "# a draft note")
    document_draft = served_document + "# a draft note"
    clear(driver, "config-edit")
    typed = json.dumps({a.key: a.value})
    driver.click("#config-edit")
    driver.send_keys("#config-edit", typed)
    if value_of(driver, "config-edit") != typed:
        raise Failure(f"typing gave {value_of(driver, 'config-edit')!r}")
    driver.wait_for(lambda: shown(driver, "config-dirty") and shown(driver, "document-dirty"), 5, "no unsaved-changes marker")

    driver.click("#service-message")
    wait_refreshes(driver, 2, "after leaving the editor")
    if value_of(driver, "config-edit") != typed:
        raise Failure(f"the refresh overwrote the service editor: {value_of(driver, 'config-edit')!r}")
    driver.click("#service-dry-run")
    note = driver.wait_for(lambda: note_text(driver), 10, "the dry run never answered")
    if not note.startswith("ok:Dry run") or a.service not in note:
        raise Failure(f"the dry run: {note}")
    wait_refreshes(driver, 2, "after the dry run")
    if value_of(driver, "config-edit") != typed or not shown(driver, "config-dirty"):
        raise Failure(f"the dry run lost the draft: {value_of(driver, 'config-edit')!r}")
    if value_of(driver, "document-edit") != document_draft:
        raise Failure("the refresh overwrote the whole-document editor")
    driver.script("document.getElementById('service-title').scrollIntoView()")
    shoot(a, driver, "page-editor.png")

    driver.script("document.getElementById('notice').replaceChildren()")
    driver.click("#service-save")
    note = driver.wait_for(lambda: note_text(driver), 30, "the save never answered")
    if not note.startswith("ok:") or "is served" not in note:
        raise Failure(f"the save: {note}")
    driver.wait_for(lambda: cell_value(driver, a.key) == a.value, 10, f"{a.key} does not show {a.value} after the save")
    driver.wait_for(lambda: not shown(driver, "config-dirty"), 10, "still marked unsaved after the save")
    if json.loads(value_of(driver, "config-edit")) != {a.key: a.value}:
        raise Failure(f"the editor after the save: {value_of(driver, 'config-edit')!r}")

    # The document draft outlived the change, and says the served document moved on.
    driver.wait_for(lambda: shown(driver, "document-stale"), 10, "the document draft is not marked outdated")
    if value_of(driver, "document-edit") != document_draft:
        raise Failure("the whole-document draft was lost")
    driver.click("#document-load")
    driver.wait_for(lambda: a.value in value_of(driver, "document-edit") and not shown(driver, "document-dirty"), 10,
                    "Load current does not show the new document")

    # Inline validation as one types.
    clear(driver, "document-edit")
    driver.click("#document-edit")
    driver.send_keys("#document-edit", "configurations:\n  broken:\n    key: [1, 2\n")
    driver.wait_for(lambda: driver.script("return document.getElementById('document-check').dataset.state") == "bad", 10,
                    "a broken document is not refused as one types")
    check = driver.text_at("#document-check")
    if not check.startswith("✗ 4:1: "):
        raise Failure(f"the refusal does not name the line and column as `skyconf validate` does (LINE:COLUMN): {check!r}")
    marked = driver.script("const p = document.querySelector('#document-check pre'); return p ? p.dataset.line : null")
    driver.script("document.getElementById('document-check').scrollIntoView({block: 'end'})")
    shoot(a, driver, "page-validation.png")
    driver.click("#document-load")
    driver.wait_for(lambda: driver.script("return document.getElementById('document-check').dataset.state") == "none", 5,
                    "Load current does not clear the check")
    warned = run_warnings(driver)
    return {"ok": True, "notice": note[3:], "refused_inline": check, "marked_line": marked, "warned": warned}


def warnings_shown(driver, check_id):
    """The warnings a check box lists, as [line, service, key, text], once its state is `warn`."""
    return driver.script(
        "const box = document.getElementById(arguments[0]);"
        "if (box.dataset.state !== 'warn') return null;"
        "return [...box.querySelectorAll('ul.warnings li')].map((li) =>"
        " [li.dataset.line, li.dataset.service, li.dataset.key, li.textContent]);", check_id)


def run_warnings(driver):
    """Usability finding 3: what `skyconf validate` warns about shows in both editors as one
    types, before Save: a misspelt key and a service written twice in the whole document (the
    reader's warning the API always returned and the page never showed), a misspelt key in the
    service editor. Nothing is saved."""
    clear(driver, "document-edit")
    driver.click("#document-edit")
    driver.send_keys("#document-edit", "configurations:\n  svc-a:\n    agent.sampel_n_per_3_secs: 5\n"
                     "  svc-b:\n    agent.sample_rate: 0.5\n  svc-b:\n    agent.sample_rate: 0.25\n")
    shown = driver.wait_for(lambda: warnings_shown(driver, "document-check"), 10,
                            "the document's warnings are not shown as one types")
    if [w[:3] for w in shown] != [["6", "", ""], ["3", "svc-a", "agent.sampel_n_per_3_secs"]]:
        raise Failure(f"the document's warnings: {shown}")
    if "written 2 times" not in shown[0][3] or "did you mean" not in shown[1][3]:
        raise Failure(f"the document's warnings say: {shown}")
    driver.click("#document-load")

    clear(driver, "config-edit")
    driver.click("#config-edit")
    driver.send_keys("#config-edit", json.dumps({"agent.sampel_n_per_3_secs": "5"}))
    service = driver.wait_for(lambda: warnings_shown(driver, "service-check"), 10,
                              "the service editor's warnings are not shown as one types")
    if [w[2] for w in service] != ["agent.sampel_n_per_3_secs"] or "did you mean" not in service[0][3]:
        raise Failure(f"the service editor's warnings: {service}")
    driver.click("#service-discard")
    driver.wait_for(lambda: driver.script("return document.getElementById('service-check').dataset.state") == "none", 5,
                    "Discard does not clear the service editor's check")
    return {"document": [w[3] for w in shown], "service": [w[3] for w in service]}


def run_refused(a, driver):
    loaded(driver, a.url)
    driver.wait_for(lambda: driver.script("return document.getElementById('status').dataset.refused") == "true", 10,
                    "the header does not say the document is refused")
    header = driver.text_at("#status")
    if "refused" not in header:
        raise Failure(f"header: {header!r}")
    # One counter, the release; a file is watched, not connected; the table version on hover.
    title = driver.script("return document.getElementById('status').title")
    if (not re.match(r"release #\d+ · ", header) or "version" in header or "· watching" not in header
            or "connected" in header or "table version" not in title):
        raise Failure(f"header: {header!r}, its title: {title!r}")
    row = f'#unconfigured tr[data-service="{a.unconfigured}"]'
    driver.wait_for(lambda: driver.find(row), 10, f"{a.unconfigured} is not listed as unconfigured")
    text = driver.text_at(row)
    if "1 agent" not in text or "1 agents" in text:
        raise Failure(f"unconfigured row: {text!r}")
    return {"ok": True, "header": header, "unconfigured": text}


def run_overview(a, driver):
    """overview: before any service is picked the page shows the fleet, the last change, the store
    and the gateway's OAPs (one up, one not); the header stays on one line at 800 px, without a
    horizontal scroll; a release without author says so, alike in the list and in the release."""
    loaded(driver, a.url)
    if driver.text_at("#service-title") != "Overview" or not shown(driver, "overview"):
        raise Failure("the first load shows no overview")
    counted = lambda: driver.script("return document.getElementById('overview-agents').dataset.agents")
    driver.wait_for(lambda: counted() == str(a.agents), 10, f"the overview counts {counted()} agents, not {a.agents}")
    oaps = driver.wait_for(lambda: (lambda o: o if o and len(o) == 2 and sum(1 for u in o if u[1] == "true") == 1 else None)(driver.script(
        "return [...document.querySelectorAll('#overview-oaps [data-upstream]')].map(d => [d.dataset.upstream, d.dataset.up])")),
        20, "the overview does not show one OAP up and one unreachable")
    if [u for u, up in oaps if up == "false"] != [a.down_upstream]:
        raise Failure(f"the OAPs: {oaps}")
    gateway = driver.text_at("#gateway")
    if gateway != "OAP 1/2 up: 1 unreachable" or a.down_upstream not in driver.script("return document.getElementById('gateway').title"):
        raise Failure(f"the header's gateway: {gateway!r}")
    change = driver.text_at("#overview-change")
    if f"release #{a.rollback_to}" not in change or "no author (file)" not in change:
        raise Failure(f"the last change: {change!r}")
    store = driver.text_at("#overview-store")
    if not store.startswith("file ") or "· watching, last read" not in store or "connected" in store or "serving release #" not in store:
        raise Failure(f"the store: {store!r}")
    if not shown(driver, "release-hint"):
        raise Failure("the release panel says nothing before a release is picked")
    author = driver.text_at(f'#releases tr[data-release="{a.rollback_to}"] td:nth-child(3)')
    shoot(a, driver, "page-overview.png")

    # The release's own line spells its author as the list does.
    driver.click(f'#releases tr[data-release="{a.rollback_to}"]')
    driver.wait_for(lambda: "no author (file)" in driver.text_at("#release-meta"), 10,
                    f"the release's line: {driver.text_at('#release-meta')!r}")
    if author != "no author (file)" or shown(driver, "release-hint"):
        raise Failure(f"the list's author cell: {author!r}")

    # 800 px: one header line, no horizontal scroll.
    driver.call("POST", driver.s("/window/rect"), {"width": 800, "height": 900})
    driver.wait_for(lambda: driver.script("return window.innerWidth") <= 800, 5, "the window does not shrink")
    lines = driver.script(
        "const tops = [...document.querySelector('header').children].filter(e => e.getClientRects().length)"
        "  .map(e => Math.round(e.getBoundingClientRect().top + e.getBoundingClientRect().height / 2));"
        "return Math.max(...tops) - Math.min(...tops)")
    if lines > 4:
        raise Failure(f"the header wraps at 800 px: its items' middles differ by {lines} px")
    no_horizontal_scroll(driver, "at 800 px")
    return {"ok": True, "oaps": oaps, "gateway": gateway, "change": change, "store": store, "author": author}


def service_rows(driver):
    return driver.script("return [...document.querySelectorAll('#services tr[data-service]')].map(t => t.dataset.service)")


def run_browse(a, driver):
    from urllib.parse import quote
    loaded(driver, a.url)
    count = driver.wait_for(lambda: driver.text_at("#services-count"), 10, "no service count")
    if count != f"{a.services} services":
        raise Failure(f"the count says {count!r}")
    rows = service_rows(driver)
    if len(rows) != 100 or not shown(driver, "services-pager"):
        raise Failure(f"the first page has {len(rows)} rows")
    driver.click("#services-next")
    rest = service_rows(driver)
    if len(rest) != a.services - 100 or set(rest) & set(rows):
        raise Failure(f"the second page has {len(rest)} rows")
    if sorted(rows + rest) != rows + rest:
        raise Failure("not sorted by name")

    # Filter.
    driver.click("#service-filter")
    driver.send_keys("#service-filter", a.service[:6].upper())
    driver.wait_for(lambda: service_rows(driver) == [a.service], 5, f"the filter shows {service_rows(driver)}")
    filtered = driver.text_at("#services-count")
    clear(driver, "service-filter")
    driver.wait_for(lambda: len(service_rows(driver)) == 100, 5, "clearing the filter")

    # Sort: by name again descending, then by keys (most first).
    driver.click('#services-head th[data-sort="name"]')
    driver.wait_for(lambda: service_rows(driver)[0] == max(rows + rest), 5, "sorting by name descending")
    driver.click('#services-head th[data-sort="keys"]')
    driver.wait_for(lambda: service_rows(driver)[0] == a.service, 5, f"sorting by keys: {service_rows(driver)[:3]}")
    driver.click('#services-head th[data-sort="name"]')

    # A pasted service URL.
    loaded(driver, a.url + "#/services/" + quote(a.service, safe=""))
    driver.wait_for(lambda: driver.script("return document.getElementById('service-title').textContent") == a.service, 10,
                    "the service's URL does not open it")
    driver.wait_for(lambda: len(driver.find("#history tr[data-history]")) >= a.history, 10,
                    f"the history has {len(driver.find('#history tr[data-history]'))} entries")
    if shown(driver, "config-dirty"):
        raise Failure("the service editor is marked unsaved before any edit")
    history = len(driver.find("#history tr[data-history]"))
    no_horizontal_scroll(driver, "with a service open")
    shoot(a, driver, "page-services.png")
    digest = driver.script("const c = document.querySelector('#service-digest code'); const b = document.querySelector('#service-digest button.copy');"
                           "return c && b ? [c.textContent, b.dataset.digest] : null")
    if not digest or len(digest[0]) != 12 or not digest[1].startswith(digest[0]) or len(digest[1]) != 128:
        raise Failure(f"the digest: {digest}")
    driver.click("#service-digest button.copy")
    copied = driver.wait_for(lambda: driver.script("return document.querySelector('#service-digest button.copy').dataset.copied"), 5,
                             "the copy button does nothing")
    if copied != "ok" and digest[1] not in (note_text(driver) or ""):
        raise Failure("a failed copy does not show the digest")

    # A history row opens its release, and the URL follows.
    history_id = driver.script("const row = document.querySelector('#history tr[data-history]'); return row && row.dataset.history")
    if not history_id:
        raise Failure("the history lists no release")
    driver.click(f'#history tr[data-history="{history_id}"]')
    driver.wait_for(lambda: driver.script("return location.hash") == f"#/releases/{history_id}", 5, "the URL does not follow a click")
    driver.wait_for(lambda: driver.script("return document.getElementById('release-title').textContent").startswith(f"Release #{history_id}"), 10,
                    "the history row does not open its release")

    # A pasted comparison URL, then the same built with "compare with".
    older, newer = a.compare
    loaded(driver, a.url + f"#/releases/{older}/compare/{newer}")
    driver.wait_for(lambda: driver.script("return document.getElementById('release-title').textContent") == f"Release #{older} → #{newer}", 10,
                    "the comparison URL does not open it")
    cell = f'#release-changes [data-change="{a.service}"] tr[data-key="{a.key}"]'
    driver.wait_for(lambda: driver.find(cell), 10, f"the comparison does not show {a.key} of {a.service}")
    change = driver.text_at(cell)
    driver.script("document.getElementById('release-detail').scrollIntoView()")
    no_horizontal_scroll(driver, "with a comparison open")
    shoot(a, driver, "page-release-diff.png")
    driver.click(f'#releases tr[data-release="{newer}"]')
    driver.wait_for(lambda: driver.script("return location.hash") == f"#/releases/{newer}", 5, "the URL does not follow a release click")
    driver.wait_for(lambda: driver.script("return document.getElementById('release-title').textContent").startswith(f"Release #{newer}"), 10,
                    "the release does not open")
    driver.script("const s = document.getElementById('compare-with'); s.value = arguments[0];", str(older))
    driver.click("#compare")
    driver.wait_for(lambda: driver.script("return location.hash") == f"#/releases/{newer}/compare/{older}", 5, "Compare does not build the URL")
    driver.wait_for(lambda: driver.script("return document.getElementById('release-title').textContent") == f"Release #{newer} → #{older}", 10,
                    "Compare does not show the comparison")
    return {"ok": True, "count": count, "filtered": filtered, "history": history, "change": change,
            "digest": digest[0], "copied": copied}


def cell(driver, row, css):
    return driver.script("const e = document.querySelector(arguments[0] + ' ' + arguments[1]); return e ? e.textContent : null", row, css)


def run_instances(a, driver):
    loaded(driver, a.url + "#/instances")
    driver.wait_for(lambda: shown(driver, "instances-view"), 10, "#/instances does not open the Instances view")
    row = f'#instances tr[data-instance="{a.instance}"]'
    driver.wait_for(lambda: driver.find(row), 10, f"instance {a.instance} is not listed")
    seen = {name: cell(driver, row, "td." + name) for name in ["host", "ips", "language", "agent-version"]}
    expected = {"host": a.host, "language": a.language, "agent-version": a.agent_version}
    for name, want in expected.items():
        if seen[name] != want:
            raise Failure(f"the {name} cell shows {seen[name]!r}, not {want!r}")
    if any(ip not in (seen["ips"] or "") for ip in a.ip):
        raise Failure(f"the IPs cell shows {seen['ips']!r}, not all of {a.ip}")
    applied = f'{row} td.fleet [data-service="{a.service}"][data-state="applied"]'
    driver.wait_for(lambda: driver.find(applied), 5, f"{a.service} is not shown applied for {a.instance}")

    # Properties: folded, unfolded on a click, still unfolded after a refresh.
    driver.click(f"{row} details summary")
    listed = lambda: driver.script("return [...document.querySelectorAll(arguments[0] + ' details[open] tr[data-key]')].map(t => t.textContent)", row)
    driver.wait_for(lambda: len([t for t in listed() if t.startswith("ipv4")]) == len(a.ip), 5, f"the unfolded properties: {listed()}")
    wait_refreshes(driver, 1, "with the properties unfolded")
    if not listed():
        raise Failure("a refresh folded the properties again")

    anonymous = driver.script("return [...document.querySelectorAll('#anonymous tr[data-peer]')].map(t => t.dataset.state)")
    if not anonymous or any(state != a.anonymous_state for state in anonymous) or not shown(driver, "anonymous-box"):
        raise Failure(f"the anonymous pollers: {anonymous}")
    if replica_column_shown(driver, "#instances"):
        raise Failure("a single replica shows a replica column")
    no_horizontal_scroll(driver, "with the Instances view open")
    shoot(a, driver, "page-instances.png")

    # The filter: by an IP, then by a text nothing has.
    driver.click("#instance-filter")
    driver.send_keys("#instance-filter", a.ip[-1])
    driver.wait_for(lambda: len(driver.find("#instances tr[data-instance]")) == 1 and driver.find(row), 5, "the filter by IP")
    clear(driver, "instance-filter")
    driver.send_keys("#instance-filter", "no-such-instance-anywhere")
    driver.wait_for(lambda: not driver.find("#instances tr[data-instance]"), 5, "the filter hides what does not match")
    clear(driver, "instance-filter")

    driver.click("#instances-close")
    driver.wait_for(lambda: not shown(driver, "instances-view"), 5, "close does not hide the view")
    driver.click("#instances-link")
    driver.wait_for(lambda: shown(driver, "instances-view") and driver.find(row), 5, "the header's link does not open the view")
    services_row = f'#services tr[data-service="{a.service}"]'
    driver.wait_for(lambda: driver.find(services_row), 10, f"{a.service} is not in the services table")
    fleet = driver.text_at(services_row)
    if "anonymous" not in fleet:
        raise Failure(f"the services table does not count the anonymous poller: {fleet!r}")
    return {"ok": True, "cells": seen, "anonymous": anonymous, "services_row": fleet}


def run_instances_paged(a, driver):
    loaded(driver, a.url + "#/instances")
    rows = "#instances tr[data-instance]"
    driver.wait_for(lambda: shown(driver, "instances-view") and len(driver.find(rows)) == 100, 10,
                    "the first page does not show 100 instances")
    count = driver.text_at("#instances-count")
    if f"1–100 of {a.total}" not in count:
        raise Failure(f"the first page counts {count!r}")
    if shown(driver, "instances-prev") or not shown(driver, "instances-next"):
        raise Failure("the first page shows a previous button, or no next button")
    flagged = driver.script("return [...document.querySelectorAll('#instances tr[data-duplicate=\"true\"]')].map(t => t.dataset.instance)")
    if len(flagged) != 2 or len(set(flagged)) != 1 or not driver.find('#instances tr[data-duplicate="true"] .duplicate'):
        raise Failure(f"the name claimed twice is flagged on {flagged}")
    driver.click("#instances-next")
    last = f'#instances tr[data-instance="{a.instance}"]'
    driver.wait_for(lambda: len(driver.find(rows)) == a.total - 100 and driver.find(last), 10,
                    f"the next page does not show the other {a.total - 100} with {a.instance}")
    if shown(driver, "instances-next") or not shown(driver, "instances-prev"):
        raise Failure("the last page shows a next button, or no previous button")
    second = driver.text_at("#instances-count")
    driver.click("#instances-prev")
    driver.wait_for(lambda: len(driver.find(rows)) == 100 and not shown(driver, "instances-prev"), 10,
                    "previous does not show the first page again")
    return {"ok": True, "first": count, "second": second, "flagged": flagged}


def replica_column_shown(driver, body):
    return driver.script("const th = document.querySelector(arguments[0]).closest('table').querySelector('th.replica-col');"
                         "return getComputedStyle(th).display !== 'none'", body)


def run_replicas(a, driver):
    """Several replicas: an agent of another replica is listed, with that replica, in the service's
    agents and in the Instances view; the header names this replica and counts the others."""
    from urllib.parse import quote
    loaded(driver, a.url + "#/services/" + quote(a.service, safe=""))
    row = f'#agents tr[data-replica="{a.peer_replica}"]'
    driver.wait_for(lambda: driver.find(row), 10, f"no agent of {a.peer_replica} is listed for {a.service}")
    if not replica_column_shown(driver, "#agents"):
        raise Failure("the agents table has no replica column")
    cell = driver.text_at(f"{row} td.replica")
    if cell != a.peer_replica:
        raise Failure(f"the replica cell shows {cell!r}")
    header = driver.text_at("#replicas")
    if a.replica not in header or "2 replicas" not in header:
        raise Failure(f"the header: {header!r}")
    no_horizontal_scroll(driver, "with the replica column")
    driver.click("#instances-link")
    anonymous = f'#anonymous tr[data-replica="{a.peer_replica}"]'
    driver.wait_for(lambda: shown(driver, "instances-view") and driver.find(anonymous), 10,
                    f"the Instances view does not list the poller of {a.peer_replica}")
    no_horizontal_scroll(driver, "with the Instances view and its replica column")
    shoot(a, driver, "page-replicas.png")
    return {"ok": True, "header": header, "cell": cell}


def run_opamp(a, driver):
    """The OpAMP view: an agent that applied its group's files and reports itself healthy, and one
    whose configuration failed and that reports itself unhealthy, with their description, group,
    status, error and effective configuration (opened: its file); filtered; opened and closed from
    the header; with --reverted-group, the reverted rollout's card with its OpAMP group and what
    its agent reports after the revert."""
    loaded(driver, a.url + "#/opamp")
    driver.wait_for(lambda: shown(driver, "opamp-view"), 10, "#/opamp does not open the OpAMP view")
    applied, failed = f'#opamp-agents tr[data-uid="{a.applied_uid}"]', f'#opamp-agents tr[data-uid="{a.failed_uid}"]'
    driver.wait_for(lambda: driver.find(applied) and driver.find(failed), 10, "the two OpAMP agents are not listed")
    driver.wait_for(lambda: driver.find(f'{applied}[data-status="applied"]') and driver.find(f'{failed}[data-status="failed"]'), 10,
                    "their statuses are not applied and failed")
    seen = {name: {row: cell(driver, sel, "td." + name) for row, sel in [("applied", applied), ("failed", failed)]}
            for name in ["health", "group", "remote-config", "effective", "attributes", "transport"]}
    checks = [
        (seen["group"]["applied"] == a.group, "the applied agent's group"),
        (seen["health"]["applied"].startswith("healthy"), "the applied agent's health"),
        (seen["health"]["failed"].startswith("unhealthy") and a.error in seen["health"]["failed"], "the failed agent's health and its error"),
        (seen["remote-config"]["applied"].startswith("applied") and "not current" not in seen["remote-config"]["applied"], "the applied status"),
        (seen["remote-config"]["failed"].startswith("failed") and a.error in seen["remote-config"]["failed"], "the failed status and why"),
        (seen["effective"]["applied"] != "not reported", "the applied agent's effective configuration"),
        (seen["effective"]["failed"] == "not reported", "the failed agent reported no effective configuration"),
        (a.host in seen["attributes"]["applied"], "the description's host.name"),
        (seen["transport"]["applied"] == "http", "the transport"),
    ]
    for ok, what in checks:
        if not ok:
            raise Failure(f"{what}: {seen}")
    unmatched_text = lambda: driver.text_at("#opamp-unmatched") if shown(driver, "opamp-unmatched") else ""
    driver.wait_for(lambda: f"group {a.unmatched}:" in unmatched_text(), 10, f"the view does not say no agent is in {a.unmatched}")
    unmatched = unmatched_text()
    if replica_column_shown(driver, "#opamp-agents"):
        raise Failure("a single replica shows a replica column")
    no_horizontal_scroll(driver, "with the OpAMP view open")
    shoot(a, driver, "page-opamp.png")

    total = len(driver.find("#opamp-agents tr[data-uid]"))
    driver.click("#opamp-filter")
    driver.send_keys("#opamp-filter", a.failed_uid[:12])
    driver.wait_for(lambda: len(driver.find("#opamp-agents tr[data-uid]")) == 1 and driver.find(failed), 5, "the filter by uid")
    clear(driver, "opamp-filter")
    driver.wait_for(lambda: len(driver.find("#opamp-agents tr[data-uid]")) == total, 5, "clearing the filter")
    # The applied agent's effective configuration, opened: its file and contents.
    driver.click(f"{applied} td.effective summary")
    effective_file = f'{applied} td.effective [data-file="sampling.json"] pre'
    driver.wait_for(lambda: driver.find(effective_file) and a.effective_body in driver.text_at(effective_file), 10,
                    "opening the effective configuration does not show its file")
    driver.click("#opamp-close")
    driver.wait_for(lambda: not shown(driver, "opamp-view"), 5, "close does not hide the view")
    driver.click("#opamp-link")
    driver.wait_for(lambda: shown(driver, "opamp-view") and driver.find(applied), 5, "the header's link does not open the view")
    reverted = None
    if a.reverted_group:
        # The reverted rollout's card: its OpAMP group, and what its reached agent reports since.
        driver.click("#rollouts-link")
        back = f'#rollout-after-revert-list tr[data-instance="{a.reverted_instance}"][data-status-of="previous"][data-status="applied"]'
        driver.wait_for(lambda: shown(driver, "rollout-opamp") and driver.find(f'#rollout-opamp-groups [data-group="{a.reverted_group}"]')
                        and shown(driver, "rollout-after-revert") and driver.find(back), 10,
                        "the reverted rollout's card does not show its OpAMP group and what its agent went back to")
        reverted = driver.text_at(back)
        if "had before" not in reverted:
            raise Failure(f"the row after the revert: {reverted!r}")
        if a.reverted_group not in driver.text_at("#rollout-meta"):
            raise Failure("the rollout's line does not name its OpAMP group")
        shoot(a, driver, "page-rollout-opamp.png")
    return {"ok": True, "cells": seen, "unmatched": unmatched, "after_revert": reverted}


def run_service_view(a, driver):
    """The service view: its targeting groups, the running rollout that touches it (its link opens
    the Rollouts view), and a preview for one instance; services sorted by the numbers in their
    names; no replica name in a single replica's header; an empty table's row spans its columns."""
    from urllib.parse import quote
    url = a.url + "#/services/" + quote(a.service, safe="")
    loaded(driver, url)
    group = f'#service-groups tr[data-group="{a.group}"]'
    driver.wait_for(lambda: driver.find(group), 10, f"group {a.group} is not listed")
    groups = driver.script("return [...document.querySelectorAll('#service-groups tr[data-group]')].map(t => t.innerText)")
    if f"{a.key} = {a.value}" not in groups[0] or "instance name in" not in groups[0] or "removed" not in groups[1]:
        raise Failure(f"the groups: {groups}")
    box = driver.wait_for(lambda: driver.script("const b = document.getElementById('service-running-rollout'); return !b.hidden && b.dataset.rollout"),
                          10, "the running rollout is not shown")
    if box != a.rollout:
        raise Failure(f"the service shows rollout {box}, not {a.rollout}")
    rollout_text = driver.text_at("#service-running-rollout")
    driver.click('#service-running-rollout a[href="#/rollouts"]')
    driver.wait_for(lambda: shown(driver, "rollouts-view"), 5, "the rollout's link does not open the Rollouts view")

    # A preview for one instance: each setting with its layer, which paths are ignored, warnings.
    loaded(driver, url)
    driver.wait_for(lambda: driver.find(group), 10, "the service view is back")
    driver.send_keys("#preview-instance", a.instance)
    driver.send_keys("#preview-properties", "\n".join(a.property))
    driver.send_keys("#preview-paths", "\n".join(a.path))
    driver.click("#preview-run")
    row = f'#preview-settings tr[data-key="{a.key}"]'
    driver.wait_for(lambda: shown(driver, "preview-result") and driver.find(row), 10, "the preview shows nothing")
    layer = driver.script("return document.querySelector(arguments[0]).dataset.layer", row)
    value = cell(driver, row, "td:nth-child(2)")
    if (layer, value) != (f"group:{a.group}", a.value):
        raise Failure(f"the preview shows {a.key} = {value} from {layer}")
    verdicts = driver.script("return Object.fromEntries([...document.querySelectorAll('#preview-paths-out tr')].map(t => [t.dataset.path, t.dataset.ignored]))")
    want = {**{p: "true" for p in a.ignored}, **{p: "false" for p in a.traced}}
    if verdicts != want:
        raise Failure(f"the paths: {verdicts}, not {want}")
    warnings = driver.script("return [...document.querySelectorAll('#preview-warnings li')].map(l => l.textContent)")
    if not warnings:
        raise Failure("the preview shows no warning")
    driver.script("document.getElementById('service-running-rollout').scrollIntoView()")
    shoot(a, driver, "page-service-preview.png")

    names = service_rows(driver)
    others = a.others.split(",")
    if [n for n in names if n in others] != others:
        raise Failure(f"services not sorted by the numbers in their names: {names}")
    header = driver.text_at("#replicas")
    if header:
        raise Failure(f"a single replica's header names it: {header!r}")
    loaded(driver, a.url + "#/services/" + quote(others[0], safe=""))
    empty = "#service-groups td.empty"
    driver.wait_for(lambda: driver.find(empty), 10, f"{others[0]} shows groups")
    span = driver.script("return document.querySelector(arguments[0]).colSpan", empty)
    if span != 3 or shown(driver, "preview-result"):
        raise Failure(f"the empty row spans {span} columns, or the last service's preview is still shown")
    return {"ok": True, "groups": groups, "rollout": rollout_text, "warnings": warnings, "services": names}


def step(name, **info):
    """Says where the rollouts scenario stands and waits for the caller's "go" on standard input:
    the caller checks the agents (over gRPC, through the API) before the page moves on."""
    print(json.dumps({"step": name, **info}), flush=True)
    line = sys.stdin.readline().strip()
    if line != "go":
        raise Failure(f"the caller stopped the run at {name}: {line or 'end of input'}")


def accept_confirm(driver, seconds=10):
    """Waits for the page's confirm(), accepts it; returns its question."""
    def open_dialog():
        try:
            return driver.call("GET", driver.s("/alert/text"))
        except Failure:
            return None
    question = driver.wait_for(open_dialog, seconds, "the page asked for no confirmation")
    driver.call("POST", driver.s("/alert/accept"), {})
    return question


def rollout_shown(driver):
    """The Rollouts view's current rollout: id, phase, wave (from 1) and the reached agents."""
    return driver.script(
        "const box = document.getElementById('rollout-current');"
        "if (box.hidden || !document.getElementById('rollouts-view').dataset.loaded) return null;"
        "const agents = [...box.querySelectorAll('#rollout-waves-list tr[data-current=true] tr[data-instance]')]"
        "  .map(t => ({instance: t.dataset.instance, applied: t.dataset.applied === 'true'}));"
        "const count = box.querySelector('#rollout-waves-list tr[data-current=true] .reached-count');"
        "return {id: box.dataset.id, phase: box.dataset.phase, wave: Number(box.dataset.wave),"
        "  waves: box.querySelectorAll('#rollout-waves-list tr[data-wave]').length, agents,"
        "  count: count ? count.textContent : null};")


def history_state(driver, rollout_id):
    return driver.script("const r = document.querySelector(`#rollout-history tr[data-rollout=\"${arguments[0]}\"]`);"
                         "return r ? r.dataset.state : null", rollout_id)


def fill_rollout_form(driver, waves, bake, advance):
    clear(driver, "rollout-form-waves")
    driver.send_keys("#rollout-form-waves", waves)
    clear(driver, "rollout-form-bake")
    driver.send_keys("#rollout-form-bake", bake)
    driver.script("document.getElementById('rollout-form-advance').value = arguments[0]", advance)


def start_rollout(driver, previous_id):
    """Clicks "Start the rollout"; waits for the Rollouts view to show the new rollout's first
    wave passed (manual advance: waiting for a promote) with one agent reached and applied."""
    driver.script("document.getElementById('notice').replaceChildren()")
    driver.click("#rollout-form-start")
    note = driver.wait_for(lambda: note_text(driver), 30, "the rollout's start never answered")
    if not note.startswith("ok:") or "started" not in note:
        raise Failure(f"the start: {note}")
    driver.wait_for(lambda: driver.script("return location.hash") == "#/rollouts" and shown(driver, "rollouts-view"), 10,
                    "a started rollout does not open the Rollouts view")
    if shown(driver, "rollout-form"):
        raise Failure("the form stays open after the start")

    def waiting():
        r = rollout_shown(driver)
        return r if r and r["id"] != previous_id and r["phase"] == "waiting" and r["agents"] else None
    r = driver.wait_for(waiting, 60, f"wave 1 never waits for a promote: {rollout_shown(driver)}")
    if (r["wave"], r["waves"]) != (1, 2):
        raise Failure(f"not wave 1 of 2: {r}")
    if len(r["agents"]) != 1 or not r["agents"][0]["applied"] or r["count"] != "1 reached, 1 applied":
        raise Failure(f"wave 1 does not show exactly 1 agent reached and applied: {r}")
    header = driver.text_at("#rollouts-active")
    if "wave 1 of 2" not in header:
        raise Failure(f"the header's rollout badge: {header!r}")
    promote = driver.text_at("#rollout-promote")
    if not shown(driver, "rollout-promote") or promote != "Promote to wave 2 of 2" or not shown(driver, "rollout-abort"):
        raise Failure(f"promote/abort buttons: {promote!r}")
    return note[3:], r


def run_rollouts(a, driver):
    """rollouts: a staged rollout started from the whole-document editor, promoted, completed; a
    second one started from a service's editor, aborted. Stops at each step for the caller."""
    from urllib.parse import quote
    loaded(driver, a.url)
    driver.wait_for(lambda: a.service in (value_of(driver, "document-edit") or ""), 10,
                    "the whole-document editor does not show the served document")
    driver.script("const e = document.getElementById('author'); e.value = arguments[0]; e.dispatchEvent(new Event('change'));", a.author)
    clear(driver, "document-edit")
    driver.click("#document-edit")
    driver.send_keys("#document-edit", a.document)
    if value_of(driver, "document-edit") != a.document:
        raise Failure(f"typing gave {value_of(driver, 'document-edit')!r}")
    driver.send_keys("#document-message", "canary first")

    # The form opens under the document editor.
    driver.click("#document-rollout")
    driver.wait_for(lambda: shown(driver, "rollout-form"), 5, "Roll out in waves… opens no form")
    if not driver.script("return document.getElementById('rollout-form').previousElementSibling.contains(document.getElementById('document-rollout'))"):
        raise Failure("the form does not open under the document editor")

    # Refused plans are errors in the notice: one the page reads, one the server refuses.
    fill_rollout_form(driver, "1,abc", "0", "manual")
    driver.script("document.getElementById('notice').replaceChildren()")
    driver.click("#rollout-form-start")
    bad_wave = driver.wait_for(lambda: note_text(driver), 5, "a bad wave is not refused")
    if not bad_wave.startswith("err:") or "abc" not in bad_wave:
        raise Failure(f"a bad wave: {bad_wave}")
    fill_rollout_form(driver, "1,150%", "0", "manual")
    driver.script("document.getElementById('notice').replaceChildren()")
    driver.click("#rollout-form-start")
    refused = driver.wait_for(lambda: note_text(driver), 10, "a wave of 150% is not refused")
    if not refused.startswith("err:") or "150%" not in refused:
        raise Failure(f"a wave of 150%: {refused}")
    if not shown(driver, "rollout-form") or driver.script("return location.hash") == "#/rollouts":
        raise Failure("a refused plan closed the form")

    fill_rollout_form(driver, a.waves, "0", "manual")
    started, r = start_rollout(driver, None)
    first = r["id"]
    reached = r["agents"][0]["instance"]
    import re
    if not re.fullmatch(r"r-\d{8}-\d{6}-\d{3}", first):
        raise Failure(f"the rollout's id is not its start in UTC: {first!r}")
    diff = driver.script(
        "const row = document.querySelector(`#rollout-changes [data-change=\"${arguments[0]}\"] tr[data-key=\"${arguments[1]}\"]`);"
        "return row ? row.textContent : null", a.service, a.key)
    if not diff or "+ " not in diff:
        raise Failure(f"the rollout's card does not show what it changes in {a.key}: {diff!r}")
    events = driver.script("return [...document.querySelectorAll('#rollout-events tr')].map(t => t.dataset.kind)")
    if "started" not in events or "passed" not in events:
        raise Failure(f"the events: {events}")
    meta = driver.text_at("#rollout-meta")
    if a.author not in meta or "canary first" not in meta or "advance manual" not in meta:
        raise Failure(f"the rollout's line: {meta!r}")
    driver.script("document.getElementById('rollouts-view').scrollIntoView()")
    shoot(a, driver, "page-rollouts.png")
    step("wave-1", rollout=first, instance=reached)

    # The Instances view names the rollout for the reached instance only.
    driver.click("#instances-link")
    driver.wait_for(lambda: shown(driver, "instances-view") and driver.find(f'#instances tr[data-instance="{reached}"]'), 10,
                    "the Instances view does not list the reached instance")
    served_as = lambda: driver.script(
        "return Object.fromEntries([...document.querySelectorAll('#instances tr[data-instance]')].map(t => {"
        "  const c = t.querySelector('td.served-as [data-rollout]'); return [t.dataset.instance, c ? c.dataset.rollout : null]; }))")
    driver.wait_for(lambda: (served_as() or {}).get(reached) == first, 10, f"served as: {served_as()}")
    cells = served_as()
    if [name for name, rollout in cells.items() if rollout] != [reached]:
        raise Failure(f"the served-as column names the rollout for {cells}")
    reason = cell(driver, f'#instances tr[data-instance="{reached}"]', "td.served-as")
    if f"rollout {first}" not in reason:
        raise Failure(f"the reached instance's served-as cell: {reason!r}")

    # Promote: wave 2 reaches everyone, then the rollout completes.
    driver.click("#rollouts-link")
    driver.wait_for(lambda: shown(driver, "rollout-promote"), 10, "no Promote button")
    driver.script("document.getElementById('notice').replaceChildren()")
    driver.click("#rollout-promote")
    question = accept_confirm(driver)
    if first not in question or "wave 2 of 2" not in question:
        raise Failure(f"the promote's question: {question!r}")
    promoted = driver.wait_for(lambda: note_text(driver), 10, "the promote never answered")
    if not promoted.startswith("ok:") or "wave 2 of 2 started" not in promoted:
        raise Failure(f"the promote: {promoted}")
    driver.wait_for(lambda: history_state(driver, first) == "completed", 60,
                    f"the rollout is not listed completed: {rollout_shown(driver)}")
    current = rollout_shown(driver)
    if current["phase"] != "completed" or shown(driver, "rollout-promote") or shown(driver, "rollout-abort") or shown(driver, "rollouts-active"):
        raise Failure(f"a completed rollout still offers promote or abort: {current}")
    step("completed", rollout=first)

    # A second rollout, from the service's editor, aborted in wave 1.
    loaded(driver, a.url + "#/services/" + quote(a.service, safe=""))
    driver.wait_for(lambda: cell_value(driver, a.key) == a.served, 10,
                    f"{a.key} shows {cell_value(driver, a.key)!r}, not the completed rollout's {a.served}")
    clear(driver, "config-edit")
    driver.click("#config-edit")
    driver.send_keys("#config-edit", json.dumps({a.key: a.value}))
    driver.send_keys("#service-message", "try a new sampling rate")
    driver.click("#service-rollout")
    driver.wait_for(lambda: shown(driver, "rollout-form"), 5, "Roll out in waves… opens no form in the service editor")
    if not driver.script("return document.getElementById('service-detail').contains(document.getElementById('rollout-form'))"):
        raise Failure("the form does not open under the service's editor")
    fill_rollout_form(driver, a.waves, "0", "manual")
    _, r = start_rollout(driver, first)
    second = r["id"]
    services = driver.text_at("#rollout-meta")
    if f"1 service: {a.service}" not in services:
        raise Failure(f"the second rollout's line: {services!r}")
    step("service-wave-1", rollout=second, instance=r["agents"][0]["instance"])

    driver.script("document.getElementById('notice').replaceChildren()")
    driver.click("#rollout-abort")
    question = accept_confirm(driver)
    if second not in question:
        raise Failure(f"the abort's question: {question!r}")
    aborted = driver.wait_for(lambda: note_text(driver), 10, "the abort never answered")
    if not aborted.startswith("ok:") or "aborted" not in aborted:
        raise Failure(f"the abort: {aborted}")
    driver.wait_for(lambda: history_state(driver, second) == "aborted", 10, "the aborted rollout is not in the history")
    current = rollout_shown(driver)
    if current["id"] != second or current["phase"] != "aborted" or shown(driver, "rollout-abort"):
        raise Failure(f"after the abort: {current}")
    history = driver.script("return [...document.querySelectorAll('#rollout-history tr[data-rollout]')].map(t => [t.dataset.rollout, t.dataset.state])")
    if history != [[second, "aborted"], [first, "completed"]]:
        raise Failure(f"the history: {history}")
    step("aborted", rollout=second)
    return {"ok": True, "started": started, "promoted": promoted[3:], "aborted": aborted[3:], "refused": refused[4:],
            "served_as": reason, "history": history}


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
    ap.add_argument("--scenario", choices=["editing", "refused", "browse", "instances", "instances-paged", "replicas", "rollouts", "service-view", "opamp", "overview"])
    ap.add_argument("--total", type=int, help="instances-paged: how many instances are listed")
    ap.add_argument("--agents", type=int, help="overview: the agents it counts")
    ap.add_argument("--down-upstream", help="overview: the OAP that is unreachable")
    ap.add_argument("--replica")
    ap.add_argument("--peer-replica")
    ap.add_argument("--instance")
    ap.add_argument("--rollout", help="service-view: the running rollout that touches --service")
    ap.add_argument("--group", help="service-view: the group --instance falls in")
    ap.add_argument("--property", action="append", default=[], help="service-view: K=V, a property to preview")
    ap.add_argument("--path", action="append", default=[], help="service-view: an operation name to preview")
    ap.add_argument("--ignored", action="append", default=[], help="service-view: a path the preview says is ignored")
    ap.add_argument("--traced", action="append", default=[], help="service-view: a path the preview says is traced")
    ap.add_argument("--others", help="service-view: services, comma-separated, in the order listed")
    ap.add_argument("--applied-uid", help="opamp: the uid of the agent that applied its configuration")
    ap.add_argument("--failed-uid", help="opamp: the uid of the agent whose configuration failed")
    ap.add_argument("--error", help="opamp: the failed agent's error message (also its health's last error)")
    ap.add_argument("--unmatched", help="opamp: the group the view says no agent is in")
    ap.add_argument("--effective-body", help="opamp: what the applied agent's effective sampling.json holds")
    ap.add_argument("--reverted-group", help="opamp: the OpAMP group of the reverted rollout the Rollouts view shows")
    ap.add_argument("--reverted-instance", help="opamp: the reached agent that rollout shows after its revert")
    ap.add_argument("--host")
    ap.add_argument("--ip", action="append", default=[])
    ap.add_argument("--language")
    ap.add_argument("--agent-version")
    ap.add_argument("--anonymous-state", default="anonymous")
    ap.add_argument("--unconfigured")
    ap.add_argument("--compare", nargs=2, type=int)
    ap.add_argument("--services", type=int)
    ap.add_argument("--history", type=int, default=1)
    ap.add_argument("--document", help="rollouts: the candidate typed into the whole-document editor")
    ap.add_argument("--waves", default="1,100%")
    ap.add_argument("--served", help="rollouts: KEY's value once the first rollout completed")
    ap.add_argument("--author", default="page-tester")
    ap.add_argument("--screenshot", metavar="DIR", help="write PNGs of the page into DIR")
    a = ap.parse_args()
    if not a.held and not a.scenario and None in (a.service, a.key, a.value, a.rollback_to, a.expect):
        ap.error("without --held: --service, --key, --value, --rollback-to and --expect are required")
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    chromedriver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
    profile = tempfile.mkdtemp(prefix="skyconf-web-")
    driver = None
    try:
        driver = Driver(chromium, chromedriver, profile)
        scenarios = {"editing": run_editing, "refused": run_refused, "browse": run_browse, "instances": run_instances,
                     "instances-paged": run_instances_paged, "replicas": run_replicas, "rollouts": run_rollouts,
                     "service-view": run_service_view, "opamp": run_opamp, "overview": run_overview}
        chosen = run_held if a.held else scenarios[a.scenario] if a.scenario else run
        print(json.dumps(chosen(a, driver)), flush=True)
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
