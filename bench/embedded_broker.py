"""Embedded broker benchmark: tasks/s through Celery workers, and whether they survive.

    .venv/bin/python bench/embedded_broker.py [--tasks 3000] [--workers 2] [--producers 4]
                                              [--brokers sqlite,fs-fixed,fs] [--rounds 1]

Three candidates for embedded mode (no broker server), each in a fresh
directory, with the embedded stack's shape: ``--workers`` Celery worker
processes (thread pool, 4 threads, prefetch 1, acks late, as in production)
consume while ``--producers`` threads in this process publish (the web
process and beat publish beside each other). Each task appends its number to
a file; the clock runs from the first publish to the last task recorded.

- ``sqlite``: Gatehouse's embedded broker (``console.broker``: kombu's
  SQLAlchemy transport on SQLite, WAL, busy timeout, taken rows deleted);
- ``fs-fixed``: kombu's filesystem transport with its races closed (defined
  below): a message is written to a staging folder and renamed into the
  queue, a consumer claims one with an atomic rename into its own folder, and
  exchange tables are replaced by rename under a lock file;
- ``fs``: kombu's filesystem transport as shipped (what embedded mode used).

Reported per broker: tasks/s, tasks recorded (lost = published - recorded;
duplicates), worker crashes (a worker that exited, or ``CRITICAL``,
``Unrecoverable`` or ``Traceback`` in its log). Writes var/bench/embedded_broker.json.

It is also the Celery app its workers run: ``celery -A bench.embedded_broker worker``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from celery import Celery
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# --- the fixed filesystem transport (the candidate that was not chosen) ------------------


class FixedFilesystemChannel(filesystem.Channel):
    """kombu's filesystem channel without its write/read and table-rewrite races."""

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{int(time.time() * 1_000_000):020d}_{uuid.uuid4()}.{queue}.msg"
        staging = Path(self.data_folder_out).parent / "staging"
        staging.mkdir(exist_ok=True)
        tmp = staging / name
        with open(tmp, "wb") as fh:
            fh.write(str_to_bytes(dumps(payload)))
        os.rename(tmp, Path(self.data_folder_out) / name)  # readers see whole messages or none

    def _get(self, queue: str) -> Any:
        suffix = f".{queue}.msg"
        claimed = Path(self.processed_folder) / f"claimed-{os.getpid()}"
        claimed.mkdir(parents=True, exist_ok=True)
        for name in sorted(os.listdir(self.data_folder_in)):
            if not name.endswith(suffix):
                continue
            target = claimed / name
            try:
                os.rename(Path(self.data_folder_in) / name, target)  # one consumer wins the rename
            except FileNotFoundError:
                continue
            payload = target.read_bytes()
            target.unlink()
            return loads(bytes_to_str(payload))
        raise filesystem.Empty()

    def _table_lock(self, exchange: str) -> Any:
        import fcntl

        self.control_folder.mkdir(parents=True, exist_ok=True)
        fh = open(self.control_folder / f"{exchange}.lock", "a")  # noqa: SIM115 - closed by the caller
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        return fh

    def _table_write(self, exchange: str, queues: list[Any]) -> None:
        file = self._exchange_file(exchange)
        tmp = file.with_name(f"{file.name}.{os.getpid()}.{uuid.uuid4().hex}")
        tmp.write_bytes(str_to_bytes(dumps(queues)))
        os.rename(tmp, file)

    def get_table(self, exchange: str) -> list[Any]:
        try:
            data = self._exchange_file(exchange).read_bytes()
        except FileNotFoundError:
            return []
        return [filesystem.exchange_queue_t(*q) for q in loads(bytes_to_str(data))]

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        value = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with contextlib.closing(self._table_lock(exchange)):
            queues = self.get_table(exchange)
            if value not in queues:
                self._table_write(exchange, [value, *queues])

    def _delete(self, queue: str, exchange: str, routing_key: str, pattern: str, *args: Any, **kwargs: Any) -> None:
        super(filesystem.Channel, self)._delete(queue, exchange, routing_key, pattern, *args, **kwargs)
        value = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with contextlib.closing(self._table_lock(exchange)):
            queues = self.get_table(exchange)
            if value in queues:
                self._table_write(exchange, [q for q in queues if q != value])


class FixedFilesystemTransport(filesystem.Transport):
    Channel = FixedFilesystemChannel


# --- the Celery app the workers run ------------------------------------------------------


def broker_config(kind: str, folder: Path) -> dict[str, Any]:
    if kind == "sqlite":
        return {
            "broker_url": f"sqlite:///{folder / 'broker.sqlite3'}",
            "broker_transport": "console.broker:Transport",
            "broker_transport_options": {"polling_interval": 0.05},
        }
    (folder / "in").mkdir(parents=True, exist_ok=True)
    (folder / "processed").mkdir(parents=True, exist_ok=True)
    options = {
        "data_folder_in": str(folder / "in"),
        "data_folder_out": str(folder / "in"),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        "store_processed": False,
        "polling_interval": 0.05,
    }
    transport = "bench.embedded_broker:FixedFilesystemTransport" if kind == "fs-fixed" else "filesystem"
    return {"broker_url": "filesystem://", "broker_transport": transport, "broker_transport_options": options}


