"""A fork server for runs on a GPU: torch is imported once, and each run is a child forked from
that process.

Importing torch (with torch._dynamo, which the first optimizer imports) takes seconds per
process, longer than most fixture scripts run, and it is the same work every time. CUDA
still has to start in each run. So one process imports torch without touching CUDA
(memlint/verify/child.py `--serve`) and forks one child per run. From inside, the child looks
like a fresh process: its own session, output files, seeds and CUDA context. It starts in
milliseconds. The server is used for device runs only. A forked child's resident set starts
without the pages it shares with the server, so a host-memory peak would be counted
differently from a fresh process's.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

from memlint.verify import measure, tree

READY_SECONDS = 300.0  # importing torch on a cold disk
START_SECONDS = 30.0
CHECK_SECONDS = 120.0


class ForkServer:
    """The server process and the state of its children, kept by a reader thread."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lock = threading.Condition()
        self.ready: Optional[dict] = None
        self.started: Dict[int, int] = {}  # request id -> pid
        self.exited: Dict[int, int] = {}  # pid -> return code
        self.dead = False
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    @classmethod
    def start(cls, python: str, env: Dict[str, str], device: str = "cpu",
              preload_too: bool = True) -> Tuple[Optional["ForkServer"], str]:
        """(a running server whose first forked child ran `device`, "") or (None, why it cannot
        serve); without a server, runs start as new processes. The server imports what the first
        optimizer imports too, unless that starts CUDA: then it is started again without."""
        try:
            proc = subprocess.Popen([python, str(measure.CHILD), "--serve", *(() if preload_too else ("--plain",))],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
        except OSError as error:
            return None, f"cannot start {python}: {error}"
        with measure.running_lock:
            measure.running.add(proc.pid)  # its children are no orphans to kill
        server = cls(proc)
        with server.lock:
            server.lock.wait_for(lambda: server.ready is not None or server.dead, READY_SECONDS)
            ready = server.ready or {}
        why = ready.get("why") or ("" if ready.get("ready") else "it did not start")
        if not why and not server._works(device):
            why = f"its first forked child could not start the {device} device"
        if why:
            server.close()
            if ready.get("again_without"):
                return cls.start(python, env, device, preload_too=False)
            return None, why
        return server, ""

    @property
    def preloaded(self) -> list:
        """What the server imported beyond torch (torch._dynamo, where that was safe)."""
        return list((self.ready or {}).get("preloaded") or ())

    def _works(self, device: str) -> bool:
        """A forked child starts the device (CUDA starts in the child, as in every run)."""
        with tempfile.TemporaryDirectory(prefix="memlint-verify-") as tmp:
            folder = Path(tmp)
            (folder / "check.py").write_text("pass\n", encoding="utf-8")
            (folder / "spec.json").write_text(json.dumps({
                "source_file": str(folder / "check.py"), "path": str(folder / "check.py"), "argv": [],
                "device": device, "seed": 0, "torch": True, "result_file": str(folder / "result.json")}))
            child = self.spawn(str(folder / "spec.json"), str(folder / "stdout"), str(folder / "stderr"))
            deadline = time.monotonic() + CHECK_SECONDS
            while child is not None and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if child is None or child.returncode != 0:
                return False
            try:
                return json.loads((folder / "result.json").read_text(encoding="utf-8")).get("status") == "ok"
            except (OSError, ValueError):
                return False

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                if "ready" in message:
                    self.ready = message
                elif "started" in message:
                    self.started[message["started"]] = message["pid"]
                elif "exited" in message:
                    self.exited[message["exited"]] = message["code"]
                self.lock.notify_all()
        with self.lock:
            self.dead = True
            self.lock.notify_all()

    def spawn(self, spec: str, stdout: str, stderr: str) -> Optional["Forked"]:
        """Fork a run of `spec` writing to these files; None if the server failed."""
        with self.lock:
            if self.dead:
                return None
            request, self.next_id = self.next_id, self.next_id + 1
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write((json.dumps({"id": request, "spec": spec, "stdout": stdout,
                                                   "stderr": stderr}) + "\n").encode("utf-8"))
                self.proc.stdin.flush()
            except OSError:
                return None
            self.lock.wait_for(lambda: request in self.started or self.dead, START_SECONDS)
            pid = self.started.pop(request, None)
        return None if pid is None else Forked(self, pid)

    def close(self) -> None:
        """Kill the server, and any child of it still running. It is dead from here on, not
        only once its reader has seen the pipe close: a run polled meanwhile must not pass for
        one still running."""
        tree.kill_descendants(self.proc.pid)
        self.proc.kill()
        self.proc.wait()
        with self.lock:
            self.dead = True
            self.lock.notify_all()
        with measure.running_lock:
            measure.running.discard(self.proc.pid)


class Forked:
    """A forked run as measure's waiting loop sees a process: pid, poll(), wait(), returncode."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        with self.server.lock:
            if self.returncode is not None:
                pass
            elif self.pid in self.server.exited:
                self.returncode = self.server.exited.pop(self.pid)
            elif self.server.dead:  # nobody will report it: make sure it is gone
                measure.kill_tree(self.pid)
                self.returncode = -9
        return self.returncode

    def wait(self) -> int:
        with self.server.lock:
            self.server.lock.wait_for(lambda: self.pid in self.server.exited or self.server.dead)
        self.poll()
        return self.returncode if self.returncode is not None else -9
