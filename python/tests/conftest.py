import pytest

from support import make_folder


@pytest.fixture
def folder(tmp_path):
    """24 small JPEGs in two colour classes."""
    pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")
    return make_folder(tmp_path / "images")
