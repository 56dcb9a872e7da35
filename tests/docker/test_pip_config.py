"""A build's RUN steps get this machine's pip configuration, whatever its settings name: every
local file or folder a setting points at is mounted, constraints files and what they include too."""

from __future__ import annotations

import subprocess
import sys

from tests.docker.podman import pip_build_mounts


def volumes(args: list[str]) -> dict[str, str]:
    """{host path: container path} of the `--volume host:container:ro` arguments."""
    pairs = [args[i + 1] for i, a in enumerate(args) if a == "--volume"]
    return {p.split(":")[0]: p.split(":")[1] for p in pairs}


def test_a_constraint_file_and_the_files_it_includes_are_mounted_where_pip_conf_names_them(tmp_path, monkeypatch):
    nested = tmp_path / "more" / "pins.txt"
    nested.parent.mkdir()
    nested.write_text("six<=1.16.0\n")
    constraint = tmp_path / "constraints.txt"
    constraint.write_text("# local caps\n-c more/pins.txt\ntorch<=2.14.1\n")
    requirement = tmp_path / "extra-reqs.txt"
    requirement.write_text("--constraint=constraints.txt\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraint))
    monkeypatch.setenv("PIP_REQUIREMENT", str(requirement))
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    workdir = tmp_path / "build"
    workdir.mkdir()

    mounts = volumes(pip_build_mounts(workdir))

    for path in (constraint, nested, requirement, wheels):
        assert mounts.get(str(path)) == str(path), (path, mounts)
    conf = (workdir / "pip.conf").read_text()
    assert f"constraint = {constraint}\n" in conf and f"requirement = {requirement}\n" in conf
    assert mounts[str(workdir / "pip.conf")] == "/etc/pip.conf"


def test_settings_naming_this_machines_own_folders_stay_out_of_the_build(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PIP_LOG", str(tmp_path / "pip.log"))
    workdir = tmp_path / "build"
    workdir.mkdir()
    mounts = volumes(pip_build_mounts(workdir))
    conf = (workdir / "pip.conf").read_text()
    assert "cache-dir" not in conf and "log =" not in conf and str(tmp_path) not in mounts


def test_the_written_pip_conf_is_one_pip_itself_reads_back(tmp_path, monkeypatch):
    constraint = tmp_path / "constraints.txt"
    constraint.write_text("six<=1.16.0\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraint))
    workdir = tmp_path / "build"
    workdir.mkdir()
    pip_build_mounts(workdir)
    # pip reads the file as a build's RUN step would find it at /etc/pip.conf.
    env = {"PIP_CONFIG_FILE": str(workdir / "pip.conf"), "PATH": "/usr/bin:/bin"}
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            check=True, env=env).stdout
    assert f"constraint='{constraint}'" in listed


def test_a_machine_without_a_pip_configuration_file_still_gets_its_environment_settings(tmp_path, monkeypatch):
    """PIP_CONFIG_FILE=/dev/null is how pip runs with no configuration file: the environment's
    settings still go to the build, the variable itself does not."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    workdir = tmp_path / "build"
    workdir.mkdir()
    mounts = volumes(pip_build_mounts(workdir))
    conf = (workdir / "pip.conf").read_text()
    assert f"find-links = {wheels}\n" in conf and "config-file" not in conf and "constraint" not in conf
    assert "/dev/null" not in mounts and mounts[str(wheels)] == str(wheels)
