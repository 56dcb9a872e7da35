"""FlashInfer's run-time compiles are logged as they start, every so often while they run, and
when they end; a module already built passes through without a word."""

import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from minisgl.kernels import jit_builds
from minisgl.kernels.jit_builds import heartbeat, report_builds, wrap_build


@pytest.fixture
def log_lines():
    """The messages minisgl.kernels.jit_builds logs (minisgl's loggers do not propagate to pytest's)."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    handler = Collect(logging.INFO)
    jit_builds.logger.addHandler(handler)
    level = jit_builds.logger.level
    jit_builds.logger.setLevel(logging.INFO)
    yield lines
    jit_builds.logger.removeHandler(handler)
    jit_builds.logger.setLevel(level)


def test_heartbeat_logs_the_start_a_beat_while_it_runs_and_the_end(log_lines):
    with heartbeat("building x", every=0.05):
        subprocess.run([sys.executable, "-c", "import time; time.sleep(0.4)"], check=True)
    assert log_lines[0] == "building x"
    beats = [line for line in log_lines if line.startswith("... still building x (")]
    assert len(beats) >= 2
    assert log_lines[-1].startswith("building x: done after ")
    assert float(log_lines[-1].split("after ")[1].rstrip(" s")) >= 0.4


def test_heartbeat_says_a_failed_block_failed_and_lets_its_error_through(log_lines):
    with pytest.raises(RuntimeError, match="ninja"):
        with heartbeat("building y", every=10):
            raise RuntimeError("ninja build failed")
    assert log_lines[0] == "building y"
    assert log_lines[-1].startswith("building y: failed after ")


class Module:
    """FlashInfer's JitSpec as wrap_build sees it: a name, whether its library exists, and a
    build that makes it (here a real child process writing the file)."""

    def __init__(self, name: str, library: Path):
        self.name, self.library, self.builds = name, library, 0

    @property
    def is_compiled(self) -> bool:
        return self.library.exists()

    def build(self, verbose: bool, need_lock: bool = True) -> None:
        self.builds += 1
        subprocess.run([sys.executable, "-c", f"open({str(self.library)!r}, 'w').write('so')"], check=True)


def test_a_module_not_yet_compiled_is_built_inside_a_heartbeat_and_a_built_one_quietly(tmp_path, log_lines):
    class Spec(Module):
        pass

    wrap_build(Spec)
    module = Spec("norm", tmp_path / "norm.so")
    module.build(False, need_lock=True)
    assert module.builds == 1 and module.is_compiled
    assert log_lines[0].startswith("compiling FlashInfer's norm kernels: first use on this machine")
    assert "python -m minisgl.prebuild" in log_lines[0]
    assert log_lines[-1].startswith(log_lines[0] + ": done after ")

    log_lines.clear()
    module.build(False)  # FlashInfer calls build before each load: ninja finds it up to date
    assert module.builds == 2 and log_lines == []


def test_where_compiling_is_off_the_build_passes_through_without_announcing_one(tmp_path, log_lines, monkeypatch):
    class Spec(Module):
        pass

    wrap_build(Spec)
    monkeypatch.setenv("FLASHINFER_DISABLE_JIT", "1")  # the image's setting
    Spec("decode", tmp_path / "decode.so").build(False)
    assert log_lines == []


def test_the_build_is_wrapped_once_however_often_it_is_asked(tmp_path, log_lines):
    class Spec(Module):
        pass

    wrap_build(Spec)
    wrap_build(Spec)
    Spec("rope", tmp_path / "rope.so").build(False)
    starts = [line for line in log_lines if line.startswith("compiling FlashInfer's rope") and "after" not in line]
    assert len(starts) == 1  # wrapped twice, it would announce twice


def test_a_failed_compile_is_logged_and_raised(tmp_path, log_lines):
    class Broken(Module):
        def build(self, verbose, need_lock=True):
            raise RuntimeError("Ninja build failed.")

    wrap_build(Broken)
    with pytest.raises(RuntimeError, match="Ninja build failed"):
        Broken("sampling", tmp_path / "sampling.so").build(False)
    assert "failed after" in log_lines[-1]


def test_flashinfers_own_build_is_wrapped_where_flashinfer_is_installed():
    installed = importlib.util.find_spec("flashinfer") is not None
    assert report_builds() is installed
    if installed:
        from flashinfer.jit.core import JitSpec

        assert JitSpec.build.reports_builds
