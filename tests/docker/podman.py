"""Building and running the images for real, with podman (set up by tests/tools/podman.sh).

No registry serves base images here, so the Debian base is made with debootstrap and imported
into podman; it is cached as an image tagged by its inputs and the ISO week (a rebuild a week
picks up Debian's updates). pip inside a build uses this machine's pip configuration: the
effective settings (`pip config list`, environment included) are written to a pip.conf mounted
at /etc/pip.conf for the build's RUN steps, with every local file and folder they name (wheel
folders, indexes, constraints files, the certificate bundle) mounted read-only. Nothing of that
ends up in an image.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from tests.docker.dockerfiles import REPO

SUITE, VARIANT, MIRROR = "bookworm", "minbase", "http://deb.debian.org/debian"
BASE_REPO = "localhost/minisgl-test-base"
# The operator image's Dockerfile expects an official python image: `python` on the PATH.
PYTHON_PACKAGES = ("python3", "python3-venv", "python-is-python3")
SETUP_HINT = "set podman up with `bash tests/tools/podman.sh`"
_made_here: set[str] = set()  # the Debian bases this process made: no build has cached layers over them yet


def podman(*args: str, check: bool = True, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def podman_problem() -> str | None:
    """Why podman cannot build and run the images here, or None."""
    if shutil.which("podman") is None:
        return f"podman is not installed: {SETUP_HINT}"
    if shutil.which("debootstrap") is None:
        return f"debootstrap is not installed: {SETUP_HINT}"
    if os.geteuid() != 0:
        return "debootstrap and rootful podman need root (CI runs as root)"
    try:
        probe = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], capture_output=True,
                               text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "`podman info` did not answer in 120 s"
    if probe.returncode != 0:
        return f"`podman info` fails here: {probe.stderr.strip()[-500:]}"
    return None


PYTEST_CONFIG = None  # set by test_container.py, so that log() can write past pytest's capture
_background_lines: list[str] = []  # logged by a build in a background thread (tests/docker/images.py)


def log(message: str) -> None:
    """Progress of the long steps, shown on the terminal even while pytest captures output. A
    background thread's lines wait for `show_background_progress` (the terminal is the main thread's)."""
    line = f"[container test] {message}"
    if threading.current_thread() is not threading.main_thread():
        _background_lines.append(line)
        return
    if PYTEST_CONFIG is None:
        print(line, file=sys.stderr, flush=True)
        return
    capture = PYTEST_CONFIG.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        PYTEST_CONFIG.pluginmanager.get_plugin("terminalreporter").write_line(line)


def show_background_progress() -> None:
    """Log what the background builds logged so far (from the main thread)."""
    while _background_lines:
        log(_background_lines.pop(0).removeprefix("[container test] ") + " (in the background)")


def _niced(argv: list[str], nice: bool) -> list[str]:
    """`argv` at the lowest CPU priority when `nice`: a background build takes only what CPU the tests leave."""
    return ["nice", "-n", "19", *argv] if nice else argv


# --- the Debian base ---------------------------------------------------------------------------


def _base_tag(packages: tuple[str, ...]) -> str:
    year, week, _ = datetime.date.today().isocalendar()
    inputs = hashlib.sha256(repr((SUITE, VARIANT, MIRROR, packages)).encode()).hexdigest()[:10]
    return f"{BASE_REPO}:{SUITE}-{VARIANT}-{year}w{week:02d}-{inputs}"


def debian_base(packages: tuple[str, ...] = (), nice: bool = False) -> str:
    """`debootstrap --variant=minbase` + `podman import`, with `packages` added; cached by tag. `nice`:
    at the lowest CPU priority."""
    tag = _base_tag(packages)
    if podman("image", "exists", tag, check=False).returncode == 0:
        return tag
    with tempfile.TemporaryDirectory(prefix="minisgl-base-") as tmp:
        root = Path(tmp) / "root"
        include = ["--include=" + ",".join(packages)] if packages else []
        log(f"debootstrap --variant={VARIANT} {SUITE} (+{','.join(packages) or 'nothing'}) ...")
        started = time.monotonic()
        subprocess.run(_niced(["debootstrap", f"--variant={VARIANT}", *include, SUITE, str(root), MIRROR], nice),
                       check=True, capture_output=True, timeout=1200)
        # apt's package lists are not kept in an image; the Dockerfiles run apt-get update.
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        (root / "var/lib/apt/lists/partial").mkdir(parents=True)
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True)
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        podman("import", "--message", f"debootstrap --variant={VARIANT} {SUITE}", "-", tag, stdin=tar.stdout)
        assert tar.wait() == 0
        _made_here.add(tag)
        log(f"base image {tag} made in {time.monotonic() - started:.0f} s")
    # Older weeks' bases of the same kind are no longer used.
    stale = podman("images", "--format", "{{.Repository}}:{{.Tag}}", BASE_REPO).stdout.split()
    for old in stale:
        if old != tag and old.rsplit("-", 1)[-1] == tag.rsplit("-", 1)[-1]:
            podman("rmi", old, check=False)
    return tag


# --- pip inside a build ------------------------------------------------------------------------


def _pip_settings() -> dict[str, str]:
    """This machine's effective pip settings: the config files', then the PIP_* variables' (which
    win, as in pip), from `pip config list` (`global.find-links='...'`, `:env:.cert='...'`)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
    entries = [line.partition("=") for line in out.splitlines() if "=" in line]
    settings: dict[str, str] = {}
    for key, _, value in sorted(entries, key=lambda e: e[0].startswith(":env:")):
        settings[key.split(".", 1)[1]] = value.strip().strip("'\"")
    return settings


