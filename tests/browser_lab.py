"""A JupyterLab server and a headless Chromium driving it, for tests/test_browser.py.

Everything a student's session would read from their home folder (settings, workspaces,
kernels' runtime files) is kept in a fresh folder, so the test sees JupyterLab as shipped and
leaves nothing behind. Chromium is Debian's, driven through Debian's chromedriver: selenium
is given both paths, so its selenium-manager never looks for (or downloads) a browser.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

# Set in the environment of every process a test starts. A check line's grading runs in a
# session of its own (it outlives the kernel on purpose), so a process group does not reach it;
# this does, and names only processes this run started.
RUN_MARKER = "COURSE_BROWSER_TEST_RUN"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
INSTALL_LINE = "apt-get install -y chromium chromium-driver"

# --no-sandbox: Chromium will not start as root (as CI runs) with its sandbox on. The
# background-networking flags keep a browser on a machine with no network from reaching for one
# (update checks, sync); their refused connections otherwise stall it.
CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1400,1000",
)

# Settings JupyterLab would otherwise take from the user's own: every cell in the page (the
# default windowing leaves cells far below the fold out of the DOM), and no news toast
# covering the cells it should not.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def marked_processes(marker: str) -> list[int]:
    """The processes whose environment holds `marker` (see `RUN_MARKER`): ours, wherever they went."""
    needle = f"{RUN_MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:  # gone, or not ours to read
                continue
    return found


def kill_marked(marker: str) -> None:
    for pid in marked_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def stop_group(process: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM to the process's group (it was started in a session of its own), then SIGKILL."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)
    except ProcessLookupError:
        pass


class WaitTimedOut(AssertionError):
    pass


class JupyterLab:
    """`jupyter lab` on `root`, with its own settings, and `kernels` ({name: env}) as extra
    kernelspecs: the stock Python kernel with these variables set, as a hub would set them.
    `command` starts it another way (`course.py lab`, as a student does); the options that
    give it a port, a token and `root` are added after it."""

    def __init__(self, root: Path, home: Path, kernels: dict[str, dict[str, str]] | None = None,
                 command: list[str] | None = None):
        self.root, self.home = root, home
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.marker = secrets.token_hex(8)
        env = dict(os.environ, **{RUN_MARKER: self.marker})
        # XDG_*: coursekit.feedback keeps a saved service address and its answers there; a
        # developer's own must not answer for the test.
        for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                         ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
                         ("IPYTHONDIR", "ipython"), ("XDG_CONFIG_HOME", "xdg_config"),
                         ("XDG_CACHE_HOME", "xdg_cache")):
            env[var] = str(home / sub)
            (home / sub).mkdir(parents=True, exist_ok=True)
        for name, settings in LAB_SETTINGS.items():
            path = home / "settings" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(settings))
        for name, kernel_env in (kernels or {}).items():
            spec = home / "share" / "kernels" / name
            spec.mkdir(parents=True)
            (spec / "kernel.json").write_text(json.dumps({
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": name, "language": "python", "env": kernel_env}))
        env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(home / "share"), env.get("JUPYTER_PATH")]))
        self.log = home / "jupyterlab.log"
        # CI runs as root; JupyterLab refuses root without --allow-root.
        self.process = subprocess.Popen(
            [*(command or [sys.executable, "-m", "jupyter", "lab"]), "--no-browser", "--ip=127.0.0.1",
             f"--port={self.port}", f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={root}", "--allow-root"],
            env=env, cwd=root, stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"JupyterLab did not answer in {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        stop_group(self.process)  # jupyter_server shuts its kernels down on SIGTERM
        kill_marked(self.marker)  # what outlived it: a check still grading, a kernel after a SIGKILL


def start_chromium(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


class NotebookPage:
    """One notebook open in JupyterLab, its cells found by their index in the saved file."""

    def __init__(self, driver, lab: JupyterLab, path: str, artifacts: Path):
        self.driver, self.lab, self.path, self.artifacts = driver, lab, path, artifacts
        self.cells_on_disk = json.loads((lab.root / path).read_text())["cells"]
        self.panel = None  # the CSS selector of this notebook's panel, once open

    # ------------------------------------------------------------------ finding things
    def index_of(self, grade_id: str | None = None, metadata_key: str | None = None) -> int:
        for index, cell in enumerate(self.cells_on_disk):
            meta = cell.get("metadata", {})
            if grade_id is not None and meta.get("nbgrader", {}).get("grade_id") == grade_id:
                return index
            if metadata_key is not None and metadata_key in meta:
                return index
        raise LookupError(f"{self.path} has no cell with grade_id={grade_id!r} / metadata {metadata_key!r}")

    def cells(self):
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, f"{self.panel} .jp-Notebook .jp-Cell")

    def cell(self, index: int):
        cells = self.cells()
        assert len(cells) == len(self.cells_on_disk), (
            f"the page shows {len(cells)} cells, the file has {len(self.cells_on_disk)}")
        return cells[index]

    def output_text(self, index: int) -> str:
        from selenium.webdriver.common.by import By

        return "\n".join(o.text for o in self.cell(index).find_elements(By.CSS_SELECTOR, ".jp-OutputArea"))

    # ------------------------------------------------------------------ waiting
    def wait(self, condition, what: str, timeout: float, evidence=None):
        """Poll `condition()` until it is truthy; on timeout keep a screenshot and the page's
        text in the test's folder and fail with `evidence()` (the text that matters)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = condition()
            except Exception as err:  # a cell re-rendered under us: look again
                if "stale element" not in str(err).lower():
                    raise
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                break
            time.sleep(0.25)
        self.artifacts.mkdir(parents=True, exist_ok=True)
        shot = self.artifacts / "timeout.png"
        self.driver.save_screenshot(str(shot))
        from selenium.webdriver.common.by import By

        page = self.driver.find_element(By.TAG_NAME, "body").text
        (self.artifacts / "page.txt").write_text(page)
        shown = evidence() if evidence else page[-3000:]
        raise WaitTimedOut(f"waited {timeout:.0f} s for {what}; the page shows:\n{shown}\n"
                           f"(screenshot and page text in {self.artifacts})")

    # ------------------------------------------------------------------ acting
    def open(self, timeout: float = 90.0) -> None:
        """Open the notebook as a student does, with a double click in JupyterLab's file browser
        (the page is loaded once: leaving a page with unsaved changes asks the user first)."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By

        if not self.driver.current_url.startswith(self.lab.url):
            self.driver.get(f"{self.lab.url}/lab?token={self.lab.token}")

        def listed():
            return [item for item in self.driver.find_elements(By.CSS_SELECTOR, ".jp-DirListing-item")
                    if item.find_element(By.CSS_SELECTOR, ".jp-DirListing-itemText").text == self.path]

        [item] = self.wait(listed, f"{self.path} in the file browser", timeout)
        ActionChains(self.driver).double_click(item).perform()
        tab_id = self.wait(lambda: self.driver.execute_script(
            "const tab = [...document.querySelectorAll('.lm-DockPanel-tabBar .lm-TabBar-tab')]"
            "  .find(t => t.querySelector('.lm-TabBar-tabLabel').textContent === arguments[0]);"
            "return tab && tab.classList.contains('lm-mod-current') && tab.dataset.id;", self.path),
            f"{self.path}'s tab", timeout)
        self.panel = f"[id='{tab_id}']"
        self.wait(lambda: len(self.cells()) == len(self.cells_on_disk),
                  f"{self.path}'s {len(self.cells_on_disk)} cells", timeout,
                  lambda: f"{len(self.cells())} cells")
        # A kernel that is still starting takes keystrokes it cannot run yet: wait until it is idle.
        self.wait(lambda: self.driver.execute_script(
            "const e = document.querySelector(arguments[0] + ' .jp-Notebook-ExecutionIndicator');"
            "return e && e.dataset.status === 'idle';", self.panel), "the kernel to be idle", timeout)

    def select(self, index: int):
        """Select a cell the way a student does: click its prompt (also there, as a placeholder
        prompt, where the cell's source is hidden)."""
        from selenium.webdriver.common.by import By

        cell = self.cell(index)
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", cell)
        cell.find_element(By.CSS_SELECTOR, ".jp-InputPrompt").click()
        return cell

    def type_source(self, index: int, line: str) -> None:
        """Replace a cell's source by one line typed on the keyboard (one line: the editor's
        auto-indent would change what a second line starts with)."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        cell = self.select(index)
        cell.find_element(By.CSS_SELECTOR, ".cm-content").click()
        ActionChains(self.driver).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).perform()
        ActionChains(self.driver).send_keys(line).perform()
        self.wait(lambda: normalise(cell.find_element(By.CSS_SELECTOR, ".cm-content").text) == normalise(line),
                  f"the editor of cell {index} to hold what was typed", 30,
                  lambda: cell.find_element(By.CSS_SELECTOR, ".cm-content").text)

    def save(self, must_contain: str, timeout: float = 60.0) -> None:
        """Ctrl+S, then wait until the file on disk holds `must_contain`: what is graded is the
        saved file, so it must be the one the student sees."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        ActionChains(self.driver).key_down(Keys.CONTROL).send_keys("s").key_up(Keys.CONTROL).perform()
        file = self.lab.root / self.path

        def saved() -> bool:
            try:
                cells = json.loads(file.read_text()).get("cells", [])
            except ValueError:  # caught mid-write
                return False
            return any(must_contain in "".join(c["source"]) for c in cells)

        self.wait(saved, f"{self.path} to be saved with the new answer", timeout)

    def run(self, index: int) -> None:
        """Shift+Enter on the cell, in command mode."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        self.select(index)
        ActionChains(self.driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()

    def wait_output(self, index: int, text: str, timeout: float) -> str:
        """Wait until cell `index`'s output holds `text` (whitespace as the page lays it out)."""
        wanted = normalise(text)
        return self.wait(lambda: wanted in normalise(self.output_text(index)) and self.output_text(index),
                         f"cell {index}'s output to show {text!r}", timeout, lambda: self.output_text(index))

    def images(self, index: int) -> list[str]:
        """The `src` of every image in cell `index`'s output (a figure is an `<img>` of a PNG)."""
        from selenium.webdriver.common.by import By

        return [img.get_attribute("src") or "" for img in
                self.cell(index).find_elements(By.CSS_SELECTOR, ".jp-OutputArea img")]

    def wait_ran(self, index: int, timeout: float) -> str:
        """Wait until cell `index` has run (its prompt shows a number, not `*` or nothing)."""
        from selenium.webdriver.common.by import By

        def ran():
            prompt = self.cell(index).find_element(By.CSS_SELECTOR, ".jp-InputPrompt").text
            return re.fullmatch(r"\[\d+\]:", prompt.strip())

        self.wait(ran, f"cell {index} to finish running", timeout, lambda: self.output_text(index))
        return self.output_text(index)
