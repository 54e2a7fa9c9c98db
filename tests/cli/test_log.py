"""What the CLI logs says what happens, without the source file and line it came from."""

from __future__ import annotations

from mqlab import cli
from mqlab.cli import fleet as lab_cli
from mqlab.cli import infra as infra_cli


def test_phase_lines_name_no_source_file() -> None:
    with cli.console.capture() as cap:
        cli._CliObserver().phase("starting a 3-node nats cluster on the local hosts")
    text = cap.get()
    assert "starting a 3-node nats cluster on the local hosts" in text
    assert ".py:" not in text, text


def test_every_cli_error_console_logs_without_paths() -> None:
    for console in (cli.console, lab_cli.ERR, infra_cli.ERR):
        with console.capture() as cap:
            console.log("lab removed")
        assert "lab removed" in cap.get() and ".py:" not in cap.get(), cap.get()


def test_client_libraries_reconnecting_through_a_fault_stay_quiet_unless_asked() -> None:
    import logging

    from click.testing import CliRunner

    runner = CliRunner()
    assert runner.invoke(cli.main, ["ls", "--help"]).exit_code == 0
    assert logging.getLogger("pika.adapters.utils.connection_workflow").getEffectiveLevel() > (
        logging.ERROR
    )
    assert runner.invoke(cli.main, ["-vv", "ls", "--help"]).exit_code == 0
    assert logging.getLogger("pika").getEffectiveLevel() == logging.DEBUG
    assert logging.getLogger("nats.aio.client").getEffectiveLevel() == logging.DEBUG