# Settings whose paths pip writes to or that describe this machine's own install, and
# PIP_CONFIG_FILE (where this machine's configuration lives, which the build's pip.conf replaces):
# they mean nothing inside a build, so they are left out of its pip.conf instead of mounted.
MACHINE_ONLY_SETTINGS = {"cache-dir", "log", "log-file", "src", "target", "root", "prefix", "build", "config-file"}
# A requirements or constraints file may name further files, relative to itself.
_INCLUDE = re.compile(r"^\s*(?:-r|-c|--requirement|--constraint)(?:\s+|=)(\S+)")


def _local_path(item: str) -> Path | None:
    """The local path a setting's value names (`/x`, `file:///x`), if it exists here."""
    path = urlsplit(item).path if item.startswith("file:") else item if item.startswith("/") else None
    return Path(path) if path and Path(path).exists() else None


def _with_includes(path: Path, seen: set[Path]) -> None:
    """`path` and, for a requirements/constraints file, every file it includes, into `seen`."""
    if path in seen:
        return
    seen.add(path)
    if path.is_file() and path.stat().st_size < 1_000_000:
        for line in path.read_text(errors="replace").splitlines():
            match = _INCLUDE.match(line)
            if match:
                included = _local_path(str((path.parent / match.group(1)).resolve()))
                if included:
                    _with_includes(included, seen)


def pip_build_mounts(workdir: Path) -> list[str]:
    """`podman build` arguments that give its RUN steps this machine's pip configuration: its
    effective settings as /etc/pip.conf, and every local file or folder any setting names (wheel
    folders, indexes, constraints and requirements files with what they include) mounted read-only
    at the same path. Derived from the values, not from a list of keys: the configuration changes."""
    settings = {k: v for k, v in _pip_settings().items() if k not in MACHINE_ONLY_SETTINGS}
    mounts = []
    if settings.get("cert"):
        # Not at /etc/ssl/certs: the image's own ca-certificates package writes there.
        mounts += ["--volume", f"{settings['cert']}:/run/minisgl-build/ca.crt:ro"]
        settings["cert"] = "/run/minisgl-build/ca.crt"
    local: set[Path] = set()
    for key, value in settings.items():
        for item in value.split():
            path = _local_path(item)
            if path is None or key == "cert":
                continue
            # A simple index's pages link to files beside the `simple` folder.
            _with_includes(path.parent if path.name == "simple" else path, local)
    conf = workdir / "pip.conf"
    conf.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(settings.items())))
    mounts += ["--volume", f"{conf}:/etc/pip.conf:ro"]
    for path in sorted(local):
        mounts += ["--volume", f"{path}:{path}:ro"]
    return mounts


def build(tag: str, dockerfile: Path, build_args: dict[str, str], timeout: float = 1800, nice: bool = False) -> float:
    """`podman build` from the repository root; returns the seconds it took. `nice`: at the lowest
    CPU priority (its RUN steps inherit it).

    Over a base made in this session (a cold machine: CI) no step's layer can be in the cache, and
    caching them only costs: each step's layer is committed (the ~2 GB venv twice, in the builder and
    where the runtime stage copies it). Such a build commits only the image (`--layers=false`: the CPU
    image's build takes about a quarter less CPU, benchmark/NOTES.md); a later session's rebuild, over
    the cached base, caches its layers for the sessions after it."""
    previous = image_id(tag)
    with tempfile.TemporaryDirectory(prefix="minisgl-build-") as tmp:
        # Docker's image format: OCI images have no HEALTHCHECK and podman ignores SHELL for them.
        args = ["build", "--format", "docker", "--network", "host", "--file", str(dockerfile), "--tag", tag,
                f"--layers={str(build_args.get('BASE_IMAGE') not in _made_here).lower()}",
                *pip_build_mounts(Path(tmp))]
        for name, value in build_args.items():
            args += ["--build-arg", f"{name}={value}"]
        log(f"podman build {tag} ({dockerfile.relative_to(REPO)}) ...")
        started = time.monotonic()
        output: list[str] = []
        with subprocess.Popen(_niced(["podman", *args, str(REPO)], nice), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) as proc:
            for line in proc.stdout:
                output.append(line)
                if "STEP " in line and (": RUN " in line or ": FROM " in line):  # the long steps
                    log(f"  {time.monotonic() - started:5.0f} s  {line.strip()[:150]}")
                if time.monotonic() - started > timeout:
                    proc.kill()
        assert proc.returncode == 0, f"podman build {tag} exited {proc.returncode}:\n{''.join(output[-60:])}"
    seconds = time.monotonic() - started
    log(f"built {tag} in {seconds:.0f} s")
    if previous and previous != image_id(tag):
        # The image this tag named before, with its layers no other image uses; the cached
        # layers of unchanged steps stay (a rerun reuses them).
        podman("rmi", previous, check=False)
    return seconds


def image_id(tag: str) -> str | None:
    proc = podman("image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def image_size(tag: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())


def inspect(name: str) -> dict:
    return json.loads(podman("inspect", name).stdout)[0]