app = Celery("embedded_broker_bench")
if os.environ.get("BENCH_BROKER"):
    _folder = Path(os.environ["BENCH_DIR"])
    app.conf.update(
        **broker_config(os.environ["BENCH_BROKER"], _folder),
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        worker_enable_remote_control=False,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )


@app.task(name="bench.record")
def record(number: int) -> None:
    # One small O_APPEND write per task: atomic, so concurrent workers never interleave lines.
    fd = os.open(Path(os.environ["BENCH_DIR"]) / "done.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{number}\n".encode())
    finally:
        os.close(fd)


# --- the measurement -----------------------------------------------------------------------


def _recorded(folder: Path) -> list[str]:
    try:
        return (folder / "done.log").read_text().split()
    except FileNotFoundError:
        return []


def _crashed(logs: list[Path], procs: list[subprocess.Popen[bytes]]) -> int:
    bad = sum(1 for p in procs if p.poll() is not None)
    for log in logs:
        text = log.read_text(errors="replace")
        if any(marker in text for marker in ("CRITICAL", "Unrecoverable", "Traceback")):
            bad += 1
    return bad


def measure(kind: str, *, tasks: int, workers: int, producers: int, timeout: float) -> dict[str, Any]:
    """One broker, in this process (started by ``main`` with BENCH_BROKER/BENCH_DIR set, so ``app`` uses it)."""
    folder = Path(os.environ["BENCH_DIR"])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    logs = [folder / f"worker-{i}.log" for i in range(workers)]
    procs = []
    for i, log in enumerate(logs):
        with open(log, "wb") as fh:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "bench.embedded_broker",
                        "worker",
                        "--pool=threads",
                        "--concurrency=4",
                        "--without-mingle",
                        "--without-gossip",
                        "--without-heartbeat",
                        "--loglevel=WARNING",
                        "-n",
                        f"w{i}@%h",
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    try:
        # Warm-up: every worker is consuming before the clock starts.
        for i in range(workers * 4):
            record.delay(-1 - i)
        deadline = time.monotonic() + 60
        while len(_recorded(folder)) < workers * 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        (folder / "done.log").unlink(missing_ok=True)

        errors: list[str] = []

        def produce(offset: int) -> None:
            try:
                with app.producer_or_acquire() as producer:
                    for n in range(offset, tasks, producers):
                        record.apply_async((n,), producer=producer)
            except Exception as exc:  # a broker error while publishing is a result, not a bench bug
                errors.append(repr(exc))

        started = time.monotonic()
        threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        published = time.monotonic() - started
        deadline = started + timeout
        while time.monotonic() < deadline:
            if len(_recorded(folder)) >= tasks or any(p.poll() is not None for p in procs):
                break
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        done = _recorded(folder)
        unique = set(done)
        crashes = _crashed(logs, procs)
        return {
            "broker": kind,
            "tasks": tasks,
            "recorded": len(unique),
            "duplicates": len(done) - len(unique),
            "lost": tasks - len(unique),
            "seconds": round(elapsed, 2),
            "publish_seconds": round(published, 2),
            "tasks_per_second": round(len(unique) / elapsed, 1),
            "worker_crashes": crashes,
            "publish_errors": errors[:3],
        }
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--brokers", default="sqlite,fs-fixed,fs")
    args = parser.parse_args()
    if os.environ.get("BENCH_BROKER"):  # one measurement, in a process whose app uses that broker
        result = measure(
            os.environ["BENCH_BROKER"],
            tasks=args.tasks,
            workers=args.workers,
            producers=args.producers,
            timeout=args.timeout,
        )
        print(json.dumps(result), flush=True)
        return
    results = []
    for _ in range(args.rounds):
        for kind in args.brokers.split(","):
            folder = Path(tempfile.mkdtemp(prefix=f"gatehouse-broker-{kind}-"))
            try:
                done = subprocess.run(
                    [sys.executable, __file__, *sys.argv[1:]],
                    env={**os.environ, "BENCH_BROKER": kind, "BENCH_DIR": str(folder)},
                    capture_output=True,
                    text=True,
                    timeout=args.timeout + 120,
                )
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if not lines:
                print(f"{kind}: no result (exit {done.returncode})\n{done.stderr[-2000:]}", flush=True)
                continue
            result = json.loads(lines[-1])
            print(json.dumps(result), flush=True)
            results.append(result)
    out = ROOT / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "embedded_broker.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
