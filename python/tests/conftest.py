import pytest

from support import LAUNCH, make_folder


@pytest.fixture
def folder(tmp_path):
    """24 small JPEGs in two colour classes."""
    pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")
    return make_folder(tmp_path / "images")


@pytest.fixture
def clean_env(monkeypatch):
    """No launcher's variables: the process is one rank of one, whatever ran pytest."""
    for name in LAUNCH:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch
