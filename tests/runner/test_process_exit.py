"""`exit_now` ends a process without module teardown but loses nothing: the exit code, buffered
stdout and stderr, and logging handlers' buffered records all arrive."""

import subprocess
import sys
import textwrap


def test_exit_now_keeps_code_output_and_log(tmp_path):
    log = tmp_path / "run.log"
    script = textwrap.dedent(f"""
        import atexit, logging, sys
        from ot_gradio.runner.process_exit import exit_now
        handler = logging.FileHandler({str(log)!r})
        logging.getLogger().addHandler(handler)
        logging.getLogger().warning("logged before the exit")
        sys.stdout.write("no newline, still buffered")
        sys.stderr.write("to stderr")
        atexit.register(lambda: print("TEARDOWN RAN"))
        exit_now(3)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3
    assert out.stdout == "no newline, still buffered"  # flushed, and the atexit handler never ran
    assert out.stderr == "to stderr"
    assert log.read_text() == "logged before the exit\n"


def test_exit_now_survives_a_closed_stdout(tmp_path):
    script = "import sys; from ot_gradio.runner.process_exit import exit_now; sys.stdout.close(); exit_now(0)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == ""

