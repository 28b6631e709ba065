"""`txcluster` command line: thin commands over the services' Python APIs."""

from __future__ import annotations

import ssl
import sys
from collections.abc import Callable

import click

from txinfra.auth import CredentialError
from txinfra.properties import ConfigError


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _serve(kind: str, run: Callable[[], None]) -> None:
    """Load a node's configuration and serve it: a refused configuration or secret, or a
    start that fails, is a clear error (exit 2)."""
    try:
        run()
    except (ConfigError, CredentialError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot start {kind}: {exc}")


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

    _serve("worker", lambda: serve(WorkerConfig.load(config_path)))


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="cluster.properties file")
def master(config_path: str) -> None:
    """Run a master: transaction log, read routing, write path, recovery."""
    # sqlite-utils imports pandas and numpy when they are installed (the pipeline extra)
    # only to map their column types, which the master never writes: ~80 MB of a
    # master's RSS (bench/bench_jmx.py). The master process does without them.
    for name in ("pandas", "numpy"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    from master_service.app import serve
    from master_service.config import MasterConfig

    _serve("master", lambda: serve(MasterConfig.load(config_path)))


@main.command("check-config")
@click.argument("path", type=click.Path(dir_okay=False))
def check_config(path: str) -> None:
    """Validate a cluster.properties without starting (exit 0 when it is fine)."""
    from master_service.config import check_config as check

    problems = check(path)
    if problems:
        for problem in problems:
            click.echo(f"{path}: {problem}", err=True)
        sys.exit(1)
    click.echo(f"{path}: OK")


def _ca_verify(ctx: click.Context, param: click.Parameter, value: str | None
               ) -> ssl.SSLContext | bool:
    """--ca-file of the commands that call a master: the context an https master is
    checked with (a bundle that cannot be used is a bad option, named), else True
    (httpx's default: the system's CAs, or SSL_CERT_FILE)."""
    if value is None:
        return True
    from txinfra.tls import client_verify, read_ca_file

    try:
        return client_verify(read_ca_file(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"--ca-file {value}: "),
                                 param_hint="--ca-file") from None


CA_FILE_HELP = ("CA bundle (PEM) that an https master is checked with (default: the "
                "system's CAs; the nodes' tls-ca-file is such a bundle)")
_ca_option = click.option("--ca-file", "verify", default=None, metavar="PATH",
                          callback=_ca_verify, help=CA_FILE_HELP)


@main.command()
@click.option("--master", "master_url", required=True, help="URL of a master")
@click.option("--json", "as_json", is_flag=True, help="print the status as JSON")
@click.option("--user", default=None, help="user:password when client auth is on")
@click.option("--watch", is_flag=True, help="redraw every --interval seconds until Ctrl-C, "
              "with the operations in progress")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(0.1),
              help="seconds between redraws of --watch")
@click.option("--count", default=None, type=click.IntRange(1),
              help="with --watch: stop after this many redraws")
@_ca_option
def status(master_url: str, as_json: bool, user: str | None, watch: bool, interval: float,
           count: int | None, verify: ssl.SSLContext | bool) -> None:
    """Print the cluster status as a master sees it."""
    import json

    from txcluster.admin_client import AdminClient, AdminError
    from txcluster.progress import watch as watch_loop
    from txcluster.status_table import render, render_operations

    calls = AdminClient(master_url, _user(user), verify=verify)
    if watch:
        def fetch() -> str:
            data = calls.status_data()
            if as_json:
                return json.dumps(data, indent=2)
            return render(data["status"]) + render_operations(data)

        watch_loop(fetch, interval, count, clear=sys.stdout.isatty())
        return
    try:
        data = calls.status()
    except AdminError as exc:
        _fail(str(exc))
    click.echo(json.dumps(data, indent=2) if as_json else render(data))


def _user(user: str | None) -> tuple[str, str] | None:
    if user is None:
        return None
    name, sep, password = user.partition(":")
    if not sep or not name:
        raise click.BadParameter("expected user:password", param_hint="--user")
    return name, password


def _backup_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from txinfra.properties import BACKUP_NAME_RULE, is_backup_name

    if not is_backup_name(value):
        raise click.BadParameter(f"'{value}' is not a backup name ({BACKUP_NAME_RULE})")
    return value


@main.command()
@click.argument("name", callback=_backup_name)
@click.option("--master", "master_url", required=True, help="URL of a master")
@click.option("--user", default=None, help="user:password when client auth is on")
@_ca_option
def backup(name: str, master_url: str, user: str | None,
           verify: ssl.SSLContext | bool) -> None:
    """Named backup written by an up-to-date worker (a name used before is replaced; the
    one named 'default' recovers workers when no worker can serve a replication)."""
    from txcluster.admin_client import AdminClient, AdminError
    from txcluster.progress import backup_progress, run_with_progress

    calls = AdminClient(master_url, _user(user), verify=verify)
    try:
        record = run_with_progress(f"backup '{name}'", lambda: calls.backup(name),
                                   lambda: backup_progress(calls.status_data()))
    except AdminError as exc:
        _fail(str(exc))
    click.echo(f"backup '{name}': seq {record['seq']}, {record['quads']} quads, "
               f"fingerprint {record['fingerprint']}, {record['bytes']} bytes on "
               f"{record['worker']}")


@main.command()
@click.argument("name", callback=_backup_name)
@click.option("--master", "master_url", required=True, help="URL of a master")
@click.option("--user", default=None, help="user:password when client auth is on")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@click.option("--timeout", default=3600.0, show_default=True, type=click.FloatRange(1),
              help="seconds to wait for every worker to be in sync again")
@_ca_option
def restore(name: str, master_url: str, user: str | None, yes: bool, timeout: float,
            verify: ssl.SSLContext | bool) -> None:
    """Restore every worker from a named backup, then wait while the log after it is
    replayed. The workers' current data is replaced."""
    from txcluster.admin_client import AdminClient, AdminError
    from txcluster.progress import run_with_progress, sync_progress, wait_for_sync

    if not yes:
        click.confirm(f"Replace the data of every worker of {master_url} with backup "
                      f"'{name}'?", abort=True)
    calls = AdminClient(master_url, _user(user), verify=verify)
    try:
        result = run_with_progress(f"restore '{name}'", lambda: calls.restore(name),
                                   lambda: sync_progress(calls.status_data()))
        failed = {w: r for w, r in result["workers"].items() if r != "restored"}
        for w, r in failed.items():
            click.echo(f"  {w}: {r}", err=True)
        wait_for_sync(calls, "replaying the log", timeout)
    except AdminError as exc:
        _fail(str(exc))
    click.echo(f"restored from '{name}' (seq {result['backup']['seq']}); every worker is "
               f"in sync" + (f" except the {len(failed)} listed" if failed else ""))


@main.command("wait-sync")
@click.option("--master", "master_url", required=True, help="URL of a master")
@click.option("--user", default=None, help="user:password when client auth is on")
@click.option("--timeout", default=3600.0, show_default=True, type=click.FloatRange(1))
@_ca_option
def wait_sync(master_url: str, user: str | None, timeout: float,
              verify: ssl.SSLContext | bool) -> None:
    """Wait, with a progress bar, until every worker is in sync (after adding a worker,
    a restart, a replication). Exit 1 on timeout."""
    from txcluster.admin_client import AdminClient, AdminError
    from txcluster.progress import wait_for_sync

    try:
        data = wait_for_sync(AdminClient(master_url, _user(user), verify=verify), "in sync",
                             timeout)
    except AdminError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    head = data["status"]["head"]
    click.echo(f"{len(data['status']['workers'])} workers in sync at seq {head['seq']}")


@main.command()
@click.option("--dir", "directory", default="run", show_default=True,
              type=click.Path(file_okay=False), help="where configs, data and logs go")
@click.option("--masters", default=1, show_default=True, type=click.IntRange(0, 9))
@click.option("--workers", default=3, show_default=True, type=click.IntRange(1, 20),
              help="workers per master")
@click.option("--base-port", default=None, type=int, help="first port (default: free ports)")
@click.option("--repository", default="repo", show_default=True)
@click.option("--sample-data", is_flag=True, help="load the bundled sample data and query it")
@click.option("--jmx", is_flag=True, help="remote JMX on every master, each on a port of its "
              "own (needs the `jmx` extra and Java)")
@click.option("--join", "join", default=None, type=click.Path(file_okay=False),
              metavar="EXISTING", help="start one more data centre (a master and --workers "
              "workers) for the cluster running in EXISTING: it is seeded from a master "
              "there and becomes a sync peer of every master of it")
