"""Every failure of a command is one line `kernel-hub <cmd>: <what>; <what to do>` with a non-zero exit;
the traceback only with --debug."""

from __future__ import annotations

import contextlib
import io

from registry.cli import main
from registry.commands.failures import describe
from registry.errors import UsageError


def test_library_errors_get_what_to_do():
    assert describe(KeyboardInterrupt()) == ("interrupted", 130)
    text, code = describe(FileNotFoundError(2, "No such file or directory", "/x/key.pem"))
    assert (
        code == 1
        and text == "[Errno 2] No such file or directory: '/x/key.pem'; check the path and its permissions"
    )
    text, code = describe(RuntimeError("boom\nsecond line"))
    assert (
        code == 1
        and text
        == "unexpected RuntimeError: boom second line; re-run with --debug for the traceback and report it"
    )
    assert describe(UsageError("--x is wrong; use --y")) == ("--x is wrong; use --y", 2)


def _run(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, err.getvalue()


def test_traceback_only_with_debug(tmp_path):
    argv = ["token", "list", "--data", str(tmp_path / "none")]
    code, err = _run(*argv)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    code, err = _run("--debug", *argv)
    assert code == 2 and "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-1].startswith("kernel-hub token: --data ")


def test_a_database_that_does_not_answer_is_named(tmp_path):
    from registry.commands.serve import free_port

    url = f"postgresql+psycopg://hub:secret@127.0.0.1:{free_port()}/hub"  # nothing listens there
    for argv in (["token", "list", "--db", url], ["gc", "--db", url, "--blobs", str(tmp_path)]):
        code, err = _run(*argv)
        assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"kernel-hub {argv[0]}: the hub's database is unavailable (connection failed")
        assert err.rstrip().endswith(
            "check that it runs and that --db / --blobs (or $KERNEL_HUB_DB / AWS_*) point at it"
        )
        assert "secret" not in err
