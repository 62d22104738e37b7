"""The `whale` command line. Errors a user can cause print one line and exit 2 (tracebacks with --debug)."""

from __future__ import annotations

import sys

from whale.cli import archive_commands, deploy_commands, domain_commands, run_commands  # noqa: F401 (they register)
from whale.cli.app import app

# typer lists commands in registration order; running an experiment comes first, shipping its agent after
rank = {run_commands.__name__: 0, domain_commands.__name__: 1}
app.registered_commands.sort(key=lambda command: rank.get(command.callback.__module__, 2))


def main() -> None:
    from whale.core.config import ConfigError
    from whale.core.openai_http import EndpointError
    from whale.harness.validate import HarnessInvalid
    from whale.model.loading import ModelLoadError

    sys.stdout.reconfigure(line_buffering=True)  # progress lines appear promptly when piped to a file
    try:
        app()
    except (ConfigError, ModelLoadError, HarnessInvalid, FileNotFoundError) as exc:
        if "--debug" in sys.argv:
            raise
        print(f"whale: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:  # a full disk, a read-only folder: the run's last commit is intact
        if "--debug" in sys.argv:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"whale: error: {where}{exc.strerror or exc} (fix it, then `whale run --resume <run dir>`)",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    except EndpointError as exc:  # a remote engine gave up after its retries; the last commit is intact
        if "--debug" in sys.argv:
            raise
        print(f"whale: error: remote engine: {exc} (then `whale run --resume <run dir>`)", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("whale: interrupted; resume with `whale run --resume <run dir>`", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