def up(directory: str, masters: int, workers: int, base_port: int | None, repository: str,
       sample_data: bool, jmx: bool, join: str | None) -> None:
    """Start a local cluster on loopback in the background; write DIR/cluster.json."""
    from pathlib import Path

    import httpx

    from txcluster import local

    try:
        if join is not None:
            info = local.join(Path(directory), Path(join), workers=workers)
        else:
            info = local.up(Path(directory), masters=masters, workers=workers,
                            base_port=base_port, repository_id=repository, jmx=jmx)
    except (RuntimeError, TimeoutError, FileExistsError, FileNotFoundError,
            httpx.HTTPError) as exc:
        _fail(str(exc))
    click.echo(local.describe(info))
    if sample_data:
        click.echo(local.load_sample(info))


@main.command()
@click.option("--dir", "directory", default="run", show_default=True,
              type=click.Path(file_okay=False))
def down(directory: str) -> None:
    """Stop the local cluster started in DIR (by the PIDs in DIR/cluster.json)."""
    from pathlib import Path

    from txcluster import local

    try:
        stopped = local.down(Path(directory))
    except FileNotFoundError as exc:
        _fail(str(exc))
    click.echo(f"stopped {len(stopped)} processes")


# ---- the data pipeline on Spark (spark_pipeline/; needs the `pipeline` extra) ----


def _spark_options(command):
    """Options every pipeline command has."""
    command = click.option(
        "--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
        help="a Spark setting (repeatable), e.g. spark.executor.memory=4g")(command)
    command = click.option(
        "--python-env", default=None, envvar="TXCLUSTER_PYTHON_ENV", metavar="ARCHIVE|none",
        help="on a Spark cluster: the Python environment shipped to the executors (default: "
        "one packed from this interpreter, cached; 'none': the executors' own "
        "PYSPARK_PYTHON); env TXCLUSTER_PYTHON_ENV")(command)
    command = click.option(
        "--progress/--no-progress", default=None,
        help="draw the progress line on stderr (default: when stderr is a terminal)")(command)
    command = click.option("--work-dir", default=None, type=click.Path(file_okay=False),
                           help="temporary files (must be visible to the Spark executors: "
                           "on a cluster, shared storage)")(command)
    return click.option("--spark-master", default=None,
                        help="Spark master URL (default local[*]; under spark-submit, its "
                        "own); on a cluster the code and a Python are shipped "
                        "(docs/design/pipeline-on-spark.md)")(command)


def _spark_conf(pairs: tuple[str, ...]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            _fail(f"--spark-conf {pair}: expected KEY=VALUE")
        conf[key.strip()] = value
    return conf


def _run_job(make_config, job: str, spark: dict) -> None:
    """Build the job's configuration, run it (it starts Spark by ``start()`` once its
    cheap checks passed), print its report; exit 1 unless the report is OK. ``spark``:
    the command's Spark options (see ``_spark_options``)."""
    try:
        from pyspark.errors import PySparkException

        import spark_pipeline.audit
        import spark_pipeline.jobs
        from spark_pipeline.progress import Progress
        from spark_pipeline.session import LazySession
    except ImportError as exc:
        _fail(f"the pipeline needs PySpark: pip install 'txcluster[pipeline]' ({exc})")
    try:
        config = make_config(spark_pipeline)
    except ValueError as exc:
        _fail(str(exc))
    progress = Progress(enabled=spark["progress"])
    try:
        with LazySession(spark["spark_master"], f"txcluster {job.rpartition('run_')[2]}",
                         spark["python_env"], _spark_conf(spark["spark_conf"])) as start:
            module, _, function = job.partition(".")  # "jobs.run_load", "audit.run_audit"
            report = getattr(getattr(spark_pipeline, module), function)(start, config,
                                                                        progress)
    except (*spark_pipeline.jobs.USER_ERRORS, PySparkException) as exc:
        progress.done()
        _fail(str(exc))
    click.echo(report.summary())
    sys.exit(0 if report.ok else 1)


@main.command("spark-env")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="where the archives go (default: the cache, ~/.cache/txcluster)")
@click.option("--python-env", default=None, metavar="ARCHIVE|none",
              help="a prepacked environment instead of building one ('none': no "
              "environment)")
def spark_env(out_dir: str | None, python_env: str | None) -> None:
    """Build what Spark executors need to run the pipeline (a zip of its code, a packed
    Python environment) and print the spark-submit options that ship them (and run the
    driver with this Python)."""
    from pathlib import Path

    from spark_pipeline import shipping

    try:
        shipment = shipping.shipment(python_env, Path(out_dir) if out_dir else None)
    except ValueError as exc:
        _fail(str(exc))
    args = shipment.submit_args(driver_python=sys.executable)
    click.echo(" ".join(f"{a} {v}" for a, v in zip(args[::2], args[1::2], strict=True)))


