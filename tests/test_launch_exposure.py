"""app.py refuses to expose the page without a password."""

import pytest

from ot_gradio.ui.launch import build_parser, check_exposure, is_loopback, read_auth


def _check(*argv):
    args = build_parser().parse_args(list(argv))
    return check_exposure(args, read_auth(args))


def test_loopback_needs_no_password():
    assert _check() is None
    assert _check("--host", "127.0.0.1") is None and _check("--host", "::1") is None
    assert is_loopback("localhost") and not is_loopback("0.0.0.0")


@pytest.mark.parametrize("argv", [["--share"], ["--host", "0.0.0.0"], ["--host", "192.168.1.5"]])
def test_exposure_without_auth_is_refused_with_how_to(argv):
    problem = _check(*argv)
    assert problem and "--auth USER:PASSWORD" in problem and "--auth-file" in problem


def test_auth_or_insecure_allows_exposure(tmp_path):
    assert _check("--share", "--auth", "me:pw") is None
    auth_file = tmp_path / "auth.txt"
    auth_file.write_text("# users\nme:pw\nyou:pw2\n")
    assert _check("--host", "0.0.0.0", "--auth-file", str(auth_file)) is None
    assert _check("--share", "--insecure") is None


def test_malformed_auth_is_refused():
    with pytest.raises(SystemExit, match="USER:PASSWORD"):
        _check("--share", "--auth", "nopassword")


def test_upload_limit_must_be_positive(tmp_path, capsys):
    from ot_gradio.ui.launch import main

    assert main(["--max-upload-mb", "0", "--workspace", str(tmp_path)]) == 2
    assert "--max-upload-mb" in capsys.readouterr().err
    assert build_parser().parse_args([]).max_upload_mb == 1024.0
