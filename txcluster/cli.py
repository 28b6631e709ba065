"""`txcluster` command line: thin commands over the services' Python APIs."""

from __future__ import annotations

import sys

import click

from txcluster.auth import CredentialError
from txcluster.properties import ConfigError


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@click.group()
@click.version_option(package_name="txcluster")
def main() -> None:
    """txcluster: a high-availability cluster for RDF repositories."""


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="worker.properties file")
def worker(config_path: str) -> None:
    """Run a worker: one repository in a pyoxigraph store on disk."""
    from worker_service.app import serve
    from worker_service.config import WorkerConfig

    try:
        config = WorkerConfig.load(config_path)
        serve(config)
    except (ConfigError, CredentialError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot start worker: {exc}")


if __name__ == "__main__":
    main()