@main.command("load")
@click.option("--master", "master_url", required=True, help="URL of a master")
@click.option("--repository", default=None, help="repository id (default: the master's)")
@click.option("--graph", default=None,
              help="load every statement into this named graph (an absolute IRI)")
@click.option("--initial", is_flag=True,
              help="empty cluster only: bulk-load one worker, replicate it to the others")
@_spark_options
@click.option("--batch-quads", default=None, type=click.IntRange(1),
              help="quads per transaction  [default: 100,000: spark_pipeline/jobs.py, "
              "BATCH_QUADS]")
@click.option("--rejects", "rejects_dir", default=None, type=click.Path(file_okay=False),
              help="where rejected lines go, as JSON lines: a directory, or a URL "
              "such as hdfs://... or s3a://... (default: ./txcluster-rejects-<time> when "
              "there are any)")
@click.option("--base-iri", default=None,
              help="resolve the relative IRIs of Turtle, TriG, RDF/XML and JSON-LD inputs "
              "against this IRI (a document's own @base wins; without one a relative IRI "
              "rejects its document; N-Triples/N-Quads allow only absolute IRIs)")
@click.option("--no-namespaces", is_flag=True,
              help="do not declare the prefixes of Turtle/TriG inputs as the repository's "
              "namespaces (default: declared, unless the repository has that prefix or "
              "the inputs give it different IRIs)")
@click.option("--user", default=None, help="user:password when client auth is on")
@click.option("--ca-file", default=None, type=click.Path(dir_okay=False),
              help="CA bundle (PEM) that https masters and workers are checked with, by "
              "the driver and the Spark tasks alike (default: the system's CAs; the "
              "nodes' tls-ca-file is such a bundle)")
@click.argument("inputs", nargs=-1, required=True, type=click.Path())
def load_command(master_url: str, repository: str | None, graph: str | None, initial: bool,
                 work_dir: str | None, batch_quads: int | None, rejects_dir: str | None,
                 base_iri: str | None, no_namespaces: bool, user: str | None,
                 ca_file: str | None, inputs: tuple[str, ...], **spark) -> None:
    """Validate, canonicalise, deduplicate and load RDF files (N-Triples, N-Quads, Turtle,
    TriG, RDF/XML, JSON-LD; .gz/.bz2; directories are walked; paths or URLs that Spark's
    Hadoop reads: hdfs://, s3a://, file://) on Spark, then check that
    every worker holds the expected fingerprint. Exit 1 on a mismatch. A task that fails
    (e.g. a file gone since it was listed) stops the load, naming its file and lines."""
    _run_job(lambda pipeline: pipeline.jobs.LoadConfig(
        master_url, tuple(inputs), repository, graph, initial,
        batch_quads or pipeline.jobs.BATCH_QUADS, rejects_dir,
        work_dir, tuple(user.split(":", 1)) if user else None, base_iri=base_iri,
        namespaces=not no_namespaces, ca_file=ca_file), "jobs.run_load", spark)


@main.command("audit")
@click.option("--worker", "workers", multiple=True, required=True,
              help="URL of a worker (give two)")
@_spark_options
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="where the differing quads go: a directory, or a URL such as "
              "hdfs://... (default: ./txcluster-audit-<time> when the replicas differ)")
@click.option("--ca-file", default=None, type=click.Path(dir_okay=False),
              help="CA bundle (PEM) that https masters and workers are checked with, by "
              "the driver and the Spark tasks alike (default: the system's CAs; the "
              "nodes' tls-ca-file is such a bundle)")
def audit_command(workers: tuple[str, ...], work_dir: str | None, out_dir: str | None,
                  ca_file: str | None, **spark) -> None:
    """Compare two replicas exactly: per-graph fingerprints and the quads that differ.
    Exit 0 when they are identical."""
    master = spark["spark_master"]
    if master and not master.startswith("local") and work_dir is None:
        # Checked again by the job (under spark-submit): here before the exports.
        _fail(f"on a Spark cluster ({master}) the executors read the replicas' exports: "
              "give --work-dir on storage that the driver and every Spark node see")
    _run_job(lambda pipeline: pipeline.audit.AuditConfig(tuple(workers), out_dir, work_dir,
                                                         ca_file),
             "audit.run_audit", spark)

if __name__ == "__main__":
    main()
