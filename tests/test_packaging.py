"""Packaging: the wheel's package list covers every folder of tmakit/, and the kernel sources ship inside it.

The build itself (wheel -> fresh venv -> compile_cuda from another directory) runs in .ci/run.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tmakit.build import sources

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
ROOT = Path(__file__).resolve().parents[1]


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed():
    listed = set(_config()["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tmakit").rglob("__init__.py")}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"


def test_kernel_sources_are_mapped_into_the_package():
    config = _config()["tool"]["setuptools"]
    mapped = config["package-dir"]
    assert mapped["tmakit._sources.cuda_src"] == "cuda_src" and mapped["tmakit._sources.ptx"] == "ptx"
    for package, folder in mapped.items():
        patterns = config["package-data"][package]
        shipped = {p for pattern in patterns for p in (ROOT / folder).glob(pattern)}
        on_disk = {p for p in (ROOT / folder).iterdir() if p.is_file()}
        assert on_disk <= shipped, f"{sorted(map(str, on_disk - shipped))} would not ship in the wheel"


def test_license_is_an_spdx_string():
    assert _config()["project"]["license"] == "Apache-2.0"


def test_the_license_text_is_at_the_root_and_named_in_the_metadata():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text and "END OF TERMS AND CONDITIONS" in text
    assert _config()["project"]["license-files"] == ["LICENSE"]


def test_project_urls_point_at_the_project():
    urls = _config()["project"]["urls"]
    assert {"Homepage", "Documentation", "Issues", "Changelog"} <= set(urls)
    assert all(u.startswith("https://github.com/tmakit/tmakit") for u in urls.values())
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog")


def test_the_wheel_ships_the_license_the_type_marker_and_the_kernel_sources(built_wheel):
    import zipfile

    names = set(zipfile.ZipFile(built_wheel).namelist())
    assert "tmakit/py.typed" in names and (ROOT / "tmakit" / "py.typed").exists()
    licenses = [n for n in names if n.endswith("LICENSE") and ".dist-info/" in n]
    assert licenses and zipfile.ZipFile(built_wheel).read(licenses[0]) == (ROOT / "LICENSE").read_bytes()
    assert {"tmakit/_sources/cuda_src/transpose.cu", "tmakit/_sources/cuda_src/tmakit/tma.cuh",
            "tmakit/_sources/ptx/tile_copy_sm90.ptx"} <= names
    metadata = zipfile.ZipFile(built_wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Project-URL: Homepage, https://github.com/tmakit/tmakit" in metadata


def test_source_dirs_prefer_environment_then_package_then_repository(monkeypatch, tmp_path):
    monkeypatch.delenv("TMAKIT_SOURCE_DIR", raising=False)
    assert sources.source_dirs() == (ROOT / "cuda_src", ROOT / "ptx")  # a checkout: no tmakit/_sources/
    packaged = tmp_path / "pkg"
    (packaged / "cuda_src").mkdir(parents=True)
    monkeypatch.setattr(sources, "_PACKAGED", packaged)
    assert sources.source_dirs() == (packaged / "cuda_src", packaged / "ptx")
    monkeypatch.setenv("TMAKIT_SOURCE_DIR", str(tmp_path / "mine"))
    assert sources.source_dirs() == (tmp_path / "mine" / "cuda_src", tmp_path / "mine" / "ptx")
