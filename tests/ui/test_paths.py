"""The file browser's root checks: nothing outside the allowed roots is listed or accepted."""

import os

import pytest

from ot_gradio.ui.paths import PathRefused, allowed_roots, check, list_folder, parent, root_of, start_folder


@pytest.fixture
def tree(tmp_path):
    """root/ (allowed) with a data folder, a file, a hidden file, a symlink out and a symlink in;
    outside/ next to it with a secret."""
    root = tmp_path / "root"
    (root / "data" / "cats").mkdir(parents=True)
    (root / "data" / "cat.png").write_bytes(b"png")
    (root / "model.safetensors").write_bytes(b"st")
    (root / ".hidden").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    os.symlink(outside, root / "escape")
    os.symlink(outside / "secret.txt", root / "secret-link.txt")
    os.symlink(root / "data", root / "data-link")
    return root, outside


def test_allowed_roots_are_the_workspace_and_the_launchers_extras(tmp_path):
    ws, extra = tmp_path / "ws", tmp_path / "extra"
    for d in (ws, extra):
        d.mkdir()
    roots = allowed_roots(ws, [extra, tmp_path / "missing", ws, "data"], base=tmp_path)
    assert roots == [ws.resolve(), extra.resolve()]  # missing ones and duplicates left out


def test_check_accepts_paths_inside_a_root(tree):
    root, _ = tree
    assert check(root / "data" / "cat.png", [root]) == (root / "data" / "cat.png").resolve()
    assert check("data/cats", [root], base=root) == (root / "data" / "cats").resolve()
    assert check(root / "data" / ".." / "model.safetensors", [root]) == (root / "model.safetensors").resolve()
    assert check(root / "data-link", [root]) == (root / "data").resolve()  # a symlink that stays inside


@pytest.mark.parametrize("request_path", [
    "{root}/..", "{root}/../outside", "{root}/data/../../outside/secret.txt", "/etc", "/", "{outside}",
    "{root}/escape", "{root}/escape/secret.txt", "{root}/secret-link.txt", "~",
])
def test_check_refuses_everything_resolving_outside(tree, request_path):
    root, outside = tree
    with pytest.raises(PathRefused, match="outside"):
        check(request_path.format(root=root, outside=outside), [root])


def test_check_refuses_relative_escapes_and_empty_paths(tree):
    root, _ = tree
    with pytest.raises(PathRefused):
        check("../outside", [root], base=root)
    with pytest.raises(PathRefused):
        check("  ", [root])


def test_root_prefix_is_not_enough(tmp_path):
    """/x/root-evil is not inside /x/root."""
    (tmp_path / "root").mkdir()
    (tmp_path / "root-evil").mkdir()
    with pytest.raises(PathRefused):
        check(tmp_path / "root-evil", [tmp_path / "root"])


def test_listing_hides_symlinks_out_and_hidden_files(tree):
    root, _ = tree
    names = [(e.name, e.is_dir) for e in list_folder(root, [root])]
    assert names == [("data", True), ("data-link", True), ("model.safetensors", False)]
    assert [e.name for e in list_folder(root, [root], files=False)] == ["data", "data-link"]


def test_listing_outside_is_refused(tree):
    root, outside = tree
    for folder in (outside, root / "escape", root / ".."):
        with pytest.raises(PathRefused):
            list_folder(folder, [root])


def test_start_folder_and_parent(tree):
    root, outside = tree
    data = (root / "data").resolve()
    assert start_folder(str(root / "data" / "cat.png"), [root]) == data  # a file: its folder
    assert start_folder(str(root / "models" / "new.safetensors"), [root]) == root.resolve()  # not written yet
    assert start_folder(str(outside / "secret.txt"), [root]) is None  # outside: the list of roots
    assert start_folder("stable-diffusion-v1-5/stable-diffusion-v1-5", [root], base=root.parent) is None
    assert parent(data / "cats", [root.resolve()]) == data
    assert parent(root.resolve(), [root.resolve()]) is None  # above the roots: the list of roots
    assert parent(data, [root.resolve(), data]) == root.resolve()  # a root inside another one
    assert root_of(data / "cats", [root.resolve(), data]) == data  # the innermost root
